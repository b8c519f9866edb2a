"""A table kept beside the messages in a chat log's own file, through a connection of its own.

The answer figures (app/answer_stats.py) and the tool calls (app/tool_calls.py) each keep such
a table; the chat log's schema steps (app/store.py) make them. One book per open chat log,
shared by every view and bridge of it, closed when the chat log goes.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar


class ChatLogTable:
    """A connection to a chat log file for one table beside its messages."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()


class ChatLogFile(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def read_only(self) -> bool: ...


BookT = TypeVar("BookT", bound=ChatLogTable)


class BookPerStore(Generic[BookT]):
    """Hands out the one book of a chat log, made on first use."""

    def __init__(self, make: Callable[[Path], BookT]) -> None:
        self._make = make
        self._books: weakref.WeakKeyDictionary[object, BookT] = weakref.WeakKeyDictionary()

    def __call__(self, store: ChatLogFile) -> BookT | None:
        """The book for ``store``'s file, or None when it cannot be written (a read-only or
        damaged file)."""
        if store.read_only:  # a newer Conch wrote the file: not a byte is written to it
            return None
        book = self._books.get(store)
        if book is None:
            try:
                book = self._make(store.path)
            except sqlite3.Error:
                return None
            self._books[store] = book
            weakref.finalize(store, book.close)
        return book
