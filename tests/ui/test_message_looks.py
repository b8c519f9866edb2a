"""How a message reads: highlighted code in both themes, long messages folded behind
"Show all", and a column no wider than a comfortable line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QPalette, QTextBlock, QTextDocument
from pytestqt.qtbot import QtBot

from engines.mock import Reply
from tests.ui.conftest import Chat
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import COLLAPSE_CHARS, Row, RowKind
from ui.chat.chat_view import ChatView
from ui.chat.markdown import EXPAND_HREF
from ui.chat.message_delegate import READING_CHARS
from ui.theme import Scheme, build_palette, load_theme

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

CODE = '```python\nfor bed in range(24):\n    print("bed", bed)  # each one\n```\n'


def make_view(qtbot: QtBot, chat: Chat, width: int = 700) -> ChatView:
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(width, 500)
    view.show()
    view.set_chat(chat.chat_id)
    return view


def message_rows(view: ChatView) -> list[Row]:
    return [r for r in view.chat_model.rows() if r.kind is RowKind.MESSAGE]


def document(view: ChatView, row: Row) -> QTextDocument:
    return view.delegate.document(row, view.delegate.content_width())


def colours_of(doc: QTextDocument, word: str) -> set[str]:
    """The colours the characters of ``word`` are painted in, wherever it appears."""
    found: set[str] = set()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if word in fragment.text():
                found.add(fragment.charFormat().foreground().color().name())
            it += 1
        block = block.next()
    return found


def themed(view: ChatView, scheme: Scheme) -> None:
    view.setPalette(build_palette(load_theme(scheme)))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_code_is_highlighted_in_both_themes(
    qtbot: QtBot, chat_factory: Callable[..., Chat], scheme: Scheme
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", CODE)
    view = make_view(qtbot, chat)
    themed(view, scheme)
    doc = document(view, message_rows(view)[0])
    keyword, comment, name = (
        colours_of(doc, "for"),
        colours_of(doc, "# each"),
        colours_of(doc, "24"),
    )
    assert len(keyword) == 1 and len(comment) == 1 and len(name) == 1
    assert len(keyword | comment | name) == 3  # three kinds of word, three colours
    # Every colour reads on the code block's background in this theme.
    background = view.palette().color(QPalette.ColorRole.Base)
    for colour in keyword | comment | name:
        assert abs(QColor(colour).lightness() - background.lightness()) > 60, colour


def test_the_two_themes_colour_code_differently(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", CODE)
    view = make_view(qtbot, chat)
    themed(view, "light")
    light = colours_of(document(view, message_rows(view)[0]), "for")
    themed(view, "dark")
    qtbot.waitUntil(lambda: colours_of(document(view, message_rows(view)[0]), "for") != light)


def test_code_in_an_unknown_language_stays_plain_and_whole(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", "```nosuchlang\nfor x <in> y\n```\n")
    view = make_view(qtbot, chat)
    doc = document(view, message_rows(view)[0])
    assert "for x <in> y" in doc.toPlainText()
    assert len(colours_of(doc, "for x")) == 1


# --- long messages ----------------------------------------------------------------------------

LONG = "\n\n".join(f"Paragraph {n}: " + "the larch beds need care. " * 8 for n in range(30))


def click_link(qtbot: QtBot, view: ChatView, i: int, href: str) -> None:
    """Click ``href`` where it is painted in row ``i``, found by looking along the row (the
    links under a message are at its end: scrolled there first, as a person would)."""
    index = view.chat_model.index(i, 0)
    view.executeDelayedItemsLayout()
    bar = view.verticalScrollBar()
    bar.setValue(bar.value() + view.visualRect(index).bottom() - view.viewport().height() + 4)
    qtbot.waitUntil(lambda: 0 < view.visualRect(index).bottom() <= view.viewport().height())
    rect = view.visualRect(index)
    viewport = view.viewport().rect()
    spot = next(
        (
            QPoint(x, y)
            for y in range(max(rect.top(), 0), min(rect.bottom(), viewport.bottom()), 3)
            for x in range(rect.left(), rect.right(), 4)
            if view.delegate.anchor_at(index, QPointF(x, y), rect) == href
        ),
        None,
    )
    assert spot is not None, f"{href} is not painted where it can be clicked"
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=spot)


def test_a_long_message_shows_its_start_and_show_all_opens_it(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    assert len(LONG) > COLLAPSE_CHARS
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "user", LONG)
    chat.store.append_message(chat.chat_id, "assistant", "Short answer.")
    view = make_view(qtbot, chat)
    shown = document(view, message_rows(view)[0]).toPlainText()
    assert "Paragraph 0:" in shown and "Paragraph 29:" not in shown
    assert f"Show all ({len(LONG):,} characters)" in shown
    short = document(view, message_rows(view)[1]).toPlainText()
    assert "Show all" not in short

    click_link(qtbot, view, 0, EXPAND_HREF)
    # Shown whole, a message this long is a row per piece: together they show all of it.
    parts = [r for r in message_rows(view) if r.message is not None and r.message.text == LONG]
    assert len(parts) > 1
    shown = "\n".join(document(view, row).toPlainText() for row in parts)
    assert "Paragraph 0:" in shown and "Paragraph 29:" in shown and "Show less" in shown
    # Copy takes the whole message whichever way it is shown.
    assert all(view.chat_model.plain_text(row) == LONG for row in parts)

    click_link(qtbot, view, len(parts) - 1, EXPAND_HREF)
    assert "Paragraph 29:" not in document(view, message_rows(view)[0]).toPlainText()
    second = message_rows(view)[1].message
    assert second is not None and second.text == "Short answer."


def test_an_answer_that_just_streamed_in_stays_whole(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply(LONG, chunk_size=400)])
    bridge = ConversationBridge(chat.conversation)
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.chat_id, bridge)
    with qtbot.waitSignal(bridge.busy_changed, check_params_cb=lambda busy: not busy):
        bridge.send("Tell me everything.")
    answer = message_rows(view)[-1]
    assert "Paragraph 29:" in document(view, answer).toPlainText()
    # Opened again later, it starts folded like any long message.
    view.set_chat(chat.chat_id)
    answer = message_rows(view)[-1]
    assert "Paragraph 29:" not in document(view, answer).toPlainText()


# --- reading width ----------------------------------------------------------------------------


def test_a_wide_window_keeps_lines_to_a_comfortable_width_in_a_centred_column(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", "word " * 400)
    view = make_view(qtbot, chat, width=2400)
    qtbot.waitUntil(lambda: view.viewport().width() > 2000)
    row = message_rows(view)[0]
    doc = document(view, row)
    char = view.fontMetrics().averageCharWidth()
    widest = max(
        doc.documentLayout().blockBoundingRect(b).width() for b in _blocks(doc) if b.text()
    )
    assert widest <= (READING_CHARS + 2) * char
    assert widest < view.viewport().width() / 2
    rect = view.visualRect(view.chat_model.index(0, 0))
    column = view.delegate.column(rect)
    margin_left = column.left() - rect.left()
    margin_right = rect.right() - column.right()
    assert margin_left > 300 and abs(margin_left - margin_right) <= 2

    # A narrow window uses all of its width.
    view.resize(500, 500)
    qtbot.waitUntil(lambda: view.viewport().width() < 520)
    assert view.delegate.content_width() > view.viewport().width() - 60


def _blocks(doc: QTextDocument) -> list[QTextBlock]:
    out: list[QTextBlock] = []
    block = doc.begin()
    while block.isValid():
        out.append(block)
        block = block.next()
    return out


# --- figures under an answer ------------------------------------------------------------------


def test_an_answer_shows_its_speed_and_tokens_under_it_and_keeps_them(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    answer = "Untreated larch lasts eight to ten years. " * 4
    chat = chat_factory([Reply(answer, chunk_size=16, chunk_delay=0.01)])
    bridge = ConversationBridge(chat.conversation)
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.chat_id, bridge)
    usage: list[object] = []
    bridge.usage.connect(usage.append)
    with qtbot.waitSignal(bridge.busy_changed, check_params_cb=lambda busy: not busy):
        bridge.send("Which wood lasts?")
    (used,) = usage
    shown = document(view, message_rows(view)[-1]).toPlainText()
    # The engine's own count, not an estimate.
    assert f"{used.output_tokens:,} out" in shown and "≈" not in shown  # type: ignore[attr-defined]
    assert "tokens/s" in shown and "first token" in shown
    question = document(view, message_rows(view)[0]).toPlainText()
    assert "tokens/s" not in question  # only answers have figures

    # Another window on the same chat log (the next run) shows the same line.
    again = ChatView(chat.store, chat.book)
    qtbot.addWidget(again)
    again.resize(700, 500)
    again.set_chat(chat.chat_id)
    assert (
        shown.splitlines()[-1]
        == document(again, message_rows(again)[-1]).toPlainText().splitlines()[-1]
    )
