"""An answer cut short by Conch closing says so, not "You stopped the answer".

The person sends a message; the answer's first words arrive and the model is still writing when
the window is closed (the close button: ``closeEvent`` and then ``aclose``, as ui/start.py does
for every way the window ends). The words that came are kept, with the sentence that Conch was
closed before the answer finished; after a restart the chat shows that sentence (read back from
the chat log) under the answer, with Continue, the next step a stopped answer has. A tool call
still running then is kept the same way: its row says it was cut off when Conch closed, not
"Stopped".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.conversation import CLOSED_FIRST
from app.services import AppServices, build_services
from app.tool_calls import tool_call_book
from engines.base import (
    CLOSED_TEXT,
    Done,
    Event,
    ProblemKind,
    TextDelta,
    ToolCall,
    ToolCallData,
    ToolStarted,
    TurnInput,
)
from tests.ui.test_stop_signals import HangingEngine
from tests.ui.windows import close_files, close_window, open_window
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.chat.tool_rows import ToolRows

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ASKED = "Tell me about larch"


class WritingEngine(HangingEngine):
    """Writes the first words of an answer, then waits for more that do not come while the
    window is open; it can go on with an answer cut short (Continue)."""

    continues_answers = True


class CallingEngine(WritingEngine):
    """Writes the first words, then runs a tool call that does not end while the window is
    open."""

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        args = {"path": "notes.txt"}
        yield TextDelta(text="Reading your notes.")
        yield ToolCall(call=ToolCallData(id="c1", name="read_text_file", arguments=args))
        yield ToolStarted(call_id="c1", tool="read_text_file", server="Files", arguments=args)
        self.waiting.set()
        await asyncio.Event().wait()
        yield Done()


def services_with(data_dir: Path, engine: WritingEngine) -> AppServices:
    return build_services(data_dir, mock=True, seed_demo_chat=False, engines=lambda *_: engine)


def test_an_answer_cut_by_closing_the_window_says_so_after_a_restart(
    qtbot: QtBot, data_dir: Path
) -> None:
    engine = WritingEngine()
    services = services_with(data_dir, engine)
    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, ASKED)
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(engine.waiting.is_set, timeout=HANG_MS)
    close_window(qtbot, win, services)

    (answer,) = [m for m in services.store.messages(chat_id) if m.role == "assistant"]
    assert answer.text == "The first words" and answer.partial
    assert answer.problem is not None
    assert answer.problem.kind is ProblemKind.CANCELLED  # it goes on as a stopped answer does
    assert answer.problem.message == CLOSED_TEXT
    close_files(services)

    # Conch starts again: the chat says why its answer ended, and offers to go on with it.
    services = services_with(data_dir, WritingEngine())
    win = open_window(qtbot, services)
    try:
        assert win.open_chat(chat_id)
        view = win.chat_view
        view.flush()
        i = view.continuable_row()
        assert i >= 0
        row = view.chat_model.row(i)
        assert row.kind is RowKind.MESSAGE and row.message is not None
        assert row.message.text == "The first words"
        shown = view.delegate.document(row, view.delegate.content_width()).toPlainText()
        assert shown.rstrip().endswith(f"{CLOSED_TEXT} · Continue")
        assert "Stopped" not in shown
        assert view.chat_model.spoken_text(row).endswith(f"({CLOSED_TEXT})")
    finally:
        close_window(qtbot, win, services)
        close_files(services)


def test_a_tool_call_cut_by_closing_the_window_says_so_after_a_restart(
    qtbot: QtBot, data_dir: Path
) -> None:
    engine = CallingEngine()
    services = services_with(data_dir, engine)
    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "What do my notes say?")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(engine.waiting.is_set, timeout=HANG_MS)
    close_window(qtbot, win, services)

    saved = services.store.messages(chat_id)
    (tool,) = [m for m in saved if m.role == "tool"]
    assert tool.text == CLOSED_FIRST  # not "The person stopped this call before it finished."
    book = tool_call_book(services.store)
    assert book is not None
    assert book.between(chat_id, tool.seq, tool.seq)[tool.seq].status == "closed"
    close_files(services)

    # Conch starts again: the call's row says Conch closed on it (a button: plain text).
    services = services_with(data_dir, WritingEngine())
    win = open_window(qtbot, services)
    try:
        assert win.open_chat(chat_id)
        view = win.chat_view
        view.flush()
        (rows,) = [w for w in view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
        (line,) = rows.lines.values()
        words = line.button.text()
        assert words.startswith("▸ read_text_file (Files)  ")
        assert words.endswith(" · Cut off when Conch closed")
        assert "Stopped" not in words
    finally:
        close_window(qtbot, win, services)
        close_files(services)
