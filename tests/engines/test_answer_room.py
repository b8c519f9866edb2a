"""A refusal about the answer's room (the prompt fits; the prompt and ``max_tokens`` together
do not) heals by asking for a shorter answer, never by folding the chat away.

vLLM, TGI and servers that copy OpenAI's older words say so with both figures; the OpenAI-style
loopback fake refuses in vLLM's words when ``answer_window`` is set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from engines.api.too_long import is_too_long
from engines.base import (
    Compacted,
    Done,
    Event,
    ModelInfo,
    Note,
    Problem,
    ProblemKind,
    TextDelta,
    TurnInput,
)
from engines.context.session import ApiSession
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.providers.too_long import answer_room_in
from tests.fakes.openai_server import OpenAIStyleServer, estimate

CHAT = "chat-answer-room"

VLLM = (
    "'max_tokens' or 'max_completion_tokens' is too large: 1229. This model's maximum context "
    "length is 1100 tokens and your request has 64 input tokens (1229 > 1100 - 64)."
)
TGI = (
    '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. '
    'Given: 3900 `inputs` tokens and 500 `max_new_tokens`","error_type":"validation"}'
)
OLD_OPENAI = (
    "This model's maximum context length is 4,096 tokens. However, you requested 4,200 tokens "
    "(3,200 in the messages, 1,000 in the completion). Please reduce the length of the "
    "messages or completion."
)


@pytest.mark.parametrize(
    ("body", "room"),
    [(VLLM, (1100, 64)), (TGI, (4096, 3900)), (OLD_OPENAI, (4096, 3200))],
)
def test_each_wording_names_the_window_and_the_prompt(body: str, room: tuple[int, int]) -> None:
    assert answer_room_in(body) == room


def test_a_prompt_over_the_window_or_a_bare_limit_is_not_an_answer_room_refusal() -> None:
    prompt_too_long = (
        "This model's maximum context length is 4096 tokens. However, your messages resulted "
        "in 5000 tokens. Please reduce the length of the messages."
    )
    assert answer_room_in(prompt_too_long) is None and is_too_long(prompt_too_long)
    assert answer_room_in("max_tokens is too large") is None
    # DESIGN §3: an output-only limit is not "too long" (the contract stays as it was).
    assert not is_too_long(VLLM)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as c:
        yield c


async def run(session: ApiSession, seq: int, text: str, model: ModelInfo) -> list[Event]:
    turn = TurnInput(chat_id=CHAT, seq=seq, text=text, model=model, system="You are Conch.")
    return [event async for event in session.turn(turn)]


async def test_the_answer_room_refusal_is_sent_again_once_with_a_max_tokens_that_fits(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    server = OpenAIStyleServer("vllm").start()
    try:
        adapter = OpenAIAdapter(ROWS["vllm"], base_url=server.base_url, client=client)
        # Listed at 8K (an answer room of 1,229 tokens) but served with 1,100 for both.
        model = ModelInfo(provider="vllm", id="fake-model", context=8_192, local=True)
        session = ApiSession(chat_id=CHAT, data_dir=data_dir, adapters={"vllm": adapter})
        server.answer_window = 1_100

        events = await run(session, 0, "Which beds get the most sun?", model)

        bodies = [r.json for r in server.chat_requests]
        asked = [b.get("max_completion_tokens") or b.get("max_tokens") for b in bodies]
        assert len(asked) == 2 and asked[0] > asked[1]  # once more, and only once
        # The second asks for no more than the server said it has room for.
        assert estimate(bodies[1]["messages"]) + asked[1] <= server.answer_window
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello, world!"
        assert isinstance(events[-1], Done)
        assert not [e for e in events if isinstance(e, Problem | Compacted)]  # nothing folded
        (note,) = [e for e in events if isinstance(e, Note)]
        assert "asked for an answer that fits" in note.text
    finally:
        server.stop()


async def test_with_no_useful_room_left_it_heals_as_a_too_long_refusal(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    server = OpenAIStyleServer("vllm").start()
    try:
        adapter = OpenAIAdapter(ROWS["vllm"], base_url=server.base_url, client=client)
        model = ModelInfo(provider="vllm", id="fake-model", context=8_192, local=True)
        session = ApiSession(chat_id=CHAT, data_dir=data_dir, adapters={"vllm": adapter})
        server.answer_window = 200  # the prompt alone nearly fills it

        events = await run(session, 0, "Which beds get the most sun? " + "sun " * 30, model)

        # Not a bare failure: the too-long path takes over, and says what to do next.
        last = events[-1]
        assert isinstance(last, Problem) and last.problem.kind is ProblemKind.TOO_LONG
        assert last.problem.next_step is not None
        assert len(server.chat_requests) == 2  # the refused one, and the one healing
    finally:
        server.stop()
