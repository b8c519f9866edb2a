""" "Message deleted. Undo" has a strip of its own: it never covers the problem card's button
at the foot of the chat."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from pytestqt.qtbot import QtBot

from app.services import AppServices, build_services
from engines.base import NextStep, ProblemKind
from engines.mock import Refuse, Reply
from tests.ui.test_main_window import send, wait_idle
from tests.ui.windows import Scripts, closed_after, shown
from ui.cards.problem_card import ProblemCard
from ui.chat.chat_model import RowKind
from ui.chat.message_delegate import GAP

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

LONG_ANSWER = "\n\n".join(
    f"Paragraph {i}: the beds are larch, the soil comes in two loads." for i in range(8)
)


@pytest.fixture
def scripts() -> Scripts:
    return Scripts()


@pytest.fixture
def services(data_dir: Path, scripts: Scripts) -> Iterator[AppServices]:
    built = build_services(data_dir, mock=True, seed_demo_chat=False, engines=scripts)
    yield from closed_after(built)


def in_view(widget: object, view: object) -> QRect:
    from PySide6.QtWidgets import QWidget

    assert isinstance(widget, QWidget) and isinstance(view, QWidget)
    return QRect(widget.mapTo(view, QPoint(0, 0)), widget.size())


def test_the_undo_bar_leaves_the_problem_cards_button_in_view_and_clickable(
    qtbot: QtBot, services: AppServices, scripts: Scripts
) -> None:
    step = NextStep(kind="retry", label="Try again")
    scripts.queue.append(
        [Reply(LONG_ANSWER), Reply(LONG_ANSWER), Refuse(ProblemKind.RATE_LIMITED, next_step=step)]
    )
    with shown(qtbot, services, start=True, size=(800, 520)) as win:
        win.new_chat()
        for words in ("First question", "Second question", "Third question"):
            send(qtbot, win, words)
            qtbot.waitUntil(lambda: win.composer.busy, timeout=3000)
            wait_idle(qtbot, win)
        view = win.chat_view
        qtbot.waitUntil(lambda: view.verticalScrollBar().maximum() > 0)  # a chat taller than
        # its view, scrolled to its foot: the card is the last thing shown

        first_answer = next(
            i
            for i in range(view.chat_model.rowCount())
            if (m := view.chat_model.row(i).message) is not None and m.role == "assistant"
        )
        assert view.act(first_answer, "delete")
        bar = view.undo_bar
        qtbot.waitExposed(bar)
        # The chat was read again: its card is a new one, placed where its row is now.
        card = view.widget_at(RowKind.PROBLEM)
        assert isinstance(card, ProblemCard) and card.button is not None
        row = next(
            i
            for i in range(view.chat_model.rowCount())
            if view.chat_model.row(i).kind is RowKind.PROBLEM
        )
        # (less the messages' gap at its foot, which the card leaves empty)
        qtbot.waitUntil(
            lambda: (
                card.geometry()
                == view.visualRect(view.chat_model.index(row, 0)).adjusted(0, 0, 0, -GAP)
            )
        )
        qtbot.waitUntil(card.button.isVisible)
        bar_rect = in_view(bar, view)
        button_rect = in_view(card.button, view)
        viewport = view.viewport().geometry()
        assert not bar_rect.intersects(in_view(card, view))  # nor any of the card's words
        assert not bar_rect.intersects(button_rect)
        assert viewport.contains(button_rect)  # the button is shown whole, above the bar
        assert bar_rect.top() > viewport.bottom()  # the bar is in its own strip
        # What is painted there is the button, not the bar.
        centre = button_rect.center()
        assert view.childAt(centre) is card.button

        qtbot.mouseClick(bar.button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not bar.isVisible())
        assert view.viewport().geometry().bottom() > viewport.bottom()  # the strip is gone


def test_deleting_a_chats_only_messages_keeps_the_chat_in_view_while_undo_is_offered(
    qtbot: QtBot, services: AppServices, scripts: Scripts
) -> None:
    scripts.queue.append([Reply("Larch, untreated.")])
    with shown(qtbot, services, start=True) as win:
        win.new_chat()
        assert win.chat_stack.currentWidget() is win.first_screen  # an empty chat
        send(qtbot, win, "Which wood?")
        qtbot.waitUntil(lambda: win.composer.busy, timeout=3000)
        wait_idle(qtbot, win)
        view = win.chat_view
        assert win.chat_stack.currentWidget() is view
        asked = next(
            i
            for i in range(view.chat_model.rowCount())
            if (m := view.chat_model.row(i).message) is not None and m.role == "user"
        )
        assert view.act(asked, "delete")  # the question and its answer: nothing left
        assert view.chat_model.rowCount() == 0
        bar = view.undo_bar
        # The chat, with its Undo, stays: the first screen would take Undo away with it.
        assert win.chat_stack.currentWidget() is view
        qtbot.waitExposed(bar)
        assert in_view(bar, view).intersects(view.rect())

        qtbot.mouseClick(bar.button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: view.chat_model.rowCount() > 0)
        assert win.chat_stack.currentWidget() is view

        # Deleted again and left to expire: the empty chat shows the first screen.
        assert view.act(asked, "delete")
        bar._timer.timeout.emit()  # the time to undo ran out
        assert win.chat_stack.currentWidget() is win.first_screen
