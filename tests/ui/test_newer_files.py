"""The window on a chat log a newer Conch wrote: it says so once and shows the chats."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.services import build_services
from app.sqlite import open_database
from app.store import _STEPS as CHAT_LOG_STEPS
from app.store import ChatStore
from tests.data.databases.make_fixtures import write_chat_log
from ui.main_window import MainWindow

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.mark.allow_log("conch.sqlite")  # a newer file is logged
def test_the_window_says_a_chat_log_is_newer_and_shows_its_chats(
    qtbot: QtBot, data_dir: Path
) -> None:
    write_chat_log(data_dir)
    newer = open_database(
        data_dir / ChatStore.FILE_NAME, (*CHAT_LOG_STEPS, "CREATE TABLE later (x);"), what="test"
    )
    newer.db.close()
    services = build_services(data_dir, mock=True)
    window = MainWindow(services)
    qtbot.addWidget(window)
    window.show()
    started = asyncio.get_running_loop().create_task(window.start())
    qtbot.waitUntil(started.done)
    try:
        assert window.statusBar().currentMessage() == (
            "Your chat log file was written by a newer Conch; it is open read-only. "
            "Update Conch to write to it."
        )
        assert window.sidebar.titles() == ["Team notes", "Weather lookup", "Garden plans"]
    finally:
        closing = asyncio.get_running_loop().create_task(window.aclose())
        qtbot.waitUntil(closing.done)
        services.store.close()
        services.memories.close()
        services.health.close()
