"""After the bundled runtime crashes the window says so: "stopped" in the picker (never ready),
a card whose step leads to Health, and in Health the crash, the command, the log and a way
to start the model again that only the person presses."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.services import AppServices, build_services
from app.store import Chat
from engines.base import Approver, ModelInfo, ProblemKind
from engines.local.bundled import CrashBook, rebuild_step, source_checkout
from engines.mock import MockEngine, Refuse
from ui.cards.problem_card import ProblemCard
from ui.chat.chat_model import RowKind
from ui.chat.model_picker import KEY_ROLE, ModelPicker
from ui.main_window import MainWindow
from ui.settings.health_page import HealthPage

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

STOPPED = ModelInfo(
    provider="local",
    id="smollm2-135m-instruct",
    label="SmolLM2 135M",
    context=8_192,
    local=True,
    ready=False,
    status="stopped",
)
OTHER = ModelInfo(provider="ollama", id="llama3", context=32_768, local=True, loaded=True)


def test_the_picker_shows_a_stopped_local_model_that_cannot_be_chosen(qtbot: QtBot) -> None:
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.set_models([STOPPED, OTHER], STOPPED.key)
    assert picker.entries() == [
        "Bundled with Conch",
        "SmolLM2 135M  ·  8K  ·  stopped",
        "Ollama",
        "llama3  ·  32K  ·  loaded",
    ]
    assert picker.combo.currentText() == "SmolLM2 135M  ·  8K  ·  stopped"
    flags = picker.combo.model().index(1, 0).flags()
    assert not flags & Qt.ItemFlag.ItemIsEnabled and not flags & Qt.ItemFlag.ItemIsSelectable
    assert [m.key for m in picker.models()] == [OTHER.key]  # only ready models can be chosen
    item = picker.combo.model().index(1, 0)
    assert item.data(KEY_ROLE) == STOPPED.key
    assert "stopped" in str(item.data(Qt.ItemDataRole.AccessibleTextRole))

    # A model not ready for no reason its provider gives is still left out.
    picker.set_models([STOPPED.model_copy(update={"status": ""}), OTHER], OTHER.key)
    assert picker.entries() == ["Ollama", "llama3  ·  32K  ·  loaded"]


@pytest.fixture
def health(data_dir: Path) -> Iterator[HealthLog]:
    log = HealthLog.in_dir(data_dir)
    yield log
    log.close()


def test_health_shows_no_local_model_panel_without_a_crash(
    qtbot: QtBot, data_dir: Path, health: HealthLog
) -> None:
    page = HealthPage(health, crashes=CrashBook(data_dir))
    qtbot.addWidget(page)
    page.show()
    assert page.local_model is not None and not page.local_model.isVisible()


def test_health_shows_the_crash_the_command_and_the_log_and_starts_again_when_asked(
    qtbot: QtBot, data_dir: Path, health: HealthLog
) -> None:
    crashes = CrashBook(data_dir)
    lines = ("llama_model_loader: loaded meta data", "INFO: 127.0.0.1 - POST /v1/chat HTTP/1.1")
    for _ in range(2):
        crashes.record(-int(signal.SIGILL), "first-token", lines)
    asked: list[str] = []

    async def start_local() -> bool:
        asked.append("start")
        await asyncio.sleep(0)
        return True

    page = HealthPage(health, crashes=crashes, start_local=start_local)
    qtbot.addWidget(page)
    page.show()
    panel = page.local_model
    assert panel is not None and panel.isVisible()
    assert panel.sentence.text().startswith(
        "The local model is stopped: its runtime stopped (illegal instruction) before its "
        "first word, 2 times in a row. Conch will not start it again until you ask"
    )
    step = rebuild_step()
    if source_checkout() is not None:
        command = "bash scripts/setup.sh local --reinstall-runtime"
        assert panel.command.text() == step.text == command
        assert panel.command.isVisible()
    assert panel.log.toPlainText() == "\n".join(lines)
    assert asked == []  # nothing starts by itself

    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.result.text() == "The local model is running again.")
    assert asked == ["start"]
    assert crashes.last() is None
    assert not panel.isVisible()


def test_health_says_so_when_the_model_stops_again(
    qtbot: QtBot, data_dir: Path, health: HealthLog
) -> None:
    crashes = CrashBook(data_dir)
    crashes.record(-int(signal.SIGSEGV), "answer", ("boom",))
    crashes.record(-int(signal.SIGSEGV), "answer", ("boom",))

    async def start_local() -> bool:
        crashes.record(-int(signal.SIGSEGV), "start", ("boom again",))
        return False

    page = HealthPage(health, crashes=crashes, start_local=start_local)
    qtbot.addWidget(page)
    page.show()
    panel = page.local_model
    assert panel is not None
    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.result.text() == "The local model stopped again; see above.")
    assert panel.isVisible() and panel.log.toPlainText() == "boom again"
    assert panel.start_button.isEnabled()


def stopped_runtime(
    services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
) -> MockEngine:
    """The engine of a chat whose bundled runtime stopped: the card offers a rebuild."""
    return MockEngine(
        [Refuse(ProblemKind.RUNTIME_STOPPED, next_step=rebuild_step(), detail="the runtime's log")]
    )


@pytest.fixture
def services(data_dir: Path) -> Iterator[AppServices]:
    built = build_services(data_dir, mock=True, seed_demo_chat=False, engines=stopped_runtime)
    yield built
    built.store.close()
    built.memories.close()
    built.health.close()


def test_the_cards_rebuild_step_opens_health(qtbot: QtBot, services: AppServices) -> None:
    window = MainWindow(services)
    qtbot.addWidget(window)
    window.show()
    started = asyncio.get_running_loop().create_task(window.start())
    qtbot.waitUntil(started.done, timeout=5000)
    try:
        window.new_chat()
        window.composer.edit.setFocus()
        qtbot.keyClicks(window.composer.edit, "Hello")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.chat_view.widget_at(RowKind.PROBLEM) is not None)
        card = window.chat_view.widget_at(RowKind.PROBLEM)
        assert isinstance(card, ProblemCard) and card.button is not None
        assert card.button.text() == rebuild_step().label
        qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)
        dialog = window._settings_dialog
        assert dialog is not None and dialog.current_page() == "health"
    finally:
        closing = asyncio.get_running_loop().create_task(window.aclose())
        qtbot.waitUntil(closing.done, timeout=5000)
