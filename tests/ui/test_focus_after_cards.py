"""Where the keyboard focus goes after a card in the chat has done its job: to the message box,
so typing goes on (never to "New chat", where Space would start another chat)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.services import AppServices
from engines.base import NextStep, ProblemKind
from engines.mock import CompactBefore, Refuse, Reply
from tests.ui.test_main_window import send, wait_idle
from tests.ui.windows import Scripts
from ui.cards.memory_card import MemoryCard
from ui.cards.problem_card import ProblemCard
from ui.chat.chat_model import RowKind
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

BIG, SMALL, _LARGE = MOCK_MODELS


@pytest.fixture
def window(qtbot: QtBot, window: MainWindow) -> MainWindow:
    """The shared window (tests/ui/conftest.py), made the active one: where keys go."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    return window


def press_with_keyboard(qtbot: QtBot, button: object) -> None:
    """Focus the button and press Space on it, as a keyboard user does."""
    from PySide6.QtWidgets import QPushButton

    assert isinstance(button, QPushButton)
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus)
    qtbot.keyClick(button, Qt.Key.Key_Space)


def typing_lands_in_the_box(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer.edit)
    before = window.current_chat_id
    qtbot.keyClicks(QApplication.focusWidget(), "next ")
    assert window.composer.text().endswith("next ")
    assert window.current_chat_id == before


def test_the_too_long_cards_switch_leaves_the_focus_in_the_message_box(
    qtbot: QtBot, window: MainWindow, scripts: Scripts
) -> None:
    step = NextStep(kind="switch-model", label="Switch", model=BIG)
    scripts.queue.append([Refuse(ProblemKind.TOO_LONG, next_step=step), Reply("Read it all.")])
    window.new_chat()
    window.switch_model(SMALL)
    send(qtbot, window, "A very long message")
    wait_idle(qtbot, window)
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None

    press_with_keyboard(qtbot, card.button)
    wait_idle(qtbot, window)

    assert window.chat_view.widget_at(RowKind.PROBLEM) is None
    typing_lands_in_the_box(qtbot, window)


def test_the_too_long_cards_new_chat_leaves_the_focus_in_the_message_box(
    qtbot: QtBot, window: MainWindow, scripts: Scripts
) -> None:
    scripts.queue.append([Refuse(ProblemKind.TOO_LONG)])
    first = window.new_chat()
    send(qtbot, window, "Paste of a whole book")
    wait_idle(qtbot, window)
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None

    press_with_keyboard(qtbot, card.button)

    assert window.current_chat_id != first
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer.edit)
    assert window.composer.text() == "Paste of a whole book"


def test_a_memory_cards_undo_leaves_the_focus_in_the_message_box(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Good."), CompactBefore(), Reply("Noted.")])
    window.new_chat()
    send(qtbot, window, "We chose untreated larch for the beds.")
    wait_idle(qtbot, window)
    send(qtbot, window, "And the soil?")
    qtbot.waitUntil(lambda: bool(window.chat_view.widgets_of(RowKind.MEMORIES)), timeout=5000)
    wait_idle(qtbot, window)
    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard)
    [memory] = card.run.memories

    press_with_keyboard(qtbot, card.buttons[(memory.id, "Undo")])

    assert services.memories.list("kept") == []
    typing_lands_in_the_box(qtbot, window)


def test_undoing_a_deleted_message_leaves_the_focus_in_the_message_box(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Larch.")])
    chat_id = window.new_chat()
    send(qtbot, window, "Which wood?")
    wait_idle(qtbot, window)
    assert window.chat_view.act(1, "delete")
    bar = window.chat_view.undo_bar
    qtbot.waitUntil(bar.isVisible)

    press_with_keyboard(qtbot, bar.button)

    qtbot.waitUntil(lambda: services.store.message_count(chat_id) == 2)
    typing_lands_in_the_box(qtbot, window)


def test_check_the_server_then_try_again_sends_the_message_again(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Refuse(ProblemKind.UNREACHABLE), Reply("The server answers now.")])
    chat_id = window.new_chat()
    send(qtbot, window, "Are you there?")
    wait_idle(qtbot, window)
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None
    assert card.button.text() == "Try again"
    assert card.sentence.text() == (
        "Conch could not reach the model's server. "
        "Check that the server is running, then try again."
    )
    # The button's words are whole on it, and the address is one button over.
    assert card.button.width() >= card.button.sizeHint().width()
    assert card.settings_button is not None and card.settings_button.isVisibleTo(card)
    assert card.settings_button.width() >= card.settings_button.sizeHint().width()
    assert card.settings_button.geometry().left() > card.button.geometry().right()
    assert card.rect().contains(card.settings_button.geometry())

    press_with_keyboard(qtbot, card.button)
    wait_idle(qtbot, window)

    log = [(m.role, m.text) for m in services.store.messages(chat_id)]
    # Sent again in place: the question once, the answer after it; no Settings opened.
    assert [text for role, text in log if role == "user"] == ["Are you there?"]
    assert log[-1] == ("assistant", "The server answers now.")
    assert window._settings_dialog is None or not window._settings_dialog.isVisible()
    assert window.chat_view.widget_at(RowKind.PROBLEM) is None
    typing_lands_in_the_box(qtbot, window)


def test_the_card_for_a_server_that_did_not_answer_still_opens_settings_one_button_over(
    qtbot: QtBot, window: MainWindow, scripts: Scripts
) -> None:
    scripts.queue.append([Refuse(ProblemKind.UNREACHABLE)])
    window.new_chat()
    send(qtbot, window, "Are you there?")
    wait_idle(qtbot, window)
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.settings_button is not None

    qtbot.mouseClick(card.settings_button, Qt.MouseButton.LeftButton)

    qtbot.waitUntil(lambda: window._settings_dialog is not None)
    dialog = window._settings_dialog
    assert dialog is not None
    qtbot.waitUntil(dialog.isVisible)
    dialog.close()
