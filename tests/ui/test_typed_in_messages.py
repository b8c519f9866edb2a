"""Words typed while the messages have the keyboard go to the message box: the chat does not
jump to a message starting with the typed letter, and nothing typed is lost."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from tests.waits import HANG_MS
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ASKED = [f"Question {n}: how deep should bed {n} be?" for n in range(30)]


def test_typing_in_the_messages_writes_in_the_box_and_the_chat_stays(
    qtbot: QtBot, window: MainWindow
) -> None:
    store = window.services.store
    chat = store.create_chat(title="Beds")
    for text in ASKED:
        store.append_message(chat.id, "user", text)
        store.append_message(chat.id, "assistant", "About 30 cm.")
    window.open_chat(chat.id)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.chat_model.rowCount() > 0, timeout=HANG_MS)
    view.scroll_to_bottom()
    at = view.verticalScrollBar().value()
    assert at > 0
    view.setFocus()
    qtbot.waitUntil(view.hasFocus, timeout=HANG_MS)

    # "Q" starts every question: a list would jump to the first one.
    qtbot.keyClicks(view, "Quick one")
    assert window.composer.text() == "Quick one"
    assert window.composer.edit.hasFocus()
    assert view.verticalScrollBar().value() == at


def test_typing_after_clicking_a_chat_in_the_list_writes_in_its_box(
    qtbot: QtBot, window: MainWindow
) -> None:
    store = window.services.store
    marta = store.create_chat(title="Marta's list")
    beds = store.create_chat(title="Beds")
    window.sidebar.refresh()
    chats = window.sidebar.list
    row = window.sidebar.row_of(beds.id)
    assert row is not None
    qtbot.mouseClick(
        chats.viewport(), Qt.MouseButton.LeftButton, pos=chats.visualItemRect(row).center()
    )
    qtbot.waitUntil(lambda: window.title_label.text() == "Beds", timeout=HANG_MS)
    assert chats.hasFocus()

    # "M" starts the other chat's title: a list would jump to it and open it.
    qtbot.keyClicks(chats, "Marta says 40 cm")
    assert window.composer.text() == "Marta says 40 cm"
    assert window.composer.edit.hasFocus()
    assert window.title_label.text() == "Beds"
    assert window.sidebar.list.currentItem() is window.sidebar.row_of(beds.id)
    assert marta.id != beds.id
