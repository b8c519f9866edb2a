"""Each chat keeps its own unsent words: what is typed (or attached) in one chat's box stays
with that chat when another is opened, and comes back with it; the other chat's box is its own.
Nothing typed for one chat can be sent to another by pressing Enter after switching."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests.waits import HANG_MS
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def open_by_click(qtbot: QtBot, window: MainWindow, chat_id: str) -> None:
    chats = window.sidebar.list
    row = window.sidebar.row_of(chat_id)
    assert row is not None
    qtbot.mouseClick(
        chats.viewport(), Qt.MouseButton.LeftButton, pos=chats.visualItemRect(row).center()
    )
    qtbot.waitUntil(lambda: window.title_label.text() == row.text(), timeout=HANG_MS)


def test_words_typed_in_one_chat_stay_with_it(qtbot: QtBot, window: MainWindow) -> None:
    store = window.services.store
    local = store.create_chat(title="Garden budget")
    other = store.create_chat(title="Slugs")
    window.sidebar.refresh()
    open_by_click(qtbot, window, local.id)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "Our budget is 2,500 and")
    window.composer.add_text("prices.txt", "larch 5 euros a metre")

    open_by_click(qtbot, window, other.id)
    assert window.composer.text() == ""
    assert window.composer.attachments() == ()
    assert window.composer.draft() is None
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "Copper tape?")

    open_by_click(qtbot, window, local.id)
    assert window.composer.text() == "Our budget is 2,500 and"
    assert [a.name for a in window.composer.attachments()] == ["prices.txt"]
    open_by_click(qtbot, window, other.id)
    assert window.composer.text() == "Copper tape?"
    assert window.composer.attachments() == ()


def test_a_new_chat_starts_empty_and_the_draft_waits_in_its_chat(
    qtbot: QtBot, window: MainWindow
) -> None:
    store = window.services.store
    chat = store.create_chat(title="Garden budget")
    window.sidebar.refresh()
    open_by_click(qtbot, window, chat.id)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "Half a thought")

    window.new_chat()
    assert window.composer.text() == ""
    open_by_click(qtbot, window, chat.id)
    assert window.composer.text() == "Half a thought"
