"""MCP servers at run time, against a real MCP server (tests/fakes/mcp_server.py, written with
the SDK's own server API) over stdio and Streamable HTTP, and against broken ones."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.tools.config import HttpServer, SecretRef, StdioServer
from engines.tools.servers import ServerState, ToolServer, ToolServers
from tests.waits import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[3]
EXPECTED_TOOLS = {
    "echo",
    "add",
    "whoami",
    "huge",
    "slow",
    "failing",
    "hostile",
    "spawn_child",
    "die",
}


def fake(control: Path, **changes: object) -> StdioServer:
    server = StdioServer(
        id="fake",
        name="Fake",
        command=sys.executable,
        args=("-m", "tests.fakes.mcp_server", "--control", str(control)),
        cwd=str(ROOT),
    )
    return server.model_copy(update=changes)


def garbage(mode: str) -> StdioServer:
    return StdioServer(
        id="garbage",
        name="Garbage",
        command=sys.executable,
        args=("-m", "tests.fakes.mcp_garbage", mode),
        cwd=str(ROOT),
    )


def starts(control: Path) -> int:
    path = control / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def wait_for_file(path: Path) -> str:
    """The file's text once it exists (the fake writes it when something happened)."""
    deadline = time.monotonic() + HANG_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)
    return path.read_text()


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + HANG_SECONDS
    # A process ending is no event this process can await: look until it is gone.
    while alive(pid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    return not alive(pid)


@pytest.fixture
def control(tmp_path: Path) -> Path:
    path = tmp_path / "control"
    path.mkdir()
    return path


# --- stdio --------------------------------------------------------------------------------------


async def test_a_server_starts_only_when_first_needed_and_lists_its_tools(control: Path) -> None:
    seen: list[ServerState] = []
    server = ToolServer(
        fake(control), on_state=lambda _id, s: seen.append(s), start_timeout=HANG_SECONDS
    )
    try:
        assert server.state.phase == "idle"
        assert server.state.text == "Starts when a chat needs it"
        assert starts(control) == 0

        tools = await server.tools()

        assert {t.name for t in tools} == EXPECTED_TOOLS
        echo = next(t for t in tools if t.name == "echo")
        assert echo.description == "Say the text back."
        assert echo.parameters["properties"]["text"]["type"] == "string"
        assert [s.phase for s in seen] == ["starting", "ready"]
        assert server.state.text == f"Ready, {len(EXPECTED_TOOLS)} tools"
        await server.tools()
        assert starts(control) == 1  # listing again does not start it again
    finally:
        await server.stop()


async def test_each_kind_of_result_comes_back_as_text_or_an_error_in_words(
    control: Path,
) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        small = await server.call("echo", {"text": "hello"})
        assert (small.text, small.error) == ("echo: hello", False)

        assert (await server.call("add", {"a": 2, "b": 40})).text == "42"

        failing = await server.call("failing")
        assert failing.error
        assert "The disk the tool reads from is not mounted." in failing.text

        huge = await server.call("huge")
        assert not huge.error
        assert len(huge.text) >= 5 * 1024 * 1024
        assert huge.text.startswith("Row 0000000:")

        hostile = await server.call("hostile")
        assert not hostile.error
        assert "IGNORE PREVIOUS INSTRUCTIONS" in hostile.text  # the rules disarm it, not this layer

        bad_arguments = await server.call("add", {"a": "two"})
        assert bad_arguments.error
        assert server.state.phase == "ready"  # a tool's failure is not the server's
    finally:
        await server.stop()


async def test_only_the_servers_own_environment_reaches_it_with_its_secret(
    control: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-conch-must-not-share-this")
    config = fake(control, env={"FAKE_TOKEN": SecretRef(secret="mcp/fake/env/FAKE_TOKEN")})
    keyring = {"mcp/fake/env/FAKE_TOKEN": "token-from-the-keyring"}
    server = ToolServer(config, keyring.get, start_timeout=HANG_SECONDS)
    try:
        seen = json.loads((await server.call("whoami")).text)
        assert seen["token"] == "token-from-the-keyring"
        assert "OPENAI_API_KEY" not in seen["env"]
    finally:
        await server.stop()


async def test_a_secret_missing_from_the_keyring_fails_in_words(control: Path) -> None:
    config = fake(control, env={"FAKE_TOKEN": SecretRef(secret="mcp/fake/env/FAKE_TOKEN")})
    server = ToolServer(config, lambda _key: None, start_timeout=HANG_SECONDS)
    assert await server.tools() == ()
    assert server.state.phase == "failed"
    assert "FAKE_TOKEN is not in the keyring" in server.state.text
    assert starts(control) == 0


async def test_a_server_that_dies_mid_call_is_named_and_started_again_on_next_use(
    control: Path,
) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        died = await server.call("die")
        assert died.error
        assert "“Fake” stopped during the call (exited with code 3)" in died.text
        assert "starts it again the next time" in died.text
        assert server.state.phase == "idle"
        assert "exited with code 3" in server.state.text

        again = await server.call("echo", {"text": "back"})
        assert again.text == "echo: back"
        assert starts(control) == 2
    finally:
        await server.stop()


async def test_a_server_that_dies_twice_in_a_row_waits_for_the_person(control: Path) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        await server.call("die")
        second = await server.call("die")  # started again once, and died again
        assert "will not start it again until you do" in second.text
        assert server.state.phase == "failed"
        assert "stopped 2 times in a row" in server.state.text

        held = await server.call("echo", {"text": "x"})
        assert held.error and "not available" in held.text
        assert starts(control) == 2  # a held server is not started behind the person's back

        assert (await server.start_again()).phase == "ready"
        assert (await server.call("echo", {"text": "x"})).text == "echo: x"
    finally:
        await server.stop()


async def test_a_tool_that_hangs_times_out_with_a_note_and_is_cancelled_on_the_server(
    control: Path,
) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        hung = await server.call("slow", time_limit=0.5)
        assert hung.error
        assert hung.text == (
            "“slow” did not finish within 0.5 seconds; Conch stopped waiting and asked the "
            "server to cancel it."
        )
        assert await wait_for_file(control / "slow-cancelled") == "cancelled"
        assert (await server.call("echo", {"text": "still here"})).text == "echo: still here"
    finally:
        await server.stop()


async def test_cancelling_a_running_call_cancels_it_on_the_server(control: Path) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        call = asyncio.create_task(server.call("slow", time_limit=HANG_SECONDS))
        await wait_for_file(control / "slow-started")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await wait_for_file(control / "slow-cancelled") == "cancelled"
        assert server.state.phase == "ready"
        assert (await server.call("echo", {"text": "next"})).text == "echo: next"
    finally:
        await server.stop()


async def test_a_slow_call_returns_what_it_was_released_with(control: Path) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    try:
        call = asyncio.create_task(server.call("slow", time_limit=HANG_SECONDS))
        await wait_for_file(control / "slow-started")
        (control / "slow-release").write_text("done at last")
        outcome = await call
        assert (outcome.text, outcome.error) == ("done at last", False)
    finally:
        await server.stop()


async def test_a_command_that_does_not_exist_fails_in_words() -> None:
    config = StdioServer(id="missing", name="Missing", command="conch-no-such-mcp-server")
    server = ToolServer(config, start_timeout=HANG_SECONDS)
    assert await server.tools() == ()
    assert server.state.phase == "failed"
    assert server.state.reason.startswith("could not run “conch-no-such-mcp-server” (")
    assert "Traceback" not in server.state.reason
    call = await server.call("anything")
    assert call.error
    assert call.text.startswith("The tool server “Missing” is not available: could not run")


async def test_a_server_that_exits_at_start_is_failed_with_what_it_said() -> None:
    script = "import sys; sys.stderr.write('Error: BRAVE_API_KEY is not set\\n'); sys.exit(2)"
    config = StdioServer(id="quits", name="Quits", command=sys.executable, args=("-c", script))
    server = ToolServer(config, start_timeout=HANG_SECONDS)
    assert await server.tools() == ()
    assert server.state.phase == "failed"
    assert server.state.reason == "exited with code 2; it said “Error: BRAVE_API_KEY is not set”"


async def test_an_answer_that_is_not_json_rpc_fails_the_start_at_once() -> None:
    server = ToolServer(garbage("broken"), start_timeout=HANG_SECONDS)
    try:
        began = time.monotonic()
        assert await server.tools() == ()
        assert server.state.phase == "failed"
        assert "its answer was not a valid MCP message" in server.state.reason
        assert time.monotonic() - began < HANG_SECONDS / 2  # not by waiting out the deadline
    finally:
        await server.stop()


async def test_plain_text_instead_of_messages_fails_the_start_naming_what_it_wrote() -> None:
    server = ToolServer(garbage("text"), start_timeout=1.5)
    try:
        assert await server.tools() == ()
        assert server.state.reason == (
            "it did not answer within 1.5 seconds; it wrote “Hello! Server starting up, please "
            "wait...” where an MCP message belongs"
        )
    finally:
        await server.stop()


async def test_stopping_a_server_that_is_still_starting_does_not_wait_for_its_deadline() -> None:
    starting = asyncio.Event()

    def seen(_id: str, state: ServerState) -> None:
        if state.phase == "starting":
            starting.set()

    server = ToolServer(garbage("text"), on_state=seen, start_timeout=HANG_SECONDS)
    listing = asyncio.create_task(server.tools())
    await asyncio.wait_for(starting.wait(), HANG_SECONDS)
    began = time.monotonic()
    await server.stop()
    assert await asyncio.wait_for(listing, HANG_SECONDS) == ()
    assert time.monotonic() - began < HANG_SECONDS / 2
    assert server.state.phase == "idle"  # stopped on purpose: not a failure
    assert server.pid is None


async def test_stopping_leaves_no_process_behind_not_even_the_servers_own_child(
    control: Path,
) -> None:
    server = ToolServer(fake(control), start_timeout=HANG_SECONDS)
    await server.tools()
    pid = server.pid
    assert pid is not None and alive(pid)
    child = int((await server.call("spawn_child")).text)
    assert alive(child)

    await server.stop()

    assert await wait_gone(pid), "the server outlived stop()"
    assert await wait_gone(child), "the server's own child outlived stop()"
    assert server.state.phase == "idle"


PARENT = """
import asyncio, sys
sys.path.insert(0, {root!r})
from engines.tools.config import StdioServer
from engines.tools.servers import ToolServer

async def main():
    config = StdioServer(id="fake", name="Fake", command=sys.executable,
                         args=("-m", "tests.fakes.mcp_server", "--control", {control!r}),
                         cwd={root!r})
    server = ToolServer(config, start_timeout=120)
    await server.tools()
    print(server.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's help is Linux's")
async def test_killing_conch_outright_leaves_no_server_behind(control: Path) -> None:
    code = PARENT.format(root=str(ROOT), control=str(control))
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE
    )
    server_pid = 0
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(parent.stdout.readline(), HANG_SECONDS)
        server_pid = int(line)
        assert alive(server_pid)
        parent.kill()  # SIGKILL: no atexit, no stop(), nothing of Conch runs any more
        await asyncio.wait_for(parent.wait(), HANG_SECONDS)
        assert await wait_gone(server_pid), "the server outlived the Conch that started it"
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
        if server_pid and alive(server_pid):  # do not leave the orphan behind
            os.kill(server_pid, signal.SIGKILL)


async def test_the_manager_lists_tools_of_allowed_servers_and_routes_calls(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    servers = ToolServers(
        [fake(one, id="one", name="One"), fake(two, id="two", name="Two")],
        start_timeout=HANG_SECONDS,
    )
    try:
        only_one = await servers.catalogue(allowed={"one"})
        assert {t.server for t in only_one.tools} == {"one"}
        assert only_one.find("echo") is not None
        assert starts(two) == 0  # a server the chat may not use is not started

        both = await servers.catalogue()
        # Both servers have the same tools: each is named after its server.
        assert both.find("echo") is None
        assert both.find("one_echo") is not None and both.find("two_echo") is not None
        outcome = await servers.call(both, "two_echo", {"text": "routed"})
        assert outcome is not None and (outcome.server, outcome.text) == ("two", "echo: routed")
        assert await servers.call(both, "no_such_tool") is None

        await servers.configure([fake(one, id="one", name="One")])
        assert servers.states() == {"one": servers["one"].state}
        assert servers["one"].state.phase == "ready"  # unchanged: kept running
    finally:
        await servers.stop()


# --- Streamable HTTP ----------------------------------------------------------------------------


@pytest.fixture
def http_fake(control: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server", "--control", str(control), "--http"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the socket is listening once this is printed
            assert line.startswith("port "), f"the fake did not start: {line!r}"
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", proc
        finally:
            proc.kill()
            proc.wait()


async def test_an_http_server_lists_calls_and_sends_its_secret_header(
    http_fake: tuple[str, subprocess.Popen[str]], control: Path
) -> None:
    url, _proc = http_fake
    ref = SecretRef(secret="mcp/web/header/Authorization")
    config = HttpServer(id="web", name="Web", url=url, headers={"Authorization": ref})
    keyring = {ref.secret: "Bearer from-the-keyring"}
    server = ToolServer(config, keyring.get, start_timeout=HANG_SECONDS)
    try:
        assert {t.name for t in await server.tools()} == EXPECTED_TOOLS
        assert (await server.call("echo", {"text": "over http"})).text == "echo: over http"
        assert json.loads((await server.call("whoami")).text)["authorization"] == (
            "Bearer from-the-keyring"
        )
        huge = await server.call("huge")
        assert not huge.error and len(huge.text) >= 5 * 1024 * 1024

        call = asyncio.create_task(server.call("slow", time_limit=HANG_SECONDS))
        await wait_for_file(control / "slow-started")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await wait_for_file(control / "slow-cancelled") == "cancelled"
    finally:
        await server.stop()


@pytest.mark.allow_log("mcp.client.streamable_http")  # its session cannot be ended
async def test_an_http_server_that_dies_mid_call_gives_a_clear_error_then_a_clear_state(
    http_fake: tuple[str, subprocess.Popen[str]], control: Path
) -> None:
    url, proc = http_fake
    server = ToolServer(HttpServer(id="web", name="Web", url=url), start_timeout=HANG_SECONDS)
    try:
        died = await server.call("die")
        assert died.error
        assert died.text.startswith("The tool server “Web” stopped during the call (")
        proc.wait(timeout=HANG_SECONDS)

        # The next use connects again, once; the server is gone, and the state says so.
        after = await server.call("echo", {"text": "anyone?"})
        assert after.error
        assert after.text.startswith("The tool server “Web” is not available: could not connect")
        assert server.state.phase == "failed"
    finally:
        await server.stop()


async def test_an_http_address_where_nothing_listens_fails_in_words() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nothing will listen on it
    config = HttpServer(id="none", name="Nobody", url=f"http://127.0.0.1:{port}/mcp")
    server = ToolServer(config, start_timeout=HANG_SECONDS)
    assert await server.tools() == ()
    assert server.state.phase == "failed"
    assert server.state.reason.startswith("could not connect")
