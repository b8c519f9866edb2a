"""The Anthropic adapter against a fake Messages API."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from engines.base import (
    AssistantRaw,
    Done,
    Message,
    Picture,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from tests.fakes.anthropic_server import AnthropicServer, ClaudeCall, ClaudeScript, FakeClaude
from tests.fakes.http import free_port
from tests.fakes.streams import collect, failure

StartServer = Callable[..., AnthropicServer]
KEY = "sk-ant-test-secret"


def ask(*messages: Message, **kw: Any) -> ChatRequest:
    chosen = messages or (Message(role="user", text="Hello?"),)
    return ChatRequest(model="claude-fake-1", messages=chosen, **kw)


def adapter_for(
    server: AnthropicServer, client: httpx.AsyncClient, key: str = KEY
) -> AnthropicAdapter:
    return AnthropicAdapter(api_key=key, base_url=server.base_url, client=client)


THINKING = ClaudeScript(
    thinking=["Let me ", "think."],
    signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    redacted="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
    text=["The answer", " is 42."],
    calls=[ClaudeCall("toolu_01", "lookup", {"q": "life", "depth": 3})],
    stop_reason="tool_use",
    input_tokens=12,
    cache_read=1000,
    cache_write=200,
    output_tokens=55,
)


LOOKUP = {"name": "lookup", "description": "Look it up.", "parameters": {"type": "object"}}


async def test_is_a_provider_adapter(loopback_client: httpx.AsyncClient) -> None:
    adapter = AnthropicAdapter(api_key=KEY, client=loopback_client)
    assert isinstance(adapter, ProviderAdapter)
    assert adapter.name == "anthropic" and not adapter.local
    assert adapter.cheap_models() and all("haiku" in m for m in adapter.cheap_models())


async def test_model_windows_come_from_max_input_tokens(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server(
        models=[
            FakeClaude("claude-big", 1_000_000, "Claude Big"),
            FakeClaude("claude-std", 200_000),
            FakeClaude("claude-unknown", None),
        ],
        page_size=2,  # the list arrives in pages
    )
    models = {m.id: m for m in await adapter_for(server, loopback_client).list_models()}
    assert models["claude-big"].context == 1_000_000
    assert models["claude-big"].name == "Claude Big"
    assert models["claude-std"].context == 200_000
    assert models["claude-unknown"].context == 128_000  # the unknown window of a model API
    assert len(server.requests_to("/v1/models")) == 2
    assert all(m.provider == "anthropic" and m.ready for m in models.values())


async def test_thinking_text_and_tool_use_stream_then_raw_blocks_usage_and_done(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server(script=THINKING)
    events = await collect(adapter_for(server, loopback_client), ask())
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Let me think."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "The answer is 42."
    [call] = [e.call for e in events if isinstance(e, ToolCall)]
    assert call == ToolCallData(id="toolu_01", name="lookup", arguments={"q": "life", "depth": 3})
    [raw] = [e for e in events if isinstance(e, AssistantRaw)]
    assert list(raw.blocks) == [
        {"type": "thinking", "thinking": "Let me think.", "signature": THINKING.signature},
        {"type": "redacted_thinking", "data": THINKING.redacted},
        {"type": "text", "text": "The answer is 42."},
        {
            "type": "tool_use",
            "id": "toolu_01",
            "name": "lookup",
            "input": {"q": "life", "depth": 3},
        },
    ]
    [usage] = [e for e in events if isinstance(e, Usage)]
    # Input counts cache reads and writes: that is what the window held.
    assert usage.input_tokens == 12 + 1000 + 200
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        1000,
        200,
        55,
    )
    assert [e.kind for e in events[-3:]] == ["raw", "usage", "done"]
    assert events[-1] == Done(stop_reason="tool_use")


async def test_thinking_blocks_go_back_byte_for_byte(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server(script=THINKING)
    adapter = adapter_for(server, loopback_client)
    first = await collect(adapter, ask())
    [raw] = [e for e in first if isinstance(e, AssistantRaw)]
    server.script = ClaudeScript(text=["Done."])
    second = ask(
        Message(role="user", text="Hello?"),
        Message(role="assistant", text="The answer is 42.", raw=raw.blocks),
        Message(role="tool", text="found it", tool_call_id="toolu_01", tool_name="lookup"),
        Message(role="user", text="And so?"),
        tools=(LOOKUP,),  # the tool loop goes on with its tools (the API requires them)
    )
    await collect(adapter, second)
    sent = server.message_requests[-1].json["messages"]
    assert json.dumps(sent[1]["content"]) == json.dumps(list(raw.blocks))
    # The thinking text and signature are exactly what the first answer streamed.
    assert sent[1]["content"][0]["signature"] == THINKING.signature
    assert sent[1]["content"][1]["data"] == THINKING.redacted
    # The tool result and the next words form one user turn, result first.
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "found it"},
            {"type": "text", "text": "And so?"},
        ],
    }


async def test_request_shape_system_pictures_tools_and_headers(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server()
    request = ChatRequest(
        model="claude-fake-1",
        system="Be kind.",
        max_output_tokens=999,
        tools=({"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}},),
        messages=(
            Message(role="user", text="See", pictures=(Picture(mime="image/png", data="iVBO"),)),
            Message(
                role="assistant",
                text="Calling",
                tool_calls=(ToolCallData(id="toolu_9", name="t", arguments={"a": 1}),),
            ),
            Message(role="tool", text="ok", tool_call_id="toolu_9"),
        ),
    )
    await collect(adapter_for(server, loopback_client), request)
    recorded = server.message_requests[0]
    body = recorded.json
    assert body["system"] == "Be kind."
    assert body["stream"] is True and body["max_tokens"] == 999
    assert all(m["role"] != "system" for m in body["messages"])
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "text", "text": "See"},
    ]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Calling"},
        {"type": "tool_use", "id": "toolu_9", "name": "t", "input": {"a": 1}},
    ]
    assert body["tools"] == [{"name": "t", "description": "", "input_schema": {"type": "object"}}]
    assert recorded.headers["x-api-key"] == KEY
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers


async def test_too_long_refusal_names_the_window(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server(window=150)
    error, shown = await failure(
        adapter_for(server, loopback_client), ask(Message(role="user", text="long " * 300))
    )
    assert error.kind is ProblemKind.TOO_LONG and error.too_long
    assert error.window == 150
    assert error.status == 400
    assert shown == "" and not error.partial


@pytest.mark.parametrize(
    ("fault", "kind", "partial"),
    [
        ("overloaded", ProblemKind.SERVER_ERROR, True),
        ("529", ProblemKind.SERVER_ERROR, False),
        ("no-stop", ProblemKind.BROKEN_STREAM, True),
        ("disconnect", ProblemKind.BROKEN_STREAM, True),
    ],
)
async def test_faults_become_the_right_problem(
    anthropic_server: StartServer,
    loopback_client: httpx.AsyncClient,
    fault: str,
    kind: ProblemKind,
    partial: bool,
) -> None:
    server = anthropic_server()
    server.fault = fault
    error, shown = await failure(adapter_for(server, loopback_client), ask())
    assert error.kind is kind
    assert error.partial is partial
    assert bool(shown) is partial
    assert not error.too_long


async def test_a_wrong_or_missing_key(
    anthropic_server: StartServer,
    loopback_client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = anthropic_server(api_key=KEY)
    wrong = adapter_for(server, loopback_client, key="sk-ant-wrong-secret")
    error, _ = await failure(wrong, ask())
    assert error.kind is ProblemKind.AUTH
    assert "sk-ant-wrong-secret" not in error.detail + caplog.text
    before = len(server.requests)
    missing = AnthropicAdapter(base_url=server.base_url, client=loopback_client)
    with pytest.raises(ProviderError) as caught:
        await missing.list_models()
    assert caught.value.kind is ProblemKind.AUTH
    assert len(server.requests) == before  # nothing was sent without a key


async def test_the_key_is_only_sent_to_anthropic(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server()
    adapter = adapter_for(server, loopback_client)
    assert adapter._headers(server.base_url + "/v1/messages")["x-api-key"] == KEY
    elsewhere = server.base_url.replace("127.0.0.1", "localhost")
    assert "x-api-key" not in adapter._headers(elsewhere + "/v1/messages")


async def test_a_server_that_is_not_there_is_unreachable() -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(0.3)) as client:
        dead = AnthropicAdapter(
            api_key=KEY, base_url=f"http://127.0.0.1:{free_port()}", client=client
        )
        error, _ = await failure(dead, ask())
        assert error.kind is ProblemKind.UNREACHABLE
        with pytest.raises(ProviderError) as caught:
            await dead.list_models()
        assert caught.value.kind is ProblemKind.UNREACHABLE


async def test_tool_calls_in_a_chat_asked_without_tools_go_as_words(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    # A chat whose tool rows came from Claude Code, moved to a model with no tools set up:
    # the API refuses tool_use and tool_result blocks in a request that defines no tools.
    server = anthropic_server(script=ClaudeScript(text=["It was created."]))
    adapter = adapter_for(server, loopback_client)
    call = ToolCallData(id="conch-log-2", name="Bash", arguments={"command": "touch ran.txt"})
    events = await collect(
        adapter,
        ask(
            Message(role="user", text="Make the file"),
            Message(role="assistant", text="Let me run it.", tool_calls=(call,)),
            Message(role="tool", text="", tool_call_id="conch-log-2", tool_name="Bash"),
            Message(role="tool", text="No such file", tool_call_id="x", tool_failed=True),
            Message(role="user", text="Did it work?"),
        ),
    )
    assert isinstance(events[-1], Done), events
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "It was created."
    sent = server.message_requests[-1].json
    assert "tools" not in sent
    assert sent["messages"][1]["content"] == [
        {"type": "text", "text": "Let me run it."},
        {"type": "text", "text": '[Called the tool Bash with {"command": "touch ran.txt"}]'},
    ]
    assert sent["messages"][2]["content"] == [
        {"type": "text", "text": "[The tool Bash returned:]\n"},
        {"type": "text", "text": "[The tool a tool failed:]\nNo such file"},
        {"type": "text", "text": "Did it work?"},
    ]


async def test_a_kept_answers_tool_use_goes_as_words_when_no_tools_are_offered(
    anthropic_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server(script=THINKING)
    adapter = adapter_for(server, loopback_client)
    [raw] = [e for e in await collect(adapter, ask()) if isinstance(e, AssistantRaw)]
    server.script = ClaudeScript(text=["Done."])
    events = await collect(
        adapter,
        ask(
            Message(role="user", text="Hello?"),
            Message(role="assistant", text="The answer is 42.", raw=raw.blocks),
            Message(role="tool", text="found it", tool_call_id="toolu_01", tool_name="lookup"),
            Message(role="user", text="And so?"),
        ),
    )
    assert isinstance(events[-1], Done), events
    kept = server.message_requests[-1].json["messages"][1]["content"]
    # The thinking goes back as it came; only the call is written as words.
    assert [b["type"] for b in kept] == [b["type"] for b in raw.blocks[:-1]] + ["text"]
    assert kept[:-1] == list(raw.blocks[:-1])
    assert kept[-1]["text"] == '[Called the tool lookup with {"q": "life", "depth": 3}]'
