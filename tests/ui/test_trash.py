"""Settings → Trash in the real window: deleted chats listed, restored, emptied with Undo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.services import AppServices
from engines.context.transcript import transcript_path
from tests.ui.windows import shown
from tests.waits import HANG_MS
from ui.main_window import MainWindow
from ui.settings.trash_page import TrashPage
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    with shown(qtbot, services) as win:
        yield win


def _delete_with_the_key(qtbot: QtBot, window: MainWindow, chat_id: str) -> None:
    window.sidebar.set_current(chat_id)
    window.sidebar.list.setFocus()
    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    qtbot.waitUntil(lambda: chat_id not in window.sidebar.chat_ids(), timeout=HANG_MS)


def _trash(qtbot: QtBot, window: MainWindow) -> TrashPage:
    window.show_settings("trash")
    page = window._settings_dialog.trash_page
    assert isinstance(page, TrashPage)
    qtbot.waitUntil(page.isVisible, timeout=HANG_MS)
    return page


def test_a_deleted_chat_waits_in_the_trash_and_restore_brings_it_back(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    keep = services.store.create_chat("Holiday plans").id
    gone = services.store.create_chat("Tax questions").id
    window.sidebar.refresh()
    _delete_with_the_key(qtbot, window, gone)
    assert window.sidebar.undo_bar.isVisibleTo(window)

    page = _trash(qtbot, window)
    assert page.titles() == ["Tax questions"]
    assert window._settings_dialog.current_page() == "trash"
    row = page.row_for(gone)
    assert row is not None and row.meta.text().startswith("Deleted today")

    qtbot.mouseClick(row.restore_button, Qt.MouseButton.LeftButton)

    qtbot.waitUntil(lambda: gone in window.sidebar.chat_ids(), timeout=HANG_MS)
    assert set(window.sidebar.chat_ids()) == {keep, gone}
    assert page.titles() == []
    assert page.list.empty.isVisibleTo(page) and not page.empty_button.isVisibleTo(page)
    assert "Tax questions" in window.statusBar().currentMessage()
    # The sidebar no longer offers to undo a deletion that is already undone.
    assert not window.sidebar.undo_bar.isVisibleTo(window)


def test_a_chat_deleted_while_the_trash_shows_appears_there(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    chat = services.store.create_chat("Recipes").id
    window.sidebar.refresh()
    page = _trash(qtbot, window)
    assert page.titles() == []

    window.sidebar.delete(chat)

    assert page.titles() == ["Recipes"]


@pytest.fixture
def dark(qapp: QApplication) -> Iterator[ThemeManager]:
    """The real dark stylesheet and palette, put back after the test."""
    sheet, palette, style = qapp.styleSheet(), qapp.palette(), qapp.style().name()
    manager = ThemeManager(qapp, "dark")
    yield manager
    manager.close()
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


def test_empty_trash_offers_undo_and_undo_keeps_every_chat(
    qtbot: QtBot, window: MainWindow, services: AppServices, dark: ThemeManager
) -> None:
    for title in ("One", "Two"):
        services.store.delete_chat(services.store.create_chat(title).id)
    page = _trash(qtbot, window)
    assert page.titles() == ["Two", "One"]

    qtbot.mouseClick(page.empty_button, Qt.MouseButton.LeftButton)

    assert page.titles() == []
    assert page.undo_bar.isVisibleTo(page)
    assert page.undo_bar.label.text() == "Trash emptied (2 chats)."
    # Painted, not only there: the bar has the Undo bar's colour, not the page's.
    qtbot.waitExposed(page.undo_bar, timeout=HANG_MS)
    bar = page.undo_bar.grab().toImage()
    assert bar.pixelColor(bar.width() // 2, 2) == dark.color("tooltip")
    assert dark.color("tooltip") != dark.color("window")

    qtbot.mouseClick(page.undo_bar.button, Qt.MouseButton.LeftButton)

    assert page.titles() == ["Two", "One"]
    assert len(services.store.deleted_chats()) == 2
    assert not page.undo_bar.isVisibleTo(page)


def test_leaving_the_page_after_empty_trash_deletes_those_chats_for_good(
    qtbot: QtBot, window: MainWindow, services: AppServices, data_dir: Path
) -> None:
    chat = services.store.create_chat("Old draft").id
    services.store.append_message(chat, "user", "draft words")
    services.store.delete_chat(chat)
    transcript = transcript_path(data_dir, chat)
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text("{}", encoding="utf-8")
    page = _trash(qtbot, window)
    qtbot.mouseClick(page.empty_button, Qt.MouseButton.LeftButton)
    assert services.store.get_chat(chat) is not None  # Undo is still possible

    with qtbot.waitSignal(page.trash_emptied, timeout=HANG_MS):
        window.show_settings("memory")

    assert services.store.get_chat(chat) is None
    assert services.store.message_count(chat) == 0
    assert not transcript.exists()


def test_closing_settings_after_empty_trash_deletes_those_chats_for_good(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    chat = services.store.create_chat("Old draft").id
    services.store.delete_chat(chat)
    page = _trash(qtbot, window)
    qtbot.mouseClick(page.empty_button, Qt.MouseButton.LeftButton)

    window._settings_dialog.close()

    assert services.store.get_chat(chat) is None
