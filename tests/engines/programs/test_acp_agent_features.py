"""What an ACP agent shows beyond its answer: its tool calls and plan as tool rows, its slash
commands, and Conch's MCP servers handed to its sessions. Against the real fake agent process
(tests/fakes/acp_agent.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from engines.base import Approval, Done, PermissionAsk, ToolCall, ToolResult, ToolStarted
from engines.programs.acp import DECLINED, NO_END, PLAN_TOOL, AcpEngine
from engines.programs.mcp import SharedServer, shared_servers
from engines.programs.slash import SlashCommand
from engines.tools.config import HttpServer, SecretRef, StdioServer
from tests.engines.programs.test_acp import Chat, make_engine, received, run_turn


@pytest.fixture
def chat() -> Chat:
    return Chat()


def results(events: Sequence[object]) -> dict[str, ToolResult]:
    return {e.call_id: e for e in events if isinstance(e, ToolResult)}


async def test_tool_calls_become_rows_with_their_status_and_output(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "Make the file [[tools]]")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.call.name for c in calls] == [
        "Run touch ran.txt",
        "Read missing.txt",
        "Edit notes.txt",
    ]
    assert calls[0].call.arguments == {"command": "touch ran.txt"}
    started = [e.call_id for e in events if isinstance(e, ToolStarted)]
    assert started == ["t1", "t2", "t3"]
    # Each call's row appears before it runs, and runs before it ends.
    order = [(type(e).__name__, getattr(e, "call_id", "")) for e in events]
    assert order.index(("ToolStarted", "t1")) < order.index(("ToolResult", "t1"))
    ended = results(events)
    assert ended["t1"].status == "done"
    assert ended["t1"].text == "created ran.txt"
    assert ended["t1"].server == "Fake agent"
    assert ended["t1"].untrusted  # what a program's tool gave back came from outside
    assert ended["t2"].status == "failed"
    assert ended["t2"].text == "No such file: missing.txt"
    assert "+milk" in ended["t3"].text and "notes.txt" in ended["t3"].text


async def test_a_plan_is_one_row_with_its_last_state(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "Plan it [[plan]]")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    plans = [e for e in events if isinstance(e, ToolResult) and e.tool == PLAN_TOOL]
    assert len(plans) == 1
    assert plans[0].text.splitlines() == [
        "[x] Read the notes",
        "[>] Write the summary",
        "[ ] Check the numbers",
    ]
    assert sum(1 for e in events if isinstance(e, ToolCall) and e.call.name == PLAN_TOOL) == 1


async def test_a_call_the_agent_never_ends_is_not_left_running(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "Go [[unfinished]]")
    finally:
        await engine.aclose()
    ended = results(events)
    assert ended["call-9"].status == "stopped"
    assert ended["call-9"].text == NO_END
    assert isinstance(events[-1], Done)


async def test_a_declined_call_is_a_row_that_says_so(tmp_path: Path, chat: Chat) -> None:
    async def deny(ask: PermissionAsk) -> Approval:
        return Approval.DENY

    engine = make_engine(tmp_path, chat, approve=deny)
    try:
        events = await run_turn(engine, chat, "Clean up [[permission]]")
    finally:
        await engine.aclose()
    ended = results(events)
    assert ended["call-1"].status == "denied"
    assert ended["call-1"].text == DECLINED
    assert not ended["call-1"].untrusted  # Conch's own words, nothing from outside
    assert len([e for e in events if isinstance(e, ToolResult)]) == 1  # the failed update too


async def test_an_allowed_call_ends_with_what_it_gave_back(tmp_path: Path, chat: Chat) -> None:
    async def once(ask: PermissionAsk) -> Approval:
        return Approval.ONCE

    engine = make_engine(tmp_path, chat, approve=once)
    try:
        events = await run_turn(engine, chat, "Clean up [[permission]]")
    finally:
        await engine.aclose()
    ended = results(events)
    assert ended["call-1"].status == "done"
    assert ended["call-1"].text == "removed"


async def test_the_agents_slash_commands_are_listed_and_kept(tmp_path: Path, chat: Chat) -> None:
    state = tmp_path / "sessions"
    engine = make_engine(tmp_path, chat, chat_id="c1", state_dir=state)
    assert not engine.slash_commands  # nothing known before the agent said
    try:
        await run_turn(engine, chat, "Hello")
        listed: tuple[SlashCommand, ...] = engine.slash_commands
    finally:
        await engine.aclose()
    assert [c.text for c in listed] == ["/init", "/review"]
    assert listed == (
        SlashCommand("init", "Write an AGENTS.md for this folder"),
        SlashCommand("review", "Review the changes in this folder", "what to review"),
    )
    # After a restart they are offered before the first turn.
    again = make_engine(tmp_path, chat, chat_id="c1", state_dir=state)
    assert again.slash_commands == listed


def _servers() -> list[SharedServer]:
    return [
        SharedServer("files", "Files", "npx", ("-y", "files-mcp"), {"ROOT": "/tmp/x"}),
        SharedServer("docs", "Docs", url="https://docs.example/mcp", headers={"X-Team": "a"}),
    ]


async def test_mcp_servers_reach_a_new_session_when_allowed(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat, "--sessions", mcp_servers=lambda: (_servers(), []))
    try:
        await run_turn(engine, chat, "Hello")
    finally:
        await engine.aclose()
    [new] = [r for r in received(tmp_path) if "new" in r]
    assert new["mcp_servers"] == [
        {
            "name": "Files",
            "command": "npx",
            "args": ["-y", "files-mcp"],
            "env": [{"name": "ROOT", "value": "/tmp/x"}],
        },
        {
            "type": "http",
            "name": "Docs",
            "url": "https://docs.example/mcp",
            "headers": [{"name": "X-Team", "value": "a"}],
        },
    ]


async def test_no_mcp_servers_without_the_persons_leave(tmp_path: Path, chat: Chat) -> None:
    engine: AcpEngine = make_engine(tmp_path, chat, "--sessions")
    try:
        await run_turn(engine, chat, "Hello")
    finally:
        await engine.aclose()
    [new] = [r for r in received(tmp_path) if "new" in r]
    assert new["mcp_servers"] == []


def test_shared_servers_read_secrets_and_leave_out_what_is_missing() -> None:
    keyring = {"mcp/gh/env/GITHUB_TOKEN": "ghp_secret"}
    configs: list[StdioServer | HttpServer] = [
        StdioServer(
            id="gh",
            name="GitHub",
            command="gh-mcp",
            env={"GITHUB_TOKEN": SecretRef(secret="mcp/gh/env/GITHUB_TOKEN"), "LEVEL": "1"},
        ),
        StdioServer(id="off", name="Off", command="x", enabled=False),
        HttpServer(id="gone", name="Gone", url=SecretRef(secret="mcp/gone/url")),
    ]
    servers, left_out = shared_servers(configs, keyring.get)
    assert [s.name for s in servers] == ["GitHub"]
    assert servers[0].env == {"GITHUB_TOKEN": "ghp_secret", "LEVEL": "1"}
    assert servers[0].secret_env == {"GITHUB_TOKEN"}
    assert len(left_out) == 1 and "Gone" in left_out[0] and "Settings → Tools" in left_out[0]
