"""A chat's unsent words, kept across a restart.

What the message box holds for a chat and has not sent (its text, the pictures and text files
attached to it) is chat content, so it lives in the chat log's own file (the ``drafts`` table,
made by the chat log's schema step 10, app/store.py), one row per chat, not in the settings
file. The window saves a chat's draft when it leaves the chat and when it closes, restores it
when the chat opens, and forgets it once it is sent. A chat in the trash keeps its draft (Undo
brings both back); emptying the trash deletes it with the chat. A row that cannot be read is
left out: the box is empty, never a crash. Nothing here is ever sent anywhere.
"""

from __future__ import annotations

import logging
import time

from pydantic import BaseModel, ConfigDict, ValidationError

from app.chat_log_tables import ChatLogFile, ChatLogTable, book_of
from engines.base import Attachment, Picture

log = logging.getLogger("conch.drafts")


class Draft(BaseModel):
    """What a chat's message box held and had not sent."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    text: str = ""
    pictures: tuple[Picture, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    pasted: bool = False  # the text was pasted (it counts as untrusted when sent)

    @property
    def empty(self) -> bool:
        return not (self.text or self.pictures or self.attachments)


class DraftBook(ChatLogTable):
    """The ``drafts`` table of a chat log file (see the module doc)."""

    def save(self, chat_id: str, draft: Draft | None) -> None:
        """Keep ``draft`` as the chat's unsent words; None (or an empty one) forgets them.
        Raises ``sqlite3.Error`` (a full disk or damage, with its sentence)."""
        if draft is None or draft.empty:
            self.forget(chat_id)
            return
        self._store.write(
            "INSERT OR REPLACE INTO drafts (chat_id, draft, saved) VALUES (?,?,?)",
            (chat_id, draft.model_dump_json(), time.time()),
        )

    def forget(self, chat_id: str) -> None:
        """The chat has no unsent words now (they were sent, or the box was emptied)."""
        self._store.write("DELETE FROM drafts WHERE chat_id = ?", (chat_id,))

    def load(self, chat_id: str) -> Draft | None:
        """The chat's unsent words; None when it has no row, an empty ``Draft`` when its row
        cannot be read (the box starts empty; the next ``save`` replaces the row)."""
        rows = self._store.query("SELECT draft FROM drafts WHERE chat_id = ?", (chat_id,))
        if not rows:
            return None
        try:
            return Draft.model_validate_json(rows[0][0])
        except (ValidationError, ValueError, TypeError):
            log.warning("a chat's unsent draft could not be read; its box starts empty")
            return Draft()


def draft_book(store: ChatLogFile) -> DraftBook | None:
    """The book of ``store``'s file, or None when nothing may be written to it (a newer Conch
    wrote it): drafts then last only while the window is open."""
    return book_of(DraftBook, store)
