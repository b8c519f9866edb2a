"""SIGTERM and SIGHUP close the real window the normal way: a turn under way keeps what arrived.

The window is started by ui/start.py's ``main`` on this test's qasync loop, every chat on an
engine that writes the first words and waits for more; the signal is sent to this process once
it waits.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.drafts import draft_book
from app.store import ChatStore
from engines.base import CLOSED_TEXT, Done, Event, ProblemKind, TextDelta, TurnInput
from ui.main_window import MainWindow
from ui.start import main

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

HANG_MS = 60_000  # a hang guard only: every wait here is for an event


class HangingEngine:
    """Writes the first words of an answer, then waits for more that never come."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        yield TextDelta(text="The first ")
        yield TextDelta(text="words")
        self.waiting.set()
        await asyncio.Event().wait()
        yield Done()

    async def aclose(self) -> None:
        return None


@pytest.fixture
def restore_app(qapp: QApplication) -> Iterator[QApplication]:
    """main() themes the whole application; put it back for the next test."""
    sheet, palette, style, icon = (
        qapp.styleSheet(),
        qapp.palette(),
        qapp.style().name(),
        qapp.windowIcon(),
    )
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)
    qapp.setWindowIcon(icon)


def the_window(app: QApplication) -> MainWindow | None:
    return next(
        (w for w in app.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()), None
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_closes_the_window_and_keeps_the_answer_so_far(
    signum: int, qtbot: QtBot, restore_app: QApplication, data_dir: Path
) -> None:
    qapp = restore_app
    engine = HangingEngine()
    running = asyncio.get_running_loop().create_task(
        main(qapp, data_dir, mock=True, quit_after=None, engines=lambda *_: engine)
    )
    qtbot.waitUntil(lambda: the_window(qapp) is not None, timeout=HANG_MS)
    window = the_window(qapp)
    assert window is not None
    services = window.services
    qtbot.waitUntil(lambda: services.default_model() is not None, timeout=HANG_MS)

    chat_id = window.new_chat()
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "Tell me about larch")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(engine.waiting.is_set, timeout=HANG_MS)
    qtbot.keyClicks(window.composer.edit, "And the spruce?")  # the next message, not sent yet

    # Without the window's handler the signal would end the test run itself.
    assert signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None)
    os.kill(os.getpid(), signum)
    qtbot.waitUntil(running.done, timeout=HANG_MS)
    assert running.result() == 128 + signum  # as a process stopped by that signal
    assert signal.getsignal(signum) == signal.SIG_DFL  # the handler went with the window

    store = ChatStore.in_dir(data_dir)
    try:
        messages = store.messages(chat_id)
        book = draft_book(store)
        draft = book.load(chat_id) if book is not None else None
    finally:
        store.close()
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Tell me about larch"),
        ("assistant", "The first words"),
    ]
    assert messages[1].partial
    assert messages[1].problem is not None
    assert messages[1].problem.kind is ProblemKind.CANCELLED
    assert messages[1].problem.message == CLOSED_TEXT  # not "You stopped the answer."
    # The words waiting in the box are there when the chat is opened again.
    assert draft is not None and draft.text == "And the spruce?"
