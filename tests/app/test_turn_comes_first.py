"""A pasted page that forces a fold is answered first; the fold's summary is written after.

The real chain: a Conversation with its chat log, ``ApiSession`` and ``ModelSummariser`` on a
loopback OpenAI-style server that holds every summary request until the test lets it go (a
summary that takes long). The server records the order of what it was asked: the fold turn's
answer request comes before the summary request ends, the chat log records the summary when it
is done, and the next turn sends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.conversation import Conversation, ConvEvent
from app.store import ChatStore
from engines.base import Compacted, Done, TextDelta
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.openai import OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer
from tests.loopback_chat import (
    PASTE,
    SUMMARY,
    SummaryWaiter,
    new_api_chat,
    turn_text,
)


def first_text(body: dict[str, Any]) -> str:
    """The first person message of a request as the server got it."""
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


async def send(conversation: Conversation, text: str) -> list[ConvEvent]:
    return [e async for e in conversation.turn(text)]


async def test_a_paste_that_forces_a_fold_is_answered_before_its_summary_is_written(
    api: OpenAIStyleServer, api_adapter: OpenAIAdapter, store: ChatStore, data_dir: Path
) -> None:
    conversation = new_api_chat(store, data_dir, api_adapter)
    summaries = conversation.on_summary = SummaryWaiter()
    try:
        for i in range(4):
            events = await send(conversation, turn_text(i))
            assert any(isinstance(e, Done) for e in events)
            assert not [e for e in events if isinstance(e, Compacted)]
        assert "summary" not in api.timeline  # the fold was not near: nothing ahead

        events = await send(conversation, PASTE)

        # The paste is answered at once, on a fold that keeps what it can without a model.
        assert any(isinstance(e, Done) for e in events)
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello, world!"
        (fold,) = [e for e in events if isinstance(e, Compacted)]
        assert fold.writing and fold.first_kept_seq == 8
        # The answer's request reached the api, and no summary has ended: the one being
        # written waits for the server to let it go.
        fold_turn = len(api.timeline) - 1 - api.timeline[::-1].index("chat")
        assert "summary-end" not in api.timeline
        logged = store.latest_compaction(conversation.chat_id)
        assert logged is not None and logged.first_kept_seq == 8
        assert logged.summary == fold.summary  # for now: what the fold kept
        assert first_text(api.chat_requests[-1].json).startswith(SUMMARY_OPEN)

        # Let the summary go: it is written after the answer, and the chat log records it.
        done = await summaries.let_go(api)
        summary_at = api.timeline.index("summary", fold_turn)
        assert fold_turn < summary_at < api.timeline.index("summary-end", fold_turn)
        assert done.first_kept_seq == 8 and SUMMARY in done.summary
        logged = store.latest_compaction(conversation.chat_id)
        assert logged is not None and logged.summary == done.summary
        asked = [r.json for r in api.chat_requests if "<summary-so-far>" in r.body.decode()]
        assert "Turn 0: Marta keeps the garden rota" in asked[-1]["messages"][-1]["content"]
        assert isinstance(conversation.engine, ApiSession)
        await conversation.engine.wait_prepared()
        assert load_transcript(data_dir, conversation.chat_id).transcript.summary == done.summary

        # The next turn sends it, and the chat log and the transcript agree (no rebuild).
        events = await send(conversation, "And the beans?")
        assert any(isinstance(e, Done) for e in events)
        sent = first_text(api.chat_requests[-1].json)
        assert sent.startswith(SUMMARY_OPEN) and SUMMARY in sent
        assert not [e for e in events if getattr(e, "topic", "") == "transcript-recovered"]
    finally:
        await conversation.aclose()
