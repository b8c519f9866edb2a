"""Windows read from listings that name one where the OpenAI-style list does not: Gemini's
native list, GitHub Copilot's limits, a LiteLLM proxy's model info, and llama-server's loaded
n_ctx when /props cannot be reached. A listed window is an upper bound: a refusal that names a
smaller one still wins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from engines.base import Done, Healed, TurnInput
from engines.context.session import ApiSession
from engines.providers.openai import OpenAIAdapter
from tests.fakes.adapters import openai_adapter
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer

StartServer = Callable[..., OpenAIStyleServer]


def adapter_at(
    server: OpenAIStyleServer, client: httpx.AsyncClient, row: str, base: str | None = None
) -> OpenAIAdapter:
    return openai_adapter(
        server, client, row, base_url=base or server.base_url, api_key=server.api_key
    )


# --- Gemini -----------------------------------------------------------------------------------


async def test_gemini_windows_come_from_its_native_list_beside_the_openai_one(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server(
        "google",
        api_key="g-key",
        models=[
            FakeModel("gemini-2.5-flash", window=1_048_576),
            FakeModel("gemini-2.0-flash-lite", window=1_000_000),
            FakeModel("gemma-3-27b-it", window=131_072),
        ],
    )
    server.native_page_size = 2  # three models: two pages
    adapter = adapter_at(server, loopback_client, "google", server.url + "/v1beta/openai")
    windows = {m.id: m.context for m in await adapter.list_models()}
    assert windows == {
        "models/gemini-2.5-flash": 1_048_576,
        "models/gemini-2.0-flash-lite": 1_000_000,
        "models/gemma-3-27b-it": 131_072,
    }
    native = server.requests_to("/v1beta/models")
    assert len(native) == 2
    # The native API takes the key in its own header; the OpenAI-style one as a bearer token.
    assert all(r.headers.get("x-goog-api-key") == "g-key" for r in native)
    assert all("authorization" not in r.headers for r in native)


async def test_a_refused_native_list_still_lists_the_models_with_the_unknown_window(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("google", api_key="g-key", models=[FakeModel("gemini-x", 500_000)])
    server.native_list = False
    adapter = adapter_at(server, loopback_client, "google", server.url + "/v1beta/openai")
    [info] = await adapter.list_models()
    assert info.id == "models/gemini-x" and info.context == 128_000


async def test_gemini_at_an_address_of_its_own_is_not_asked_for_a_native_list(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("google", api_key="g-key", models=[FakeModel("gemini-x", 500_000)])
    [info] = await adapter_at(server, loopback_client, "google").list_models()
    assert info.context == 128_000
    assert server.requests_to("/v1beta/models") == []


# --- GitHub Copilot ---------------------------------------------------------------------------


async def test_copilot_limits_name_the_input_window(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server(
        "openai",
        api_key="ghu-token",
        models=[
            FakeModel("gpt-4.1", window=64_000, trained=128_000, name="GPT-4.1"),
            FakeModel("claude-sonnet-4", window=80_000, trained=200_000),
        ],
    )
    server.gateway = "copilot"
    models = {m.id: m for m in await adapter_at(server, loopback_client, "openai").list_models()}
    # max_prompt_tokens, not the whole window that also holds the answer
    assert models["gpt-4.1"].context == 64_000
    assert models["claude-sonnet-4"].context == 80_000
    assert models["gpt-4.1"].name == "GPT-4.1"


# --- LiteLLM ----------------------------------------------------------------------------------


async def test_a_litellm_proxy_names_windows_in_its_model_info(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server(
        "openai",
        api_key="sk-litellm",
        models=[
            FakeModel("gpt-4o", window=128_000),
            FakeModel("gpt-4o", window=30_000),  # a second deployment of the same group
            FakeModel("claude", window=200_000),
            FakeModel("no-window", window=None),
        ],
    )
    server.gateway = "litellm"
    models = {
        m.id: m.context for m in await adapter_at(server, loopback_client, "openai").list_models()
    }
    # Any deployment may answer: the smallest of a group's windows.
    assert models == {"gpt-4o": 30_000, "claude": 200_000, "no-window": 128_000}
    [info] = server.requests_to("/model/info")
    assert info.path == "/v1/model/info"
    assert info.headers.get("authorization") == "Bearer sk-litellm"


async def test_a_litellm_proxy_in_front_of_a_local_server_gives_its_window(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("vllm", models=[FakeModel("qwen", window=None)])
    server.gateway = "litellm"
    server.models = [FakeModel("qwen", window=32_768)]
    [info] = await adapter_at(server, loopback_client, "vllm").list_models()
    assert info.context == 32_768 and info.local


async def test_a_server_without_model_info_is_asked_once(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openai", api_key="sk", models=[FakeModel("m", window=None)])
    adapter = adapter_at(server, loopback_client, "openai")
    for _ in range(3):
        [info] = await adapter.list_models()
        assert info.context == 128_000
    assert len(server.requests_to("/model/info")) == 1


# --- llama-server -----------------------------------------------------------------------------


async def test_llama_server_behind_a_proxy_gives_its_loaded_n_ctx_in_the_list(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp", models=[FakeModel("gguf", window=32_768, trained=131_072)])
    server.props = False  # a proxy in front answers only the OpenAI-style paths
    [info] = await adapter_at(server, loopback_client, "llamacpp").list_models()
    assert info.context == 32_768  # n_ctx, not the trained n_ctx_train


async def test_an_older_llama_server_without_n_ctx_in_the_list_keeps_the_capped_trained_one(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("llamacpp", models=[FakeModel("gguf", window=32_768, trained=131_072)])
    server.props = False
    server.meta_n_ctx = False
    [info] = await adapter_at(server, loopback_client, "llamacpp").list_models()
    assert info.context == 8_192


# --- a listed window is an upper bound ----------------------------------------------------------


async def test_a_refusal_naming_less_than_the_listing_wins(
    openai_server: StartServer, loopback_client: httpx.AsyncClient, data_dir: Path
) -> None:
    server = openai_server("openai", api_key="ghu", models=[FakeModel("gpt-4.1", window=64_000)])
    server.gateway = "copilot"
    adapter = adapter_at(server, loopback_client, "openai")
    [model] = await adapter.list_models()
    assert model.context == 64_000
    server.window = 6_000  # what the server really reads today
    session = ApiSession(chat_id="chat-listed", data_dir=data_dir, adapters={"openai": adapter})
    turn = TurnInput(chat_id="chat-listed", seq=0, text="x" * 40_000, model=model)
    events = [event async for event in session.turn(turn)]
    assert isinstance(events[-1], Done)
    assert [e.window for e in events if isinstance(e, Healed)] == [6_000]
    assert session.window_for(model) == 6_000
    assert len(server.chat_requests) == 2
