""" "Always for this tool" binds to the server: after a chat's tools move from server A to a
server B with a tool of the same name, or after a server's definition changes, the person is
asked again. Through real MCP servers (tests/fakes/mcp_server.py) and the real tool loop."""

from __future__ import annotations

from pathlib import Path

from bench._scripted import Answer, ScriptedAdapter
from engines.base import Approval, Done, Event, ModelInfo, ToolAsk, ToolResult, TurnInput
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.tools import approvals
from engines.tools.catalogue import ServerTool
from engines.tools.config import server_identity
from engines.tools.servers import ToolServers
from tests.engines.tools.test_loop_servers import calls
from tests.engines.tools.test_servers import fake
from tests.waits import HANG_SECONDS

CHAT = "chat-approvals"
MODEL = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=128_000)


class Person:
    """Answers "Always for this tool" and remembers every question it was asked."""

    def __init__(self) -> None:
        self.asked: list[ToolAsk] = []

    async def __call__(self, ask: ToolAsk) -> Approval:
        self.asked.append(ask)
        return Approval.ALWAYS


async def echo_turn(session: ApiSession, adapter: ScriptedAdapter, seq: int) -> list[Event]:
    adapter.steps.extend([calls(("echo", {"text": f"turn {seq}"})), Answer(text="Done.")])
    turn = TurnInput(chat_id=CHAT, seq=seq, text="Echo it", model=MODEL)
    return [e async for e in session.turn(turn)]


def ran(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, ToolResult) and e.status == "done"]


async def test_an_always_on_one_server_does_not_let_another_servers_tool_run(
    tmp_path: Path,
) -> None:
    a = fake(tmp_path / "a", id="a", name="Files A")
    b = fake(tmp_path / "b", id="b", name="Files B")
    servers = ToolServers([a, b], start_timeout=HANG_SECONDS)
    person = Person()
    host = ToolHost(servers, person, allowed={"a"})
    adapter = ScriptedAdapter()
    session = ApiSession(chat_id=CHAT, data_dir=None, adapters={adapter.name: adapter}, tools=host)
    try:
        first = await echo_turn(session, adapter, 0)
        again = await echo_turn(session, adapter, 2)
        assert ran(first) == ["echo: turn 0"] and ran(again) == ["echo: turn 2"]
        assert [ask.server for ask in person.asked] == ["Files A"]  # A's "always" held on A

        host.allowed = {"b"}  # the chat's tools switched to server B, whose tool has that name
        moved = await echo_turn(session, adapter, 4)
        assert ran(moved) == ["echo: turn 4"]
        assert [ask.server for ask in person.asked] == ["Files A", "Files B"]

        # B's definition changes (another folder for it to serve, say): asked again.
        changed = fake(tmp_path / "b-elsewhere", id="b", name="Files B")
        await servers.configure([a, changed])
        later = await echo_turn(session, adapter, 6)
        assert ran(later) == ["echo: turn 6"] and isinstance(later[-1], Done)
        assert [ask.server for ask in person.asked] == ["Files A", "Files B", "Files B"]
    finally:
        await servers.stop()


def test_a_server_keeps_its_identity_through_a_rename_but_not_a_new_command(
    tmp_path: Path,
) -> None:
    server = fake(tmp_path / "a")
    assert server_identity(server.model_copy(update={"name": "Renamed", "enabled": False})) == (
        server_identity(server)
    )
    assert server_identity(server.model_copy(update={"args": ("-m", "other")})) != (
        server_identity(server)
    )
    assert server_identity(server.model_copy(update={"env": {"ROOT": "/"}})) != (
        server_identity(server)
    )


def test_an_approval_kept_by_the_tools_name_alone_asks_again(tmp_path: Path) -> None:
    servers = ToolServers([fake(tmp_path / "a", id="a")])
    tool = ServerTool(server="a", name="write_file", exposed="write_file")
    assert not approvals.allowed({"write_file"}, servers, tool)  # the old, name-only key
    assert approvals.allowed({approvals.key_for(servers, tool)}, servers, tool)
    assert approvals.allowed({approvals.by_name("write_file")}, servers, tool)  # --allow-tools
