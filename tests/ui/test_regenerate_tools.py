"""Regenerate an answer that used a tool: the earlier try's tool lines go with its answer.

Real chat view, bridge, conversation and ApiSession; the model is a ScriptedAdapter that calls
``read_file`` before each answer, the tool runs in the in-process runner of the loop tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.services import history_messages
from app.store import ChatStore
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Approval, ModelInfo, ToolAsk, ToolCallData
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from tests.engines.tools.test_loop import Runner
from tests.waits import HANG_MS
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView
from ui.chat.tool_rows import ToolRows

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

MODEL = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=128_000)
FILES = {"monday.txt": "Eggs and flour.", "tuesday.txt": "Lemons."}


def read(args: dict[str, Any]) -> str:
    return FILES[str(args["path"])]


def reads(path: str, call_id: str) -> Answer:
    return Answer(
        text="", tool_calls=(ToolCallData(id=call_id, name="read_file", arguments={"path": path}),)
    )


@dataclass
class Setup:
    store: ChatStore
    adapter: ScriptedAdapter
    bridge: ConversationBridge
    view: ChatView


@pytest.fixture
def setup(qtbot: QtBot, data_dir: Path) -> Iterator[Setup]:
    async def allow(_ask: ToolAsk) -> Approval:
        return Approval.ONCE

    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(model_key=MODEL.key)
    adapter = ScriptedAdapter(
        [
            reads("monday.txt", "c1"),
            Answer(text="Eggs and flour."),
            reads("tuesday.txt", "c2"),
            Answer(text="Lemons."),
            Answer(text="Nothing to read this time."),
        ]
    )
    engine = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        tools=ToolHost(Runner({"read_file": read}), allow),
        history=lambda: history_messages(store.messages(chat.id)),
    )
    bridge = ConversationBridge(Conversation(chat.id, store=store, engine=engine, model=MODEL))
    view = ChatView(store)
    qtbot.addWidget(view)
    view.resize(800, 700)
    view.show()
    view.set_chat(chat.id, bridge)
    yield Setup(store, adapter, bridge, view)
    task = asyncio.get_running_loop().create_task(bridge.aclose())
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    store.close()


def turn(qtbot: QtBot, s: Setup, start: Any) -> None:
    with qtbot.waitSignal(s.bridge.busy_changed, timeout=HANG_MS, check_params_cb=lambda b: not b):
        assert start()


def tool_lines(view: ChatView) -> list[str]:
    """The tool lines on screen, each as its button reads."""
    rows = [w for w in view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
    return [line.button.text() for r in rows for line in r.lines.values() if r.isVisible()]


def answers(view: ChatView) -> list[str]:
    return [
        r.message.text
        for r in view.chat_model.rows()
        if r.kind is RowKind.MESSAGE and r.message is not None and r.message.role == "assistant"
    ]


def last_answer_row(view: ChatView) -> int:
    return max(i for i, r in enumerate(view.chat_model.rows()) if r.kind is RowKind.MESSAGE)


def test_a_regenerated_answer_shows_only_its_own_tool_lines(qtbot: QtBot, setup: Setup) -> None:
    s = setup
    turn(qtbot, s, lambda: s.bridge.send("What do I buy?"))
    assert answers(s.view) == ["Eggs and flour."]
    (line,) = tool_lines(s.view)
    assert "monday.txt" in line

    turn(qtbot, s, lambda: s.view.act(last_answer_row(s.view), "regenerate"))
    assert answers(s.view) == ["Lemons."]
    (line,) = tool_lines(s.view)  # the earlier try's line went with its answer
    assert "tuesday.txt" in line
    # The new try was asked without the earlier try's call or what it read.
    retry = s.adapter.requests[2]
    assert [m.role for m in retry.messages] == ["user"]

    # Flipping back to the first version brings its own line back, and only it.
    assert s.view.step_version(last_answer_row(s.view), -1)
    assert answers(s.view) == ["Eggs and flour."]
    (line,) = tool_lines(s.view)
    assert "monday.txt" in line

    # A try that uses no tool shows no tool line at all.
    turn(qtbot, s, lambda: s.view.act(last_answer_row(s.view), "regenerate"))
    assert answers(s.view) == ["Nothing to read this time."]
    assert tool_lines(s.view) == []
    # The next question carries the shown answer only, none of the earlier tries' results.
    turn(qtbot, s, lambda: s.bridge.send("Thanks"))
    roles = [m.role for m in s.adapter.requests[-1].messages]
    assert roles == ["user", "assistant", "user"]


def test_a_deleted_answer_takes_its_tool_lines_and_undo_brings_them_back(
    qtbot: QtBot, setup: Setup
) -> None:
    s = setup
    turn(qtbot, s, lambda: s.bridge.send("What do I buy?"))
    (line,) = tool_lines(s.view)
    assert "monday.txt" in line

    assert s.view.act(last_answer_row(s.view), "delete")
    assert answers(s.view) == []
    assert tool_lines(s.view) == []

    # Undo brings the answer back with its own tool line.
    qtbot.mouseClick(s.view.undo_bar.button, Qt.MouseButton.LeftButton)
    assert answers(s.view) == ["Eggs and flour."]
    (line,) = tool_lines(s.view)
    assert "monday.txt" in line

    # Deleted for good, the next question is asked without its call or what it read.
    assert s.view.act(last_answer_row(s.view), "delete")
    turn(qtbot, s, lambda: s.bridge.send("And on Tuesday?"))
    (asked,) = s.adapter.requests[2].messages  # the two questions, as one message
    assert asked.role == "user" and "Eggs" not in asked.text
