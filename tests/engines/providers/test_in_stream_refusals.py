"""Refusals that arrive inside a 200 stream: each adapter raises them as too long, with the
window they name, before any answer text, so the session can heal them.

Gateways that have already sent their status line (OpenRouter, LiteLLM's proxy, vLLM's stream
generator, llama-server before it answered 400, Ollama once it has begun) put the error in an
SSE event or a final NDJSON line instead.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from engines.base import Done, ProblemKind, TextDelta
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.adapters import ask
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.ollama_server import CLASSIC_REFUSAL, FakeModel, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.fakes.streams import failure

StartServer = Callable[..., OpenAIStyleServer]
LONG = "word " * 4_000  # about 5,000 tokens by the fakes' counts


# --- OpenAI-style gateways --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "row"),
    [
        ("openrouter", "openrouter"),  # the upstream's words inside metadata.raw
        ("mislabelled", "openrouter"),  # the same stream sent as text/plain
        ("litellm", "openai"),  # a LiteLLM proxy set as the OpenAI address
        ("vllm", "vllm"),
        ("vllm-flat", "vllm"),
        ("llamacpp", "llamacpp"),
        ("event-error", "openai"),
    ],
)
async def test_a_gateway_refusal_inside_a_200_stream_is_too_long_with_its_window(
    openai_server: StartServer, loopback_client: httpx.AsyncClient, shape: str, row: str
) -> None:
    server = openai_server(row, window=1_000)
    server.in_stream_shape = shape
    adapter = OpenAIAdapter(
        ROWS[row], base_url=server.base_url, client=loopback_client, api_key="k"
    )
    error, shown = await failure(adapter, ask(LONG), thinking=True)
    assert error.too_long and error.kind is ProblemKind.TOO_LONG
    assert error.window == 1_000
    assert not error.partial and shown == ""
    assert len(server.chat_requests) == 1  # read from the stream, not found by asking again


async def test_openrouter_says_what_the_upstream_said_not_only_that_it_failed(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter", window=1_000)
    server.in_stream_shape = "openrouter"
    adapter = OpenAIAdapter(
        ROWS["openrouter"], base_url=server.base_url, client=loopback_client, api_key="k"
    )
    error, _ = await failure(adapter, ask(LONG), thinking=True)
    assert error.detail.startswith("Provider returned error: ")
    assert "maximum context length is 1000 tokens" in error.detail


async def test_another_gateway_error_keeps_its_own_kind(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    # LiteLLM writes the status as a string; a rate limit must stay a rate limit.
    server = openai_server("openai")
    server.stream_error = {
        "message": "litellm.RateLimitError: OpenAIException - Too Many Requests",
        "type": None,
        "param": None,
        "code": "429",
    }
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, client=loopback_client, api_key="k"
    )
    error, _ = await failure(adapter, ask("Hi"), thinking=True)
    assert error.kind is ProblemKind.RATE_LIMITED
    assert not error.too_long


async def test_an_answer_that_finishes_with_error_is_not_an_empty_answer(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter", script=Script(text=[], finish_reason="error"))
    adapter = OpenAIAdapter(
        ROWS["openrouter"], base_url=server.base_url, client=loopback_client, api_key="k"
    )
    error, shown = await failure(adapter, ask("Hi"), thinking=True)
    assert error.kind is ProblemKind.SERVER_ERROR
    assert shown == "" and not error.partial


async def test_the_same_request_under_the_window_is_answered(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter", window=100_000)
    server.in_stream_shape = "openrouter"
    adapter = OpenAIAdapter(
        ROWS["openrouter"], base_url=server.base_url, client=loopback_client, api_key="k"
    )
    events = [event async for event in adapter.stream(ask(LONG))]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello, world!"
    assert isinstance(events[-1], Done)


# --- Anthropic --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["json", "text"])
async def test_an_anthropic_error_event_before_any_text_is_too_long(
    anthropic_server: Callable[..., AnthropicServer],
    loopback_client: httpx.AsyncClient,
    shape: str,
) -> None:
    server = anthropic_server(window=2_000, api_key="sk-ant")
    server.in_stream_shape = shape
    adapter = AnthropicAdapter(api_key="sk-ant", base_url=server.base_url, client=loopback_client)
    error, shown = await failure(adapter, ask(LONG, model="claude-fake-1"), thinking=True)
    assert error.too_long and error.window == 2_000
    assert not error.partial and shown == ""


# --- Ollama -----------------------------------------------------------------------------------


async def test_an_ollama_error_line_in_a_200_stream_is_too_long_with_num_ctx() -> None:
    with running_ollama(
        [FakeModel("llama3.2", 131_072)], version="0.12.6", loaded={"llama3.2": 4_096}
    ) as ollama:
        ollama.refuse_in_stream = True
        adapter = OllamaAdapter(ollama.url, memory=64 * 2**30)
        try:
            error, shown = await failure(adapter, ask(LONG, model="llama3.2"), thinking=True)
        finally:
            await adapter.aclose()
        refused = [o.refused for o in ollama.outcomes]
    assert refused == [True]
    assert error.too_long and error.window == 4_096  # the refusal names none: num_ctx is it
    assert CLASSIC_REFUSAL in error.detail
    assert not error.partial and shown == ""
