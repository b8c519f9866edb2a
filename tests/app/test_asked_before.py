"""What an answer replies to: one chat-log query the card, the window and a regenerate share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import ChatStore


@pytest.fixture
def store(data_dir: Path) -> Iterator[ChatStore]:
    opened = ChatStore.in_dir(data_dir)
    yield opened
    opened.close()


def test_an_answer_replies_to_the_last_message_shown_before_it(store: ChatStore) -> None:
    chat = store.create_chat(title="t")
    first = store.append_message(chat.id, "user", "Which wood?").seq
    store.append_message(chat.id, "assistant", "Larch.")
    second = store.append_message(chat.id, "user", "And the soil?").seq
    answer = store.append_message(chat.id, "assistant", "A 70/30 mix.").seq

    found = store.asked_before(chat.id, answer)
    assert found is not None and found.text == "And the soil?"

    # A deleted message is not what the answer replies to any more: the one before it is.
    store.delete_messages(chat.id, [second])
    found = store.asked_before(chat.id, answer)
    assert found is not None and found.seq == first and found.text == "Which wood?"

    assert store.asked_before(chat.id, first) is None
    assert store.asked_before("no-such-chat", answer) is None
