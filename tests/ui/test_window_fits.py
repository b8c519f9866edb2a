"""The first window fits the screen it opens on, and typing goes to the message box."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QTextLayout, QTextOption
from PySide6.QtWidgets import QApplication, QLabel, QWidget
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.services import AppServices, build_services
from tests.ui.windows import closed_after, shown
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.main_window import FIRST_SIZE, MainWindow, first_size
from ui.plain import WORD_JOINER

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def services(data_dir: Path) -> Iterator[AppServices]:
    built = build_services(data_dir, mock=True, seed_demo_chat=True)
    yield from closed_after(built)


def on_screen(widget: QWidget, win: MainWindow) -> bool:
    """Whether all of ``widget`` lies inside the window, which lies inside the screen."""
    top_left = widget.mapTo(win, QPoint(0, 0))
    inside = QRect(QPoint(0, 0), win.size()).contains(QRect(top_left, widget.size()))
    return inside and win.screen().availableGeometry().contains(win.frameGeometry().topLeft())


def wrapped_lines(label: QLabel, width: int) -> list[str]:
    """The lines ``label``'s words break into at ``width`` pixels, as a word-wrapping label
    breaks them (at word boundaries, by Qt's line-break rules)."""
    layout = QTextLayout(label.text(), label.font())
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    layout.setTextOption(option)
    lines: list[str] = []
    layout.beginLayout()
    while (line := layout.createLine()).isValid():
        line.setLineWidth(width)
        lines.append(label.text()[line.textStart() : line.textStart() + line.textLength()])
    layout.endLayout()
    return lines


@pytest.mark.parametrize(
    ("screen", "expected"),
    [
        (QSize(800, 600), QSize(720, 540)),
        (QSize(1024, 700), QSize(921, 630)),
        (QSize(1280, 800), QSize(FIRST_SIZE.width(), 720)),
        (QSize(1920, 1080), QSize(1248, 864)),
        (QSize(2560, 1440), QSize(1664, 1152)),
    ],
)
def test_the_first_size_is_a_share_of_the_screen_and_never_larger(
    screen: QSize, expected: QSize
) -> None:
    assert first_size(screen) == expected


def test_the_first_window_fits_the_screen_with_send_in_view(
    qtbot: QtBot, services: AppServices
) -> None:
    with shown(qtbot, services, start=True) as win:
        room = win.screen().availableGeometry()
        assert win.width() <= room.width() and win.height() <= room.height()
        assert on_screen(win.composer.send_button, win)
        # Focus is in the message box from the start: the first key typed lands there.
        qtbot.waitUntil(lambda: QApplication.focusWidget() is win.composer.edit, timeout=HANG_MS)


def test_a_size_saved_on_a_bigger_screen_is_brought_back_within_this_one(
    qtbot: QtBot, services: AppServices
) -> None:
    with shown(qtbot, services, start=True) as win:
        win.resize(4000, 3000)
        win.close()
    with shown(qtbot, services, start=True) as again:
        room = again.screen().availableGeometry()
        assert again.width() <= room.width() and again.height() <= room.height()


def test_the_demo_says_it_is_a_demo_in_the_title_bar(qtbot: QtBot, services: AppServices) -> None:
    with shown(qtbot, services, start=True) as win:
        assert "demo" in win.windowTitle() and "scripted" in win.windowTitle()
        if win.current_chat_id:
            chat = services.store.get_chat(win.current_chat_id)
            assert chat is not None and win.windowTitle().startswith(chat.title)


def test_on_a_wide_window_the_message_box_and_the_divider_keep_to_the_messages_column(
    qtbot: QtBot, services: AppServices
) -> None:
    with shown(qtbot, services, start=True) as win:
        assert win.current_chat_id  # the demo chat, with its divider
        win.resize(2400, 1300)
        view = win.chat_view
        qtbot.waitUntil(lambda: view.viewport().width() > 1800, timeout=HANG_MS)
        column = view.delegate.column(view.viewport().rect())
        assert column.width() < view.viewport().width() // 2  # the messages stay narrow
        left = view.viewport().mapTo(win, column.topLeft()).x()

        def box_left() -> int:
            return win.composer.mapTo(win, QPoint(0, 0)).x()

        # The message box is the column's width, right under it.
        qtbot.waitUntil(lambda: abs(win.composer.width() - column.width()) <= 1, timeout=HANG_MS)
        assert abs(box_left() - left) <= 1
        # So is the divider (a card row): not across the whole window.
        divider = view.widget_at(RowKind.DIVIDER)
        assert divider is not None and divider.isVisible()
        qtbot.waitUntil(lambda: divider.width() == column.width(), timeout=HANG_MS)
        assert divider.mapTo(win, QPoint(0, 0)).x() == left

        # Back to a narrow window: the box takes the width there is, less its margins.
        win.resize(700, 600)
        qtbot.waitUntil(lambda: view.viewport().width() < 700, timeout=HANG_MS)
        qtbot.waitUntil(
            lambda: win.composer.width() >= win.composer_holder.width() - 2 * 12 - 1,
            timeout=HANG_MS,
        )


def test_the_window_can_be_made_as_narrow_whatever_width_it_had_and_whatever_it_shows(
    qtbot: QtBot, services: AppServices
) -> None:
    with shown(qtbot, services, start=True) as win:
        assert win.current_chat_id  # the demo chat: its messages, the box lined up under them
        view = win.chat_view

        def narrowest() -> int:
            QApplication.processEvents()  # the window's least width follows its layout's events
            win.resize(200, 700)  # as far as the person could drag the edge
            return win.width()

        least = narrowest()
        assert least < 600
        # Wide, the box keeps to the messages' column with wide margins beside it: they must not
        # hold the window wide.
        win.resize(1800, 700)
        qtbot.waitUntil(
            lambda: (
                abs(win.composer.width() - view.delegate.column_width(view.viewport().width())) <= 1
            ),
            timeout=HANG_MS,
        )
        assert narrowest() == least
        # Nor do a chat's title or its model's line change it.
        chat = services.store.create_chat(title="Mmmmmmmmmmmmmmmm " * 4)
        win.sidebar.refresh()
        win.open_chat(chat.id)
        assert narrowest() == least
        win.new_chat()
        assert narrowest() == least
        small = services.catalogue.find(MOCK_MODELS[1].key)
        assert small is not None
        win.switch_model(small)
        assert win.picker.combo.currentText().startswith(small.name)
        assert narrowest() == least
        # At its narrowest the message box, Send and the model picker are all in view.
        assert on_screen(win.composer.send_button, win) and on_screen(win.composer.edit, win)
        assert on_screen(win.picker, win) and on_screen(win.title_label, win)


def test_the_demo_banner_never_breaks_its_command_across_lines(
    qtbot: QtBot, services: AppServices
) -> None:
    with shown(qtbot, services, start=True) as win:
        QApplication.processEvents()
        win.resize(200, 700)  # the narrowest the window goes
        banner = win.demo_banner
        qtbot.waitUntil(lambda: banner.width() < 600, timeout=HANG_MS)
        assert banner.textFormat() == Qt.TextFormat.PlainText  # words, never markup
        # It reads (and is spoken) as typed: only invisible joiners were added.
        assert "without --mock to chat" in banner.text().replace(WORD_JOINER, "")
        # At the width it has, and at any narrower one where the command still fits on a line,
        # "--mock" is on one line: never "--" at a line's end and "mock" on the next.
        room = banner.contentsRect().width()
        least = banner.fontMetrics().horizontalAdvance("--mock ") + 1
        for width in (room, *range(least, room)):
            lines = [line.replace(WORD_JOINER, "") for line in wrapped_lines(banner, width)]
            assert any("--mock" in line for line in lines), (width, lines)
