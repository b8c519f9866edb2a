"""A table kept beside the messages in a chat log's own file.

The answer figures (app/answer_stats.py) and the tool calls (app/tool_calls.py) each keep such
a table; the chat log's schema steps (app/store.py) make them. A book reads and writes its
table through the chat log's own connection (``ChatStore.query`` and ``ChatStore.write``), so
the file is opened one way (app/sqlite.py: one busy timeout, damage set aside, a full disk said
plainly), and a book's write never lands inside a transaction of the chat log's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar


class ChatLogFile(Protocol):
    @property
    def read_only(self) -> bool: ...

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def write(self, sql: str, args: Sequence[Any] = ()) -> None: ...


class ChatLogTable:
    """One table beside the messages, read and written through its chat log."""

    def __init__(self, store: ChatLogFile) -> None:
        self._store = store


BookT = TypeVar("BookT", bound=ChatLogTable)


def book_of(make: Callable[[ChatLogFile], BookT], store: ChatLogFile) -> BookT | None:
    """``make``'s book of ``store``, or None when nothing may be written to the file (a newer
    Conch wrote it: not a byte is written to it)."""
    return None if store.read_only else make(store)
