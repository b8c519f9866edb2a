"""Which of the bundled runtime's two slots a request is read in."""

from __future__ import annotations

from engines.local.bundled import slot_for_request
from engines.local.gate import background, for_the_chat
from engines.local.slot_states import BACKGROUND_SLOT, CHAT_SLOT


def test_the_persons_turn_and_the_chats_own_next_prompt_use_the_chats_slot() -> None:
    assert slot_for_request() == CHAT_SLOT
    with background():
        # A summary, learning, a title, a fold's prompt read ahead: never the chat's slot.
        assert slot_for_request() == BACKGROUND_SLOT
        with for_the_chat():
            # The prompt the chat's next turn sends, read ahead while the person reads.
            assert slot_for_request() == CHAT_SLOT
        assert slot_for_request() == BACKGROUND_SLOT
    assert slot_for_request() == CHAT_SLOT
