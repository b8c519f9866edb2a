"""Which chats just imported are too long for their model's window, so that their fold is made
right after the import (``Conversation.fold_to_fit``) and the first reply waits on no summary.

Only a chat's own model is considered, and only when it is ready: a chat whose model is not
running folds at its first turn as any chat does (background work waits for its own model).
A program keeps its own memory, so its chats are never folded here. The engine decides for
certain; this is a cheap look that spares building an engine for every short chat of an
export with hundreds.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.services import AppServices, logged_history
from engines.context.windows import listed_window
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.window import FOLD_MESSAGES, budget, estimate_message


def too_long(services: AppServices, chat_id: str) -> bool:
    """Whether the chat may be too long for its own ready model (the engine checks it for
    certain: a system prompt, memories and the answer's room take some of the budget, so
    half of it is where a closer look starts)."""
    chat = services.store.get_chat(chat_id)
    if chat is None:
        return False
    model = services.model_for(chat)
    if model is None or not model.ready or model.provider == PROGRAMS:
        return False
    history = logged_history(services.store, chat_id)
    if len(history) > FOLD_MESSAGES:
        return True
    room = budget(listed_window(model)) // 2
    used = 0
    for _seq, message in history:
        used += estimate_message(message)
        if used > room:
            return True
    return False


def chats_to_fold(services: AppServices, chat_ids: Iterable[str]) -> list[str]:
    """The chats of ``chat_ids`` that may need a fold before their first turn (reads the chat
    log: called off the window's thread)."""
    return [c for c in chat_ids if too_long(services, c)]
