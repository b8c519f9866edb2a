"""Edit and resend, regenerate (versions), delete with Undo: through the real engine.

Each action changes the chat log; the engine (``ApiSession``) checks its transcript against
the log every turn, so what the next request carries is read here from the loopback server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.conversation import Conversation, MessageSaved
from app.services import history_messages, latest_fold
from app.store import ChatStore
from engines.base import ModelInfo
from engines.context.session import ApiSession
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer, Script

MODEL = ModelInfo(provider="openai", id="fake-model", label="Fake", context=8_192)


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    with OpenAIStyleServer("openai") as s:
        yield s


@pytest.fixture
async def conv(
    data_dir: Path, store: ChatStore, server: OpenAIStyleServer
) -> AsyncIterator[Conversation]:
    chat = store.create_chat(model_key=MODEL.key)
    adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key")
    session = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={"openai": adapter},
        history=lambda: history_messages(store.messages(chat.id)),
        latest_fold=lambda: latest_fold(store, chat.id),
    )
    c = Conversation(chat.id, store=store, engine=session, model=MODEL)
    yield c
    await c.aclose()
    await adapter.aclose()


def said(server: OpenAIStyleServer, answer: str) -> None:
    server.script = Script(text=[answer])


def sent(server: OpenAIStyleServer) -> list[tuple[str, str]]:
    """What the newest chat request carried: (role, text) of each message but the system's."""
    body: Any = server.chat_requests[-1].json
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


def shown(store: ChatStore, chat_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in store.messages(chat_id)]


async def ask(conv: Conversation, server: OpenAIStyleServer, text: str, answer: str) -> int:
    said(server, answer)
    saved = [e async for e in conv.turn(text) if isinstance(e, MessageSaved)]
    return saved[-1].seq


async def test_an_edited_message_is_sent_again_and_what_followed_is_gone(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    await ask(conv, server, "What is 2+2?", "Four.")
    await ask(conv, server, "And 3+3?", "Six.")

    said(server, "Ten.")
    async for _ in conv.edit(0, "What is 5+5?"):
        pass

    assert sent(server) == [("user", "What is 5+5?")]
    assert shown(store, conv.chat_id) == [("user", "What is 5+5?"), ("assistant", "Ten.")]
    # The next turn carries the edited chat, nothing of the branch that was dropped.
    await ask(conv, server, "Thanks", "You're welcome.")
    assert sent(server) == [
        ("user", "What is 5+5?"),
        ("assistant", "Ten."),
        ("user", "Thanks"),
    ]


async def test_a_regenerated_answer_is_a_version_and_the_model_reads_the_shown_one(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    first = await ask(conv, server, "Name a colour", "Red.")

    said(server, "Blue.")
    saved = [e async for e in conv.regenerate(first) if isinstance(e, MessageSaved)]
    second = saved[-1].seq
    # The question is asked once more without the earlier answer.
    assert sent(server) == [("user", "Name a colour")]
    assert shown(store, conv.chat_id) == [("user", "Name a colour"), ("assistant", "Blue.")]
    versions = store.versions(conv.chat_id, second)
    assert versions.seqs == (first, second) and versions.label == "2/2"
    # A page that starts after the first version still knows both (the chat view's read).
    assert store.all_versions(conv.chat_id, start=second)[second] == versions
    assert store.all_versions(conv.chat_id)[first] == versions

    # Flip back to the first version: the chat shows it and the model reads it.
    store.show_version(conv.chat_id, first)
    assert store.versions(conv.chat_id, second).label == "1/2"
    assert shown(store, conv.chat_id) == [("user", "Name a colour"), ("assistant", "Red.")]
    await ask(conv, server, "Why?", "Because.")
    assert sent(server) == [
        ("user", "Name a colour"),
        ("assistant", "Red."),
        ("user", "Why?"),
    ]


async def test_a_regenerate_that_fails_is_a_version_and_the_earlier_answer_is_kept(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    first = await ask(conv, server, "Name a colour", "Red.")
    server.fault = "500"
    saved = [e async for e in conv.regenerate(first) if isinstance(e, MessageSaved)]
    server.fault = None
    # The failure shows (with its card) as version 2; the earlier answer is one flip away.
    failed = store.messages(conv.chat_id)[-1]
    assert failed.seq == saved[-1].seq and failed.problem is not None and not failed.text
    assert store.versions(conv.chat_id, first).label == "2/2"
    store.show_version(conv.chat_id, first)
    assert shown(store, conv.chat_id) == [("user", "Name a colour"), ("assistant", "Red.")]


async def test_a_deleted_question_leaves_the_next_request_with_its_answer_and_undo_brings_both(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    await ask(conv, server, "One", "Uno.")
    answer = await ask(conv, server, "Two", "Dos.")

    stamp = conv.delete(answer - 1)
    assert shown(store, conv.chat_id) == [("user", "One"), ("assistant", "Uno.")]
    assert store.search_chats("Dos") == []  # a deleted message is not found either
    await ask(conv, server, "Three", "Tres.")
    assert sent(server) == [("user", "One"), ("assistant", "Uno."), ("user", "Three")]

    conv.undelete(stamp)
    assert ("assistant", "Dos.") in shown(store, conv.chat_id)
    await ask(conv, server, "Four", "Cuatro.")
    assert ("user", "Two") in sent(server) and ("assistant", "Dos.") in sent(server)


async def test_a_deleted_answer_leaves_the_next_request(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    await ask(conv, server, "One", "Uno.")
    answer = await ask(conv, server, "Two", "Dos.")

    conv.delete(answer)
    assert ("assistant", "Dos.") not in shown(store, conv.chat_id)
    await ask(conv, server, "Three", "Tres.")
    assert ("assistant", "Dos.") not in sent(server)


async def test_an_edit_before_the_fold_withdraws_it_and_the_model_rereads_the_log(
    conv: Conversation, store: ChatStore, server: OpenAIStyleServer
) -> None:
    await ask(conv, server, "My cat is Tom", "Noted.")
    await ask(conv, server, "My dog is Rex", "Noted too.")
    store.add_compaction(conv.chat_id, 2, "SUMMARY: the cat is Tom.", "fake-model")
    await ask(conv, server, "Hello", "Hi.")
    assert "SUMMARY: the cat is Tom." in sent(server)[0][1]  # the fold is in use

    said(server, "Noted, Felix.")
    async for _ in conv.edit(0, "My cat is Felix"):
        pass
    assert store.latest_compaction(conv.chat_id) is None
    assert all("SUMMARY" not in text for _, text in sent(server))
    assert sent(server) == [("user", "My cat is Felix")]
