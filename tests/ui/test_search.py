"""Sidebar search in the real window: a snippet under each hit, and choosing it opens the chat
scrolled to that message, lit up for a moment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from app.services import AppServices
from tests.ui.windows import shown
from tests.waits import HANG_MS
from ui.chat.chat_model import PAGE, RowKind
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

NEEDLE_SEQ = 12  # far above the page of messages a chat first shows


@pytest.fixture
def garden(services: AppServices) -> str:
    """A long chat with one old message about copper tape, and a newer chat on top."""
    store = services.store
    chat = store.create_chat("Garden")
    for i in range(4 * PAGE):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i} about beds and watering."
        if i == NEEDLE_SEQ:
            text = "Slugs keep eating the lettuce. " * 3 + "Would copper tape stop them?"
        store.append_message(chat.id, role, text)  # type: ignore[arg-type]
    store.create_chat("Budget")
    return chat.id


@pytest.fixture
def window(qtbot: QtBot, services: AppServices, garden: str) -> Iterator[MainWindow]:
    with shown(qtbot, services) as win:
        qtbot.waitExposed(win, timeout=HANG_MS)
        yield win


def _search(qtbot: QtBot, window: MainWindow, text: str, expected: list[str]) -> None:
    window.sidebar.search.setFocus()
    window.sidebar.search.clear()
    qtbot.keyClicks(window.sidebar.search, text)
    qtbot.waitUntil(lambda: window.sidebar.chat_ids() == expected, timeout=HANG_MS)


def _shows(window: MainWindow, seq: int) -> bool:
    """Whether the message at ``seq`` is on screen in the chat view."""
    view = window.chat_view
    row = view.chat_model.find(RowKind.MESSAGE, seq)
    if row < 0:
        return False
    rect = view.visualRect(view.chat_model.index(row, 0))
    return rect.intersects(view.viewport().rect())


def test_a_hit_shows_a_snippet_with_the_match_under_its_title(
    qtbot: QtBot, window: MainWindow, garden: str
) -> None:
    plain_height = window.sidebar.list.visualItemRect(window.sidebar.list.item(0)).height()

    _search(qtbot, window, "COPPER tape", [garden])

    [snippet] = window.sidebar.snippets()
    assert snippet.startswith("…") and "copper tape stop them?" in snippet
    assert window.sidebar.titles() == ["Garden"]
    item = window.sidebar.list.item(0)
    assert window.sidebar.list.visualItemRect(item).height() > plain_height  # two lines


def test_choosing_a_hit_opens_the_chat_at_that_message_lit_up_briefly(
    qtbot: QtBot, window: MainWindow, garden: str
) -> None:
    assert window.current_chat_id != garden  # "Budget" is newer and opens first
    _search(qtbot, window, "copper", [garden])
    assert not _shows(window, NEEDLE_SEQ)

    list_ = window.sidebar.list
    rect = list_.visualItemRect(list_.item(0))
    qtbot.mouseClick(list_.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())

    assert window.current_chat_id == garden
    qtbot.waitUntil(lambda: _shows(window, NEEDLE_SEQ), timeout=HANG_MS)
    light = window.match_highlight
    assert light.isVisible() and light.seq == NEEDLE_SEQ
    row = window.chat_view.chat_model.find(RowKind.MESSAGE, NEEDLE_SEQ)
    where = window.chat_view.visualRect(window.chat_view.chat_model.index(row, 0))
    assert where.contains(light.geometry().center())
    qtbot.waitUntil(lambda: not light.isVisible(), timeout=HANG_MS)  # "briefly"
    assert _shows(window, NEEDLE_SEQ)  # the view stays at the match


def test_clicking_the_chosen_hit_again_goes_back_to_the_match(
    qtbot: QtBot, window: MainWindow, garden: str
) -> None:
    _search(qtbot, window, "copper", [garden])
    list_ = window.sidebar.list
    point: QPoint = list_.visualItemRect(list_.item(0)).center()
    qtbot.mouseClick(list_.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.waitUntil(lambda: _shows(window, NEEDLE_SEQ), timeout=HANG_MS)
    window.chat_view.scroll_to_bottom()
    qtbot.waitUntil(lambda: not _shows(window, NEEDLE_SEQ), timeout=HANG_MS)

    qtbot.mouseClick(list_.viewport(), Qt.MouseButton.LeftButton, pos=point)

    qtbot.waitUntil(lambda: _shows(window, NEEDLE_SEQ), timeout=HANG_MS)
    assert window.match_highlight.seq == NEEDLE_SEQ


def test_the_keyboard_chooses_a_hit_too(qtbot: QtBot, window: MainWindow, garden: str) -> None:
    _search(qtbot, window, "copper", [garden])
    window.sidebar.list.setFocus()
    window.sidebar.list.setCurrentRow(-1)

    qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Down)

    assert window.current_chat_id == garden
    qtbot.waitUntil(lambda: _shows(window, NEEDLE_SEQ), timeout=HANG_MS)


def test_a_title_hit_opens_the_chat_as_usual_without_a_snippet(
    qtbot: QtBot, window: MainWindow, services: AppServices, garden: str
) -> None:
    _search(qtbot, window, "gard", [garden])
    assert window.sidebar.snippets() == [""]

    list_ = window.sidebar.list
    qtbot.mouseClick(
        list_.viewport(),
        Qt.MouseButton.LeftButton,
        pos=list_.visualItemRect(list_.item(0)).center(),
    )

    assert window.current_chat_id == garden
    assert not window.match_highlight.isVisible()
    assert window.chat_view.at_bottom()


def test_starting_a_new_chat_drops_the_search_and_lists_every_chat(
    qtbot: QtBot, window: MainWindow, garden: str
) -> None:
    everything = window.sidebar.chat_ids()
    _search(qtbot, window, "copper tape", [garden])

    qtbot.mouseClick(window.sidebar.new_button, Qt.MouseButton.LeftButton)

    new = window.current_chat_id
    assert new not in everything
    assert window.sidebar.search.text() == ""
    assert window.sidebar.chat_ids() == [new, *everything]
    assert window.sidebar.snippets() == ["", "", ""]  # titles only, no hit lines
    listed = window.sidebar.list
    # The new chat is the chosen row, drawn at the top of the list where the person looks.
    assert listed.currentRow() == 0
    top = listed.visualItemRect(listed.item(0))
    assert top.top() <= 8 and listed.viewport().rect().contains(top)
    assert not window.sidebar.empty.isVisibleTo(window)
    # The search does not come back on its own a moment later.
    window.sidebar.refresh()
    assert window.sidebar.chat_ids() == [new, *everything]
