"""A pasted page that forces a fold is answered first; the fold's summary is written after.

The real chain: a Conversation with its chat log, ``ApiSession`` and ``ModelSummariser`` on a
loopback OpenAI-style server that holds every summary request until the test lets it go (a
summary that takes long). The server records the order of what it was asked: the fold turn's
answer request comes before the summary request ends, the chat log records the summary when it
is done, and the next turn sends it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.conversation import Conversation, ConvEvent
from app.services import history_messages, latest_fold
from app.store import ChatStore
from engines.base import Compacted, Done, ModelInfo, SummaryWritten, TextDelta
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.summarise import ModelSummariser
from engines.context.transcript import load_transcript
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.waits import HANG_SECONDS

MODEL = ModelInfo(provider="openai", id="gpt-fake", label="GPT Fake", context=4_096)
SUMMARY = "The person asked about Marta's garden rota and the tomatoes."


def turn_text(i: int) -> str:
    return f"Turn {i}: Marta keeps the garden rota. " + (
        "We talked about watering the tomatoes and the beans. " * 30
    )


# About 1,200 tokens: with four turns before it, more than a 4K model's budget holds.
PASTE = "Here is the pump log:\n" + "\n".join(
    f"line {k}: the pump ran for {k % 60} minutes" for k in range(130)
)


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("openai")
    s.summary_gate = threading.Event()
    s.summary_script = Script(text=[SUMMARY])
    s.start()
    yield s
    s.summary_gate.set()
    s.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60.0)) as c:
        yield c


@pytest.fixture
def store(data_dir: Path) -> Iterator[ChatStore]:
    s = ChatStore.in_dir(data_dir)
    yield s
    s.close()


def first_text(body: dict[str, Any]) -> str:
    """The first person message of a request as the server got it."""
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


async def send(conversation: Conversation, text: str) -> list[ConvEvent]:
    return [e async for e in conversation.turn(text)]


async def test_a_paste_that_forces_a_fold_is_answered_before_its_summary_is_written(
    server: OpenAIStyleServer, client: httpx.AsyncClient, store: ChatStore, data_dir: Path
) -> None:
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, api_key="sk-test", client=client
    )
    adapters = {"openai": adapter}
    chat = store.create_chat(model_key=MODEL.key)
    session = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters=adapters,
        summariser=ModelSummariser(adapters),
        history=lambda: history_messages(store.messages(chat.id)),
        latest_fold=lambda: latest_fold(store, chat.id),
    )
    conversation = Conversation(chat.id, store=store, engine=session, model=MODEL)
    written = asyncio.Event()
    heard: list[SummaryWritten] = []

    def on_summary(event: SummaryWritten) -> None:
        heard.append(event)
        written.set()

    conversation.on_summary = on_summary
    try:
        for i in range(4):
            events = await send(conversation, turn_text(i))
            assert any(isinstance(e, Done) for e in events)
            assert not [e for e in events if isinstance(e, Compacted)]
        assert "summary" not in server.timeline  # the fold was not near: nothing ahead

        events = await send(conversation, PASTE)

        # The paste is answered at once, on a fold that keeps what it can without a model.
        assert any(isinstance(e, Done) for e in events)
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello, world!"
        (fold,) = [e for e in events if isinstance(e, Compacted)]
        assert fold.writing and fold.first_kept_seq == 8
        # The answer's request reached the server, and no summary has ended: the one being
        # written waits for the server to let it go.
        fold_turn = len(server.timeline) - 1 - server.timeline[::-1].index("chat")
        assert "summary-end" not in server.timeline
        logged = store.latest_compaction(chat.id)
        assert logged is not None and logged.first_kept_seq == 8
        assert logged.summary == fold.summary  # for now: what the fold kept
        assert first_text(server.chat_requests[-1].json).startswith(SUMMARY_OPEN)

        # Let the summary go: it is written after the answer, and the chat log records it.
        assert server.summary_gate is not None
        server.summary_gate.set()
        await asyncio.wait_for(written.wait(), HANG_SECONDS)
        summary_at = server.timeline.index("summary", fold_turn)
        assert fold_turn < summary_at < server.timeline.index("summary-end", fold_turn)
        (done,) = heard
        assert done.first_kept_seq == 8 and done.summary.startswith(SUMMARY)
        logged = store.latest_compaction(chat.id)
        assert logged is not None and logged.summary == done.summary
        asked = [r.json for r in server.chat_requests if "<summary-so-far>" in r.body.decode()]
        assert "Turn 0: Marta keeps the garden rota" in asked[-1]["messages"][-1]["content"]
        await session.wait_prepared()
        assert load_transcript(data_dir, chat.id).transcript.summary == done.summary

        # The next turn sends it, and the chat log and the transcript agree (no rebuild).
        events = await send(conversation, "And the beans?")
        assert any(isinstance(e, Done) for e in events)
        assert first_text(server.chat_requests[-1].json).startswith(SUMMARY_OPEN + SUMMARY)
        assert not [e for e in events if getattr(e, "topic", "") == "transcript-recovered"]
    finally:
        await conversation.aclose()
