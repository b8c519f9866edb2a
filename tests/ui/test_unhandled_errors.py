"""An exception nobody catches in the running window reaches ``conch.log`` and Health.

The window is started by ui/start.py's ``main`` on this test's qasync loop, with the log file
set up the way ``conch`` sets it up. A slot connected to a real widget's signal raises, and a
background task fails with nobody awaiting it: the window keeps going, the log has each
traceback, and Health has one sentence for each, without the traceback.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.logs import LOG_NAME, configure_logging
from ui.main_window import MainWindow
from ui.start import main

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = [
    pytest.mark.qt_log_ignore("This plugin does not support"),
    # pytest-qt would catch the slot's exception itself; here the window's own hook must.
    pytest.mark.qt_no_exception_capture,
    pytest.mark.allow_log("conch.unhandled", level="ERROR"),
]


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


@pytest.fixture
def log_file(data_dir: Path) -> Iterator[Path]:
    undo = configure_logging(data_dir, console=False)
    try:
        yield data_dir / "logs" / LOG_NAME
    finally:
        undo()


def _log_text(path: Path) -> str:
    for handler in logging.getLogger().handlers:
        handler.flush()
    return path.read_text(encoding="utf-8")


def the_window(app: QApplication) -> MainWindow | None:
    return next(
        (w for w in app.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()), None
    )


class SlotError(RuntimeError):
    pass


class TaskError(LookupError):
    pass


def test_a_failing_slot_and_a_failing_task_reach_the_log_and_health(
    qtbot: QtBot, restore_app: QApplication, data_dir: Path, log_file: Path
) -> None:
    qapp = restore_app
    loop = asyncio.get_running_loop()
    running = loop.create_task(main(qapp, data_dir, mock=True, quit_after=None))
    qtbot.waitUntil(lambda: the_window(qapp) is not None)
    window = the_window(qapp)
    assert window is not None
    health = window.services.health

    # A slot on a real widget's signal raises while the person types.
    def on_text_changed() -> None:
        raise SlotError("a slot's bug")

    window.composer.edit.textChanged.connect(on_text_changed)
    qtbot.keyClicks(window.composer.edit, "larch")
    qtbot.waitUntil(lambda: bool(health.notes(topic="error")))
    window.composer.edit.textChanged.disconnect(on_text_changed)

    # A background task fails and nobody awaits it.
    async def fails() -> None:
        await asyncio.sleep(0)
        raise TaskError("a task's bug")

    task = loop.create_task(fails(), name="forgotten")
    qtbot.waitUntil(task.done)
    del task
    gc.collect()  # asyncio reports a failure nobody retrieved when the task is collected
    qtbot.waitUntil(lambda: len(health.notes(topic="error")) == 2)

    # The window is still there and still takes text.
    assert window.composer.edit.toPlainText() == "larch"
    said = [n.text for n in health.notes(topic="error")]
    window.close()
    qtbot.waitUntil(running.done)
    assert running.result() == 0

    text = _log_text(log_file)
    assert "uncaught, in a Qt slot or callback" in text
    assert "SlotError: a slot's bug" in text
    assert "Task exception was never retrieved (task forgotten)" in text
    assert "TaskError: a task's bug" in text
    assert text.count("Traceback (most recent call last)") >= 2
    assert [("TaskError" in s, "SlotError" in s) for s in said] == [(True, False), (False, True)]
    for sentence in said:
        assert "Traceback" not in sentence and "bug" not in sentence
        assert LOG_NAME in sentence
