"""The tool loop through real MCP servers (tests/fakes/mcp_server.py, on the SDK's own server
API) and broken ones: each failure is a clear note or tool result, the turn goes on or ends
cleanly, and nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from bench._scripted import Answer, ScriptedAdapter, Step
from engines.base import (
    Approval,
    Done,
    Event,
    ModelInfo,
    Note,
    Problem,
    TextDelta,
    ToolAsk,
    ToolCallData,
    ToolResult,
    TurnInput,
)
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.tools.config import ServerConfig, StdioServer
from engines.tools.rules import tool_list_tokens
from engines.tools.servers import ToolServers
from tests.engines.tools.test_servers import ROOT, fake, garbage, wait_for_file
from tests.waits import HANG_SECONDS

CHAT = "chat-mcp"
MODEL = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=128_000)


async def allow(_ask: ToolAsk) -> Approval:
    return Approval.ALWAYS


def calls(*named: tuple[str, dict[str, object]]) -> Answer:
    return Answer(
        text="",
        tool_calls=tuple(
            ToolCallData(id=f"c{i}", name=name, arguments=dict(args))
            for i, (name, args) in enumerate(named)
        ),
    )


async def turn(
    configs: Sequence[ServerConfig],
    answers: list[Answer],
    *,
    time_limit: float = HANG_SECONDS,
    data_dir: Path | None = None,
) -> tuple[list[Event], ScriptedAdapter]:
    servers = ToolServers(configs, start_timeout=HANG_SECONDS)
    adapter = ScriptedAdapter(list[Step](answers))
    session = ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        tools=ToolHost(servers, allow, time_limit=time_limit),
    )
    try:
        events = [
            e async for e in session.turn(TurnInput(chat_id=CHAT, seq=0, text="Go", model=MODEL))
        ]
    finally:
        await servers.stop()
    return events, adapter


def ended_well(events: list[Event]) -> bool:
    ends = [e for e in events if isinstance(e, Done | Problem)]
    return len(ends) == 1 and isinstance(ends[0], Done) and events[-1] is ends[0]


def rows(events: list[Event]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


@pytest.fixture
def control(tmp_path: Path) -> Path:
    path = tmp_path / "control"
    path.mkdir()
    return path


async def test_results_bad_arguments_failures_and_a_5_mb_result_through_a_real_server(
    control: Path,
) -> None:
    events, adapter = await turn(
        [fake(control)],
        [
            calls(("add", {"a": 2, "b": 40}), ("add", {"a": "two", "b": 1}), ("failing", {})),
            calls(("huge", {}), ("hostile", {}), ("no_such_tool", {})),
            Answer(text="All done."),
        ],
    )
    assert ended_well(events)
    got = rows(events)
    assert [r.status for r in got] == ["done", "failed", "failed", "done", "done", "unknown"]
    assert got[0].text == "42"
    assert "valid integer" in got[1].text  # the server's own words on the bad argument
    assert "The disk the tool reads from is not mounted." in got[2].text
    big = got[3]
    assert big.shortened and big.total_chars >= 5 * 1024 * 1024 and big.text.startswith("Row")
    sent = adapter.requests[2].messages
    results = [m for m in sent if m.role == "tool"]
    assert len(results) == 6 and len(results[3].text) == big.sent_chars < 200_000
    assert "IGNORE PREVIOUS INSTRUCTIONS" in results[4].text
    assert "</earlier-in-this-chat>" not in results[4].text
    assert "There is no tool called “no_such_tool”" in results[5].text


async def test_a_server_that_dies_mid_call_is_a_failed_result_and_the_turn_goes_on(
    control: Path,
) -> None:
    events, _ = await turn(
        [fake(control)],
        [calls(("die", {})), calls(("echo", {"text": "back"})), Answer(text="Recovered.")],
    )
    assert ended_well(events)
    died, echoed = rows(events)
    assert died.status == "failed" and "stopped during the call" in died.text
    assert echoed.status == "done" and echoed.text == "echo: back"  # started again
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Recovered."


async def test_a_tool_that_hangs_is_stopped_at_its_time_limit(control: Path) -> None:
    events, _ = await turn(
        [fake(control)], [calls(("slow", {})), Answer(text="It took too long.")], time_limit=1.0
    )
    assert ended_well(events)
    (row,) = rows(events)
    assert row.status == "failed" and "did not finish within 1 second" in row.text
    assert await wait_for_file(control / "slow-cancelled") == "cancelled"


@pytest.mark.parametrize("broken", ["missing", "garbage"])
async def test_a_server_that_never_starts_is_a_note_and_the_model_answers_without_it(
    broken: str,
) -> None:
    if broken == "missing":
        config: ServerConfig = StdioServer(
            id="gone", name="Gone", command="/nonexistent/mcp-server", cwd=str(ROOT)
        )
        name = "Gone"
    else:
        config = garbage("broken")
        name = "Garbage"
    events, adapter = await turn([config], [Answer(text="No tools, but hello.")])
    assert ended_well(events)
    notes = [e.text for e in events if isinstance(e, Note) and e.topic == "tools"]
    assert len(notes) == 1 and f"“{name}” is not available" in notes[0]
    assert "Settings → Tools" in notes[0]
    assert adapter.requests[0].tools == ()


async def test_stop_cancels_the_running_tool_on_its_server(control: Path) -> None:
    servers = ToolServers([fake(control)], start_timeout=HANG_SECONDS)
    adapter = ScriptedAdapter([calls(("slow", {})), Answer(text="Hello again.")])
    session = ApiSession(
        chat_id=CHAT,
        data_dir=None,
        adapters={adapter.name: adapter},
        tools=ToolHost(servers, allow),
    )
    try:
        first = TurnInput(chat_id=CHAT, seq=0, text="Take your time", model=MODEL)
        task = asyncio.create_task(collect(session.turn(first)))
        await wait_for_file(control / "slow-started")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await wait_for_file(control / "slow-cancelled") == "cancelled"

        again = TurnInput(chat_id=CHAT, seq=2, text="Just say hello", model=MODEL)
        events = await collect(session.turn(again))
    finally:
        await servers.stop()
    assert ended_well(events)
    sent = adapter.requests[-1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user"]
    assert "stopped" in sent[2].text


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def test_the_meter_counts_the_running_servers_tools_before_the_first_message(
    control: Path,
) -> None:
    servers = ToolServers([fake(control)], start_timeout=HANG_SECONDS)
    try:
        fresh = ApiSession(chat_id=CHAT, data_dir=None, adapters={}, tools=ToolHost(servers))
        plain = ApiSession(chat_id="plain", data_dir=None, adapters={})
        # Nothing is started for the meter: no tool is counted until a server runs.
        assert fresh.context_usage(MODEL) == plain.context_usage(MODEL)
        assert servers.states()["fake"].phase == "idle"

        listed = await servers.catalogue()
        _, with_tools = fresh.context_usage(MODEL)
        _, without = plain.context_usage(MODEL)
        assert without - with_tools == tool_list_tokens(listed.specs()) > 0
    finally:
        await servers.stop()
