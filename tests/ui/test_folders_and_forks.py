"""Folders, pins and forks in the real window: where the rows are painted, what a menu does,
what a drop does, and the chat a fork opens with its link back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt
from PySide6.QtGui import QAction, QDropEvent, QImage
from PySide6.QtWidgets import QListWidgetItem, QMenu
from pytestqt.qtbot import QtBot

from app.services import AppServices
from tests.ui.windows import open_window
from tests.waits import HANG_MS
from ui.main_window import MainWindow
from ui.sidebar import FOLDER_ROLE, ID_ROLE, INDENT

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    win = open_window(qtbot, services, size=(1000, 700))
    yield win
    win.close()


def rows(window: MainWindow) -> list[str]:
    """The sidebar's rows as painted from top: "[F] name" for a folder, "  title" inside one."""
    out = []
    for i in range(window.sidebar.list.count()):
        item = window.sidebar.list.item(i)
        if item.data(FOLDER_ROLE) is not None:
            out.append(f"[F] {item.text()}")
        else:
            left = window.sidebar.list.visualItemRect(item).left()
            out.append(("  " if ink_left(window, item) > left + 12 else "") + item.text())
    return out


def ink_left(window: MainWindow, item: QListWidgetItem) -> int:
    """The x of the leftmost pixel of the row's painted text (its background excluded)."""
    view = window.sidebar.list
    rect = view.visualItemRect(item)
    image: QImage = view.viewport().grab(rect).toImage()
    background = image.pixelColor(0, 0)  # the row starts with its background (or a gap)
    for x in range(image.width()):
        for y in range(image.height()):
            c = image.pixelColor(x, y)
            if abs(c.lightness() - background.lightness()) > 60:
                return rect.left() + x
    return rect.right()


def action(menu: QMenu, words: str) -> QAction:
    for a in menu.actions():
        if a.text() == words:
            return a
        sub = a.menu()
        if isinstance(sub, QMenu):
            for b in sub.actions():
                if b.text() == words:
                    return b
    raise AssertionError(f"no “{words}” in {[a.text() for a in menu.actions()]}")


def test_pinned_chats_come_first_then_each_folder_with_its_chats_drawn_inside_it(
    window: MainWindow, services: AppServices
) -> None:
    store = services.store
    loose = store.create_chat("Loose ends")
    rent = store.create_chat("Rent")
    seeds = store.create_chat("Seeds")
    taxes = store.create_chat("Taxes")
    store.set_folder(rent.id, "Money")
    store.set_folder(seeds.id, "Garden")
    store.set_folder(taxes.id, "Money")
    store.set_pinned(loose.id, True)
    window.sidebar.refresh()

    assert rows(window) == [
        "Loose ends",
        "[F] Garden",
        "  Seeds",
        "[F] Money",
        "  Taxes",
        "  Rent",
    ]
    assert window.sidebar.chat_ids() == [loose.id, seeds.id, taxes.id, rent.id]


def test_a_click_on_a_folder_folds_its_chats_away_and_counts_them(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    store = services.store
    for title in ("A", "B"):
        store.set_folder(store.create_chat(title).id, "Work")
    window.sidebar.refresh()
    header = window.sidebar.list.item(0)
    assert header.data(FOLDER_ROLE) == "Work"

    qtbot.mouseClick(
        window.sidebar.list.viewport(),
        Qt.MouseButton.LeftButton,
        pos=window.sidebar.list.visualItemRect(header).center(),
    )
    assert rows(window) == ["[F] Work  (2)"]
    # A folder's name is not a chat: the keyboard and the chat list skip it.
    assert window.sidebar.chat_ids() == []

    window.sidebar.toggle_folder("Work")
    assert rows(window) == ["[F] Work", "  B", "  A"]


def test_the_chats_menu_pins_and_moves_it_into_a_folder_and_out(
    window: MainWindow, services: AppServices
) -> None:
    store = services.store
    store.set_folder(store.create_chat("Other").id, "Money")
    chat = store.create_chat("Bills")
    window.sidebar.refresh()

    action(window.sidebar.chat_menu(chat.id), "Pin to top").trigger()
    assert rows(window)[0] == "Bills"
    action(window.sidebar.chat_menu(chat.id), "Unpin").trigger()

    action(window.sidebar.chat_menu(chat.id), "Money").trigger()
    got = store.get_chat(chat.id)
    assert got is not None and got.folder == "Money"
    assert rows(window) == ["[F] Money", "  Bills", "  Other"]

    action(window.sidebar.chat_menu(chat.id), "Take out of the folder").trigger()
    assert rows(window) == ["[F] Money", "  Other", "Bills"]


def test_a_chat_dropped_on_a_folder_goes_into_it(window: MainWindow, services: AppServices) -> None:
    store = services.store
    store.set_folder(store.create_chat("Seeds").id, "Garden")
    chat = store.create_chat("Compost")
    window.sidebar.refresh()
    view = window.sidebar.list
    moved = next(view.item(i) for i in range(view.count()) if view.item(i).data(ID_ROLE) == chat.id)
    folder = next(view.item(i) for i in range(view.count()) if view.item(i).data(FOLDER_ROLE))
    view.setCurrentItem(moved)

    mime = QMimeData()
    mime.setData("application/x-qabstractitemmodeldatalist", b"")
    drop = QDropEvent(
        QPointF(view.visualItemRect(folder).center()),
        Qt.DropAction.MoveAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    view.dropEvent(drop)

    got = store.get_chat(chat.id)
    assert got is not None and got.folder == "Garden"
    assert rows(window) == ["[F] Garden", "  Compost", "  Seeds"]


def test_fork_from_a_message_opens_a_new_chat_with_a_link_back(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    store = services.store
    source = store.create_chat("Trip to Lisbon", model_key="mock:demo")
    for text in ("Where in May?", "Lisbon.", "And June?", "Porto."):
        store.append_message(source.id, "user" if text.endswith("?") else "assistant", text)
    window.sidebar.refresh()
    window.open_chat(source.id)
    qtbot.waitUntil(lambda: window.chat_view.chat_model.rowCount() >= 4, timeout=HANG_MS)

    row = next(
        i
        for i in range(window.chat_view.chat_model.rowCount())
        if window.chat_view.chat_model.plain_text(window.chat_view.chat_model.row(i)) == "Lisbon."
    )
    action(window.chat_view.menu_for(row), "Fork from here").trigger()

    fork = window._current
    assert fork != source.id
    assert [m.text for m in store.messages(fork)] == ["Where in May?", "Lisbon."]
    assert window.title_label.text() == "Trip to Lisbon (fork)"
    link = window.origin_link
    assert link.isVisible() and link.text() == "Forked from “Trip to Lisbon”"
    assert link.geometry().top() >= window.title_label.geometry().bottom()
    assert window.sidebar.chat_ids()[0] == fork
    assert window.composer.edit.hasFocus()

    qtbot.mouseClick(link, Qt.MouseButton.LeftButton, pos=QPoint(4, link.height() // 2))
    assert window._current == source.id
    assert not window.origin_link.isVisible()


def test_new_chat_from_summary_starts_at_the_summary(
    window: MainWindow, services: AppServices
) -> None:
    store = services.store
    source = store.create_chat("Long chat", model_key="mock:demo")
    for i in range(4):
        store.append_message(source.id, "user", f"question {i}")
        store.append_message(source.id, "assistant", f"answer {i}")
    store.add_compaction(source.id, 6, "The person asked three questions.", "demo")
    window.sidebar.refresh()

    action(window.sidebar.chat_menu(source.id), "New chat from summary").trigger()

    made = window._current
    assert made != source.id
    assert [m.text for m in store.messages(made)] == ["question 3", "answer 3"]
    fold = store.latest_compaction(made)
    assert fold is not None and fold.summary == "The person asked three questions."
    assert window.origin_link.text() == "Started from the summary of “Long chat”"


def test_folders_and_pins_are_there_after_a_restart(qtbot: QtBot, services: AppServices) -> None:
    store = services.store
    chat = store.create_chat("Seeds")
    store.set_folder(chat.id, "Garden")
    store.set_pinned(store.create_chat("Top").id, True)
    first = open_window(qtbot, services)
    first.close()

    again = open_window(qtbot, services)
    try:
        assert rows(again) == ["Top", "[F] Garden", "  Seeds"]
    finally:
        again.close()


def test_a_folder_whose_chat_is_pinned_still_lists_it_with_its_pin(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    store = services.store
    plan = store.create_chat("Build day plan")
    store.set_folder(plan.id, "Garden")
    store.set_pinned(plan.id, True)
    window.sidebar.refresh()

    # At the top among the pinned, and again under its folder's name (never a bare heading).
    assert rows(window) == ["Build day plan", "[F] Garden", "  Build day plan"]
    assert window.sidebar.chat_ids() == [plan.id]
    view = window.sidebar.list
    top, heading, inside = (view.item(i) for i in range(3))
    assert view.visualItemRect(inside).top() >= view.visualItemRect(heading).bottom()
    assert view.visualItemRect(inside).height() > 0
    # Both rows carry the pin, drawn ahead of the title: the title's ink starts further
    # right than the row's own inset, by the same amount in both.
    assert not inside.icon().isNull() and not top.icon().isNull()
    assert ink_left(window, inside) - ink_left(window, top) in range(INDENT - 2, INDENT + 3)
    # Only one of its rows is selected when the chat is open.
    window.sidebar.set_current(plan.id)
    window.sidebar.refresh()
    assert [i.text() for i in view.selectedItems()] == ["Build day plan"]
    assert view.currentRow() == 0

    window.sidebar.toggle_folder("Garden")
    assert rows(window) == ["Build day plan", "[F] Garden  (1)"]
