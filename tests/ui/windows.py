"""Set-up shared by the tests that drive the real window: its services, the window, the fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from app.services import AppServices
from app.settings import SettingsStore
from tests.fakes.http import free_port
from tests.waits import HANG_MS
from ui.main_window import MainWindow

PROVIDER_URLS = ("lmstudio_url", "ollama_url", "llamacpp_url", "vllm_url")


def route_to(data_dir: Path, **settings: Any) -> None:
    """Save ``settings``; each provider URL not among them points at a closed port, none bundled."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    urls = {name: nowhere for name in PROVIDER_URLS if name not in settings}
    SettingsStore.in_dir(data_dir).update(**{**urls, "bundled_model": False, **settings})


def closed_after(built: AppServices) -> Iterator[AppServices]:
    """Yield ``built`` to a fixture's test, then close its files (``yield from`` in a fixture)."""
    yield built
    built.store.close()
    built.memories.close()
    built.health.close()


@contextmanager
def shown(
    qtbot: QtBot,
    services: AppServices,
    *,
    start: bool = False,
    size: tuple[int, int] | None = None,
    timeout: int = HANG_MS,
) -> Iterator[MainWindow]:
    """The real window, shown (and started if asked), closed again after the block."""
    win = MainWindow(services)
    qtbot.addWidget(win)
    if size is not None:
        win.resize(*size)
    win.show()
    if start:
        task = asyncio.ensure_future(win.start())
        qtbot.waitUntil(task.done, timeout=timeout)
    yield win
    close = asyncio.get_running_loop().create_task(win.aclose())
    qtbot.waitUntil(close.done, timeout=timeout)
