"""Each chat's unsent words for the window: kept while it is open, and in the chat log's file
(app/drafts.py) so that they are there again after a restart.

The window hands over what the box holds when it leaves a chat or closes (``keep``) and asks
for a chat's words when it opens it (``take``); a message sent forgets them (``forget``). A
draft that could not be written (a full disk, a file a newer Conch wrote) still lasts while the
window is open.
"""

from __future__ import annotations

import logging
import sqlite3

from app.chat_log_tables import ChatLogFile
from app.drafts import Draft, draft_book
from ui.chat.composer import Submission

log = logging.getLogger("conch.ui.drafts")


def _draft(submission: Submission) -> Draft:
    return Draft(
        text=submission.text,
        pictures=submission.pictures,
        attachments=submission.attachments,
        pasted=submission.pasted,
    )


def _submission(draft: Draft) -> Submission:
    return Submission(
        text=draft.text,
        pictures=draft.pictures,
        attachments=draft.attachments,
        pasted=draft.pasted,
    )


class ChatDrafts:
    """The unsent words of every chat (see the module doc)."""

    def __init__(self, store: ChatLogFile) -> None:
        self._book = draft_book(store)
        self._open: dict[str, Submission] = {}  # of the chats not showing, this session
        # Chats that may have a row in the file: only they need one deleted when their box is
        # empty (closing the window then writes nothing for a chat that had no words).
        self._stored: set[str] = set()

    def keep(self, chat_id: str, words: Submission | None) -> None:
        """``words`` are what the chat's box holds now (None: nothing)."""
        if words is None:
            self._open.pop(chat_id, None)
        else:
            self._open[chat_id] = words
        if self._book is None or (words is None and chat_id not in self._stored):
            return
        try:
            self._book.save(chat_id, _draft(words) if words is not None else None)
        except sqlite3.Error:  # a nicety: the words still last while the window is open
            log.warning("a chat's unsent words could not be saved", exc_info=True)
            return
        if words is None:
            self._stored.discard(chat_id)
        else:
            self._stored.add(chat_id)

    def take(self, chat_id: str) -> Submission | None:
        """The chat's unsent words, to put back in its box."""
        kept = self._open.pop(chat_id, None)
        if kept is not None or self._book is None:
            return kept
        try:
            stored = self._book.load(chat_id)
        except sqlite3.Error:
            log.warning("a chat's unsent words could not be read", exc_info=True)
            return None
        if stored is None:
            return None
        self._stored.add(chat_id)
        return None if stored.empty else _submission(stored)

    def forget(self, chat_id: str) -> None:
        """The chat's words were sent: none wait for it any more."""
        self.keep(chat_id, None)
