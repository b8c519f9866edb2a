"""A long wait before the first word says what it is, in the answer's placeholder: "Reading the
chat… 35%" when the server says how far it has read, "Reading about 1,200 tokens… 0 s" when it
does not; the answer's words take its place.

The engine is the scripted mock: it reads (``ReadFirst``) and sends no word until the test lets
it. The two-second threshold is the view's ``reading_after_ms``, set to 0 here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics, QImage
from pytestqt.qtbot import QtBot

from engines.mock import ReadFirst, Reply
from tests.ui.conftest import Chat
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import Row, RowKind
from ui.chat.chat_view import ChatView

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def make_view(qtbot: QtBot, chat: Chat, bridge: ConversationBridge) -> ChatView:
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.chat_id, bridge)
    view.reading_after_ms = 0  # the wait counts as a long one at once
    return view


def answer_row(view: ChatView) -> Row | None:
    i = view.chat_model.find(RowKind.STREAMING)
    return view.chat_model.row(i) if i >= 0 else None


def displayed(view: ChatView) -> str:
    """The streaming row's text as the model gives it to the view (and to a screen reader)."""
    i = view.chat_model.find(RowKind.STREAMING)
    if i < 0:
        return ""
    return str(view.chat_model.index(i, 0).data(Qt.ItemDataRole.DisplayRole))


def painted_lines(view: ChatView) -> list[int]:
    """How wide the ink of each line of text in the answer's row is, as painted on screen."""
    i = view.chat_model.find(RowKind.STREAMING)
    assert i >= 0
    rect = view.visualRect(view.chat_model.index(i, 0))
    image = view.viewport().grab(rect).toImage().convertToFormat(QImage.Format.Format_RGB32)
    paper = image.pixel(2, 2)
    widths: list[int] = []
    inked_before = False
    for y in range(image.height()):
        xs = [x for x in range(image.width()) if image.pixel(x, y) != paper]
        if xs and not inked_before:
            widths.append(0)
        if xs:
            widths[-1] = max(widths[-1], xs[-1] - xs[0])
        inked_before = bool(xs)
    return widths


def test_progress_from_the_server_shows_as_a_share_until_the_first_word(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    go = asyncio.Event()
    chat = chat_factory([ReadFirst(((600, 3_000), (1_050, 3_000)), until=go), Reply("Larch.")])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    heard: list[object] = []
    bridge.reading.connect(heard.append)

    bridge.send("Which wood lasts longest?")
    qtbot.waitUntil(lambda: displayed(view) == "Reading the chat… 35%")

    assert len(heard) == 2  # each step of the server's reading reached the window
    row = answer_row(view)
    assert row is not None
    assert view.delegate.shown_text(row).endswith("Reading the chat… 35%")
    # Painted: the placeholder's line is as wide as its words, not a lone "…".
    metrics = QFontMetrics(view.font())
    wide = metrics.horizontalAdvance("Reading the chat… 35%")
    assert metrics.horizontalAdvance("…") < wide / 4
    assert 0.8 * wide <= painted_lines(view)[-1] <= 1.2 * wide

    go.set()
    with qtbot.waitSignal(bridge.busy_changed):
        pass
    saved = [r for r in view.chat_model.rows() if r.message is not None]
    assert [r.message.text for r in saved if r.message is not None][-1] == "Larch."
    assert answer_row(view) is None
    assert "Reading" not in view.delegate.shown_text(saved[-1])


def test_a_chat_opened_again_mid_wait_shows_the_wait_at_once(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    go = asyncio.Event()
    chat = chat_factory([ReadFirst(((1_050, 3_000),), until=go), Reply("Larch.")])
    other = chat_factory()
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    bridge.send("Which wood lasts longest?")
    qtbot.waitUntil(lambda: displayed(view) == "Reading the chat… 35%")
    view.set_chat(other.chat_id)  # the person looks at another chat meanwhile
    assert answer_row(view) is None
    view.set_chat(chat.chat_id, bridge)
    qtbot.waitUntil(lambda: displayed(view) == "Reading the chat… 35%")

    go.set()
    with qtbot.waitSignal(bridge.busy_changed):
        pass
    assert answer_row(view) is None


def test_the_first_word_takes_the_placeholder_s_place_while_the_turn_goes_on(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    go = asyncio.Event()
    words = Reply("Untreated larch lasts longest. " * 20, chunk_size=4, chunk_delay=0.01)
    chat = chat_factory([ReadFirst(((1_050, 3_000),), until=go), words])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    bridge.send("Which wood lasts longest?")
    qtbot.waitUntil(lambda: displayed(view) == "Reading the chat… 35%")
    go.set()
    qtbot.waitUntil(lambda: displayed(view).startswith("Untreated"))

    assert bridge.busy  # still answering: the placeholder went with the first word
    row = answer_row(view)
    assert row is not None and row.status == ""
    assert "Reading" not in view.delegate.shown_text(row)
    with qtbot.waitSignal(bridge.busy_changed):
        pass


def test_a_server_that_says_nothing_shows_the_prompt_size_and_the_time(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    go = asyncio.Event()
    long_message = "The beds are 1.2 m wide and made of larch boards. " * 100
    chat = chat_factory([ReadFirst(until=go), Reply("Noted.")])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    bridge.send(long_message)
    qtbot.waitUntil(lambda: displayed(view).startswith("Reading about"))

    estimate = chat.conversation.context_usage()
    assert estimate is not None
    shown = displayed(view)
    figure = int(shown.split("about ", 1)[1].split(" tokens", 1)[0].replace(",", ""))
    assert abs(figure - estimate[0]) <= 50  # the session's own estimate, rounded
    assert shown.endswith(" s")  # and how long it has been

    go.set()
    with qtbot.waitSignal(bridge.busy_changed):
        pass
    assert answer_row(view) is None
    assert chat.store.messages(chat.chat_id)[-1].text == "Noted."
