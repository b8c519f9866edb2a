"""A Conch started after the bundled runtime crashed twice in a row lists the model as stopped,
starts nothing, and starts it when the person asks (the services, with a runtime that crashes
on cue: ``tests/engines/local/fake_runtime.py``)."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from app.settings import SettingsStore
from engines.local.bundled import MODEL_ID, CrashBook, available, free_port
from tests.engines.local.test_runtime_crashes import fake_runtime, starts

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    # The services start the bundled model only where it is installed.
    pytest.mark.skipif(not available(), reason="the bundled model is not installed here"),
]


@pytest.fixture
async def services(data_dir: Path) -> AsyncIterator[AppServices]:
    # The servers on this computer are set to a closed port: only the bundled model answers.
    closed = f"http://127.0.0.1:{free_port()}"
    settings = SettingsStore.in_dir(data_dir)
    settings.update(ollama_url=closed, lmstudio_url=closed, llamacpp_url=closed, vllm_url=closed)
    built = build_services(
        data_dir, mock=False, secrets=SessionSecrets(), runtime=fake_runtime(data_dir)
    )
    yield built
    await built.aclose()


async def test_a_held_runtime_is_listed_stopped_and_started_only_when_asked(
    services: AppServices, data_dir: Path
) -> None:
    crashes = CrashBook(data_dir)
    for _ in range(2):
        crashes.record(-int(signal.SIGILL), "first-token", ("ggml: illegal instruction",))

    models = [m for m in await services.refresh_models() if m.provider == "local"]

    assert [(m.id, m.ready, m.status) for m in models] == [(MODEL_ID, False, "stopped")]
    assert services.default_model() is None
    assert starts(data_dir) == []  # nothing was started
    notes = [n.text for n in services.health.notes(topic="local-model")]
    assert notes and "illegal instruction" in notes[0]

    crashes.clear()  # what Settings → Health → "Start the local model again" does first
    assert await services.start_bundled() is True
    assert len(starts(data_dir)) == 1
    ready = [m for m in services.catalogue.models() if m.provider == "local"]
    assert [(m.id, m.ready, m.status) for m in ready] == [(MODEL_ID, True, "")]
    assert services.default_model() is not None
