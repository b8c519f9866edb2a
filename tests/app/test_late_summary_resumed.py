"""A fold's summary cut off when the chat closed is written again when the chat opens.

The real chain, twice: a Conversation with its chat log, ``ApiSession`` and ``ModelSummariser``
on a loopback OpenAI-style server that holds every summary request until the test lets it go.
The chat closes while the summary request is held (as when the app quits); the chat opened
again sends the same request again (or, its model not ready then, after its next turn), the chat
log records the summary, and the next turn sends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

import pytest

from app.conversation import Conversation
from app.store import ChatStore
from engines.base import Compacted, Done, SummaryWritten
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.openai import OpenAIAdapter
from tests.fakes.http import Recorded
from tests.fakes.openai_server import OpenAIStyleServer
from tests.loopback_chat import (
    API_MODEL,
    PASTE,
    SUMMARY,
    SummaryWaiter,
    api_conversation,
    new_api_chat,
    turn_text,
)
from tests.waits import HANG_SECONDS


def summary_requests(api: OpenAIStyleServer) -> list[Recorded]:
    return [r for r in api.chat_requests if b"<summary-so-far>" in r.body]


async def arrived(api: OpenAIStyleServer) -> None:
    """Until a summary request reaches the server (it holds it there)."""
    assert await asyncio.to_thread(api.summary_arrived.wait, HANG_SECONDS)


class CutOff(NamedTuple):
    chat_id: str
    fold: Compacted
    body: bytes  # of the summary request the closing cut off


@pytest.fixture
async def cut_off(
    api: OpenAIStyleServer, api_adapter: OpenAIAdapter, store: ChatStore, data_dir: Path
) -> CutOff:
    """Four turns and a paste that folds; the chat closes while the fold's summary request is
    held."""
    heard: list[SummaryWritten] = []
    first = new_api_chat(store, data_dir, api_adapter)
    first.on_summary = heard.append
    for i in range(4):
        assert any(isinstance(e, Done) for e in [e async for e in first.turn(turn_text(i))])
    events = [e async for e in first.turn(PASTE)]
    (fold,) = [e for e in events if isinstance(e, Compacted)]
    assert fold.writing
    # The summary is asked for after the answer, and the chat closes while it is held.
    await arrived(api)
    (asked,) = summary_requests(api)
    await first.aclose()
    assert not heard
    api.summary_arrived.clear()
    return CutOff(first.chat_id, fold, asked.body)


@pytest.fixture
async def again(
    cut_off: CutOff, api_adapter: OpenAIAdapter, store: ChatStore, data_dir: Path
) -> AsyncIterator[Conversation]:
    """The cut-off chat opened again, as the app opens it: a new session on its transcript
    file and chat log. Closed after the test."""
    conversation = api_conversation(cut_off.chat_id, store, data_dir, {"openai": api_adapter})
    yield conversation
    await conversation.aclose()


async def test_a_summary_cut_off_by_closing_the_chat_is_written_when_it_opens_again(
    api: OpenAIStyleServer, cut_off: CutOff, again: Conversation, store: ChatStore, data_dir: Path
) -> None:
    chat_id, fold, body = cut_off
    logged = store.latest_compaction(chat_id)
    assert logged is not None and logged.summary == fold.summary and SUMMARY not in fold.summary

    # Opened again: the same summary request is sent again, in the background.
    summaries = again.on_summary = SummaryWaiter()
    assert again.resume_summary()
    await arrived(api)
    resent = summary_requests(api)
    assert len(resent) == 2 and resent[1].body == body
    done = await summaries.let_go(api)
    assert done.first_kept_seq == fold.first_kept_seq and SUMMARY in done.summary
    logged = store.latest_compaction(chat_id)
    assert logged is not None and logged.summary == done.summary
    assert isinstance(again.engine, ApiSession)
    await again.engine.wait_prepared()  # the transcript is saved after the chat log
    saved = load_transcript(data_dir, chat_id).transcript
    assert saved.summary == done.summary and not saved.late
    assert not again.resume_summary()  # nothing left to write

    # The next turn sends it; the chat log and the transcript agree (no rebuild).
    events = [e async for e in again.turn("And the beans?")]
    assert any(isinstance(e, Done) for e in events)
    sent = next(m["content"] for m in api.chat_requests[-1].json["messages"] if m["role"] == "user")
    assert str(sent).startswith(SUMMARY_OPEN) and SUMMARY in str(sent)
    assert not [e for e in events if getattr(e, "topic", "") == "transcript-recovered"]
    assert len(summary_requests(api)) == 2


async def test_a_summary_cut_off_is_written_after_the_next_turn_when_the_model_was_not_ready(
    api: OpenAIStyleServer, cut_off: CutOff, again: Conversation, store: ChatStore
) -> None:
    chat_id, fold, body = cut_off
    again.switch_model(API_MODEL.model_copy(update={"ready": False}))
    summaries = again.on_summary = SummaryWaiter()
    # Nothing is sent while the chat's model is not ready.
    assert not again.resume_summary()
    assert len(summary_requests(api)) == 1
    # Its next turn (the model is ready then) writes it after the answer.
    again.switch_model(API_MODEL)
    events = [e async for e in again.turn("And the beans?")]
    assert any(isinstance(e, Done) for e in events)
    await arrived(api)
    assert [r.body for r in summary_requests(api)] == [body, body]
    done = await summaries.let_go(api)
    assert done.first_kept_seq == fold.first_kept_seq and SUMMARY in done.summary
    logged = store.latest_compaction(chat_id)
    assert logged is not None and logged.summary == done.summary
