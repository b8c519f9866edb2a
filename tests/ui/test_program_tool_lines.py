"""What an ACP agent's tool rows say, from the events the real fake agent's turn gives
(tests/fakes/acp_agent.py): a call it reports "pending" is starting unless a question is
open, and its plan's row gives no time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from engines.base import PermissionAsk, ToolCall, ToolResult, ToolStarted
from engines.programs.acp import PLAN_TOOL
from tests.engines.programs.test_acp import Chat, make_engine, run_turn
from tests.waits import HANG_MS
from ui.tool_rows import entries_from, line_text

ToolEvent = ToolCall | ToolStarted | ToolResult


def turn_events(qtbot: QtBot, tmp_path: Path, text: str) -> list[ToolEvent]:
    """The tool events of one turn of the fake agent, run on the window's event loop."""

    async def go() -> list[Any]:
        chat = Chat()
        engine = make_engine(tmp_path, chat)
        try:
            return await run_turn(engine, chat, text)
        finally:
            await engine.aclose()

    task = asyncio.get_running_loop().create_task(go())
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    return [e for e in task.result() if isinstance(e, ToolCall | ToolStarted | ToolResult)]


def test_a_pending_call_is_starting_unless_a_question_is_open(qtbot: QtBot, tmp_path: Path) -> None:
    events = turn_events(qtbot, tmp_path, "Make the file [[tools]]")
    # As the row stood when the agent had reported "touch ran.txt" pending, before it ran.
    reported = events[: next(i for i, e in enumerate(events) if isinstance(e, ToolStarted))]
    [entry] = entries_from(reported)
    assert line_text(entry) == 'Run touch ran.txt  command="touch ran.txt" · Starting…'
    ask = PermissionAsk("Fake agent", "Run touch ran.txt", "execute")
    [asked] = entries_from(reported, ask)
    assert line_text(asked).endswith(" · Waiting for your OK")


def test_a_plan_row_gives_no_time(qtbot: QtBot, tmp_path: Path) -> None:
    events = turn_events(qtbot, tmp_path, "Plan it [[plan]]")
    [plan] = [e for e in entries_from(events) if e.tool == PLAN_TOOL]
    assert line_text(plan) == "Plan (Fake agent)"  # not "· 0.0 s"
