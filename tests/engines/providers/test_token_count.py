"""Counting a request's tokens with the server's own tokenizer (servers that stream no usage).

Against fake llama-cpp-python and llama-server tokenizer endpoints, and once against the real
bundled runtime, whose count must match its tokenizer's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.base import Message, Picture, ToolCallData
from engines.local.bundled import (
    MODEL_ID,
    BundledAdapter,
    BundledRuntime,
    available,
    missing,
)
from engines.local.gate import GatedAdapter, GaveWayError, background
from engines.providers.base import ChatRequest
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.providers.tokens import TEMPLATE_TOKENS, request_text
from engines.window import PICTURE_TOKENS, estimate_tokens
from tests.fakes.adapters import openai_adapter
from tests.fakes.http import Recorded, Reply, free_port
from tests.fakes.openai_server import OpenAIStyleServer, count_tokens
from tests.waits import HANG_SECONDS

StartServer = Callable[..., OpenAIStyleServer]

TABLE = "\n".join(f"{i},{i * 37 % 1000}.{i % 97:02d},2024-{i % 12 + 1:02d}-17" for i in range(400))
SYSTEM = "You are a helpful assistant."


def table_request(model: str = "fake-model") -> ChatRequest:
    return ChatRequest(
        model=model,
        system=SYSTEM,
        messages=(
            Message(role="user", text="Here are my readings:\n" + TABLE),
            Message(role="assistant", text="Thanks, what should I do with them?"),
            Message(role="user", text="Sum the second column."),
        ),
    )


def framing(request: ChatRequest) -> int:
    return TEMPLATE_TOKENS * (len(request.messages) + (1 if request.system else 0))


# --- llama-cpp-python (a server people run themselves) ---------------------------------------


async def test_a_table_of_numbers_is_counted_a_token_a_digit_on_llama_cpp_python(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local")
    server.digit_tokens = True  # as real tokenizers: a token per digit
    request = table_request()
    counted = await openai_adapter(server, loopback_client).count_tokens(request)

    (asked,) = server.count_requests
    assert asked.path == "/extras/tokenize/count"
    assert asked.json == {"input": request_text(request), "model": "fake-model"}
    # The server's count (BOS included) plus the chat template's tokens around each message.
    assert counted == count_tokens(request_text(request), digit_tokens=True) + 1 + framing(request)
    assert counted > sum(c.isdigit() for c in TABLE)  # a token per digit


async def test_what_is_counted_is_what_the_request_sends(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local")
    tools = ({"name": "add", "description": "Adds numbers", "parameters": {"type": "object"}},)
    request = ChatRequest(
        model="fake-model",
        messages=(
            Message(
                role="user",
                text="What is on these?",
                pictures=(Picture(data="AAAA"), Picture(data="BBBB")),
            ),
            Message(
                role="assistant",
                text="",
                thinking="SECRET-THOUGHTS are never sent back",
                tool_calls=(ToolCallData(id="c1", name="add", arguments={"a": 2, "b": 3}),),
            ),
            Message(role="tool", text="5", tool_call_id="c1", tool_name="add"),
        ),
        tools=tools,
    )
    counted = await openai_adapter(server, loopback_client).count_tokens(request)

    sent = server.count_requests[0].json["input"]
    assert "What is on these?" in sent and '{"a":2,"b":3}' in sent and "Adds numbers" in sent
    assert "SECRET-THOUGHTS" not in sent  # thinking is not sent to the model, so not counted
    assert "AAAA" not in sent  # a picture is not text: it counts 1,600 like the estimate
    assert counted == count_tokens(sent) + 1 + 3 * TEMPLATE_TOKENS + 2 * PICTURE_TOKENS


# --- llama-server, and a llama-cpp-python server set up as "llama.cpp" -------------------------


async def test_llama_server_counts_with_its_tokenize_endpoint(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp")
    server.digit_tokens = True
    request = table_request()
    counted = await openai_adapter(server, loopback_client).count_tokens(request)

    (asked,) = server.count_requests
    assert asked.path == "/tokenize"
    assert asked.json == {"content": request_text(request), "add_special": True}
    assert counted == count_tokens(request_text(request), digit_tokens=True) + 1 + framing(request)


async def test_a_llama_cpp_python_server_set_up_as_llama_cpp_is_counted_and_remembered(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local")  # what answers at the llama.cpp address
    adapter = openai_adapter(server, loopback_client, row="llamacpp")
    first = await adapter.count_tokens(table_request())
    assert first is not None
    assert [r.path for r in server.count_requests] == ["/tokenize", "/extras/tokenize/count"]

    second = await adapter.count_tokens(table_request())
    assert second == first
    # The endpoint that answered is asked straight away from then on.
    assert [r.path for r in server.count_requests][2:] == ["/extras/tokenize/count"]


async def test_a_server_without_a_tokenizer_is_asked_once_then_left_alone(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp")
    server.tokenizer = False
    adapter = openai_adapter(server, loopback_client)
    assert await adapter.count_tokens(table_request()) is None
    asked = len(server.count_requests)
    assert asked == 2  # both kinds were tried
    assert await adapter.count_tokens(table_request()) is None
    assert len(server.count_requests) == asked


@pytest.mark.parametrize("fault", ["500", "no-count"])
async def test_a_failed_count_is_no_count_and_is_tried_again_next_time(
    openai_server: StartServer, loopback_client: httpx.AsyncClient, fault: str
) -> None:
    server = openai_server("local")
    server.tokenizer_fault = fault
    adapter = openai_adapter(server, loopback_client)
    assert await adapter.count_tokens(table_request()) is None
    server.tokenizer_fault = None
    assert await adapter.count_tokens(table_request()) is not None


async def test_an_unreachable_server_gives_no_count(loopback_client: httpx.AsyncClient) -> None:
    adapter = OpenAIAdapter(
        ROWS["local"], base_url=f"http://127.0.0.1:{free_port()}/v1", client=loopback_client
    )
    assert await adapter.count_tokens(table_request()) is None


@pytest.mark.parametrize("flavour", ["openai", "groq", "mistral", "lmstudio", "vllm"])
async def test_servers_that_report_usage_are_not_asked_to_count(
    openai_server: StartServer, loopback_client: httpx.AsyncClient, flavour: str
) -> None:
    server = openai_server(flavour)
    adapter = openai_adapter(server, loopback_client)
    assert await adapter.count_tokens(table_request()) is None
    assert server.requests == []


# --- through the gate, and the bundled adapter --------------------------------------------------


class _HeldChat(OpenAIStyleServer):
    """A llama-cpp-python fake whose chat answers are held until the client hangs up; says
    when one arrived."""

    def __init__(self) -> None:
        super().__init__("local")
        self.chat_arrived = threading.Event()
        self.fault = "slow"
        self.slow_seconds = HANG_SECONDS

    def handle(self, request: Recorded) -> Reply:
        if request.path.endswith("/chat/completions"):
            self.chat_arrived.set()
        return super().handle(request)


async def test_a_count_for_the_persons_turn_stops_background_work_first(
    loopback_client: httpx.AsyncClient,
) -> None:
    # llama-cpp-python cuts a streaming answer short when any other request arrives, so a
    # count goes through the gate like the turn it belongs to.
    with _HeldChat() as server:
        adapter = GatedAdapter(openai_adapter(server, loopback_client))

        async def learn() -> list[Any]:
            with background():
                return [e async for e in adapter.stream(table_request())]

        learning = asyncio.ensure_future(learn())
        assert await asyncio.to_thread(server.chat_arrived.wait, HANG_SECONDS)
        counted = await asyncio.wait_for(adapter.count_tokens(table_request()), HANG_SECONDS)
        assert counted is not None
        with pytest.raises(GaveWayError):
            await asyncio.wait_for(learning, HANG_SECONDS)
        assert adapter.gate.gave_way == 1


async def test_the_bundled_adapter_never_starts_its_runtime_to_count(data_dir: Path) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = BundledAdapter(runtime)
    try:
        assert await adapter.count_tokens(table_request(MODEL_ID)) is None
    finally:
        await adapter.aclose()
    assert runtime.pid is None and runtime.state.phase == "stopped"


@pytest.mark.bundled
@pytest.mark.skipif(
    not available(), reason=f"the bundled model is not installed here ({missing()})"
)
async def test_the_bundled_runtime_counts_what_it_then_reads(data_dir: Path) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = BundledAdapter(runtime)
    try:
        state = await runtime.start()
        assert state.phase == "ready", state.text
        request = table_request(MODEL_ID)
        counted = await adapter.count_tokens(request)
        # What the runtime makes of the same request, its chat template included.
        base = runtime.base_url
        assert base is not None
        async with httpx.AsyncClient(trust_env=False, timeout=HANG_SECONDS) as client:
            answer = await client.post(
                f"{base}/chat/completions",
                json={
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        *({"role": m.role, "content": m.text} for m in request.messages),
                    ],
                    "max_tokens": 1,
                },
            )
        # The table is past the window: the refusal names the prompt's tokens.
        assert answer.status_code == 400, answer.text
        read = answer.json()["error"]["n_prompt_tokens"]
    finally:
        await adapter.aclose()
        await runtime.stop()
    assert counted is not None
    # The count is the text's exact tokens plus a few per message for the template's framing.
    assert abs(counted - read) <= framing(request)
    # SmolLM2 spends a token per digit, and so does the estimate: within -3%/+10% of the count.
    estimate = sum(estimate_tokens(m.text) for m in request.messages) + estimate_tokens(SYSTEM)
    assert estimate / 1.1 <= counted <= 1.03 * estimate
