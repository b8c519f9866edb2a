"""The tool loop over each wire protocol, against loopback fakes that ask for tool calls the way
each provider streams them: OpenAI-style argument deltas, Ollama's native tool_calls (only for a
model whose capabilities include "tools"), Anthropic tool_use blocks after a signed thinking
block that must come back byte-for-byte."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engines.base import (
    Approval,
    Done,
    Event,
    ModelInfo,
    Note,
    Problem,
    TextDelta,
    ToolAsk,
    ToolResult,
    TurnInput,
)
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.engines.tools.test_loop import Runner, notes_file
from tests.fakes.anthropic_server import AnthropicServer, ClaudeCall, ClaudeScript
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, Script, ScriptedCall

CHAT = "chat-wire"
GIB = 1024**3


async def allow(_ask: ToolAsk) -> Approval:
    return Approval.ONCE


async def ask_turn(adapter: ProviderAdapter, model: ModelInfo, runner: Runner) -> list[Event]:
    session = ApiSession(
        chat_id=CHAT, data_dir=None, adapters={adapter.name: adapter}, tools=ToolHost(runner, allow)
    )
    turn = TurnInput(chat_id=CHAT, seq=0, text="What do I need to buy?", model=model)
    return [e async for e in session.turn(turn)]


def ended_well(events: list[Event]) -> bool:
    ends = [e for e in events if isinstance(e, Done | Problem)]
    return len(ends) == 1 and isinstance(ends[0], Done) and events[-1] is ends[0]


def answer_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.fixture
async def client() -> Any:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as c:
        yield c


@pytest.fixture
def openai() -> Iterator[OpenAIStyleServer]:
    server = OpenAIStyleServer("openai").start()
    yield server
    server.stop()


@pytest.fixture
def claude() -> Iterator[AnthropicServer]:
    server = AnthropicServer(api_key="sk-ant-test").start()
    yield server
    server.stop()


async def test_openai_style_streamed_argument_deltas_run_the_tool(
    openai: OpenAIStyleServer, client: httpx.AsyncClient
) -> None:
    openai.scripts = [
        Script(
            text=["Checking."],
            calls=[
                ScriptedCall("call_abc", "read_file", {"path": "list.txt"}),
                ScriptedCall("call_def", "read_file", {"path": "more.txt"}),
            ],
            finish_reason="tool_calls",
        ),
        Script(text=["Eggs and ", "flour."]),
    ]
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=openai.base_url, client=client, api_key="sk-test"
    )
    runner = Runner({"read_file": notes_file})
    model = ModelInfo(provider="openai", id="fake-model", context=128_000)

    events = await ask_turn(adapter, model, runner)

    assert ended_well(events) and answer_of(events) == "Checking.Eggs and flour."
    # Two calls streamed side by side, each's arguments in two deltas, both run in order.
    assert runner.calls == [
        ("read_file", {"path": "list.txt"}),
        ("read_file", {"path": "more.txt"}),
    ]
    first, second = (r.json for r in openai.chat_requests)
    assert first is not None and second is not None
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    asked, result, more = second["messages"][-3:]
    assert asked["role"] == "assistant"
    assert [c["id"] for c in asked["tool_calls"]] == ["call_abc", "call_def"]
    assert asked["tool_calls"][0]["function"]["arguments"] == '{"path": "list.txt"}'
    assert result == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "Shopping: eggs, flour, 2 lemons.",
    }
    assert more["tool_call_id"] == "call_def"


async def test_anthropic_tool_use_keeps_the_signed_thinking_byte_for_byte(
    claude: AnthropicServer, client: httpx.AsyncClient
) -> None:
    signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    claude.scripts = [
        ClaudeScript(
            thinking=["The list is ", "in a file."],
            signature=signature,
            text=["Let me read it."],
            calls=[ClaudeCall("toolu_01", "read_file", {"path": "list.txt"})],
            stop_reason="tool_use",
        ),
        ClaudeScript(text=["Eggs and flour."]),
    ]
    adapter = AnthropicAdapter(api_key="sk-ant-test", base_url=claude.base_url, client=client)
    runner = Runner({"read_file": notes_file})
    model = ModelInfo(provider="anthropic", id="claude-fake-1", context=200_000)

    events = await ask_turn(adapter, model, runner)

    assert ended_well(events) and answer_of(events) == "Let me read it.Eggs and flour."
    assert runner.calls == [("read_file", {"path": "list.txt"})]
    first, second = (r.json for r in claude.message_requests)
    assert first is not None and second is not None
    assert [t["name"] for t in first["tools"]] == ["read_file"]
    assert "input_schema" in first["tools"][0]
    asked, result = second["messages"][-2:]
    assert asked["role"] == "assistant"
    thinking, text, use = asked["content"]
    assert thinking == {
        "type": "thinking",
        "thinking": "The list is in a file.",
        "signature": signature,
    }
    assert text == {"type": "text", "text": "Let me read it."}
    assert use == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "read_file",
        "input": {"path": "list.txt"},
    }
    assert result["role"] == "user"
    assert result["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": "Shopping: eggs, flour, 2 lemons.",
        }
    ]


async def test_anthropic_hears_a_failed_tool_call_as_an_error(
    claude: AnthropicServer, client: httpx.AsyncClient
) -> None:
    claude.scripts = [
        ClaudeScript(
            calls=[
                ClaudeCall("toolu_01", "read_file", {"path": "list.txt"}),
                ClaudeCall("toolu_02", "open_door", {"path": "front"}),
            ],
            stop_reason="tool_use",
        ),
        ClaudeScript(text=["The door would not open."]),
    ]
    adapter = AnthropicAdapter(api_key="sk-ant-test", base_url=claude.base_url, client=client)
    runner = Runner({"read_file": notes_file, "open_door": lambda _args: "the door is locked"})
    runner.failing = {"open_door"}
    model = ModelInfo(provider="anthropic", id="claude-fake-1", context=200_000)

    events = await ask_turn(adapter, model, runner)

    assert ended_well(events)
    second = claude.message_requests[-1].json
    assert second is not None
    read, opened = second["messages"][-1]["content"]
    assert read["tool_use_id"] == "toolu_01" and "is_error" not in read
    assert opened["tool_use_id"] == "toolu_02" and opened["is_error"] is True
    assert opened["content"] == "the door is locked"


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    models = (
        FakeModel("llama3.2", 131_072, ("completion", "tools")),
        FakeModel("gemma2", 8_192, ("completion",)),
    )
    with running_ollama(models, version="0.12.6") as fake:
        yield fake


async def test_ollama_native_tools_for_a_model_that_can_use_them(ollama: FakeOllama) -> None:
    ollama.replies.extend(
        [
            FakeReply(text="", tool_calls=({"name": "read_file", "arguments": {"path": "a"}},)),
            FakeReply(text="Eggs and flour."),
        ]
    )
    adapter = OllamaAdapter(ollama.url, memory=32 * GIB)
    try:
        runner = Runner({"read_file": notes_file})
        model = ModelInfo(provider="ollama", id="llama3.2", context=16_384, local=True)
        events = await ask_turn(adapter, model, runner)
    finally:
        await adapter.aclose()
    assert ended_well(events) and answer_of(events) == "Eggs and flour."
    assert runner.calls == [("read_file", {"path": "a"})]
    first, second = ollama.chat_requests()
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    asked, result = second["messages"][-2:]
    assert asked["tool_calls"] == [{"function": {"name": "read_file", "arguments": {"path": "a"}}}]
    assert result["role"] == "tool" and result["tool_name"] == "read_file"
    assert result["content"] == "Shopping: eggs, flour, 2 lemons."


async def test_ollama_sends_no_tools_to_a_model_without_the_capability(
    ollama: FakeOllama,
) -> None:
    adapter = OllamaAdapter(ollama.url, memory=32 * GIB)
    try:
        runner = Runner({"read_file": notes_file})
        model = ModelInfo(provider="ollama", id="gemma2", context=8_192, local=True)
        events = await ask_turn(adapter, model, runner)
    finally:
        await adapter.aclose()
    # Ollama would refuse the request with tools (400); without them the model just answers.
    assert ended_well(events) and answer_of(events)
    assert "tools" not in ollama.chat_requests()[0]
    notes = [e for e in events if isinstance(e, Note) and e.topic == "tools"]
    assert len(notes) == 1 and "cannot use tools" in notes[0].text
    assert not [e for e in events if isinstance(e, ToolResult)]
