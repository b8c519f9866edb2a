"""The OpenAI-style adapter against fake servers in each company's and local server's flavour."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from engines.base import (
    Done,
    Message,
    Picture,
    ProblemKind,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from engines.providers.openai import ROWS, OpenAIAdapter, OpenAIStyleRow
from engines.providers.sse import iter_sse
from tests.fakes.adapters import ask, openai_adapter
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script, ScriptedCall
from tests.fakes.streams import collect, failure, text_of

StartServer = Callable[..., OpenAIStyleServer]
LONG = "word " * 400  # about 500 tokens by the fake's count


# --- the adapter and its rows ---------------------------------------------------------------


async def test_every_row_makes_a_provider_adapter(loopback_client: httpx.AsyncClient) -> None:
    for row in ROWS.values():
        adapter = OpenAIAdapter(row, client=loopback_client)
        assert isinstance(adapter, ProviderAdapter)
        assert adapter.name == row.name
        assert adapter.local == row.local
        if row.local:
            assert adapter.cheap_models() == ()  # summaries only ever use the chat's own model
        else:
            assert adapter.cheap_models(), row.name
            assert row.needs_key


@pytest.mark.parametrize(
    ("flavour", "model", "expected"),
    [
        # OpenRouter: the top provider serves less than the model's maximum; the smaller wins.
        ("openrouter", FakeModel("m", window=32_000, trained=1_048_576), 32_000),
        ("groq", FakeModel("m", window=131_072), 131_072),
        ("together", FakeModel("m", window=32_768), 32_768),
        ("mistral", FakeModel("m", window=40_960), 40_960),
        ("vllm", FakeModel("m", window=16_384), 16_384),
        # Lists without a window: the unknown window of a model API.
        ("openai", FakeModel("m", window=None), 128_000),
        ("deepseek", FakeModel("m", window=None), 128_000),
        ("xai", FakeModel("m", window=None), 128_000),
        ("zhipu", FakeModel("m", window=None), 128_000),
    ],
)
async def test_model_list_windows_per_row(
    openai_server: StartServer,
    loopback_client: httpx.AsyncClient,
    flavour: str,
    model: FakeModel,
    expected: int,
) -> None:
    server = openai_server(flavour, models=[model], api_key="sk-test")
    adapter = openai_adapter(server, loopback_client, api_key="sk-test")
    [info] = await adapter.list_models()
    assert info.provider == flavour
    assert info.id == "m"
    assert info.context == expected
    assert info.ready
    assert info.local is ROWS[flavour].local


async def test_google_model_ids_come_from_its_openai_endpoint(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("google", models=[FakeModel("gemini-2.5-flash", window=None)])
    adapter = openai_adapter(server, loopback_client, api_key="g-key")
    [info] = await adapter.list_models()
    assert info.id == "models/gemini-2.5-flash"
    assert info.context == 128_000


async def test_models_that_cannot_chat_are_left_out(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server(
        "openai",
        models=[
            FakeModel("gpt-4.1", window=None),
            FakeModel("text-embedding-3-small", window=None),
            FakeModel("whisper-1", window=None),
        ],
    )
    adapter = openai_adapter(server, loopback_client, api_key="sk")
    assert [m.id for m in await adapter.list_models()] == ["gpt-4.1"]


async def test_openrouter_names_become_labels(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter", models=[FakeModel("a/b", 8000, name="Model B")])
    [info] = await openai_adapter(server, loopback_client, api_key="or").list_models()
    assert info.name == "Model B"


async def test_lmstudio_window_is_the_loaded_length_not_the_trained_one(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server(
        "lmstudio",
        models=[
            FakeModel("qwen", window=4096, trained=32_768, loaded=True),
            FakeModel("llama", window=None, trained=131_072, loaded=False),
            FakeModel("nomic-embed", window=None, trained=2048, loaded=False, type="embeddings"),
        ],
    )
    models = {m.id: m for m in await openai_adapter(server, loopback_client).list_models()}
    assert set(models) == {"qwen", "llama"}
    assert models["qwen"].context == 4096 and models["qwen"].loaded
    # Not loaded: a JIT load uses saved settings, so the trained maximum is never trusted.
    assert models["llama"].context == 8192 and not models["llama"].loaded
    assert all(m.local for m in models.values())
    assert server.requests_to("/api/v1/models")


async def test_lmstudio_before_0_4_reads_the_v0_list(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("lmstudio", models=[FakeModel("qwen", window=6000, trained=32_768)])
    server.lmstudio_rest = "v0"
    [info] = await openai_adapter(server, loopback_client).list_models()
    assert info.context == 6000
    assert info.loaded


async def test_lmstudio_without_its_rest_lists_falls_back_to_the_local_default(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("lmstudio", models=[FakeModel("qwen", window=6000)])
    server.lmstudio_rest = "none"
    [info] = await openai_adapter(server, loopback_client).list_models()
    assert info.context == 8192


async def test_llamacpp_window_comes_from_props_per_slot(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp", models=[FakeModel("gguf", window=16_384, trained=131_072)])
    [info] = await openai_adapter(server, loopback_client).list_models()
    assert info.context == 16_384
    assert info.local and info.loaded


async def test_llamacpp_without_props_never_trusts_more_than_the_trained_length(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp", models=[FakeModel("gguf", window=None, trained=4096)])
    server.props = False
    [info] = await openai_adapter(server, loopback_client).list_models()
    assert info.context == 4096


async def test_llamacpp_is_found_on_its_second_port(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp", models=[FakeModel("gguf", window=8192)])
    row = dataclasses.replace(
        ROWS["llamacpp"],
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        alt_base_urls=(server.base_url,),
    )
    adapter = OpenAIAdapter(row, client=loopback_client)
    [info] = await adapter.list_models()
    assert info.context == 8192
    assert adapter.base_url == server.base_url
    events = await collect(adapter, ask(model="gguf"))
    assert text_of(events) == "Hello, world!"


async def test_the_bundled_runtime_window_is_the_one_it_was_started_with(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local", models=[FakeModel("smollm2", window=None)])
    [info] = await openai_adapter(server, loopback_client, window_override=2048).list_models()
    assert info.context == 2048
    assert info.provider == "local"
    [unknown] = await openai_adapter(server, loopback_client).list_models()
    assert unknown.context == 8192  # the unknown window of a server on this computer


async def test_a_list_without_a_key_is_refused_before_any_request(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openai")
    adapter = openai_adapter(server, loopback_client)
    with pytest.raises(ProviderError) as caught:
        await adapter.list_models()
    assert caught.value.kind is ProblemKind.AUTH
    with pytest.raises(ProviderError):
        await collect(adapter, ask())
    assert server.requests == []


async def test_a_local_server_that_is_not_running_is_unreachable(
    loopback_client: httpx.AsyncClient,
) -> None:
    adapter = OpenAIAdapter(
        ROWS["lmstudio"], base_url=f"http://127.0.0.1:{free_port()}/v1", client=loopback_client
    )
    with pytest.raises(ProviderError) as caught:
        await adapter.list_models()
    assert caught.value.kind is ProblemKind.UNREACHABLE
    error, _ = await failure(adapter, ask())
    assert error.kind is ProblemKind.UNREACHABLE
    assert not error.partial


# --- streaming --------------------------------------------------------------------------------


async def test_text_thinking_tool_calls_and_usage_stream_in_order(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    script = Script(
        thinking=["Let me ", "see."],
        text=["Hel", "lo"],
        calls=[ScriptedCall("call_9", "get_weather", {"city": "Paris", "days": 2})],
        finish_reason="tool_calls",
        prompt_tokens=40,
        completion_tokens=9,
        cached_tokens=32,
    )
    server = openai_server("deepseek", script=script)
    events = await collect(openai_adapter(server, loopback_client, api_key="sk"), ask())
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking == "Let me see."
    assert text_of(events) == "Hello"
    [call] = [e.call for e in events if isinstance(e, ToolCall)]
    assert call == ToolCallData(
        id="call_9", name="get_weather", arguments={"city": "Paris", "days": 2}
    )
    [usage] = [e for e in events if isinstance(e, Usage)]
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (40, 9, 32)
    assert events[-1] == Done(stop_reason="tool_calls")
    assert sum(isinstance(e, Done) for e in events) == 1
    # Thinking comes before the words, the call and usage after them.
    kinds = [e.kind for e in events]
    assert kinds.index("thinking") < kinds.index("text") < kinds.index("tool_call")
    assert kinds.index("tool_call") < kinds.index("usage") < kinds.index("done")


async def test_openrouter_reasoning_field_is_thinking(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter", script=Script(thinking=["Hmm."], text=["Yes."]))
    events = await collect(openai_adapter(server, loopback_client, api_key="or"), ask())
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Hmm."]
    assert text_of(events) == "Yes."


async def test_the_request_carries_what_the_provider_accepts(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    openai = openai_server("openai")
    mistral = openai_server("mistral")
    local = openai_server("local")
    request = ask(
        system="Be brief.", max_output_tokens=321, tools=({"name": "t", "parameters": {}},)
    )
    await collect(openai_adapter(openai, loopback_client, api_key="sk"), request)
    await collect(openai_adapter(mistral, loopback_client, api_key="mk"), request)
    await collect(openai_adapter(local, loopback_client), request)
    sent = openai.chat_requests[0].json
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["max_completion_tokens"] == 321
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["tools"] == [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    # Mistral refuses unknown fields; llama-cpp-python never streams usage.
    for server in (mistral, local):
        body = server.chat_requests[0].json
        assert "stream_options" not in body
        assert body["max_tokens"] == 321


async def test_mistral_usage_arrives_without_asking(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("mistral")
    events = await collect(openai_adapter(server, loopback_client, api_key="mk"), ask())
    assert any(isinstance(e, Usage) and e.input_tokens == 21 for e in events)


async def test_messages_map_onto_openai_shapes(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("vllm")
    request = ChatRequest(
        model="fake-model",
        system="Sys",
        messages=(
            Message(
                role="user",
                text="What is this?",
                pictures=(Picture(mime="image/jpeg", data="QUJD"),),
            ),
            Message(
                role="assistant",
                text="",
                thinking="private",
                tool_calls=(ToolCallData(id="c1", name="look", arguments={"q": "ü"}),),
            ),
            Message(role="tool", text="a cat", tool_call_id="c1", tool_name="look"),
            Message(role="assistant", text="It is a cat."),
            Message(role="user", text="Thanks"),
        ),
    )
    await collect(openai_adapter(server, loopback_client), request)
    messages = server.chat_requests[0].json["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[1]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
    ]
    call = messages[2]["tool_calls"][0]
    assert call["id"] == "c1" and call["type"] == "function"
    assert json.loads(call["function"]["arguments"]) == {"q": "ü"}
    assert isinstance(call["function"]["arguments"], str)
    assert "private" not in json.dumps(messages)  # thinking is never sent back
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "a cat"}
    assert messages[5] == {"role": "user", "content": "Thanks"}


async def test_a_server_that_ignores_stream_true_still_answers(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("vllm", script=Script(text=["Whole answer."], thinking=["t"]))
    server.refusal = (200, json.dumps(server._whole()))
    events = await collect(openai_adapter(server, loopback_client), ask())
    assert text_of(events) == "Whole answer."
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["t"]
    assert isinstance(events[-1], Done)


# --- too long ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavour", "window_named"),
    [
        ("openai", True),
        ("openrouter", True),
        ("groq", False),  # Groq's words carry no number
        ("together", True),
        ("deepseek", True),
        ("mistral", True),
        ("xai", True),
        ("google", True),
        ("zhipu", False),
        ("vllm", True),
        ("lmstudio", True),
        ("llamacpp", True),
    ],
)
async def test_too_long_refusals_carry_the_window_they_name(
    openai_server: StartServer,
    loopback_client: httpx.AsyncClient,
    flavour: str,
    window_named: bool,
) -> None:
    server = openai_server(flavour, window=120)
    adapter = openai_adapter(server, loopback_client, api_key="key")
    error, shown = await failure(adapter, ask(LONG))
    assert error.kind is ProblemKind.TOO_LONG
    assert error.too_long
    assert error.window == (120 if window_named else None)
    assert not error.partial and shown == ""
    assert error.status in (400, 422)
    # The same adapter answers once the request fits.
    events = await collect(adapter, ask("short"))
    assert text_of(events) == "Hello, world!"


async def test_the_bundled_runtime_empty_stream_is_confirmed_as_too_long(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local", window=100)
    error, shown = await failure(openai_adapter(server, loopback_client), ask(LONG))
    assert error.too_long and error.window == 100
    assert shown == ""
    streamed, confirm = server.chat_requests
    assert streamed.json["stream"] is True
    assert confirm.json["stream"] is False
    assert confirm.json["max_tokens"] == 1
    assert confirm.json["messages"] == streamed.json["messages"]


async def test_an_empty_local_stream_that_is_not_too_long_is_a_broken_stream(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local", script=Script(text=[]))
    server.fault = "no-done"
    error, _ = await failure(openai_adapter(server, loopback_client), ask())
    assert error.kind is ProblemKind.BROKEN_STREAM
    assert not error.partial


async def test_a_refusal_inside_the_stream_is_recognised(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp")
    server.stream_error = {
        "code": 400,
        "message": "request (9000 tokens) exceeds the available context size (8192 tokens)",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 9000,
        "n_ctx": 8192,
    }
    error, shown = await failure(openai_adapter(server, loopback_client), ask())
    assert error.too_long and error.window == 8192
    assert error.partial and shown == "Hello"


async def test_old_llama_server_error_line_is_read(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp")
    server.fault = "sse-error-line"
    error, _ = await failure(openai_adapter(server, loopback_client), ask())
    assert error.kind is ProblemKind.TOO_LONG
    assert error.window is None


async def test_another_error_inside_the_stream_is_not_too_long(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openrouter")
    server.stream_error = {"code": 502, "message": "Provider returned error"}
    error, _ = await failure(openai_adapter(server, loopback_client, api_key="or"), ask())
    assert error.kind is ProblemKind.SERVER_ERROR
    assert not error.too_long
    assert error.partial


# --- faults -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind", "partial"),
    [
        ("no-done", ProblemKind.BROKEN_STREAM, True),
        ("malformed", ProblemKind.BROKEN_STREAM, True),
        ("disconnect", ProblemKind.BROKEN_STREAM, True),
        ("html", ProblemKind.SERVER_ERROR, False),
        ("429", ProblemKind.RATE_LIMITED, False),
        ("500", ProblemKind.SERVER_ERROR, False),
        ("502", ProblemKind.SERVER_ERROR, False),
        ("503", ProblemKind.SERVER_ERROR, False),
        ("not-found", ProblemKind.MODEL_MISSING, False),
    ],
)
async def test_faults_become_the_right_problem(
    openai_server: StartServer,
    loopback_client: httpx.AsyncClient,
    fault: str,
    kind: ProblemKind,
    partial: bool,
) -> None:
    server = openai_server("openai")
    server.fault = fault
    error, shown = await failure(openai_adapter(server, loopback_client, api_key="sk"), ask())
    assert error.kind is kind
    assert error.partial is partial
    assert bool(shown) is partial
    assert not error.too_long
    assert error.detail


async def test_rate_limit_says_how_long_to_wait(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("groq")
    server.fault = "429"
    server.retry_after = "12"
    error, _ = await failure(openai_adapter(server, loopback_client, api_key="gsk"), ask())
    assert error.kind is ProblemKind.RATE_LIMITED
    assert error.retry_after == 12.0
    step = error.to_problem().next_step
    assert step is not None and step.kind == "wait" and step.seconds == 12.0


async def test_a_busy_server_says_when_to_try_again(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("groq")
    server.fault = "503"
    server.busy_says_when = True
    server.retry_after = "45"
    error, _ = await failure(openai_adapter(server, loopback_client, api_key="gsk"), ask())
    assert error.kind is ProblemKind.SERVER_ERROR
    assert error.retry_after == 45.0
    step = error.to_problem().next_step
    assert step is not None and step.kind == "wait" and step.seconds == 45.0


async def test_an_html_error_page_is_described_not_dumped(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openai")
    server.fault = "html"
    error, _ = await failure(openai_adapter(server, loopback_client, api_key="sk"), ask())
    assert "502 Bad Gateway" in error.detail
    assert "<" not in error.detail
    assert len(error.detail) < 200


async def test_a_server_slow_to_answer_times_out(openai_server: StartServer) -> None:
    server = openai_server("vllm")
    server.fault = "slow"
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(0.3)) as client:
        error, _ = await failure(openai_adapter(server, client), ask())
    assert error.kind is ProblemKind.TIMEOUT
    assert not error.partial


async def test_a_wrong_key_is_an_auth_problem_without_the_key_in_it(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openai", api_key="sk-right")
    adapter = openai_adapter(server, loopback_client, api_key="sk-wrong-secret")
    error, _ = await failure(adapter, ask())
    assert error.kind is ProblemKind.AUTH
    with pytest.raises(ProviderError) as listed:
        await adapter.list_models()
    assert listed.value.kind is ProblemKind.AUTH
    assert "sk-wrong-secret" not in error.detail + str(error) + listed.value.detail


# --- keys -------------------------------------------------------------------------------------


async def test_each_key_goes_only_to_its_own_provider(
    openai_server: StartServer,
    loopback_client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    one = openai_server("openai", api_key="sk-one-secret")
    two = openai_server("groq", api_key="gsk-two-secret")
    local = openai_server("lmstudio", models=[FakeModel("qwen", 4096, trained=8192)])
    adapters = [
        openai_adapter(one, loopback_client, api_key="sk-one-secret"),
        openai_adapter(two, loopback_client, api_key="gsk-two-secret"),
        openai_adapter(local, loopback_client),
    ]
    for adapter in adapters:  # one shared client, as the app may use
        await adapter.list_models()
        await collect(adapter, ask())
    assert {r.headers.get("authorization") for r in one.requests} == {"Bearer sk-one-secret"}
    assert {r.headers.get("authorization") for r in two.requests} == {"Bearer gsk-two-secret"}
    assert all("authorization" not in r.headers for r in local.requests)
    assert len(local.requests) >= 2
    logged = caplog.text + " ".join(str(r.args) for r in caplog.records)
    assert "sk-one-secret" not in logged and "gsk-two-secret" not in logged


async def test_a_key_is_never_sent_to_another_host(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    provider = openai_server("openai", api_key="sk-x")
    adapter = openai_adapter(provider, loopback_client, api_key="sk-x")
    elsewhere = provider.url.replace("127.0.0.1", "localhost")
    assert "authorization" not in adapter._headers(elsewhere + "/v1/models")
    assert adapter._headers(provider.base_url + "/models")["authorization"] == "Bearer sk-x"


async def test_an_injected_client_is_left_open_and_an_own_client_is_closed(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("vllm")
    shared = openai_adapter(server, loopback_client)
    await shared.aclose()
    assert not loopback_client.is_closed
    own = OpenAIAdapter(ROWS["vllm"], base_url=server.base_url)
    assert text_of(await collect(own, ask())) == "Hello, world!"
    await own.aclose()
    assert own._client.is_closed


# --- the SSE reader on its own ----------------------------------------------------------------


async def test_sse_lines_split_anywhere_still_read_whole() -> None:
    body = (
        ': keep-alive\r\ndata: {"a": 1}\r\n\r\nevent: note\r\ndata: x\r\ndata: y\r\n\r\n'
        "data: line\u2028with separator\n\ndata: [DONE]"
    ).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 3):  # cuts through CRLF pairs and UTF-8 sequences
            yield body[i : i + 3]

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for piece in pieces():
                yield piece

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Stream()))
    async with (
        httpx.AsyncClient(transport=transport) as client,
        client.stream("GET", "http://sse.test/") as response,
    ):
        events = [(e.event, e.data) async for e in iter_sse(response)]
    assert events == [
        ("message", '{"a": 1}'),
        ("note", "x\ny"),
        ("message", "line\u2028with separator"),
        ("message", "[DONE]"),
    ]


def test_rows_cover_every_company_and_local_server() -> None:
    assert set(ROWS) == {
        "openai",
        "openrouter",
        "groq",
        "together",
        "deepseek",
        "mistral",
        "xai",
        "google",
        "zhipu",
        "lmstudio",
        "llamacpp",
        "vllm",
        "local",
    }
    assert all(isinstance(row, OpenAIStyleRow) for row in ROWS.values())
    assert ROWS["lmstudio"].base_url.endswith(":1234/v1")
    assert ROWS["llamacpp"].base_url.endswith(":8080/v1")
    assert ROWS["llamacpp"].alt_base_urls == ("http://127.0.0.1:9931/v1",)
    assert ROWS["vllm"].base_url.endswith(":8000/v1")
