"""The session counts a request with the server's own tokenizer where the server streams no
usage (llama-cpp-python, the bundled runtime): once per fold, and when the text not yet counted
could bring the transcript near the budget. Asserted on what the loopback server received.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engines.base import (
    Compacted,
    Done,
    Event,
    Healed,
    ModelInfo,
    Problem,
    Shortened,
    TurnInput,
)
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.local.gate import gated
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.window import budget, estimate_tokens
from tests.engines.test_session import FakeSummariser
from tests.fakes.http import Recorded
from tests.fakes.openai_server import OpenAIStyleServer

CHAT = "chat-counted"
SYSTEM = "You are Conch, a helpful assistant."
# A status board pasted as emoji (410 lines, 18 KB): about 4,400 tokens by the estimate, about
# four times that by a byte-level tokenizer that has not learned them (``byte_tokens``).
BOARD = "\n".join("🟩🟩🟥🟩🟨🟩🟦🟩🟩🟥" for _ in range(410))


def model(window: int) -> ModelInfo:
    return ModelInfo(provider="local", id="fake-model", label="Fake", context=window, local=True)


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("local").start()
    yield s
    s.stop()


def session_for(
    server: OpenAIStyleServer,
    client: httpx.AsyncClient,
    data_dir: Path,
    summariser: FakeSummariser | None = None,
) -> ApiSession:
    adapter = gated(OpenAIAdapter(ROWS["local"], base_url=server.base_url, client=client))
    return ApiSession(
        chat_id=CHAT, data_dir=data_dir, adapters={"local": adapter}, summariser=summariser
    )


async def run(session: ApiSession, seq: int, text: str, window: int) -> list[Event]:
    turn = TurnInput(chat_id=CHAT, seq=seq, text=text, model=model(window), system=SYSTEM)
    return [e async for e in session.turn(turn)]


def sent_text(request: Recorded) -> str:
    """What a chat request carries, as the session's count sends it (one piece a line)."""
    return "\n".join(m["content"] for m in request.json["messages"])


def counts(server: OpenAIStyleServer) -> list[Recorded]:
    return server.count_requests


async def test_a_paste_the_estimate_undercounts_is_counted_and_cut_before_it_is_sent(
    server: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    server.window = 8_192
    server.byte_tokens = True  # a token per byte of an emoji, as a byte-level tokenizer spends
    session = session_for(server, client, tmp_path)
    events = await run(session, 0, "Please check this board:\n" + BOARD, 8_192)

    assert isinstance(events[-1], Done), events[-1]
    # Counted before it was sent, so it was cut to what the server really holds: no refusal,
    # no re-send, one request.
    assert not [e for e in events if isinstance(e, Healed | Problem)]
    (chat,) = server.chat_requests
    assert chat.json["stream"] is True
    assert server.requests.index(counts(server)[0]) < server.requests.index(chat)
    assert server.count(sent_text(chat)) <= 8_192
    assert session.factor > 3.0
    # Most of the board did not go: the turn says so.
    (cut,) = [e for e in events if isinstance(e, Shortened)]
    assert cut.seq == 0 and cut.sent_chars < cut.total_chars / 2
    assert cut.text.startswith(f"Conch sent the first and last {cut.sent_chars:,} characters")


async def test_far_from_the_budget_a_chat_is_counted_once_per_fold(
    server: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    window = 128_000  # the budget is 100,000 tokens; this chat stays far below it
    session = session_for(server, client, tmp_path, summariser=FakeSummariser())
    per_turn: list[int] = []
    seq = 0
    for i in range(12):
        before = len(counts(server))
        events = await run(session, seq, f"Note {i}: " + "the garden needs water. " * 60, window)
        assert isinstance(events[-1], Done)
        per_turn.append(len(counts(server)) - before)
        seq += 2
    # The first turn says too little to count (under MIN_SAMPLE tokens); the first that says
    # enough is counted, and then no other.
    first = next(k for k, n in enumerate(per_turn) if n)
    assert first > 0 and per_turn[first] == 1 and sum(per_turn) == 1
    assert session.factor >= 1.0

    # A fold (asked for here, far from the budget) is counted once more, on the next turn,
    # and that count is of the request as sent: the summary in front of the kept turn.
    compacted = [e async for e in session.compact(model=model(window))]
    assert [e for e in compacted if isinstance(e, Compacted)]
    after: list[int] = []
    for i in range(4):
        before = len(counts(server))
        await run(session, seq, f"More {i}: " + "the shed door sticks. " * 200, window)
        after.append(len(counts(server)) - before)
        seq += 2
    assert after == [1, 0, 0, 0]
    recount = counts(server)[-1].json["input"]
    assert recount == sent_text(server.chat_requests[-4])
    assert SUMMARY_OPEN in recount


async def test_a_fold_turn_is_counted_once_after_the_fold_and_never_twice_a_turn(
    server: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    window = 16_384
    b = budget(window, estimate_tokens(SYSTEM))
    session = session_for(server, client, tmp_path)  # no summariser: folds drop turns
    seq = 0
    folds = 0
    for i in range(40):
        before = len(counts(server))
        events = await run(session, seq, f"Part {i}: " + "we moved the beds today. " * 100, window)
        seq += 2
        assert isinstance(events[-1], Done)
        made = counts(server)[before:]
        assert len(made) <= 1  # never twice in one turn
        if [e for e in events if isinstance(e, Compacted)]:
            folds += 1
            # Counted once, after the fold: the request that was then sent.
            (count,) = made
            assert count.json["input"] == sent_text(server.chat_requests[-1])
    assert folds >= 2
    assert len(counts(server)) > folds  # and the approach to each fold was counted too
    assert session.context_usage(model(window), SYSTEM)[1] == b
