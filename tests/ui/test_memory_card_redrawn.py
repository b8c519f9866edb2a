"""A memory the person undid stays undone on its card when the chat redraws it (after a fold,
after Settings): the card never offers Undo for it again. The card keeps the messages' gap
from the message below it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QLabel, QPushButton
from pytestqt.qtbot import QtBot

from app.services import AppServices
from engines.mock import CompactBefore, Reply
from tests.ui.test_main_window import chat_of_two_turns, send, wait_idle
from tests.ui.windows import Scripts
from ui.cards.memory_card import MemoryCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.chat_model import RowKind
from ui.chat.message_delegate import GAP
from ui.main_window import MainWindow
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def the_card(window: MainWindow) -> MemoryCard:
    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard)
    return card


def painted_words(card: MemoryCard) -> list[str]:
    """The words of the buttons and labels drawn on the card, top to bottom."""
    # Controls the card let go of are deleted on the next turn of the event loop.
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    children: list[QPushButton | QLabel] = [
        *card.findChildren(QPushButton),
        *card.findChildren(QLabel),
    ]
    shown_ = [w for w in children if w.isVisibleTo(card) and w.parent() is card]
    shown_.sort(key=lambda w: (w.y(), w.x()))
    return [w.text() for w in shown_]


def undone_and_never_offered_again(qtbot: QtBot, card: MemoryCard, memory_id: int) -> None:
    assert (memory_id, "Undo") not in card.buttons
    # A redrawn row's controls are shown on the event loop's next turn.
    qtbot.waitUntil(lambda: "Redo" in painted_words(card))
    words = painted_words(card)
    assert "Undo" not in words
    assert "Undone" in words and "Redo" in words
    redo = card.buttons[(memory_id, "Redo")]
    # Drawn on the card, not hidden under its edge.
    assert card.rect().contains(redo.geometry())


def test_an_undone_memory_stays_undone_after_a_fold_and_after_settings(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    chat_id = chat_of_two_turns(qtbot, window, scripts)
    run = services.memories.add_run(
        chat_id, ["The budget is 2,500 euros."], seq_from=0, seq_to=1, waiting=False, source="fold"
    )
    assert run is not None
    window.open_chat(chat_id)
    [memory] = run.memories
    card = the_card(window)
    card.buttons[(memory.id, "Undo")].click()
    assert services.memories.list("kept") == []
    undone_and_never_offered_again(qtbot, the_card(window), memory.id)

    send(qtbot, window, "/compact")
    qtbot.waitUntil(lambda: services.store.latest_compaction(chat_id) is not None, timeout=5000)
    wait_idle(qtbot, window)
    qtbot.waitUntil(lambda: isinstance(window.chat_view.widget_at(RowKind.DIVIDER), SummaryDivider))
    undone_and_never_offered_again(qtbot, the_card(window), memory.id)

    window.show_settings("memories")
    dialog = window._settings_dialog
    assert dialog is not None
    undone_and_never_offered_again(qtbot, the_card(window), memory.id)
    dialog.close()
    QApplication.processEvents()
    undone_and_never_offered_again(qtbot, the_card(window), memory.id)
    assert services.memories.list("kept") == []


def test_a_memory_undone_on_a_card_learned_in_a_turn_stays_undone_after_the_next_fold(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append(
        [Reply("Good."), CompactBefore(), Reply("Noted."), CompactBefore(), Reply("Fine.")]
    )
    window.new_chat()
    send(qtbot, window, "We chose untreated larch for the beds.")
    wait_idle(qtbot, window)
    send(qtbot, window, "And the soil?")
    qtbot.waitUntil(lambda: bool(window.chat_view.widgets_of(RowKind.MEMORIES)), timeout=5000)
    wait_idle(qtbot, window)
    card = the_card(window)
    [memory] = card.run.memories
    card.buttons[(memory.id, "Undo")].click()
    undone_and_never_offered_again(qtbot, the_card(window), memory.id)

    send(qtbot, window, "Which screws, then?")  # the next fold draws the chat again
    wait_idle(qtbot, window)
    every_card_keeps_it_undone(qtbot, window, memory.id)
    window.show_settings("memories")
    every_card_keeps_it_undone(qtbot, window, memory.id)
    window._settings_dialog.close()


def every_card_keeps_it_undone(qtbot: QtBot, window: MainWindow, memory_id: int) -> None:
    cards = [c for c in window.chat_view.widgets_of(RowKind.MEMORIES) if isinstance(c, MemoryCard)]
    holding = [c for c in cards if any(m.id == memory_id for m in c.run.memories)]
    assert holding
    for card in holding:
        undone_and_never_offered_again(qtbot, card, memory_id)


def test_the_memory_card_leaves_the_messages_gap_above_the_next_bubble(
    qtbot: QtBot, theme: ThemeManager, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Noted."), Reply("Fine.")])
    chat_id = window.new_chat()
    send(qtbot, window, "The budget is 2,500 euros.")
    wait_idle(qtbot, window)
    # Learned after the first answer: the card sits between it and the next "You".
    services.memories.add_run(
        chat_id, ["The budget is 2,500 euros."], seq_from=0, seq_to=1, waiting=False, source="fold"
    )
    send(qtbot, window, "We build 24 beds.")
    wait_idle(qtbot, window)
    window.open_chat(chat_id)
    view = window.chat_view
    card = the_card(window)
    rows = view.chat_model.rows()
    at = next(i for i, row in enumerate(rows) if row.kind is RowKind.MEMORIES)
    below = rows[at + 1].message
    assert below is not None and below.role == "user"
    index = view.chat_model.index(at + 1, 0)
    view.scrollTo(index)
    qtbot.waitUntil(lambda: card.isVisible() and view.visualRect(index).top() >= 0)
    bubble = view.visualRect(index)

    # As between two messages: GAP pixels of the view's own background, then the bubble.
    assert bubble.top() - card.geometry().bottom() - 1 == GAP
    image = view.viewport().grab().toImage()
    ratio = image.devicePixelRatio()
    x = card.geometry().center().x()

    def colour(y: int) -> QColor:
        return image.pixelColor(QPoint(int(x * ratio), int(y * ratio)))

    back = colour(card.geometry().bottom() + GAP // 2 + 1)
    assert back != colour(card.geometry().bottom() - 2)  # the card's own background
    assert back != colour(bubble.top() + 3)  # the "You" bubble's
