"""The Ollama adapter against a fake Ollama on a real loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from engines.base import (
    Done,
    Message,
    Note,
    Picture,
    ProblemKind,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from engines.providers.ndjson import NdjsonError, parse_line
from engines.providers.ndjson import lines as ndjson_lines
from engines.providers.ollama import OllamaAdapter, ollama_base_url
from tests.fakes.adapters import ask
from tests.fakes.http import free_port
from tests.fakes.ollama_server import (
    CLASSIC_REFUSAL,
    LLAMA_SERVER_REFUSAL,
    FakeModel,
    FakeOllama,
    FakeReply,
    Fault,
    running_ollama,
)
from tests.fakes.streams import collect, failure, text_of

GIB = 1024**3
MODELS = (
    FakeModel("llama3.2", 131_072, ("completion", "tools")),
    FakeModel("qwen3:8b", 40_960, ("completion", "tools", "thinking"), family="qwen3"),
    FakeModel("tinyllama", 2_048, ("completion",)),
    FakeModel("llava", 32_768, ("completion", "vision")),
    FakeModel("nomic-embed-text", 8_192, ("embedding",), family="nomic-bert"),
)


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama(MODELS, version="0.12.6", loaded={"qwen3:8b": 8_192}) as fake:
        yield fake


@pytest.fixture
async def adapter(ollama: FakeOllama) -> AsyncIterator[OllamaAdapter]:
    a = OllamaAdapter(ollama.url, memory=32 * GIB)
    yield a
    await a.aclose()


# --- the model list and its windows -------------------------------------------------------------


async def test_is_a_provider_adapter_for_a_local_server(adapter: OllamaAdapter) -> None:
    assert isinstance(adapter, ProviderAdapter)
    assert adapter.local is True
    assert adapter.cheap_models() == ()


async def test_model_list_windows_on_a_large_computer(adapter: OllamaAdapter) -> None:
    models = {m.id: m for m in await adapter.list_models()}

    assert set(models) == {"llama3.2:latest", "qwen3:8b", "tinyllama:latest", "llava:latest"}
    assert models["llama3.2:latest"].context == 32_768  # trained 131,072, capped for 32 GiB
    assert models["qwen3:8b"].context == 8_192  # already loaded with 8,192: keep it
    assert models["tinyllama:latest"].context == 2_048  # trained window is smaller than the cap
    assert models["llava:latest"].context == 32_768
    assert [m.id for m in models.values() if m.loaded] == ["qwen3:8b"]
    assert all(m.local and m.ready and m.provider == "ollama" for m in models.values())
    assert models["llama3.2:latest"].name == "llama3.2"


async def test_model_list_windows_on_a_small_computer(ollama: FakeOllama) -> None:
    adapter = OllamaAdapter(ollama.url, memory=8 * GIB)
    try:
        models = {m.id: m.context for m in await adapter.list_models()}
    finally:
        await adapter.aclose()
    assert models["llama3.2:latest"] == 16_384
    assert models["llava:latest"] == 16_384
    assert models["qwen3:8b"] == 8_192
    assert models["tinyllama:latest"] == 2_048


async def test_a_16_gb_computer_counts_as_large_though_it_reports_a_little_less(
    ollama: FakeOllama,
) -> None:
    adapter = OllamaAdapter(ollama.url, memory=int(15.6 * GIB))
    try:
        assert await adapter.context_for("llama3.2") == 32_768
    finally:
        await adapter.aclose()


async def test_every_request_for_a_model_carries_the_same_num_ctx(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    listed = {m.id: m.context for m in await adapter.list_models()}
    for _ in range(3):
        await collect(adapter, ask(model="llama3.2"))
        await collect(adapter, ask(model="qwen3:8b", window=4_096))  # a smaller learned window
    # Another client changes what is loaded; Conch still asks for what it asked before.
    ollama.unload("llama3.2")
    await collect(adapter, ask(model="llama3.2:latest"))
    await adapter.list_models()

    sent: dict[str, set[int]] = {}
    for body in ollama.chat_requests():
        sent.setdefault(body["model"].removesuffix(":latest"), set()).add(
            body["options"]["num_ctx"]
        )
    assert sent == {"llama3.2": {32_768}, "qwen3:8b": {8_192}}
    assert listed["llama3.2:latest"] == 32_768
    assert ollama.total_reloads() == 0
    assert ollama.loaded["qwen3:8b"] == 8_192


async def test_a_restarted_app_reuses_the_window_the_model_is_loaded_with(
    ollama: FakeOllama,
) -> None:
    first = OllamaAdapter(ollama.url, memory=32 * GIB)
    await collect(first, ask(model="llama3.2"))
    await first.aclose()
    # The next run is on a smaller computer budget, but the model is still loaded: keep it.
    second = OllamaAdapter(ollama.url, memory=8 * GIB)
    try:
        await collect(second, ask(model="llama3.2"))
        assert await second.context_for("llama3.2") == 32_768
    finally:
        await second.aclose()
    assert ollama.total_reloads() == 0


async def test_chat_without_listing_first_decides_the_window_itself(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    await collect(adapter, ask(model="tinyllama"))
    assert ollama.chat_requests()[-1]["options"]["num_ctx"] == 2_048


# --- truncate/shift by version ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "sends"),
    [("0.5.12", False), ("0.12.5", False), ("0.12.6", True), ("0.13.1", True), ("0.30.1", True)],
)
async def test_truncate_and_shift_are_sent_only_to_servers_that_honour_them(
    version: str, sends: bool
) -> None:
    with running_ollama(MODELS, version=version) as fake:
        adapter = OllamaAdapter(fake.url, memory=32 * GIB)
        try:
            await collect(adapter, ask(model="llama3.2"))
            await collect(adapter, ask(model="llama3.2"))
        finally:
            await adapter.aclose()
        bodies = fake.chat_requests()
    for body in bodies:
        if sends:
            assert body["truncate"] is False
            assert body["shift"] is False
        else:
            assert "truncate" not in body
            assert "shift" not in body
    assert [r.path for r in fake.requests].count("/api/version") == 1


async def test_an_overflow_on_a_new_server_is_a_refusal_with_the_window(
    adapter: OllamaAdapter,
) -> None:
    err, text = await failure(adapter, ask(model="tinyllama", text="word " * 3_000))
    assert err.too_long is True
    assert err.kind is ProblemKind.TOO_LONG
    assert err.window == 2_048  # the body names no window: the num_ctx Conch sent
    assert err.status == 400
    assert CLASSIC_REFUSAL in err.detail
    assert text == ""


async def test_the_v0_30_overflow_wording_is_recognised_too() -> None:
    with running_ollama(MODELS, version="0.30.1") as fake:
        assert fake.refusal == LLAMA_SERVER_REFUSAL
        adapter = OllamaAdapter(fake.url, memory=32 * GIB)
        try:
            err, _ = await failure(adapter, ask(model="tinyllama", text="word " * 3_000))
        finally:
            await adapter.aclose()
    assert err.too_long and err.window == 2_048


async def test_a_silent_cut_on_an_old_server_is_noted() -> None:
    history = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", text=f"message {i} " + "x" * 2_000)
        for i in range(12)
    )
    request = ChatRequest(model="tinyllama", system="Be brief.", messages=history)
    with running_ollama(MODELS, version="0.12.5") as fake:
        adapter = OllamaAdapter(fake.url, memory=32 * GIB)
        try:
            events = await collect(adapter, request)
        finally:
            await adapter.aclose()
        outcome = fake.outcomes[-1]
    assert outcome.truncated  # the fake, like Ollama, dropped messages and answered 200
    assert outcome.kept_messages[0]["role"] == "system"
    notes = [e for e in events if isinstance(e, Note)]
    assert len(notes) == 1 and notes[0].topic == "other"
    assert "cut" in notes[0].text
    assert isinstance(events[-1], Done)
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.input_tokens <= 2_048


async def test_a_request_that_fits_gets_no_note(adapter: OllamaAdapter) -> None:
    events = await collect(adapter, ask(model="llama3.2", text="A short question?"))
    assert not any(isinstance(e, Note) for e in events)


# --- the answer ---------------------------------------------------------------------------------


async def test_answer_text_usage_and_done(ollama: FakeOllama, adapter: OllamaAdapter) -> None:
    ollama.replies.append(FakeReply(text="The sky is blue because of Rayleigh scattering."))
    events = await collect(adapter, ask(model="llama3.2", text="Why is the sky blue?"))
    assert text_of(events) == "The sky is blue because of Rayleigh scattering."
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.input_tokens == ollama.outcomes[-1].prompt_tokens > 0
    assert usage.output_tokens == 12
    assert events[-1] == Done(stop_reason="stop")
    body = ollama.chat_requests()[-1]
    assert body["stream"] is True
    assert body["options"]["num_predict"] == 1024


async def test_system_prompt_goes_first(ollama: FakeOllama, adapter: OllamaAdapter) -> None:
    await collect(adapter, ask(model="llama3.2", system="You are kind."))
    messages = ollama.chat_requests()[-1]["messages"]
    assert messages[0] == {"role": "system", "content": "You are kind."}
    assert messages[1]["role"] == "user"


async def test_done_reason_length_is_reported(ollama: FakeOllama, adapter: OllamaAdapter) -> None:
    ollama.replies.append(FakeReply(text="It was a dark and", done_reason="length"))
    events = await collect(adapter, ask(model="llama3.2"))
    assert events[-1] == Done(stop_reason="length")


async def test_thinking_is_kept_apart_from_the_answer(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.replies.append(FakeReply(text="Forty-two.", thinking="The user wants a number."))
    events = await collect(adapter, ask(model="qwen3:8b"))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking == "The user wants a number."
    assert text_of(events) == "Forty-two."
    assert "think" not in ollama.chat_requests()[-1]  # not sent unless asked


async def test_think_is_sent_only_when_the_request_asks(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.replies.append(FakeReply(text="Forty-two.", thinking="Hmm."))
    events = await collect(adapter, ask(model="qwen3:8b", extra={"think": False}))
    assert ollama.chat_requests()[-1]["think"] is False
    assert not any(isinstance(e, ThinkingDelta) for e in events)
    assert text_of(events) == "Forty-two."


async def test_tool_calls_come_back_with_object_arguments(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    ollama.replies.append(
        FakeReply(text="", tool_calls=({"name": "get_weather", "arguments": {"city": "Oslo"}},))
    )
    events = await collect(adapter, ask(model="llama3.2", tools=(tool,)))
    calls = [e.call for e in events if isinstance(e, ToolCall)]
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert calls[0].arguments == {"city": "Oslo"}
    assert calls[0].id
    assert ollama.chat_requests()[-1]["tools"] == [tool]


async def test_tool_history_and_pictures_are_sent_in_ollamas_shape(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    history = (
        Message(
            role="user",
            text="What is in this picture, and the weather in Oslo?",
            pictures=(Picture(data="aGVsbG8="),),
        ),
        Message(
            role="assistant",
            text="",
            tool_calls=(ToolCallData(id="c1", name="get_weather", arguments={"city": "Oslo"}),),
        ),
        Message(role="tool", text="12 °C, rain", tool_call_id="c1", tool_name="get_weather"),
    )
    bare_tool = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}
    await collect(adapter, ChatRequest(model="llama3.2", messages=history, tools=(bare_tool,)))
    sent = ollama.chat_requests()[-1]
    user, assistant, tool = sent["messages"]
    assert user["images"] == ["aGVsbG8="]
    assert assistant["tool_calls"] == [
        {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    ]
    assert tool == {
        "role": "tool",
        "content": "12 °C, rain",
        "tool_name": "get_weather",
        "tool_call_id": "c1",
    }
    assert sent["tools"][0]["type"] == "function"
    assert sent["tools"][0]["function"]["name"] == "get_weather"


# --- failures -----------------------------------------------------------------------------------


async def test_an_error_line_mid_stream_is_an_error(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.faults.append(Fault.ERROR_MID_STREAM)
    err, text = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.SERVER_ERROR
    assert "unexpected EOF" in err.detail
    assert text  # some text had come
    assert err.partial is True


async def test_a_too_long_error_line_is_a_refusal_with_the_window(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.faults.append(Fault.ERROR_MID_STREAM)
    ollama.mid_stream_error = CLASSIC_REFUSAL
    err, _ = await failure(adapter, ask(model="llama3.2"))
    assert err.too_long is True
    assert err.window == 32_768


async def test_a_stream_without_its_done_line_is_broken(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.faults.append(Fault.NO_DONE)
    err, text = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.BROKEN_STREAM
    assert text == FakeReply().text  # the whole text came, but no done line
    assert err.partial is True


async def test_a_malformed_line_breaks_the_stream(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.faults.append(Fault.MALFORMED_LINE)
    err, _ = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.BROKEN_STREAM
    assert err.partial is True


async def test_a_dropped_connection_breaks_the_stream(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.faults.append(Fault.DISCONNECT)
    err, text = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.BROKEN_STREAM
    assert text and err.partial is True


async def test_an_unknown_model_is_missing(adapter: OllamaAdapter) -> None:
    err, _ = await failure(adapter, ask(model="mistral"))
    assert err.kind is ProblemKind.MODEL_MISSING
    assert "not found" in err.detail


async def test_a_model_deleted_after_listing_is_missing(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    await adapter.list_models()
    ollama.faults.append(Fault.NOT_FOUND)
    err, _ = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.MODEL_MISSING
    assert err.status == 404


async def test_out_of_memory_is_a_server_error(ollama: FakeOllama, adapter: OllamaAdapter) -> None:
    ollama.faults.append(Fault.OUT_OF_MEMORY)
    err, _ = await failure(adapter, ask(model="llama3.2"))
    assert err.kind is ProblemKind.SERVER_ERROR
    assert "memory" in err.detail
    assert err.too_long is False


async def test_thinking_on_a_model_that_cannot_is_refused(adapter: OllamaAdapter) -> None:
    err, _ = await failure(adapter, ask(model="llama3.2", extra={"think": True}))
    assert err.kind is ProblemKind.REFUSED
    assert "does not support thinking" in err.detail


async def test_a_slow_start_within_the_timeout_still_answers(
    ollama: FakeOllama, adapter: OllamaAdapter
) -> None:
    ollama.slow_start_seconds = 0.5
    ollama.faults.append(Fault.SLOW_START)
    events = await collect(adapter, ask(model="llama3.2"))
    assert text_of(events) == FakeReply().text


async def test_a_server_that_does_not_answer_in_time_is_a_timeout(ollama: FakeOllama) -> None:
    adapter = OllamaAdapter(ollama.url, memory=32 * GIB, read_timeout=0.3)
    ollama.slow_start_seconds = 3600  # silent until the fake stops: the read times out
    ollama.faults.append(Fault.SLOW_START)
    try:
        err, _ = await failure(adapter, ask(model="llama3.2"))
    finally:
        await adapter.aclose()
    assert err.kind is ProblemKind.TIMEOUT


async def test_a_server_that_is_down_is_unreachable() -> None:
    adapter = OllamaAdapter(f"http://127.0.0.1:{free_port()}", memory=32 * GIB)
    try:
        with pytest.raises(ProviderError) as listing:
            await adapter.list_models()
        err, _ = await failure(adapter, ask(model="llama3.2"))
    finally:
        await adapter.aclose()
    assert listing.value.kind is ProblemKind.UNREACHABLE
    assert err.kind is ProblemKind.UNREACHABLE


async def test_a_failed_probe_decides_nothing(ollama: FakeOllama) -> None:
    """A window guessed while the server was down must not stick once it is up."""
    down = OllamaAdapter(f"http://127.0.0.1:{free_port()}", memory=32 * GIB)
    try:
        with pytest.raises(ProviderError):
            await down.context_for("llama3.2")
        down.base_url = ollama.url  # the server comes up (same adapter, same decisions)
        assert await down.context_for("llama3.2") == 32_768
    finally:
        await down.aclose()


async def test_an_injected_client_is_used_and_left_open(ollama: FakeOllama) -> None:
    async with httpx.AsyncClient() as client:
        adapter = OllamaAdapter(ollama.url, client=client, memory=32 * GIB)
        await collect(adapter, ask(model="llama3.2"))
        await adapter.aclose()
        assert not client.is_closed


# --- OLLAMA_HOST ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("", "http://127.0.0.1:11434"),
        ("  ", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        (":11435", "http://127.0.0.1:11435"),
        ("192.168.1.20", "http://192.168.1.20:11434"),
        ("gpu-box:9000", "http://gpu-box:9000"),
        ("http://gpu-box:9000", "http://gpu-box:9000"),
        ("http://gpu-box", "http://gpu-box:80"),
        ("https://ollama.example.org", "https://ollama.example.org:443"),
        ("https://example.org/ollama/", "https://example.org:443/ollama"),
        ("[::]:11434", "http://127.0.0.1:11434"),
        ("[::1]:11434", "http://[::1]:11434"),
        ("localhost:notaport", "http://localhost:11434"),
    ],
)
def test_ollama_host_is_read_like_ollama_reads_it(value: str, url: str) -> None:
    assert ollama_base_url(value) == url


async def test_the_adapter_reads_ollama_host_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:12345")
    first = OllamaAdapter(memory=0)
    monkeypatch.delenv("OLLAMA_HOST")
    second = OllamaAdapter(memory=0)
    await first.aclose()
    await second.aclose()
    assert first.base_url == "http://127.0.0.1:12345"
    assert second.base_url == "http://127.0.0.1:11434"


# --- the fake itself: its checks must be able to fail --------------------------------------------


async def test_the_fake_counts_a_reload_when_num_ctx_changes(ollama: FakeOllama) -> None:
    async with httpx.AsyncClient(base_url=ollama.url) as client:
        for options in ({"num_ctx": 4_096}, {"num_ctx": 4_096}, {"num_ctx": 8_192}, {}):
            body = {"model": "llama3.2", "messages": [], "stream": False, "options": options}
            r = await client.post("/api/chat", json=body)
            assert r.status_code == 200
    # 4096 -> 4096 (same), -> 8192 (reload), -> unset = default 2048 (reload)
    assert ollama.reloads == {"llama3.2:latest": 2}
    assert ollama.loaded["llama3.2:latest"] == 2_048


async def test_the_fake_cuts_silently_like_ollama(ollama: FakeOllama) -> None:
    messages = [{"role": "system", "content": "Rules."}] + [
        {"role": "user", "content": f"{i} " + "y" * 1_000} for i in range(12)
    ]
    async with httpx.AsyncClient(base_url=ollama.url) as client:
        r = await client.post(
            "/api/chat",
            json={"model": "tinyllama", "messages": messages, "stream": False},
        )
    assert r.status_code == 200
    outcome = ollama.outcomes[-1]
    assert outcome.truncated and outcome.num_ctx == 2_048
    assert outcome.kept_messages[0]["content"] == "Rules."
    assert outcome.kept_messages[-1] == messages[-1]
    assert len(outcome.kept_messages) < len(messages)
    assert r.json()["prompt_eval_count"] <= 2_048


async def test_a_server_older_than_ps_and_version_still_works(ollama: FakeOllama) -> None:
    ollama.missing_paths = {"/api/ps", "/api/version"}
    adapter = OllamaAdapter(ollama.url, memory=32 * GIB)
    try:
        models = {m.id: m for m in await adapter.list_models()}
        events = [e async for e in adapter.stream(ask(model="llama3.2"))]
    finally:
        await adapter.aclose()
    assert models["llama3.2:latest"].context == 32_768
    assert not any(m.loaded for m in models.values())  # it cannot say what is loaded
    assert text_of(events) == FakeReply().text
    assert "truncate" not in ollama.chat_requests()[-1]


# --- the NDJSON line parser ----------------------------------------------------------------------


def test_ndjson_lines() -> None:
    assert parse_line('{"done": true}\r') == {"done": True}
    assert parse_line("   ") is None
    with pytest.raises(NdjsonError, match="not a JSON object"):
        parse_line("[1, 2]")
    with pytest.raises(NdjsonError, match="not JSON"):
        parse_line('{"message": {')
    long = "x" * 1_000
    with pytest.raises(NdjsonError) as info:
        parse_line(long)
    assert len(info.value.line) < 300


async def test_ndjson_lines_split_across_chunks_and_stop_at_the_cap() -> None:
    async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    got = [
        line
        async for line in ndjson_lines(
            chunks(b'{"a":', b' 1}\n{"b": "caf\xc3', b'\xa9"}\n', b"tail")
        )
    ]
    assert got == ['{"a": 1}', '{"b": "café"}', "tail"]

    read: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for i in range(100):
            read.append(i)
            yield b"A" * 1024

    with pytest.raises(NdjsonError, match="longer than"):
        async for _ in ndjson_lines(endless(), max_line=10 * 1024 * 1024 // 1024):
            pass
    assert len(read) < 100  # it gave up without reading the whole line


def test_ndjson_nested_too_deeply_is_a_bad_line_not_a_crash() -> None:
    with pytest.raises(NdjsonError, match="nested"):
        parse_line("[" * 100_000)
