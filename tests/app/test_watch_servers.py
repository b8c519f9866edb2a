"""A server that comes up after Conch started appears in the model list by itself."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from app.secrets import SessionSecrets
from app.services import build_services
from app.settings import SettingsStore
from engines.base import ModelInfo
from tests.fakes.ollama_server import FakeModel, FakeOllama


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_server_that_comes_up_later_shows_its_models(data_dir: Path) -> None:
    port = free_port()
    settings = SettingsStore.in_dir(data_dir)
    settings.update(ollama_url=f"http://127.0.0.1:{port}", bundled_model=False)
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    fake = FakeOllama([FakeModel("llama3.2", 131_072)])
    appeared = asyncio.Event()

    def changed(models: list[ModelInfo]) -> None:  # the window's picker listens the same way
        if any(m.id.startswith("llama3.2") and m.ready for m in models):
            appeared.set()

    services.catalogue.on_change(changed)
    watcher: asyncio.Task[None] | None = None
    try:
        await services.refresh_models(start_bundled=False)
        assert "ollama" in services.catalogue.unreachable
        assert not any(m.provider == "ollama" for m in services.catalogue.ready_models())

        fake.start(port)
        watcher = asyncio.create_task(services.watch_servers(every=0.05))
        await asyncio.wait_for(appeared.wait(), 20)
        assert "ollama" not in services.catalogue.unreachable
        assert any(m.id.startswith("llama3.2") for m in services.catalogue.ready_models())
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        fake.stop()
        await services.aclose()
