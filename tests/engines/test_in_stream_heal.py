"""ApiSession heals a too-long refusal that came inside a 200 stream exactly as it heals a 400:
one quiet re-send, shortened, and the person sees only the healed answer.

Real adapters against the loopback fakes: a model listed with a larger window than the server
really has (a stale or over-stated listing) gets a long chat, the server refuses inside its
stream, and the session folds, shortens and sends once more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from engines.base import (
    Done,
    Event,
    Healed,
    ModelInfo,
    Problem,
    ProblemKind,
    TextDelta,
    TurnInput,
)
from engines.context.session import ApiSession
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.http import Recorded
from tests.fakes.ollama_server import FakeModel, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, estimate

CHAT = "chat-in-stream"
SYSTEM = "You are Conch, a helpful assistant."
WINDOW = 4_000  # what the server really reads; the listing says far more
EARLIER = ("Question 0: " + "q" * 6_000, "Question 1: " + "r" * 6_000)
NOW = "And now? " + "z" * 30_000  # about 7,500 tokens: over the real window on its own


def session_for(adapter: ProviderAdapter, data_dir: Path) -> ApiSession:
    return ApiSession(chat_id=CHAT, data_dir=data_dir, adapters={adapter.name: adapter})


async def run(session: ApiSession, seq: int, text: str, model: ModelInfo) -> list[Event]:
    turn = TurnInput(chat_id=CHAT, seq=seq, text=text, model=model, system=SYSTEM)
    return [event async for event in session.turn(turn)]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def converse(
    session: ApiSession, model: ModelInfo, before: Callable[[], None]
) -> list[Event]:
    """Two earlier turns answered in full, then ``before()``, then the long turn."""
    for seq, text in enumerate(EARLIER):
        events = await run(session, 2 * seq, text, model)
        assert isinstance(events[-1], Done), events[-1]
    before()
    return await run(session, 2 * len(EARLIER), NOW, model)


def assert_healed_quietly(events: list[Event], answer: str, window: int | None) -> None:
    assert text_of(events) == answer  # nothing of the refused attempt shows
    assert not [e for e in events if isinstance(e, Problem)]
    (healed,) = [e for e in events if isinstance(e, Healed)]
    assert healed.window == window
    assert isinstance(events[-1], Done)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as c:
        yield c


@pytest.mark.parametrize(
    ("shape", "row"),
    [
        ("openrouter", "openrouter"),
        ("litellm", "openai"),
        ("vllm", "vllm"),
        ("vllm-flat", "vllm"),
        ("llamacpp", "llamacpp"),
        ("event-error", "openai"),
    ],
)
async def test_an_openai_style_refusal_in_the_stream_heals_with_one_shorter_resend(
    data_dir: Path, client: httpx.AsyncClient, shape: str, row: str
) -> None:
    server = OpenAIStyleServer(row).start()
    try:
        adapter = OpenAIAdapter(ROWS[row], base_url=server.base_url, client=client, api_key="k")
        model = ModelInfo(provider=row, id="fake-model", context=128_000, local=ROWS[row].local)

        def refuse_from_now_on() -> None:
            server.window = WINDOW
            server.in_stream_shape = shape

        events = await converse(session_for(adapter, data_dir), model, refuse_from_now_on)
        refused, resent = server.chat_requests[len(EARLIER) :]
    finally:
        server.stop()
    assert_healed_quietly(events, "Hello, world!", WINDOW)
    assert estimate(refused.json["messages"]) > WINDOW
    assert estimate(resent.json["messages"]) <= WINDOW


async def test_a_refusal_in_the_stream_after_text_is_shown_is_not_resent(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    server = OpenAIStyleServer("llamacpp").start()
    try:
        adapter = OpenAIAdapter(ROWS["llamacpp"], base_url=server.base_url, client=client)
        model = ModelInfo(provider="llamacpp", id="fake-model", context=128_000, local=True)

        def fail_after_the_first_words() -> None:
            server.stream_error = {
                "code": 400,
                "message": "request (9000 tokens) exceeds the available context size "
                f"({WINDOW} tokens), try increasing it",
                "type": "exceed_context_size_error",
            }

        events = await converse(session_for(adapter, data_dir), model, fail_after_the_first_words)
        asked = len(server.chat_requests)
    finally:
        server.stop()
    assert asked == len(EARLIER) + 1  # the words already shown are not taken back by a re-send
    assert text_of(events) == "Hello"
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.TOO_LONG and problem.problem.partial
    assert not [e for e in events if isinstance(e, Healed)]


@pytest.mark.parametrize("shape", ["json", "text"])
async def test_an_anthropic_error_event_in_the_stream_heals(
    data_dir: Path, client: httpx.AsyncClient, shape: str
) -> None:
    server = AnthropicServer(api_key="sk-ant").start()
    try:
        adapter = AnthropicAdapter(api_key="sk-ant", base_url=server.base_url, client=client)
        model = ModelInfo(provider="anthropic", id="claude-fake-1", context=200_000)

        def refuse_from_now_on() -> None:
            server.window = WINDOW
            server.in_stream_shape = shape

        events = await converse(session_for(adapter, data_dir), model, refuse_from_now_on)
        sent: list[Recorded] = server.message_requests[len(EARLIER) :]
    finally:
        server.stop()
    assert_healed_quietly(events, "Hi there.", WINDOW)
    assert len(sent) == 2


async def test_an_ollama_error_line_in_a_200_stream_heals(data_dir: Path) -> None:
    with running_ollama(
        [FakeModel("llama3.2", 131_072)], version="0.12.6", loaded={"llama3.2": 4_096}
    ) as ollama:
        adapter = OllamaAdapter(ollama.url, memory=64 * 2**30)
        try:
            # Listed with its trained window, as a catalogue read before the load would say.
            model = ModelInfo(provider="ollama", id="llama3.2", context=131_072, local=True)

            def refuse_in_the_stream() -> None:
                ollama.refuse_in_stream = True

            events = await converse(session_for(adapter, data_dir), model, refuse_in_the_stream)
        finally:
            await adapter.aclose()
        outcomes = list(ollama.outcomes)[len(EARLIER) :]
        reloads = ollama.total_reloads()
    assert_healed_quietly(events, "Hello from the fake Ollama.", 4_096)
    assert [o.refused for o in outcomes] == [True, False]
    assert not outcomes[1].truncated and reloads == 0
