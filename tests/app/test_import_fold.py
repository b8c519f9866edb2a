"""A long chat just imported is folded before its first turn, its summary written in the
background; the first turn neither folds nor waits for it.

The real chain: chats written by ``app.importers.save`` into a real chat log, a Conversation on
``ApiSession`` and ``ModelSummariser``, and loopback OpenAI-style servers that record what they
were asked (the model API's holds every summary request until the test lets it go).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.conversation import Conversation
from app.importers import ImportedChat, ImportedMessage, save
from app.store import ChatStore
from engines.base import Compacted, Done, Event, ModelInfo, TextDelta
from engines.context.session import SUMMARY_OPEN
from engines.providers.base import ProviderAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.loopback_chat import (
    API_MODEL,
    SummaryWaiter,
    api_conversation,
    held_summaries,
)
from tests.waits import HANG_SECONDS

MODEL = API_MODEL
LOCAL = ModelInfo(
    provider="llamacpp", id="small-local", label="Small local", context=4_096, local=True
)
SUMMARY = "The person planned Marta's garden rota and the tomato beds."


def long_chat(turns: int) -> ImportedChat:
    said: list[ImportedMessage] = []
    for i in range(turns):
        said.append(
            ImportedMessage(
                "user",
                f"Turn {i}: Marta keeps the garden rota. "
                + "We talked about watering the tomatoes and the beans. " * 12,
            )
        )
        said.append(ImportedMessage("assistant", f"Answer {i}: water them at dawn."))
    return ImportedChat(title="Garden rota", messages=tuple(said))


@pytest.fixture
def api() -> Iterator[OpenAIStyleServer]:
    with held_summaries(SUMMARY) as s:
        yield s


@pytest.fixture
def nearby() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("llamacpp")
    s.summary_script = Script(text=[SUMMARY])
    s.start()
    yield s
    s.stop()


def conversation_for(
    store: ChatStore,
    data_dir: Path,
    chat_id: str,
    model: ModelInfo,
    adapters: dict[str, ProviderAdapter],
) -> Conversation:
    store.set_model(chat_id, model.key)
    return api_conversation(chat_id, store, data_dir, adapters, model)


async def folded(conversation: Conversation) -> list[Event]:
    return [e async for e in conversation.fold_to_fit()]


async def test_a_long_imported_chat_folds_at_once_and_a_turn_meanwhile_answers_first(
    api: OpenAIStyleServer, client: httpx.AsyncClient, store: ChatStore, data_dir: Path
) -> None:
    adapters: dict[str, ProviderAdapter] = {
        "openai": OpenAIAdapter(ROWS["openai"], base_url=api.base_url, api_key="k", client=client)
    }
    (chat_id,) = save(store, data_dir, [long_chat(20)])
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.untrusted  # an imported chat: what it teaches waits
    conversation = conversation_for(store, data_dir, chat_id, MODEL, adapters)
    summaries = conversation.on_summary = SummaryWaiter()
    try:
        # No person turn: the fold is made now, and its summary is asked for in the background.
        events = await folded(conversation)
        (fold,) = [e for e in events if isinstance(e, Compacted)]
        assert fold.writing and fold.first_kept_seq > 0
        logged = store.latest_compaction(chat_id)
        assert logged is not None and logged.first_kept_seq == fold.first_kept_seq
        assert await asyncio.to_thread(api.summary_arrived.wait, HANG_SECONDS)
        assert api.timeline == ["summary"]  # nothing else was sent

        # The person writes while the summary is held: the answer comes first, and the turn
        # does not fold again (it was folded to fit already).
        turn = [e async for e in conversation.turn("What did we say about the beans?")]
        assert any(isinstance(e, Done) for e in turn)
        assert "".join(e.text for e in turn if isinstance(e, TextDelta)) == "Hello, world!"
        assert not [e for e in turn if isinstance(e, Compacted)]
        assert api.timeline == ["summary", "chat"]
        sent = api.chat_requests[-1].json
        first = next(m["content"] for m in sent["messages"] if m["role"] == "user")
        assert first.startswith(SUMMARY_OPEN)

        # Let the summary go: the chat log records it as the fold's.
        done = await summaries.let_go(api)
        assert SUMMARY in done.summary
        logged = store.latest_compaction(chat_id)
        assert logged is not None and logged.summary == done.summary
        assert logged.first_kept_seq == fold.first_kept_seq
    finally:
        await conversation.aclose()


async def test_a_short_imported_chat_sends_nothing(
    api: OpenAIStyleServer, client: httpx.AsyncClient, store: ChatStore, data_dir: Path
) -> None:
    adapters: dict[str, ProviderAdapter] = {
        "openai": OpenAIAdapter(ROWS["openai"], base_url=api.base_url, api_key="k", client=client)
    }
    (chat_id,) = save(store, data_dir, [long_chat(2)])
    conversation = conversation_for(store, data_dir, chat_id, MODEL, adapters)
    try:
        assert await folded(conversation) == []
        assert api.chat_requests == []
        assert store.latest_compaction(chat_id) is None
    finally:
        await conversation.aclose()


async def test_an_imported_chat_on_a_local_model_is_summarised_only_by_that_model(
    api: OpenAIStyleServer,
    nearby: OpenAIStyleServer,
    client: httpx.AsyncClient,
    store: ChatStore,
    data_dir: Path,
) -> None:
    adapters: dict[str, ProviderAdapter] = {
        "openai": OpenAIAdapter(ROWS["openai"], base_url=api.base_url, api_key="k", client=client),
        "llamacpp": OpenAIAdapter(ROWS["llamacpp"], base_url=nearby.base_url, client=client),
    }
    (chat_id,) = save(store, data_dir, [long_chat(20)])
    conversation = conversation_for(store, data_dir, chat_id, LOCAL, adapters)
    summaries = conversation.on_summary = SummaryWaiter()
    try:
        events = await folded(conversation)
        assert [e for e in events if isinstance(e, Compacted)]
        await summaries.wait()
        asked = [r.json for r in nearby.chat_requests]
        assert asked and all(body["model"] == LOCAL.id for body in asked)
        logged = store.latest_compaction(chat_id)
        assert logged is not None and SUMMARY in logged.summary
        assert api.requests == []  # the model API heard nothing of this chat
    finally:
        await conversation.aclose()
