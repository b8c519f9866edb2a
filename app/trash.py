"""Emptying the trash: deleted chats go for good, with the model's copy of each.

A deleted chat stays in the chat log (``deleted_at``) until the trash is emptied; then its rows
and its transcript file (engines/context/transcript.py) are removed. A chat restored in between is
left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from app.store import ChatStore
from engines.context.transcript import TranscriptError, lock_path, transcript_path


def empty_trash(store: ChatStore, data_dir: Path, chat_ids: Iterable[str]) -> None:
    """Delete ``chat_ids`` (chats in the trash) for good. Raises ``StoreError``."""
    ids = list(chat_ids)
    store.purge_chats(ids)
    for chat_id in ids:
        if store.get_chat(chat_id) is not None:
            continue  # restored before the trash emptied: its transcript is still the model's
        with contextlib.suppress(TranscriptError):  # an id no transcript could have had
            path = transcript_path(data_dir, chat_id)
            for each in (path, lock_path(path)):
                with contextlib.suppress(OSError):
                    each.unlink(missing_ok=True)
