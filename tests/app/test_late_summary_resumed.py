"""A fold's summary cut off when the chat closed is written again when the chat opens.

The real chain, twice: a Conversation with its chat log, ``ApiSession`` and ``ModelSummariser``
on a loopback OpenAI-style server that holds every summary request until the test lets it go.
The chat closes while the summary request is held (as when the app quits); the chat opened
again sends the same request again (or, its model not ready then, after its next turn), the chat
log records the summary, and the next turn sends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.conversation import Conversation
from app.store import ChatStore
from engines.base import Compacted, Done, SummaryWritten
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.http import Recorded
from tests.fakes.openai_server import OpenAIStyleServer
from tests.loopback_chat import (
    API_MODEL,
    PASTE,
    SummaryWaiter,
    api_conversation,
    held_summaries,
    turn_text,
)
from tests.waits import HANG_SECONDS

MODEL = API_MODEL
SUMMARY = "The person asked about Marta's garden rota and the tomatoes."


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    with held_summaries(SUMMARY) as s:
        yield s


def open_chat(
    chat_id: str, store: ChatStore, data_dir: Path, adapter: OpenAIAdapter
) -> Conversation:
    """The chat as the app opens it: a new session on its transcript file and chat log."""
    return api_conversation(chat_id, store, data_dir, {"openai": adapter})


def summary_requests(server: OpenAIStyleServer) -> list[Recorded]:
    return [r for r in server.chat_requests if b"<summary-so-far>" in r.body]


async def arrived(server: OpenAIStyleServer) -> None:
    """Until a summary request reaches the server (it holds it there)."""
    assert await asyncio.to_thread(server.summary_arrived.wait, HANG_SECONDS)


async def cut_off(
    server: OpenAIStyleServer,
    chat_id: str,
    store: ChatStore,
    data_dir: Path,
    adapter: OpenAIAdapter,
) -> tuple[Compacted, bytes]:
    """Four turns and a paste that folds; the chat closes while the fold's summary request is
    held. Returns the fold and that request's body."""
    heard: list[SummaryWritten] = []
    first = open_chat(chat_id, store, data_dir, adapter)
    first.on_summary = heard.append
    for i in range(4):
        assert any(isinstance(e, Done) for e in [e async for e in first.turn(turn_text(i))])
    events = [e async for e in first.turn(PASTE)]
    (fold,) = [e for e in events if isinstance(e, Compacted)]
    assert fold.writing
    # The summary is asked for after the answer, and the chat closes while it is held.
    await arrived(server)
    (asked,) = summary_requests(server)
    await first.aclose()
    assert not heard
    server.summary_arrived.clear()
    return fold, asked.body


async def test_a_summary_cut_off_by_closing_the_chat_is_written_when_it_opens_again(
    server: OpenAIStyleServer, client: httpx.AsyncClient, store: ChatStore, data_dir: Path
) -> None:
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, api_key="sk-test", client=client
    )
    chat = store.create_chat(model_key=MODEL.key)
    fold, body = await cut_off(server, chat.id, store, data_dir, adapter)
    logged = store.latest_compaction(chat.id)
    assert logged is not None and logged.summary == fold.summary and SUMMARY not in fold.summary

    # Opened again: the same summary request is sent again, in the background.
    again = open_chat(chat.id, store, data_dir, adapter)
    summaries = again.on_summary = SummaryWaiter()
    try:
        assert again.resume_summary()
        await arrived(server)
        resent = summary_requests(server)
        assert len(resent) == 2 and resent[1].body == body
        assert server.summary_gate is not None
        server.summary_gate.set()
        await summaries.wait()
        (done,) = summaries.heard
        assert done.first_kept_seq == fold.first_kept_seq and SUMMARY in done.summary
        logged = store.latest_compaction(chat.id)
        assert logged is not None and logged.summary == done.summary
        assert isinstance(again.engine, ApiSession)
        await again.engine.wait_prepared()  # the transcript is saved after the chat log
        saved = load_transcript(data_dir, chat.id).transcript
        assert saved.summary == done.summary and not saved.late
        assert not again.resume_summary()  # nothing left to write

        # The next turn sends it; the chat log and the transcript agree (no rebuild).
        events = [e async for e in again.turn("And the beans?")]
        assert any(isinstance(e, Done) for e in events)
        sent = next(
            m["content"] for m in server.chat_requests[-1].json["messages"] if m["role"] == "user"
        )
        assert str(sent).startswith(SUMMARY_OPEN) and SUMMARY in str(sent)
        assert not [e for e in events if getattr(e, "topic", "") == "transcript-recovered"]
        assert len(summary_requests(server)) == 2
    finally:
        await again.aclose()


async def test_a_summary_cut_off_is_written_after_the_next_turn_when_the_model_was_not_ready(
    server: OpenAIStyleServer, client: httpx.AsyncClient, store: ChatStore, data_dir: Path
) -> None:
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, api_key="sk-test", client=client
    )
    chat = store.create_chat(model_key=MODEL.key)
    fold, body = await cut_off(server, chat.id, store, data_dir, adapter)
    again = open_chat(chat.id, store, data_dir, adapter)
    again.switch_model(MODEL.model_copy(update={"ready": False}))
    summaries = again.on_summary = SummaryWaiter()
    try:
        # Nothing is sent while the chat's model is not ready.
        assert not again.resume_summary()
        assert len(summary_requests(server)) == 1
        # Its next turn (the model is ready then) writes it after the answer.
        again.switch_model(MODEL)
        events = [e async for e in again.turn("And the beans?")]
        assert any(isinstance(e, Done) for e in events)
        await arrived(server)
        assert [r.body for r in summary_requests(server)] == [body, body]
        assert server.summary_gate is not None
        server.summary_gate.set()
        await summaries.wait()
        (done,) = summaries.heard
        assert done.first_kept_seq == fold.first_kept_seq and SUMMARY in done.summary
        logged = store.latest_compaction(chat.id)
        assert logged is not None and logged.summary == done.summary
    finally:
        await again.aclose()
