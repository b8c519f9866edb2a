"""Set-up shared by the tests that drive the real window: its services, the window, the fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from app.demo import mock_engine
from app.services import AppServices
from app.settings import SettingsStore
from app.store import Chat
from engines.base import Approver, Engine, ModelInfo
from engines.mock import MockEngine, Step
from tests.fakes.http import free_port
from tests.waits import HANG_MS
from ui.main_window import MainWindow

PROVIDER_URLS = ("lmstudio_url", "ollama_url", "llamacpp_url", "vllm_url")


class Scripts:
    """The services' engine factory: each new conversation gets the next scripted
    ``MockEngine`` (else the demo's)."""

    def __init__(self) -> None:
        self.queue: list[list[Step]] = []
        self.engines: dict[str, MockEngine] = {}

    def __call__(
        self, services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
    ) -> Engine:
        if not self.queue:
            return mock_engine(services, chat, model, approve)
        engine = MockEngine(self.queue.pop(0), fold_every=0, delay=0.002)
        self.engines[chat.id] = engine
        return engine


def route_to(data_dir: Path, **settings: Any) -> None:
    """Save ``settings``; each provider URL not among them points at a closed port, none bundled."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    urls = {name: nowhere for name in PROVIDER_URLS if name not in settings}
    SettingsStore.in_dir(data_dir).update(**{**urls, "bundled_model": False, **settings})


def closed_after(built: AppServices) -> Iterator[AppServices]:
    """Yield ``built`` to a fixture's test, then close its files (``yield from`` in a fixture)."""
    yield built
    close_files(built)


def close_files(services: AppServices) -> None:
    services.store.close()
    services.memories.close()
    services.health.close()


def open_window(
    qtbot: QtBot,
    services: AppServices,
    *,
    start: bool = True,
    size: tuple[int, int] | None = None,
    timeout: int = HANG_MS,
) -> MainWindow:
    """The real window, shown and (unless told not to) started."""
    win = MainWindow(services)
    qtbot.addWidget(win)
    if size is not None:
        win.resize(*size)
    win.show()
    if start:
        task = asyncio.ensure_future(win.start())
        qtbot.waitUntil(task.done, timeout=timeout)
    return win


def close_window(qtbot: QtBot, win: MainWindow, services: AppServices) -> None:
    """Close the window as the person would, then its services' model connections."""
    win.close()
    for closing in (win.aclose, services.catalogue.aclose, services.local_models.aclose):
        task = asyncio.ensure_future(closing())
        qtbot.waitUntil(task.done, timeout=HANG_MS)


@contextmanager
def shown(
    qtbot: QtBot,
    services: AppServices,
    *,
    start: bool = False,
    size: tuple[int, int] | None = None,
    timeout: int = HANG_MS,
) -> Iterator[MainWindow]:
    """The real window, shown (and started if asked), closed again after the block, as the
    person would close it (what its box holds is saved then, while the chat log is open)."""
    win = open_window(qtbot, services, start=start, size=size, timeout=timeout)
    yield win
    win.close()
    close = asyncio.get_running_loop().create_task(win.aclose())
    qtbot.waitUntil(close.done, timeout=timeout)
