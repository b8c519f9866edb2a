"""A button that pauses itself (a card's reload while the model loads, Health's "Start the local
model again" while it starts) keeps the keyboard's place: the focus stays on its card or panel,
never passed on to an unrelated control, and comes back to the button once it works again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QPushButton, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.secrets import SessionSecrets
from app.settings import SettingsStore
from engines.base import ModelInfo, NextStep, ProblemKind, TurnProblem
from engines.local.bundled import CrashBook
from engines.local.reload import ReloadOffer
from tests.waits import HANG_MS
from ui.cards.problem_card import ProblemCard
from ui.settings.settings_dialog import SettingsDialog

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

GB = 10**9


def focus_with_tab(qtbot: QtBot, window: QWidget, button: QPushButton) -> None:
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=HANG_MS)
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus, timeout=HANG_MS)


def health_page(
    qtbot: QtBot, data_dir: Path, crashes: CrashBook, start: Callable[[], Awaitable[bool]]
) -> tuple[SettingsDialog, MemoryBook, HealthLog]:
    """Settings open on Health, its "Start the local model again" button reached with Tab."""
    book, health = MemoryBook.in_dir(data_dir), HealthLog.in_dir(data_dir)
    dialog = SettingsDialog(
        settings=SettingsStore.in_dir(data_dir),
        secrets=SessionSecrets(),
        memories=book,
        health=health,
        crashes=crashes,
        start_local=start,
    )
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_page("health")
    panel = dialog.health_page.local_model
    assert panel is not None and panel.isVisible()
    focus_with_tab(qtbot, dialog, panel.start_button)
    return dialog, book, health


def test_a_too_long_card_loading_its_model_keeps_the_focus_on_the_card(qtbot: QtBot) -> None:
    llama = ModelInfo(provider="ollama", id="llama3.1:8b", context=2_048, local=True)
    step = NextStep(kind="new-chat", label="Start a new chat with this message", text="Hi")
    card = ProblemCard(TurnProblem.of(ProblemKind.TOO_LONG, "", step), "Hi")
    host = QWidget()
    qtbot.addWidget(host)
    column = QVBoxLayout(host)
    column.addWidget(card)
    elsewhere = QPushButton("New chat")  # an unrelated control after the card
    column.addWidget(elsewhere)
    card.offer_reload(ReloadOffer(llama, 16_384, int(6.5 * GB), 16 * GB))
    host.show()
    qtbot.waitExposed(host, timeout=HANG_MS)
    focus_with_tab(qtbot, host, card.reload_button)

    card.show_loading("Loading llama3.1:8b into memory with a 16K window…")
    assert not card.reload_button.isEnabled()
    assert QApplication.focusWidget() is card  # not "New chat", nor the card's other step
    card.reload_failed("llama3.1:8b could not be loaded (out of memory).")
    assert QApplication.focusWidget() is card.reload_button


def test_start_again_on_health_keeps_the_focus_on_its_panel_until_it_is_done(
    qtbot: QtBot, data_dir: Path
) -> None:
    crashes = CrashBook(data_dir)
    crashes.record(-9, "answer", ("segfault",))
    allowed = asyncio.Event()

    async def start() -> bool:
        await allowed.wait()
        crashes.record(-9, "start", ("segfault again",))  # it stopped once more
        return False

    dialog, book, health = health_page(qtbot, data_dir, crashes, start)
    panel = dialog.health_page.local_model
    assert panel is not None
    try:
        qtbot.keyClick(panel.start_button, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: not panel.start_button.isEnabled(), timeout=HANG_MS)
        assert QApplication.focusWidget() is panel  # not the Refresh or Clear beside the notes
        allowed.set()
        qtbot.waitUntil(panel.start_button.isEnabled, timeout=HANG_MS)
        assert "stopped again" in panel.result.text()
        assert QApplication.focusWidget() is panel.start_button
    finally:
        book.close()
        health.close()


def test_once_the_local_model_runs_again_the_focus_stays_on_the_health_page(
    qtbot: QtBot, data_dir: Path
) -> None:
    crashes = CrashBook(data_dir)
    crashes.record(-9, "answer", ("segfault",))

    async def start() -> bool:
        return True

    dialog, book, health = health_page(qtbot, data_dir, crashes, start)
    panel = dialog.health_page.local_model
    assert panel is not None
    try:
        qtbot.keyClick(panel.start_button, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: not panel.isVisible(), timeout=HANG_MS)  # no crash to show
        assert QApplication.focusWidget() is dialog.health_page
    finally:
        book.close()
        health.close()
