"""Each chat keeps its own unsent words: what is typed (or attached) in one chat's box stays
with that chat when another is opened, and comes back with it; the other chat's box is its own.
Nothing typed for one chat can be sent to another by pressing Enter after switching. The words
outlast a restart (app/drafts.py), go to the trash with their chat, and are gone once sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.drafts import draft_book
from app.services import AppServices, build_services
from tests.ui.windows import close_files, close_window, open_window, shown
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


# --- across a restart -----------------------------------------------------------------------


def test_unsent_words_come_back_with_their_chat_after_a_restart(
    qtbot: QtBot, data_dir: Path
) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    win = open_window(qtbot, services)
    local = services.store.create_chat(title="Garden budget").id
    other = services.store.create_chat(title="Slugs").id
    win.sidebar.refresh()
    open_by_click(qtbot, win, local)
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Our budget is 2,500 and")
    win.composer.add_text("prices.txt", "larch 5 euros a metre")
    open_by_click(qtbot, win, other)  # the words are left in the chat they were typed for
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Copper tape?")
    close_window(qtbot, win, services)  # with words still in the box
    close_files(services)

    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    win = open_window(qtbot, services)
    try:
        assert win.current_chat_id == other  # the chat open when Conch closed
        assert win.composer.text() == "Copper tape?"
        open_by_click(qtbot, win, local)
        assert win.composer.text() == "Our budget is 2,500 and"
        assert [(a.name, a.text) for a in win.composer.attachments()] == [
            ("prices.txt", "larch 5 euros a metre")
        ]
    finally:
        close_window(qtbot, win, services)
        close_files(services)


def test_words_sent_are_not_kept_as_a_draft(qtbot: QtBot, window: MainWindow) -> None:
    store = window.services.store
    chat = store.create_chat(title="Garden budget").id
    other = store.create_chat(title="Slugs").id
    window.sidebar.refresh()
    open_by_click(qtbot, window, chat)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "Half a thought")
    open_by_click(qtbot, window, other)
    open_by_click(qtbot, window, chat)
    assert window.composer.text() == "Half a thought"
    window.composer.edit.setFocus()
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(store.messages(chat)) == 2, timeout=HANG_MS)
    # Conch ended without closing (a power cut): what a restart reads back is no draft.
    book = draft_book(store)
    assert book is not None and book.load(chat) is None


def test_a_deleted_chat_takes_its_draft_to_the_trash_and_out_of_it(
    qtbot: QtBot, window: MainWindow
) -> None:
    store = window.services.store
    keep = store.create_chat(title="Holiday plans").id
    gone = store.create_chat(title="Tax questions").id
    window.sidebar.refresh()
    open_by_click(qtbot, window, gone)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "My income was")
    window.sidebar.delete(gone)  # the chat showing, with words in its box
    qtbot.waitUntil(lambda: window.current_chat_id == keep, timeout=HANG_MS)
    assert window.composer.text() == ""  # they are not offered to another chat
    qtbot.mouseClick(window.sidebar.undo_bar.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: gone in window.sidebar.chat_ids(), timeout=HANG_MS)
    open_by_click(qtbot, window, gone)
    assert window.composer.text() == "My income was"  # Undo brings them back with it

    open_by_click(qtbot, window, keep)
    window.sidebar.delete(gone)
    store.purge_chats([gone])  # the trash emptied: the words go with the chat
    book = draft_book(store)
    assert book is not None and book.load(gone) is None
    assert store.query("SELECT COUNT(*) FROM drafts WHERE chat_id = ?", (gone,)) == [(0,)]


@pytest.mark.allow_log("conch.drafts")
@pytest.mark.parametrize("damaged", ["{not json", '{"text": 12, "pictures": "x"}', "[]"])
def test_a_damaged_draft_leaves_the_box_empty(
    qtbot: QtBot, services: AppServices, damaged: str
) -> None:
    chat = services.store.create_chat(title="Garden budget").id
    services.store.write(
        "INSERT INTO drafts (chat_id, draft, saved) VALUES (?, ?, 0)", (chat, damaged)
    )
    with shown(qtbot, services, start=True) as win:
        assert win.current_chat_id == chat
        assert win.composer.text() == "" and win.composer.attachments() == ()
        win.composer.edit.setFocus()
        qtbot.keyClicks(win.composer.edit, "Fresh words")
        win.new_chat()  # leaving the chat keeps the new words in place of the damaged ones
        book = draft_book(services.store)
        assert book is not None
        kept = book.load(chat)
        assert kept is not None and kept.text == "Fresh words"
