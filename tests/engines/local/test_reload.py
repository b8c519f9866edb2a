"""Reloading a local model with a bigger window, and pulling an Ollama model, against the
loopback LM Studio and Ollama."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from bench._scripted import Answer, Raise, ScriptedAdapter
from engines.base import ModelInfo, ProblemKind, TurnInput
from engines.context.session import ApiSession
from engines.context.transcript import load_transcript
from engines.local.reload import (
    LocalModels,
    ModelFacts,
    PullError,
    PullProgress,
    choose_window,
    kv_per_token,
)
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.ollama_server import FakeModel, FakeOllama, Fault, running_ollama
from tests.fakes.openai_server import FakeModel as LmModel
from tests.fakes.openai_server import OpenAIStyleServer
from tests.fakes.streams import collect
from tests.waits import HANG_SECONDS

GIB = 1024**3
QWEN = FakeModel(
    "qwen3:8b", 40_960, ("completion", "tools"), family="qwen3", size=5 * GIB, layers=36
)


# --- the arithmetic -------------------------------------------------------------------------


def test_the_kv_cache_follows_the_layer_and_head_counts() -> None:
    info = {
        "general.architecture": "llama",
        "llama.block_count": 32,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "llama.embedding_length": 4096,
    }
    # 32 layers x 8 KV heads x (128 + 128) x 2 bytes: Llama 3 8B's 128 KiB a token.
    assert kv_per_token(info) == 128 * 1024
    per_layer = {**info, "llama.attention.head_count_kv": [8] * 16 + [0] * 16}
    assert kv_per_token(per_layer) == 64 * 1024
    assert kv_per_token({"general.architecture": "llama"}) is None


def test_the_offered_window_is_the_first_step_clearly_above_the_loaded_one() -> None:
    facts = ModelFacts(trained=131_072, weights=5 * GIB, kv_per_token=128 * 1024)
    assert choose_window(4_096, facts, cap=32_768, memory_total=16 * GIB) == 16_384
    assert choose_window(16_384, facts, cap=32_768, memory_total=16 * GIB) == 32_768
    # Nothing above the computer's cap, the trained window, or what the memory holds.
    assert choose_window(16_384, facts, cap=16_384, memory_total=16 * GIB) is None
    small = ModelFacts(trained=8_192, weights=GIB, kv_per_token=None)
    assert choose_window(2_048, small, cap=32_768, memory_total=16 * GIB) is None
    assert choose_window(4_096, facts, cap=32_768, memory_total=6 * GIB) is None


# --- LM Studio ------------------------------------------------------------------------------


@pytest.fixture
def lmstudio() -> Iterator[OpenAIStyleServer]:
    model = LmModel("qwen2.5-7b-instruct", window=4_096, trained=32_768, size_bytes=4 * GIB)
    with OpenAIStyleServer("lmstudio", models=[model], window=4_096) as server:
        yield server


@pytest.fixture
async def lm_adapter(lmstudio: OpenAIStyleServer) -> AsyncIterator[OpenAIAdapter]:
    adapter = OpenAIAdapter(ROWS["lmstudio"], base_url=lmstudio.base_url)
    yield adapter
    await adapter.aclose()


Services = Callable[..., LocalModels]


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    """``LocalModels`` over one adapter (and this much memory), closed after the test."""
    made: list[LocalModels] = []

    def make(adapter: ProviderAdapter, memory: int = 32 * GIB) -> LocalModels:
        local = LocalModels(lambda name: adapter if name == adapter.name else None, memory=memory)
        made.append(local)
        return local

    yield make
    for local in made:
        await local.aclose()


async def test_lm_studio_at_4k_is_offered_16k_and_reloaded_once(
    lmstudio: OpenAIStyleServer, lm_adapter: OpenAIAdapter, services: Services
) -> None:
    [model] = await lm_adapter.list_models()
    assert (model.context, model.loaded) == (4_096, True)
    local = services(lm_adapter)
    assert local.offer(model) is None  # nothing known before the server is asked
    offer = await local.learn(model)
    assert offer is not None and offer.window == 16_384
    # The weights plus a cache guessed from them (an 8B model's 16K cache is 2 GiB).
    assert offer.memory is not None and 5 * GIB < offer.memory < 7 * GIB

    assert await local.reload(offer) == 16_384
    [unload] = lmstudio.requests_to("/api/v1/models/unload")
    assert unload.json == {"instance_id": "qwen2.5-7b-instruct"}
    [load] = lmstudio.requests_to("/api/v1/models/load")
    assert load.json["model"] == "qwen2.5-7b-instruct"
    assert load.json["context_length"] == 16_384
    assert lmstudio.duplicate_loads == 0
    [model] = await lm_adapter.list_models()
    assert model.context == 16_384
    bigger = local.offer(model)
    assert bigger is not None and bigger.window == 32_768  # and the next step up, if wanted


async def test_a_refused_lm_studio_load_raises_with_its_words(
    lmstudio: OpenAIStyleServer, lm_adapter: OpenAIAdapter, services: Services
) -> None:
    [model] = await lm_adapter.list_models()
    local = services(lm_adapter)
    offer = await local.learn(model)
    assert offer is not None
    lmstudio.models[0].trained = 8_192  # the model changed on disk meanwhile
    with pytest.raises(Exception, match="exceeds the model's maximum"):
        await local.reload(offer)


# --- Ollama ---------------------------------------------------------------------------------


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama([QWEN], version="0.12.6", loaded={"qwen3:8b": 2_048}) as fake:
        yield fake


@pytest.fixture
async def ollama_adapter(ollama: FakeOllama) -> AsyncIterator[OllamaAdapter]:
    adapter = OllamaAdapter(ollama.url, memory=32 * GIB)
    yield adapter
    await adapter.aclose()


async def test_ollama_loaded_at_2k_by_another_app_is_reloaded_with_16k_and_kept_there(
    ollama: FakeOllama, ollama_adapter: OllamaAdapter, services: Services
) -> None:
    [model] = await ollama_adapter.list_models()
    assert model.context == 2_048  # Conch asks for what is loaded, so as not to reload it
    local = services(ollama_adapter)
    offer = await local.learn(model)
    assert offer is not None and offer.window == 16_384
    assert offer.memory == QWEN.size + QWEN.kv_bytes(16_384)

    assert await local.reload(offer) == 16_384
    load = ollama.chat_requests()[-1]
    assert load["messages"] == [] and load["options"]["num_ctx"] == 16_384
    assert ollama.loaded == {"qwen3:8b": 16_384}
    reloads = ollama.total_reloads()

    [model] = await ollama_adapter.list_models()
    assert model.context == 16_384
    request = ChatRequest(model="qwen3:8b", messages=(), system="hi", max_output_tokens=64)
    await collect(ollama_adapter, request)
    assert ollama.chat_requests()[-1]["options"]["num_ctx"] == 16_384
    assert ollama.total_reloads() == reloads  # the chat found the model as it wanted it


async def test_a_failed_ollama_load_keeps_asking_for_the_old_window(
    ollama: FakeOllama, ollama_adapter: OllamaAdapter, services: Services
) -> None:
    [model] = await ollama_adapter.list_models()
    local = services(ollama_adapter)
    offer = await local.learn(model)
    assert offer is not None
    ollama.faults.append(Fault.OUT_OF_MEMORY)
    with pytest.raises(Exception, match="more system memory"):
        await local.reload(offer)
    assert await ollama_adapter.context_for("qwen3:8b") == 2_048


async def test_no_offer_when_the_window_cannot_grow(
    ollama_adapter: OllamaAdapter, services: Services
) -> None:
    [model] = await ollama_adapter.list_models()
    assert await services(ollama_adapter, memory=4 * GIB).learn(model) is None
    cloud = model.model_copy(update={"local": False})
    assert await services(ollama_adapter).learn(cloud) is None


# --- pulling --------------------------------------------------------------------------------

GEMMA = FakeModel("gemma3:1b", 32_768, ("completion",), family="gemma3", size=GIB)


async def test_a_pull_reports_growing_progress_and_the_model_is_listed_after(
    ollama: FakeOllama, ollama_adapter: OllamaAdapter, services: Services
) -> None:
    ollama.registry[GEMMA.key] = GEMMA
    steps: list[PullProgress] = []
    async for step in services(ollama_adapter).pull("gemma3:1b"):
        steps.append(step)
    fractions = [s.fraction for s in steps if s.fraction is not None]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 4
    assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
    assert "gemma3:1b" in [m.id for m in await ollama_adapter.list_models()]


async def test_stopping_a_pull_closes_the_stream_and_the_next_goes_on_from_there(
    ollama: FakeOllama, ollama_adapter: OllamaAdapter, services: Services
) -> None:
    ollama.registry[GEMMA.key] = GEMMA
    ollama.pull_hold_at = GIB // 2
    local = services(ollama_adapter)
    steps = local.pull("gemma3:1b")
    async for step in steps:
        if step.completed >= GIB // 2:
            break
    await steps.aclose()
    assert await asyncio.to_thread(ollama.pull_closed.wait, HANG_SECONDS)
    assert ollama.pulls_closed == 1

    ollama.pull_release.set()
    again = [s async for s in local.pull("gemma3:1b")]
    first = next(s for s in again if s.total)
    assert first.completed >= GIB // 2  # Ollama kept what it had fetched
    assert again[-1].status == "success"


async def test_a_name_the_library_lacks_says_so(
    ollama: FakeOllama, ollama_adapter: OllamaAdapter, services: Services
) -> None:
    with pytest.raises(PullError, match="no model called nosuch"):
        async for _ in services(ollama_adapter).pull("nosuch"):
            pass


def test_no_ollama_no_pull() -> None:
    local = LocalModels(lambda _name: None)
    assert not local.can_pull()
    assert local.offer(ModelInfo(provider="ollama", id="x", context=2_048, local=True)) is None


# --- the chat after a reload ----------------------------------------------------------------


async def test_after_a_reload_the_window_a_refusal_named_is_forgotten(data_dir: Path) -> None:
    adapter = ScriptedAdapter(name="lmstudio", local=True)
    session = ApiSession(chat_id="c1", data_dir=data_dir, adapters={"lmstudio": adapter})
    model = ModelInfo(provider="lmstudio", id="qwen", context=16_384, local=True)

    async def turn(seq: int, text: str) -> None:
        turn = TurnInput(chat_id="c1", seq=seq, text=text, model=model)
        [_ async for _ in session.turn(turn)]

    refusal = ProviderError(
        ProblemKind.REFUSED, "loaded with context length of only 4096", too_long=True
    )
    refusal.window = 4_096
    adapter.add([Raise(refusal), Answer("Healed.")])
    await turn(0, "A question")
    assert session.window_for(model) == 4_096  # what the refusal named holds for the chat

    session.forget_window(model.key)  # the person reloaded the model with 16K
    assert session.window_for(model) == 16_384
    await turn(2, "Another question")
    assert adapter.requests[-1].window == 16_384
    assert load_transcript(data_dir, "c1").transcript.windows == {}
