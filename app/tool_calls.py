"""How each tool call of a chat went, kept beside its result in the chat log.

The conversation saves a tool call's result as a "tool" message (the chat log is the source of
truth; a result from outside marks the chat untrusted, as ``app.trust`` decides);
``ToolCallBook`` keeps the rest of the call beside it, keyed like ``messages`` by chat and seq,
in a table of the chat log's own file (``tool_calls``, made by the chat log's schema step 5,
app/store.py): the tool and its server, the arguments, how it ended, how long it took, how big
the whole result was and whether the model was sent all of it. The window's tool rows read it
back. Nothing here is ever sent anywhere.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.chat_log_tables import ChatLogFile, ChatLogTable, book_of
from app.trust import untrusted_message
from engines.base import ToolResult
from engines.tools.rules import kept_result

if TYPE_CHECKING:
    from app.store import ChatStore

log = logging.getLogger("conch.tool_calls")

# What a "tool" message is called where it shows outside its answer's tool lines (an export,
# a search hit, a result whose call was not kept).
RESULT_LABEL = "Tool result"


class ToolCallBook(ChatLogTable):
    """The ``tool_calls`` table of a chat log file (see the module doc)."""

    def save(self, chat_id: str, seq: int, call: ToolResult) -> None:
        """Keep ``call`` for the "tool" message at ``seq`` (its text lives in that message)."""
        kept = call.model_copy(update={"text": ""}).model_dump_json()
        self._store.write(
            "INSERT OR REPLACE INTO tool_calls (chat_id, seq, call) VALUES (?,?,?)",
            (chat_id, seq, kept),
        )

    def between(self, chat_id: str, first: int, last: int) -> dict[int, ToolResult]:
        """The calls of "tool" messages ``first`` ≤ seq ≤ ``last`` in ``chat_id``, by seq; a
        row that cannot be read is left out (its message still shows, plainly)."""
        rows = self._store.query(
            "SELECT seq, call FROM tool_calls WHERE chat_id = ? AND seq BETWEEN ? AND ?",
            (chat_id, first, last),
        )
        out: dict[int, ToolResult] = {}
        for seq, raw in rows:
            try:
                out[int(seq)] = ToolResult.model_validate_json(raw)
            except (ValidationError, ValueError):
                log.warning("a tool call's record in the chat log could not be read")
        return out


def tool_call_book(store: ChatLogFile) -> ToolCallBook | None:
    """The book of ``store``'s file, or None when its table cannot be written (a read-only
    file: the rows then show just the results)."""
    return book_of(ToolCallBook, store)


def keep_tool_call(store: ChatStore, chat_id: str, call: ToolResult, model_key: str = "") -> int:
    """Save a finished tool call in the chat log: its result (or, for a call that never ran,
    the note the model was given) as a "tool" message, head and tail only when it is bigger
    than any model is sent (``kept_result``), and the call beside it. Returns the message's
    seq.

    A result from outside marks the chat untrusted; a call that read nothing from outside
    (denied, unknown, not run) leaves the chat as trusted as it was."""
    untrusted = untrusted_message("tool", call.text, outside=call.untrusted)
    # A huge result is kept shortened, as a model is sent it; the call's record keeps its size.
    saved = store.append_message(
        chat_id, "tool", kept_result(call.text), model_key=model_key, untrusted=untrusted
    )
    book = tool_call_book(store)
    if book is not None:
        try:
            book.save(chat_id, saved.seq, call)
        except sqlite3.Error:  # the row then shows just the result; the chat goes on
            log.warning("a tool call's record could not be saved", exc_info=True)
    return saved.seq
