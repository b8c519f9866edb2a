"""The chat view: Markdown, streaming, marks, thinking, the summary divider, lazy pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.store import ChatStore
from engines.mock import Fail, Reply
from tests.ui.conftest import Chat
from tests.waits import HANG_MS
from ui.cards.summary_divider import SummaryDivider
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import PAGE, ROW_ROLE, ChatModel, Row, RowKind
from ui.chat.chat_view import ChatView
from ui.chat.markdown import MarkdownRenderer, code_blocks

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

MARKDOWN = """# Plan

Some **bold** words and `inline code`.

- first
- second

| Item | Cost |
|---|---|
| Larch | €2,100 |

```python
print("hello")
```

<b>not html</b>
"""


def make_view(qtbot: QtBot, chat: Chat, bridge: ConversationBridge | None = None) -> ChatView:
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.chat_id, bridge)
    return view


def shown_text(view: ChatView, row: Row) -> str:
    """What the person sees in a painted row (the laid-out document's text)."""
    return view.delegate.document(row, view.delegate.content_width()).toPlainText()


def rows_of(view: ChatView, kind: RowKind) -> list[Row]:
    return [r for r in view.chat_model.rows() if r.kind is kind]


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_renders_structure_and_keeps_raw_html_as_text() -> None:
    out = MarkdownRenderer().render(MARKDOWN)
    assert "<h1>Plan</h1>" in out.html
    assert "<strong>bold</strong>" in out.html
    assert "<li>first</li>" in out.html
    assert "<table" in out.html and "<td>€2,100</td>" in out.html
    assert 'href="conch-copy:0"' in out.html and ">Copy</a>" in out.html
    assert "&lt;b&gt;not html&lt;/b&gt;" in out.html
    assert out.code_blocks == ('print("hello")',)
    assert code_blocks(MARKDOWN) == ('print("hello")',)


def test_a_message_cannot_forge_the_copy_link() -> None:
    out = MarkdownRenderer().render("[click](conch-copy:0) [web](https://example.org)")
    assert 'href="conch-copy:0"' not in out.html
    assert 'href="https://example.org"' in out.html


def test_code_block_copy_puts_the_code_on_the_clipboard(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "user", "code please")
    chat.store.append_message(chat.chat_id, "assistant", MARKDOWN)
    view = make_view(qtbot, chat)
    i = view.chat_model.find(RowKind.MESSAGE, 1)
    text = shown_text(view, view.chat_model.row(i))
    assert "Plan" in text and "Larch" in text and 'print("hello")' in text
    with qtbot.waitSignal(view.status) as note:
        assert view.delegate.activate_link(view.chat_model.index(i, 0), "conch-copy:0")
    assert note.args == ["Code copied"]
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == 'print("hello")'


# --- a turn in the view -----------------------------------------------------------------------


def test_a_turn_streams_into_the_view_and_settles(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    answer = "Untreated **larch** lasts longer. " * 6
    chat = chat_factory([Reply(answer, chunk_delay=0.005, chunk_size=6)])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    bridge.send("Which wood?")
    qtbot.waitUntil(lambda: bool(rows_of(view, RowKind.STREAMING)), timeout=5000)
    qtbot.waitUntil(
        lambda: (
            bool(rows_of(view, RowKind.STREAMING))
            and "larch" in rows_of(view, RowKind.STREAMING)[0].text
        ),
        timeout=5000,
    )
    with qtbot.waitSignal(bridge.busy_changed, timeout=5000):
        pass

    assert not rows_of(view, RowKind.STREAMING)
    messages = rows_of(view, RowKind.MESSAGE)
    assert [r.message.role for r in messages if r.message] == ["user", "assistant"]
    assert "larch lasts longer" in shown_text(view, messages[1])
    assert view.at_bottom()


def test_streamed_text_reaches_the_screen_in_batches(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("x" * 300, chunk_delay=0, chunk_size=1)])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    deltas: list[str] = []
    bridge.text_delta.connect(deltas.append)
    updates: list[int] = []
    view.chat_model.dataChanged.connect(lambda top, _bottom, _roles: updates.append(top.row()))
    ticks: list[int] = []
    view._flush_timer.timeout.connect(lambda: ticks.append(len(updates)))
    streamed: list[int] = []
    bridge.done.connect(lambda _reason: streamed.append(len(updates)))

    with qtbot.waitSignal(bridge.done, timeout=HANG_MS):
        bridge.send("go")

    assert len(deltas) == 300
    assert "x" * 300 in shown_text(view, view.chat_model.rows()[-1])
    # Deltas never repaint by themselves: while the answer streamed, the row changed at most
    # once per tick of the flush timer (FLUSH_MS apart), however fast or slow the machine is.
    assert streamed[0] <= len(ticks)


def test_a_burst_of_deltas_is_one_repaint(qtbot: QtBot, chat_factory: Callable[..., Chat]) -> None:
    # The pieces a server sends in one read arrive together: they cost one repaint, not one each.
    chat = chat_factory([Reply("x" * 40, chunk_delay=0, chunk_size=1)])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    with qtbot.waitSignal(bridge.done, timeout=HANG_MS):
        bridge.send("go")
    view.chat_model.start_stream(who="Mock")
    updates: list[int] = []
    view.chat_model.dataChanged.connect(lambda top, _bottom, _roles: updates.append(top.row()))
    for _ in range(200):
        bridge.text_delta.emit("y")
    assert updates == []  # nothing yet: the flush timer is running
    qtbot.waitUntil(lambda: len(updates) > 0 or not view._flush_timer.isActive(), timeout=HANG_MS)
    assert not view._flush_timer.isActive()


def test_stopped_and_cut_off_answers_are_marked(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory(
        [Reply("word " * 300, chunk_delay=0.01, chunk_size=5), Fail(after_chars=12)]
    )
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    bridge.send("long one")
    qtbot.waitUntil(lambda: len(bridge.partial_text) > 10, timeout=5000)
    with qtbot.waitSignal(bridge.busy_changed, timeout=5000):
        bridge.stop()
    stopped = rows_of(view, RowKind.MESSAGE)[-1]
    # The last answer, stopped: it offers to go on.
    assert shown_text(view, stopped).rstrip().endswith("Stopped · Continue")

    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.send("again")
    cut = rows_of(view, RowKind.MESSAGE)[-1]
    assert cut.message is not None and cut.message.role == "assistant"
    assert shown_text(view, cut).rstrip().endswith("Cut off")
    # Once something follows it, the stopped answer is only marked.
    earlier = next(r for r in rows_of(view, RowKind.MESSAGE) if r.key == stopped.key)
    assert shown_text(view, earlier).rstrip().endswith("Stopped")
    assert "Continue" not in shown_text(view, earlier)
    # The failure also gets its card, with the one next step.
    assert len(rows_of(view, RowKind.PROBLEM)) == 1
    assert view.widget_at(RowKind.PROBLEM) is not None


def test_thinking_is_collapsed_until_opened(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("The answer.", thinking="Secret reasoning steps.")])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.send("q")

    i = view.chat_model.find(RowKind.MESSAGE, 1)
    closed = shown_text(view, view.chat_model.row(i))
    assert "▸ Thinking" in closed and "Secret reasoning" not in closed

    view.setCurrentIndex(view.chat_model.index(i, 0))
    qtbot.keyClick(view, Qt.Key.Key_Space)
    i = view.chat_model.find(RowKind.MESSAGE, 1)
    opened = shown_text(view, view.chat_model.row(i))
    assert "▾ Thinking" in opened and "Secret reasoning steps." in opened


# --- the summary divider ----------------------------------------------------------------------


def test_the_divider_follows_the_latest_fold_and_opens_to_the_summary(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)
    for text in ("Budget is €2,500", "24 beds", "Marta coordinates"):
        with qtbot.waitSignal(bridge.done, timeout=5000):
            bridge.send(text)
    assert not rows_of(view, RowKind.DIVIDER)

    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.compact("keep the budget numbers")
    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.send("Slugs?")
    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.compact()

    dividers = rows_of(view, RowKind.DIVIDER)
    assert len(dividers) == 1  # only the latest
    latest = chat.store.latest_compaction(chat.chat_id)
    assert latest is not None and latest.first_kept_seq == 6
    rows = view.chat_model.rows()
    at = rows.index(dividers[0])
    after = rows[at + 1].message
    assert after is not None and after.seq == latest.first_kept_seq
    # Every message stays in the scrollback above the line.
    assert len(rows_of(view, RowKind.MESSAGE)) == 8

    divider = view.widget_at(RowKind.DIVIDER)
    assert isinstance(divider, SummaryDivider)
    assert divider.button.text().endswith("Earlier messages are summarised for Small mock")
    assert not divider.summary.isVisible()
    qtbot.mouseClick(divider.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(divider.summary.isVisible)
    assert divider.summary.text() == latest.summary
    assert "Marta coordinates" in divider.summary.text()  # folded by the second fold only
    flags = divider.summary.textInteractionFlags()
    assert flags & Qt.TextInteractionFlag.TextSelectableByMouse
    qtbot.mouseClick(divider.copy_button, Qt.MouseButton.LeftButton)
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == latest.summary

    divider.button.setFocus()
    qtbot.keyClick(divider.button, Qt.Key.Key_Return)
    assert not divider.summary.isVisible()
    qtbot.keyClick(divider.button, Qt.Key.Key_Space)
    assert divider.summary.isVisible()


# --- long chats -------------------------------------------------------------------------------


def fill(store: ChatStore, chat_id: str, n: int) -> None:
    for i in range(n):
        store.append_message(chat_id, "user" if i % 2 == 0 else "assistant", f"message {i}")


def test_a_long_chat_opens_on_its_newest_page_and_reads_older_ones_on_scroll(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    fill(chat.store, chat.chat_id, 600)
    view = make_view(qtbot, chat)

    loaded = [r.message.seq for r in rows_of(view, RowKind.MESSAGE) if r.message]
    assert loaded == list(range(600 - PAGE, 600))
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and view.at_bottom())
    assert view.chat_model.messages[0].seq == 600 - PAGE  # one page filled the view

    # Scroll to the top: the page before is read, and the message that was on top stays put.
    top_seq = loaded[0]
    bar.setValue(0)
    qtbot.waitUntil(lambda: view.chat_model.messages[0].seq < top_seq, timeout=3000)
    i = view.chat_model.find(RowKind.MESSAGE, top_seq)
    rect = view.visualRect(view.chat_model.index(i, 0))
    assert 0 <= rect.top() <= view.viewport().height()
    assert not view.at_bottom()


def test_the_model_reads_pages_not_the_whole_log(chat_factory: Callable[..., Chat]) -> None:
    chat = chat_factory()
    fill(chat.store, chat.chat_id, 120)
    model = ChatModel(chat.store, page=50)
    model.set_chat(chat.chat_id)
    assert model.rowCount() == 50
    assert model.can_fetch_older()
    assert model.fetch_older() == 50
    assert model.fetch_older() == 20
    assert not model.can_fetch_older()
    seqs = [r.message.seq for r in model.rows() if r.message]
    assert seqs == list(range(120))
    assert model.data(model.index(0, 0), ROW_ROLE).message.text == "message 0"


def test_right_click_offers_copy_for_the_message_and_each_code_block(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", MARKDOWN)
    view = make_view(qtbot, chat)
    menu = view.menu_for(0)
    titles = [a.text() for a in menu.actions()]
    assert titles[0] == "Copy message"
    assert titles[1].startswith("Copy code block 1")
    menu.actions()[1].trigger()
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == 'print("hello")'


def test_the_streaming_row_grows_as_text_arrives(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    long_answer = "A sentence that wraps across the view as it keeps going. " * 40
    chat = chat_factory([Reply(long_answer, chunk_delay=0.01, chunk_size=20)])
    bridge = ConversationBridge(chat.conversation)
    view = make_view(qtbot, chat, bridge)

    def streaming_height() -> int:
        i = view.chat_model.find(RowKind.STREAMING)
        return view.visualRect(view.chat_model.index(i, 0)).height() if i >= 0 else 0

    bridge.send("Talk at length")
    qtbot.waitUntil(lambda: 0 < len(bridge.partial_text) < 200, timeout=5000)
    qtbot.waitUntil(lambda: streaming_height() > 0, timeout=2000)
    early = streaming_height()
    qtbot.waitUntil(lambda: len(bridge.partial_text) > 1500, timeout=8000)
    qtbot.waitUntil(lambda: streaming_height() > early + 40, timeout=2000)
    row = rows_of(view, RowKind.STREAMING)[0]
    assert shown_text(view, row).startswith("Small mock")  # who is answering
    assert view.at_bottom()  # it follows the answer down
    with qtbot.waitSignal(bridge.done, timeout=10000):
        pass


def test_clicking_copy_on_a_painted_code_block_copies_it(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", MARKDOWN)
    view = make_view(qtbot, chat)
    qtbot.waitUntil(lambda: view.visualRect(view.chat_model.index(0, 0)).height() > 0)
    index = view.chat_model.index(0, 0)
    rect = view.visualRect(index)
    # Find where "Copy" is painted, the way a person finds it: by looking along the row.
    spot = next(
        (
            QPoint(x, y)
            for y in range(rect.top(), rect.bottom(), 3)
            for x in range(rect.right(), rect.left(), -3)
            if view.delegate.anchor_at(index, QPointF(x, y), rect) == "conch-copy:0"
        ),
        None,
    )
    assert spot is not None
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None
    clipboard.setText("")
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=spot)
    assert clipboard.text() == 'print("hello")'


def test_a_chat_opens_far_enough_back_to_show_a_nearby_divider(
    chat_factory: Callable[..., Chat],
) -> None:
    chat = chat_factory()
    fill(chat.store, chat.chat_id, 200)
    chat.store.add_compaction(chat.chat_id, 120, "Earlier: the budget.", "Small mock")
    model = ChatModel(chat.store, page=40)
    model.set_chat(chat.chat_id)
    assert model.find(RowKind.DIVIDER) >= 0
    assert model.messages[0].seq == 119  # one message of context above the line
    # A fold far back is not worth reading hundreds of messages for; scrolling finds it.
    chat.store.add_compaction(chat.chat_id, 20, "Older.", "Small mock")
    model.set_chat(chat.chat_id)
    assert model.find(RowKind.DIVIDER) == -1 and model.messages[0].seq == 160
