"""The window opens at the size it was closed at, across a restart (the settings file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QSize
from pytestqt.qtbot import QtBot

from app.services import build_services
from tests.ui.windows import close_files, shown

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def test_the_window_comes_back_at_the_size_it_was_closed_at(qtbot: QtBot, data_dir: Path) -> None:
    first = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        with shown(qtbot, first, start=True) as win:
            room = win.screen().availableGeometry().size()
            chosen = QSize(min(870, room.width() - 40), min(610, room.height() - 40))
            assert win.size() != chosen  # not the size a first window gets anyway
            win.resize(chosen)
            qtbot.waitUntil(lambda: win.size() == chosen)
            win.close()
    finally:
        close_files(first)
    saved = json.loads((data_dir / "settings.json").read_text(encoding="utf-8"))
    assert saved["window_geometry"]  # written to the settings file, not kept in memory

    again = build_services(data_dir, mock=True, seed_demo_chat=False)  # a new start
    try:
        with shown(qtbot, again, start=True) as reopened:
            assert reopened.size() == chosen
    finally:
        close_files(again)
