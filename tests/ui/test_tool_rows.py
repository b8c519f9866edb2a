"""A model's tool calls in the chat: the approval card asks, the call shows as a quiet line in the
answer (tool, arguments, time, shortened or not) that opens to the result's first lines, and the
lines stay in the chat log. The model is a small scripted adapter that calls ``read_text_file``
and then quotes what it read; the tool runs on a real MCP server (tests/fakes/mcp_files.py)
through the app's own ``ToolSettings`` and the engine's real tool loop."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.settings import SettingsStore
from app.store import ChatStore
from app.tool_calls import keep_tool_call
from app.tools import ChatToolHost, ToolSettings
from engines.base import (
    Approval,
    Done,
    Event,
    ModelInfo,
    TextDelta,
    ToolAsk,
    ToolCall,
    ToolCallData,
    ToolResult,
)
from engines.context.session import ApiSession
from engines.providers.base import ChatRequest
from ui.cards.approval_card import ApprovalCard
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView
from ui.chat.tool_rows import ToolRows, entries_from, line_text
from ui.theme import ThemeManager

pytestmark = [
    pytest.mark.qt_log_ignore("This plugin does not support"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
MODEL = ModelInfo(provider="reader", id="reader-1", label="Reader", context=32_768)
NOTES = "Shopping: eggs, flour, 2 lemons.\nCall Marta about the beds.\n"


@dataclass
class ReadingModel:
    """A provider whose model reads ``notes.txt`` through a tool, then answers with what it read.

    ``hold`` keeps the answer after the tool call waiting until the test sets it, so the test
    can look at the chat while the turn is still going."""

    name: str = "reader"
    label: str = "Reader"
    local: bool = True
    hold: asyncio.Event | None = None
    requests: list[ChatRequest] = field(default_factory=list)

    async def list_models(self) -> list[ModelInfo]:
        return [MODEL]

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        last = request.messages[-1]
        if last.role == "user":
            call = ToolCallData(id="call_1", name="read_text_file", arguments={"path": "notes.txt"})
            yield ToolCall(call=call)
            yield Done(stop_reason="tool_calls")
            return
        if self.hold is not None:
            await self.hold.wait()
        said = last.text.splitlines()[0] if last.text else "nothing"
        yield TextDelta(text=f"Your notes say: {said}")
        yield Done()

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


@dataclass
class Setup:
    store: ChatStore
    tools: ToolSettings
    model: ReadingModel
    bridge: ConversationBridge
    view: ChatView
    card: ApprovalCard
    chat_id: str


@pytest.fixture
def setup(qtbot: QtBot, data_dir: Path, tmp_path: Path) -> Iterator[Setup]:
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text(NOTES, "utf-8")
    settings = SettingsStore.in_dir(data_dir)
    tools = ToolSettings(settings, SessionSecrets())
    tools.add_stdio(
        "Files",
        sys.executable,
        ["-m", "tests.fakes.mcp_files", str(folder)],
        {"PYTHONPATH": str(ROOT)},
    )
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(model_key=MODEL.key)
    model = ReadingModel(hold=asyncio.Event())
    made: list[ConversationBridge] = []

    async def approve(ask: ToolAsk) -> Approval:
        return await made[0].approve_tool(ask)

    host = ChatToolHost(tools, approve, chosen=lambda: store.chat_settings(chat.id).tool_servers)
    engine = ApiSession(chat_id=chat.id, data_dir=data_dir, adapters={"reader": model}, tools=host)
    conversation = Conversation(chat.id, store=store, engine=engine, model=MODEL)
    bridge = ConversationBridge(conversation)
    made.append(bridge)
    view = ChatView(store)
    view.resize(800, 700)
    card = ApprovalCard()
    bridge.approval_changed.connect(card.show_ask)
    card.answered.connect(bridge.answer_approval)
    qtbot.addWidget(view)
    qtbot.addWidget(card)  # hidden until a request waits
    view.show()
    view.set_chat(chat.id, bridge)
    yield Setup(store, tools, model, bridge, view, card, chat.id)
    stop = asyncio.get_running_loop().create_task(bridge.aclose())
    qtbot.waitUntil(stop.done)
    stop = asyncio.get_running_loop().create_task(tools.stop())
    qtbot.waitUntil(stop.done)
    store.close()


def tool_rows(view: ChatView) -> list[ToolRows]:
    return [w for w in view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]


def shown_in_viewport(view: ChatView, widget: Any) -> bool:
    """Whether the widget is on screen inside the chat's visible area."""
    if not widget.isVisible():
        return False
    top_left = widget.mapTo(view.viewport(), QPoint(0, 0))
    return view.viewport().rect().intersects(widget.rect().translated(top_left))


def not_cut(rows: ToolRows) -> bool:
    """Each line's button and details as tall as they need, inside the row's widget."""
    for line in rows.lines.values():
        for part in (line.button, line.details):
            if part.isVisible() and part.height() < part.sizeHint().height():
                return False
        bottom = line.mapTo(rows, QPoint(0, line.height())).y()
        if bottom > rows.height():
            return False
    return True


def test_a_tool_call_is_asked_about_shown_in_the_answer_and_kept(
    qtbot: QtBot, setup: Setup
) -> None:
    s = setup
    assert s.bridge.send("What do my notes say?")
    qtbot.waitUntil(s.card.isVisible)

    # The card: the tool, its server, what it does and the arguments it would run with.
    assert s.card.label.text() == "The model asks to use read_text_file (Files)"
    assert s.card.about.text() == "Read a text file in the folder."
    assert s.card.arguments.text() == "path: notes.txt"
    assert s.card.buttons["always"].toolTip().endswith("for: read_text_file on Files")
    # Meanwhile the call shows in the answer, waiting.
    rows = tool_rows(s.view)
    assert len(rows) == 1
    line = rows[0].lines["call_1"]
    assert line.button.text().startswith("▸ read_text_file (Files)  path=")
    assert "Waiting for your OK" in line.button.text()
    assert shown_in_viewport(s.view, line)

    qtbot.mouseClick(s.card.buttons["once"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not s.card.isVisible())
    qtbot.waitUntil(lambda: tool_rows(s.view)[0].lines["call_1"].entry.status == "done")
    line = tool_rows(s.view)[0].lines["call_1"]
    words = line.button.text()
    assert words.startswith('▸ read_text_file (Files)  path="notes.txt" · ')
    assert words.endswith(" s")  # the time it took; not shortened
    assert "shortened" not in words
    assert not line.details.isVisible()
    qtbot.mouseClick(line.button, Qt.MouseButton.LeftButton)  # open it
    assert line.details.isVisible() and shown_in_viewport(s.view, line.details)
    # Nothing is squeezed or cut at the bottom (an underscore in a tool's name with it).
    qtbot.waitUntil(lambda: not_cut(tool_rows(s.view)[0]))
    assert "Shopping: eggs, flour, 2 lemons." in line.details.text()
    assert '"path": "notes.txt"' in line.details.text()

    assert s.model.hold is not None
    s.model.hold.set()
    qtbot.waitUntil(lambda: not s.bridge.busy)
    # The answer used what the tool read; the tool's text reached the model as a tool message.
    answer = [m for m in s.store.messages(s.chat_id) if m.role == "assistant"][-1]
    assert answer.text == "Your notes say: Shopping: eggs, flour, 2 lemons."
    sent = s.model.requests[-1].messages
    assert sent[-1].role == "tool" and sent[-1].text == NOTES
    # The call stays in the chat, between the question and the answer, after the turn.
    kinds = [r.kind for r in s.view.chat_model.rows()]
    assert kinds == [RowKind.MESSAGE, RowKind.TOOLS, RowKind.MESSAGE]
    kept = tool_rows(s.view)
    assert len(kept) == 1
    (entry,) = kept[0].lines.values()
    assert entry.entry.tool == "read_text_file" and entry.entry.server == "Files"
    assert entry.entry.status == "done"
    assert shown_in_viewport(s.view, entry)
    qtbot.waitUntil(lambda: not_cut(kept[0]))
    # The chat read a tool result: learning from it waits for an OK.
    chat = s.store.get_chat(s.chat_id)
    assert chat is not None and chat.untrusted

    # Opened again later, the chat shows the call as it went.
    s.view.set_chat(s.chat_id, s.bridge)
    (again,) = tool_rows(s.view)
    (again_line,) = again.lines.values()
    assert line_text(again_line.entry) == line_text(entry.entry)


def test_denying_a_call_shows_it_and_the_chat_goes_on(qtbot: QtBot, setup: Setup) -> None:
    s = setup
    assert s.model.hold is not None
    s.model.hold.set()
    assert s.bridge.send("What do my notes say?")
    qtbot.waitUntil(s.card.isVisible)
    qtbot.mouseClick(s.card.buttons["deny"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not s.bridge.busy)
    (rows,) = tool_rows(s.view)
    (line,) = rows.lines.values()
    assert "Not allowed" in line.button.text()
    # The model was told, never given the file.
    sent = s.model.requests[-1].messages[-1]
    assert sent.role == "tool" and "did not allow" in sent.text
    assert NOTES.splitlines()[0] not in sent.text
    chat = s.store.get_chat(s.chat_id)
    assert chat is not None and not chat.untrusted


def test_stop_while_the_card_waits_withdraws_the_question(qtbot: QtBot, setup: Setup) -> None:
    s = setup
    assert s.bridge.send("What do my notes say?")
    qtbot.waitUntil(s.card.isVisible)
    s.bridge.stop()
    qtbot.waitUntil(lambda: not s.bridge.busy)
    assert not s.card.isVisible()
    assert s.bridge.pending_approval is None
    assert s.model.requests and len(s.model.requests) == 1  # nothing was run or sent after


def test_a_shortened_result_says_so_on_its_line() -> None:
    result = ToolResult(
        call_id="c",
        tool="read_text_file",
        server="Files",
        arguments={"path": "big.log"},
        status="done",
        text="x" * 5_000_000,
        preview="x" * 40,
        seconds=1.25,
        shortened=True,
        sent_chars=12_000,
        total_chars=5_000_000,
    )
    (entry,) = entries_from([result])
    assert line_text(entry) == 'read_text_file (Files)  path="big.log" · 1.2 s · shortened'
    rows = ToolRows([entry])
    line = rows.lines["c"]
    line.button.click()
    assert "the model was sent 12,000 of them" in line.details.text()


def test_a_kept_tool_line_is_drawn_whole_in_the_themed_chat(
    qtbot: QtBot, theme: ThemeManager, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    store.append_message(chat.id, "user", "What do my notes say?")
    call = ToolResult(
        call_id="c",
        tool="read_text_file",
        server="Files",
        arguments={"path": "notes.txt"},
        status="done",
        text=NOTES,
        preview=NOTES.strip(),
        seconds=0.3,
    )
    keep_tool_call(store, chat.id, call)
    store.append_message(chat.id, "assistant", "Eggs, flour and lemons.")
    view = ChatView(store)
    qtbot.addWidget(view)
    view.resize(760, 500)
    view.show()
    view.set_chat(chat.id)
    (rows,) = tool_rows(view)
    (line,) = rows.lines.values()
    qtbot.waitUntil(lambda: shown_in_viewport(view, line) and not_cut(rows))
    line.button.click()
    qtbot.waitUntil(lambda: line.details.isVisible() and not_cut(rows))
    assert shown_in_viewport(view, line.details)
    store.close()
