"""A message's hover buttons (copy, edit, regenerate, delete), versions of an answer, Undo.

Driven through the real chat view and bridge on the scripted mock engine: what the person
sees after each action, and what the engine was sent. (What a real provider is sent after
each action is tested through ApiSession and a loopback server in tests/app.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QMenu
from pytestqt.qtbot import QtBot

from app.services import AppServices
from engines.mock import Reply
from tests.ui.conftest import Chat
from tests.ui.test_main_window import send, wait_idle
from tests.ui.windows import Scripts
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import Row, RowKind
from ui.chat.chat_view import EDIT_HINT, REFOLD_NOTE, ChatView
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def make_view(qtbot: QtBot, chat: Chat, bridge: ConversationBridge) -> ChatView:
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.chat_id, bridge)
    return view


def turn(qtbot: QtBot, bridge: ConversationBridge, start: Callable[[], bool]) -> None:
    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        assert start()


def messages(view: ChatView) -> list[tuple[str, str]]:
    """What the chat shows: (who, text) of each message, as laid out on screen."""
    out: list[tuple[str, str]] = []
    for row in view.chat_model.rows():
        if row.kind is RowKind.MESSAGE and row.message is not None:
            out.append((row.message.role, row.message.text))
    return out


def shown_text(view: ChatView, row: Row) -> str:
    return view.delegate.document(row, view.delegate.content_width()).toPlainText()


def row_of(view: ChatView, text: str) -> int:
    for i, row in enumerate(view.chat_model.rows()):
        if row.message is not None and row.message.text == text:
            return i
    raise AssertionError(f"no row shows {text!r}")


def click_button(qtbot: QtBot, view: ChatView, i: int, action: str) -> None:
    index = view.chat_model.index(i, 0)
    view.scrollTo(index)
    rect = view.visualRect(index)
    (where,) = [r for a, r in view.delegate.buttons(index, rect) if a == action]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=where.center())


def grab(view: ChatView) -> QImage:
    view.viewport().repaint()
    return view.viewport().grab().toImage()


@pytest.fixture
def chatted(qtbot: QtBot, chat_factory: Callable[..., Chat]) -> tuple[Chat, ConversationBridge]:
    chat = chat_factory(
        [
            Reply("Four.", chunk_delay=0.001),
            Reply("Six.", chunk_delay=0.001),
            Reply("Second try.", chunk_delay=0.001),
            Reply("Ten.", chunk_delay=0.001),
        ]
    )
    bridge = ConversationBridge(chat.conversation)
    return chat, bridge


def test_the_buttons_each_message_offers_are_painted_on_the_current_row(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    turn(qtbot, bridge, lambda: bridge.send("And 3+3?"))
    model = view.chat_model
    assert model.actions(row_of(view, "What is 2+2?")) == ("copy", "edit", "delete")
    assert model.actions(row_of(view, "Four.")) == ("copy", "delete")
    assert model.actions(row_of(view, "Six.")) == ("copy", "regenerate", "delete")

    i = row_of(view, "Six.")
    index = model.index(i, 0)
    (where,) = [
        r for a, r in view.delegate.buttons(index, view.visualRect(index)) if a == "regenerate"
    ]
    view.clearSelection()
    before = grab(view).copy(where)
    view.setCurrentIndex(index)
    after = grab(view).copy(where)
    assert before != after  # the button is drawn where a click finds it

    QGuiApplication.clipboard().clear()
    with qtbot.waitSignal(view.status) as note:
        click_button(qtbot, view, i, "copy")
    assert note.args == ["Message copied"]
    assert QGuiApplication.clipboard().text() == "Six."


def test_regenerate_keeps_the_earlier_answer_as_a_version_to_flip_to(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    turn(qtbot, bridge, lambda: bridge.send("And 3+3?"))

    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        click_button(qtbot, view, row_of(view, "Six."), "regenerate")

    assert messages(view)[-1] == ("assistant", "Second try.")
    assert ("assistant", "Six.") not in messages(view)
    assert chat.engine.inputs[-1].text == "And 3+3?"  # the same question, asked again
    row = view.chat_model.row(row_of(view, "Second try."))
    assert "‹ 2/2 ›" in shown_text(view, row)

    assert view.step_version(row_of(view, "Second try."), -1)
    assert messages(view)[-1] == ("assistant", "Six.")
    assert "‹ 1/2 ›" in shown_text(view, view.chat_model.row(row_of(view, "Six.")))
    # The menu (keyboard: the Menu key) offers the same, and the other version.
    menu = view.menu_for(row_of(view, "Six."))
    words = [a.text() for a in menu.actions()]
    assert "Regenerate answer" in words and "Next version" in words


def test_editing_a_message_resends_it_and_drops_what_followed(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    chat.engine._script.pop(2)  # no regenerate in this test: "Ten." answers the edit
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    turn(qtbot, bridge, lambda: bridge.send("And 3+3?"))

    click_button(qtbot, view, row_of(view, "What is 2+2?"), "edit")
    editor = view.editor
    assert editor is not None and editor.isVisible()
    assert editor.hint.text() == EDIT_HINT
    assert editor.text.toPlainText() == "What is 2+2?"
    assert editor.text.hasFocus()

    editor.text.selectAll()
    qtbot.keyClicks(editor.text, "What is 5+5?")
    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        qtbot.keyClick(editor.text, Qt.Key.Key_Return)

    assert messages(view) == [("user", "What is 5+5?"), ("assistant", "Ten.")]
    assert chat.engine.inputs[-1].text == "What is 5+5?"
    assert view.editor is None


def test_escape_leaves_the_message_as_it_was(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    assert view.start_edit(row_of(view, "What is 2+2?"))
    editor = view.editor
    assert editor is not None
    qtbot.keyClicks(editor.text, " and more")
    qtbot.keyClick(editor.text, Qt.Key.Key_Escape)

    assert view.editor is None
    assert messages(view) == [("user", "What is 2+2?"), ("assistant", "Four.")]
    assert not view.chat_model.row(row_of(view, "What is 2+2?")).editing
    assert len(chat.engine.inputs) == 1


def test_a_deleted_message_can_be_brought_back_with_undo(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    turn(qtbot, bridge, lambda: bridge.send("And 3+3?"))

    view.setFocus()
    view.setCurrentIndex(view.chat_model.index(row_of(view, "Four."), 0))
    qtbot.keyClick(view, Qt.Key.Key_Delete)

    assert ("assistant", "Four.") not in messages(view)
    bar = view.undo_bar
    assert bar.isVisible() and bar.label.text() == "Message deleted."
    # Painted, not only there: the bar's middle differs from the chat's background.
    shot = view.grab().toImage()
    inside = bar.geometry().center() + QPoint(-bar.width() // 4, 0)
    assert shot.pixelColor(inside) != view.palette().color(view.viewport().backgroundRole())

    qtbot.mouseClick(bar.button, Qt.MouseButton.LeftButton)
    assert ("assistant", "Four.") in messages(view)
    assert not bar.isVisible()


def test_the_pointer_over_a_message_shows_its_buttons(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    view.clearSelection()
    view.setCurrentIndex(view.chat_model.index(-1, 0))
    i = row_of(view, "What is 2+2?")
    index = view.chat_model.index(i, 0)
    (where,) = [r for a, r in view.delegate.buttons(index, view.visualRect(index)) if a == "edit"]
    before = grab(view).copy(where)
    qtbot.mouseMove(view.viewport(), view.visualRect(index).center())
    qtbot.waitUntil(lambda: grab(view).copy(where) != before, timeout=5000)


def test_a_stopped_answer_can_be_answered_again_and_keeps_what_arrived(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory(
        [Reply("Once upon a time " * 40, chunk_delay=0.05, chunk_size=4), Reply("The end.")]
    )
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    with qtbot.waitSignal(bridge.text_delta, timeout=10_000):
        bridge.send("Tell a story")
    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        bridge.stop()
    stopped = view.chat_model.rows()[-1]
    assert stopped.message is not None and stopped.message.partial
    arrived = stopped.message.text
    assert "Stopped" in shown_text(view, stopped)
    i = len(view.chat_model.rows()) - 1
    assert "regenerate" in view.chat_model.actions(i)

    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        click_button(qtbot, view, i, "regenerate")
    assert messages(view)[-1] == ("assistant", "The end.")
    assert chat.engine.inputs[-1].text == "Tell a story"
    assert view.step_version(len(view.chat_model.rows()) - 1, -1)
    assert messages(view)[-1] == ("assistant", arrived)


def test_the_menu_key_opens_the_chosen_messages_actions(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    view.setFocus()
    view.setCurrentIndex(view.chat_model.index(row_of(view, "Four."), 0))
    qtbot.keyClick(view, Qt.Key.Key_Menu)

    def opened() -> list[str]:
        menus = [m for m in view.findChildren(QMenu) if m.isVisible()]
        return [a.text() for a in menus[0].actions()] if menus else []

    qtbot.waitUntil(lambda: bool(opened()), timeout=5000)
    assert "Regenerate answer" in opened() and "Delete message" in opened()
    assert "Edit and resend" not in opened()  # an answer is the model's, not the person's


# --- in the real window, on mock-mode services -----------------------------------------------


def test_in_the_window_an_edit_resends_and_a_regenerate_makes_a_version(
    qtbot: QtBot,
    window: MainWindow,
    scripts: Scripts,
    services: AppServices,
) -> None:
    scripts.queue.append([Reply("Four."), Reply("Six."), Reply("Ten."), Reply("Still ten.")])
    chat_id = window.new_chat()
    for text in ("What is 2+2?", "And 3+3?"):
        send(qtbot, window, text)
        wait_idle(qtbot, window)
    view = window.chat_view

    click_button(qtbot, view, row_of(view, "What is 2+2?"), "edit")
    editor = view.editor
    assert editor is not None
    editor.text.selectAll()
    qtbot.keyClicks(editor.text, "What is 5+5?")
    qtbot.keyClick(editor.text, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.composer.busy, timeout=5000)
    wait_idle(qtbot, window)
    assert messages(view) == [("user", "What is 5+5?"), ("assistant", "Ten.")]

    click_button(qtbot, view, row_of(view, "Ten."), "regenerate")
    qtbot.waitUntil(lambda: window.composer.busy, timeout=5000)
    wait_idle(qtbot, window)
    assert messages(view) == [("user", "What is 5+5?"), ("assistant", "Still ten.")]
    stored = [(m.role, m.text) for m in services.store.messages(chat_id)]
    assert stored == messages(view)  # what shows is what the chat log (and the model) holds
    assert "‹ 2/2 ›" in shown_text(view, view.chat_model.rows()[-1])


def test_an_edit_above_the_summary_line_says_the_summary_will_be_made_again(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge]
) -> None:
    chat, bridge = chatted
    chat.engine._script.pop(2)  # "Ten." answers the edit
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    turn(qtbot, bridge, lambda: bridge.send("And 3+3?"))
    chat.store.add_compaction(chat.chat_id, 2, "They asked about sums.", "small")
    view.set_chat(chat.chat_id, bridge)
    assert [r.kind for r in view.chat_model.rows()].count(RowKind.DIVIDER) == 1

    assert view.start_edit(row_of(view, "What is 2+2?"))
    editor = view.editor
    assert editor is not None and REFOLD_NOTE in editor.hint.text()
    with qtbot.waitSignal(bridge.busy_changed, timeout=10_000, check_params_cb=lambda b: not b):
        qtbot.keyClick(editor.text, Qt.Key.Key_Return)
    assert RowKind.DIVIDER not in [r.kind for r in view.chat_model.rows()]
    assert messages(view) == [("user", "What is 2+2?"), ("assistant", "Ten.")]


def test_an_edit_left_open_for_another_chat_is_there_on_coming_back(
    qtbot: QtBot, chatted: tuple[Chat, ConversationBridge], chat_factory: Callable[..., Chat]
) -> None:
    chat, bridge = chatted
    other = chat_factory()  # the same chat log, another chat
    view = make_view(qtbot, chat, bridge)
    turn(qtbot, bridge, lambda: bridge.send("What is 2+2?"))
    assert view.start_edit(row_of(view, "What is 2+2?"))
    editor = view.editor
    assert editor is not None
    qtbot.keyClicks(editor.text, " And 3+3, while you are at it?")

    view.set_chat(other.chat_id)  # the person opens another chat mid-edit...
    assert view.editor is None
    view.set_chat(chat.chat_id, bridge)  # ...and comes back: the words are still there
    editor = view.editor
    assert editor is not None and editor.isVisible()
    assert editor.text.toPlainText() == "What is 2+2? And 3+3, while you are at it?"
    # Nothing was sent meanwhile; Esc still leaves the message as it was.
    assert len(chat.engine.inputs) == 1
    qtbot.keyClick(editor.text, Qt.Key.Key_Escape)
    assert messages(view) == [("user", "What is 2+2?"), ("assistant", "Four.")]
