"""The model catalogue against real loopback servers: ready models, unreachable ones noted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.catalogue import ModelCatalogue
from app.health import HealthLog
from engines.base import ModelInfo
from engines.local import bundled
from engines.providers.base import ChatRequest
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.ollama_server import FakeModel, FakeOllama, running_ollama


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama(
        [
            FakeModel("llama3.2", 131_072),
            FakeModel("qwen3:8b", 40_960),
            FakeModel("nomic-embed-text", 8_192, ("embedding",)),
        ]
    ) as fake:
        yield fake


@pytest.fixture
def health(data_dir: Path) -> Iterator[HealthLog]:
    log = HealthLog.in_dir(data_dir)
    yield log
    log.close()


async def test_lists_ready_chat_models_with_their_windows(
    ollama: FakeOllama, health: HealthLog
) -> None:
    catalogue = ModelCatalogue([OllamaAdapter(ollama.url)], health=health)
    try:
        models = await catalogue.refresh()
    finally:
        await catalogue.aclose()
    keys = [m.key for m in models]
    assert keys == ["ollama/llama3.2:latest", "ollama/qwen3:8b"]  # no embedding model
    assert all(m.ready and m.local and m.context > 0 for m in models)
    found = catalogue.find("ollama/qwen3:8b")
    assert found is not None and found.context <= 40_960
    assert catalogue.resolve("qwen3:8b") == found
    assert catalogue.find("ollama/missing") is None
    assert health.notes() == []


async def test_an_unreachable_server_is_noted_and_skipped(
    ollama: FakeOllama, health: HealthLog
) -> None:
    port = closed_port()
    lmstudio = OpenAIAdapter(ROWS["lmstudio"], base_url=f"http://127.0.0.1:{port}/v1")
    catalogue = ModelCatalogue([lmstudio, OllamaAdapter(ollama.url)], health=health)
    seen: list[list[ModelInfo]] = []
    catalogue.on_change(seen.append)
    try:
        models = await catalogue.refresh()
        await catalogue.refresh()  # still down: noted once, not every refresh
    finally:
        await catalogue.aclose()
    assert [m.provider for m in models] == ["ollama", "ollama"]
    assert "lmstudio" in catalogue.unreachable
    notes = health.notes(topic="unreachable")
    assert len(notes) == 1
    assert "LM Studio" in notes[0].text
    assert len(seen) == 2 and [m.key for m in seen[-1]] == [m.key for m in models]


async def test_a_server_that_was_only_probed_is_not_noted(health: HealthLog) -> None:
    vllm = OpenAIAdapter(ROWS["vllm"], base_url=f"http://127.0.0.1:{closed_port()}/v1")
    catalogue = ModelCatalogue([vllm], health=health, probed={"vllm"})
    try:
        assert await catalogue.refresh() == []
    finally:
        await catalogue.aclose()
    assert "vllm" in catalogue.unreachable
    assert health.notes() == []


class SlowAdapter:
    """A provider that takes its time to list models (a server loading a model).

    ``delay=None``: it never answers, and notes whether ``meanwhile()`` held when the
    catalogue gave up on it.
    """

    name = "slow"
    label = "Slow server"
    local = True

    def __init__(self, delay: float | None, meanwhile: Callable[[], bool] = lambda: False) -> None:
        self.delay = delay
        self.meanwhile = meanwhile
        self.saw_meanwhile = False

    async def list_models(self) -> list[ModelInfo]:
        if self.delay is None:
            try:
                await asyncio.Event().wait()
            finally:
                self.saw_meanwhile = self.meanwhile()
        await asyncio.sleep(self.delay or 0)
        return [ModelInfo(provider="slow", id="m", context=0)]

    def stream(self, request: ChatRequest):  # type: ignore[no-untyped-def]
        raise AssertionError("not used")

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


async def test_providers_are_asked_at_once_and_a_hanging_one_times_out(
    ollama: FakeOllama, health: HealthLog
) -> None:
    hanging = SlowAdapter(None, meanwhile=lambda: bool(ollama.requests))
    # The timeout is all the test waits; the fake lists in milliseconds even on a busy machine.
    catalogue = ModelCatalogue([hanging, OllamaAdapter(ollama.url)], health=health, timeout=3.0)
    try:
        models = await catalogue.refresh()
    finally:
        await catalogue.aclose()
    # Ollama was asked while the hanging one still waited: not one after the other.
    assert hanging.saw_meanwhile
    assert [m.provider for m in models] == ["ollama", "ollama"]
    assert "slow" in catalogue.unreachable
    assert health.notes(topic="unreachable")[0].text.startswith("Slow server")


async def test_an_unknown_window_gets_the_local_default(health: HealthLog) -> None:
    catalogue = ModelCatalogue([SlowAdapter(0.0)], health=health)
    (model,) = await catalogue.refresh()
    assert model.context == 8_192


async def test_adding_a_provider_refreshes(ollama: FakeOllama) -> None:
    catalogue = ModelCatalogue()
    assert await catalogue.refresh() == []
    try:
        models = await catalogue.add_provider(OllamaAdapter(ollama.url))
    finally:
        await catalogue.aclose()
    assert len(models) == 2
    assert len(catalogue.ready_models()) == 2


async def test_adding_a_key_adds_its_models_and_keeps_the_other_providers(
    ollama: FakeOllama, data_dir: Path
) -> None:
    """Settings → add a key: the company's models appear; Ollama's adapter (and so the
    num_ctx it promised each model) is kept as it was."""
    import json

    from app.secrets import SessionSecrets
    from app.services import build_services
    from tests.fakes.openai_server import FakeModel as ApiModel
    from tests.fakes.openai_server import OpenAIStyleServer

    key = "gsk_" + "k" * 30
    with OpenAIStyleServer("groq", models=[ApiModel("llama-3.1-8b-instant", 131_072)]) as groq:
        (data_dir / "settings.json").write_text(
            json.dumps(
                {
                    "ollama_url": ollama.url,
                    "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
                    "llamacpp_url": f"http://127.0.0.1:{closed_port()}",
                    "vllm_url": f"http://127.0.0.1:{closed_port()}",
                    "base_urls": {"groq": groq.base_url},
                    "bundled_model": False,
                }
            )
        )
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            before = await services.refresh_models()
            ollama_adapter = services.catalogue.adapter("ollama")
            after = await services.set_key("groq", key)
            assert services.catalogue.adapter("ollama") is ollama_adapter
            assert [m.key for m in before] == ["ollama/llama3.2:latest", "ollama/qwen3:8b"]
            assert [m.key for m in after] == [
                "ollama/llama3.2:latest",
                "ollama/qwen3:8b",
                "groq/llama-3.1-8b-instant",
            ]
            assert services.catalogue.find("groq/llama-3.1-8b-instant").context == 131_072  # type: ignore[union-attr]
            # Removing the key removes the provider again.
            gone = await services.set_key("groq", "")
            assert [m.provider for m in gone] == ["ollama", "ollama"]
        finally:
            await services.aclose()


@pytest.mark.bundled
@pytest.mark.skipif(not bundled.available(), reason="the bundled model is not installed here")
async def test_the_bundled_model_starts_only_when_nothing_else_is_ready(data_dir: Path) -> None:
    import json

    from app.secrets import SessionSecrets
    from app.services import build_services

    (data_dir / "settings.json").write_text(
        json.dumps(
            {
                name: f"http://127.0.0.1:{closed_port()}"
                for name in ("ollama_url", "lmstudio_url", "llamacpp_url", "vllm_url")
            }
        )
    )
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    statuses: list[str] = []
    services.on_status(statuses.append)
    try:
        models = await services.refresh_models()
        assert [m.key for m in models] == [f"local/{bundled.MODEL_ID}"]
        assert models[0].ready and models[0].local and models[0].context == bundled.WINDOW
        assert statuses[0] == "Starting the local model…" and statuses[-1] == ""
        assert services.status == ""
    finally:
        await services.aclose()
    assert services.runtime is not None and services.runtime.state.phase == "stopped"


async def test_the_bundled_model_is_not_started_when_a_server_answers(
    ollama: FakeOllama, data_dir: Path
) -> None:
    import json

    from app.secrets import SessionSecrets
    from app.services import build_services

    (data_dir / "settings.json").write_text(json.dumps({"ollama_url": ollama.url}))
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    statuses: list[str] = []
    services.on_status(statuses.append)
    try:
        await services.refresh_models()
        assert services.runtime is None and statuses == []
        assert services.catalogue.adapter("local") is None
    finally:
        await services.aclose()


async def test_a_local_server_busy_with_a_turn_is_busy_not_unreachable(
    health: HealthLog,
) -> None:
    from engines.base import Message, TextDelta
    from engines.local.gate import GatedAdapter
    from tests.waits import HANG_SECONDS

    with running_ollama([FakeModel("llama3.2", 131_072)]) as fake:
        adapter = GatedAdapter(OllamaAdapter(fake.url))
        catalogue = ModelCatalogue([adapter], health=health)
        try:
            await catalogue.refresh()
            assert [m.key for m in catalogue.models()] == ["ollama/llama3.2:latest"]
            # A turn is streaming on the server, and the server is too busy to list its models.
            fake.chat_hold_after = 1
            request = ChatRequest(
                model="llama3.2", messages=(Message(role="user", text="hi"),), max_output_tokens=32
            )

            async def answer() -> list[str]:
                return [e.text async for e in adapter.stream(request) if isinstance(e, TextDelta)]

            turn = asyncio.ensure_future(answer())
            await asyncio.to_thread(fake.chat_held.wait, HANG_SECONDS)
            fake.tags_held = True
            catalogue.timeout = 0.05  # the listing is held: it times out whatever the machine
            await catalogue.refresh()

            assert [m.key for m in catalogue.models()] == ["ollama/llama3.2:latest"]
            assert catalogue.unreachable == {}
            assert health.notes() == []

            fake.chat_release.set()
            assert await asyncio.wait_for(turn, HANG_SECONDS)
            # Idle and still silent: now that is unreachable, noted once.
            await catalogue.refresh()
            assert "ollama" in catalogue.unreachable
            assert [n.topic for n in health.notes()] == ["unreachable"]
        finally:
            fake.tags_release.set()
            await catalogue.aclose()
