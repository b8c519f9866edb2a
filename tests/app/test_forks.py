"""Fork from here and New chat from summary: the new chat's messages, its link back, and what
its first turn sends through the real engine to a loopback server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.conversation import Conversation
from app.forks import fork_from, from_summary, origin_words
from app.services import history_messages, latest_fold
from app.store import ChatStore
from engines.base import ModelInfo
from engines.context.session import ApiSession
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer, Script

MODEL = ModelInfo(provider="openai", id="fake-model", label="Fake", context=8_192)


@pytest.fixture
async def server() -> AsyncIterator[OpenAIStyleServer]:
    with OpenAIStyleServer("openai") as s:
        yield s


def long_chat(store: ChatStore) -> str:
    """Six turns, the first two folded into a summary; the last answer has two versions."""
    chat = store.create_chat("Trip to Lisbon", model_key=MODEL.key)
    for i in range(6):
        store.append_message(chat.id, "user", f"question {i}")
        store.append_message(chat.id, "assistant", f"answer {i}", model_key=MODEL.key)
    store.append_message(chat.id, "assistant", "answer 5, again", version_of=11)
    store.set_shelved(chat.id, 11, True)
    store.add_compaction(chat.id, 4, "The person plans a trip to Lisbon in May.", "fake-model")
    return chat.id


async def first_turn(
    data_dir: Path, store: ChatStore, server: OpenAIStyleServer, chat_id: str
) -> list[tuple[str, str]]:
    """Send one message in the chat; what the request carried (role, text), system excluded."""
    adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key")
    session = ApiSession(
        chat_id=chat_id,
        data_dir=data_dir,
        adapters={"openai": adapter},
        history=lambda: history_messages(store.messages(chat_id)),
        latest_fold=lambda: latest_fold(store, chat_id),
    )
    conv = Conversation(chat_id, store=store, engine=session, model=MODEL)
    server.script = Script(text=["Sure."])
    try:
        async for _ in conv.turn("and next?"):
            pass
    finally:
        await conv.aclose()
        await adapter.aclose()
    body: Any = server.chat_requests[-1].json
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


def shown(store: ChatStore, chat_id: str) -> list[str]:
    return [m.text for m in store.messages(chat_id)]


async def test_a_fork_holds_the_messages_up_to_the_one_chosen_and_answers_from_them(
    data_dir: Path, store: ChatStore, server: OpenAIStyleServer
) -> None:
    source = long_chat(store)
    fork = fork_from(store, source, 3)  # up to "answer 1"

    assert shown(store, fork.id) == ["question 0", "answer 0", "question 1", "answer 1"]
    assert fork.title == "Trip to Lisbon (fork)"
    assert origin_words(fork, store) == "Forked from “Trip to Lisbon”"
    # The summary covers seqs 0–3, all the fork holds: sent with nothing after it, it would
    # stand in for every message; the fork starts unfolded and folds by its own turns.
    assert store.latest_compaction(fork.id) is None

    sent = await first_turn(data_dir, store, server, fork.id)
    assert sent == [
        ("user", "question 0"),
        ("assistant", "answer 0"),
        ("user", "question 1"),
        ("assistant", "answer 1"),
        ("user", "and next?"),
    ]
    # The source is untouched by the fork's turn.
    assert shown(store, source)[-1] == "answer 5, again"
    assert "and next?" not in shown(store, source)


async def test_a_fork_after_a_fold_keeps_the_summary_and_the_shown_version(
    data_dir: Path, store: ChatStore, server: OpenAIStyleServer
) -> None:
    source = long_chat(store)
    fork = fork_from(store, source, 12)  # up to the shown version of the last answer

    assert shown(store, fork.id) == shown(store, source)
    assert shown(store, fork.id)[-2:] == ["question 5", "answer 5, again"]
    kept = store.latest_compaction(fork.id)
    assert kept is not None and kept.first_kept_seq == 4
    assert kept.summary == "The person plans a trip to Lisbon in May."
    assert store.versions(fork.id, 12).seqs == (11, 12)

    sent = await first_turn(data_dir, store, server, fork.id)
    assert "The person plans a trip to Lisbon in May." in sent[0][1]
    assert ("user", "question 0") not in sent
    assert ("assistant", "answer 5, again") in sent
    assert ("assistant", "answer 5") not in sent


async def test_a_chat_from_the_summary_starts_at_the_summary(
    data_dir: Path, store: ChatStore, server: OpenAIStyleServer
) -> None:
    source = long_chat(store)
    made = from_summary(store, source)

    assert made is not None
    assert made.title == "Trip to Lisbon (from summary)"
    assert origin_words(made, store) == "Started from the summary of “Trip to Lisbon”"
    assert shown(store, made.id)[0] == "question 2"
    assert "question 0" not in shown(store, made.id)

    sent = await first_turn(data_dir, store, server, made.id)
    assert "The person plans a trip to Lisbon in May." in sent[0][1]
    assert all("question 0" not in text and "question 1" not in text for _, text in sent)
    assert sent[-1] == ("user", "and next?")


def test_a_chat_without_a_summary_gives_none_and_a_deleted_source_is_named(
    store: ChatStore,
) -> None:
    chat = store.create_chat("Short", model_key=MODEL.key)
    store.append_message(chat.id, "user", "hello")
    assert from_summary(store, chat.id) is None

    fork = fork_from(store, chat.id, 0)
    store.delete_chat(chat.id)
    again = store.get_chat(fork.id)
    assert again is not None
    assert origin_words(again, store) == "Forked from “Short” (deleted)"


def test_a_copy_keeps_the_sources_marks_and_settings_and_is_not_learned_again(
    store: ChatStore,
) -> None:
    chat = store.create_chat("Pasted log", model_key=MODEL.key)
    store.append_message(chat.id, "user", "see this", untrusted=True)
    store.append_message(chat.id, "assistant", "ok")
    store.update_chat_settings(chat.id, system_prompt="Be brief.", temperature=0.3)

    fork = fork_from(store, chat.id, 1)

    assert fork.untrusted
    assert fork.read_until == 1
    assert store.chat_settings(fork.id).system_prompt == "Be brief."
    assert store.chat_settings(fork.id).temperature == 0.3
    assert fork.model_key == MODEL.key


def test_the_link_survives_reopening_the_chat_log(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Plans", model_key=MODEL.key)
    store.append_message(chat.id, "user", "hello")
    fork = fork_from(store, chat.id, 0)
    store.close()

    again = ChatStore.in_dir(data_dir)
    try:
        reopened = again.get_chat(fork.id)
        assert reopened is not None and reopened.forked_from is not None
        assert reopened.forked_from.chat_id == chat.id
        assert origin_words(reopened, again) == "Forked from “Plans”"
    finally:
        again.close()
