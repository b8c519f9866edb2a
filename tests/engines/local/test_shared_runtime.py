"""A runtime started by a ``conch`` command stays warm for the next one, is found and used by
every Conch on the data folder (one at a time starting it), and ends by itself when idle.

The server here is Conch's real launcher (engines/local/serve.py: its fork, hold routes, exits
file and idle exit) around ``fake_served.py``'s small app in place of llama.cpp's server. The
same with the real model and the real ``conch ask`` is in tests/integration/test_warm_runtime.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.base import Message, TextDelta
from engines.local import bundled, serve
from engines.local.bundled import (
    EXITS_NAME,
    IDLE_ENV,
    IDLE_EXIT,
    MODEL_ID,
    SHARED_NAME,
    WINDOW,
    BundledRuntime,
    CrashBook,
    RuntimeCrashError,
    bundled_adapter,
    free_port,
    idle_exit_setting,
)
from engines.local.processes import alive as _alive
from engines.providers.base import ChatRequest
from tests.waits import HANG_SECONDS as GUARD

FAKE = Path(__file__).with_name("fake_served.py")
ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")


def runtime_in(
    data_dir: Path,
    *,
    idle: float | None = IDLE_EXIT,
    crash: str = "none",
    n_ctx: int = WINDOW,
) -> BundledRuntime:
    """A runtime on the real launcher with the fake app; ``idle`` None is the window's kind."""
    model = data_dir.parent / "model.gguf"
    model.write_bytes(b"GGUF")
    return BundledRuntime(
        data_dir,
        server=(sys.executable, str(FAKE), "--crash", crash),
        model_path=model,
        start_timeout=GUARD,
        idle_exit=idle,
        n_ctx=n_ctx,
    )


def starts(data_dir: Path) -> int:
    path = data_dir / "fake-runtime-starts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def shared_record(data_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((data_dir / SHARED_NAME).read_text())
    return data


def wait_gone(pid: int, seconds: float = GUARD) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ask() -> ChatRequest:
    return ChatRequest(model=MODEL_ID, messages=(Message(role="user", text="Colours?"),))


async def answer(runtime: BundledRuntime) -> str:
    adapter = bundled_adapter(runtime)
    try:
        return "".join([e.text async for e in adapter.stream(ask()) if isinstance(e, TextDelta)])
    finally:
        await adapter.aclose()


def running_in(folder: Path) -> list[int]:
    """Processes working in ``folder``: the servers a runtime started there (Linux)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.fixture
async def made(data_dir: Path) -> AsyncIterator[list[BundledRuntime]]:
    """Runtimes to stop afterwards; then no server the test started is left running."""
    runtimes: list[BundledRuntime] = []
    yield runtimes
    for runtime in runtimes:
        await runtime.stop()
    killed = set(running_in(data_dir))
    for pid in killed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    # A runtime stopped but left running for the next Conch is this process's child: once it
    # ended (by itself, or killed above), collect it, or it stays a zombie until exit.
    for proc in list(bundled._LEFT_RUNNING):
        if proc.pid in killed or proc.poll() is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=GUARD)
            bundled._LEFT_RUNNING.remove(proc)


# --- the launcher's idle clock -----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def call(watch: serve.Watch, method: str, path: str, body: bytes = b"") -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await watch({"type": "http", "method": method, "path": path}, receive, send)
    return sent


async def test_the_idle_clock_waits_for_requests_under_way_and_for_holders() -> None:
    clock = Clock()
    living = {4242}
    entered, finish = asyncio.Event(), asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.set()
        await finish.wait()

    watch = serve.Watch(app, {"launcher": 7}, clock=clock, is_alive=lambda pid: pid in living)
    clock.now = 50.0
    assert watch.idle_for() == 50.0  # nobody came at all: that is idle too

    streaming = asyncio.ensure_future(call(watch, "POST", "/v1/chat/completions"))
    await entered.wait()
    clock.now = 5_000.0
    assert watch.idle_for() == 0.0  # a long answer is not idleness
    finish.set()
    await streaming
    clock.now = 5_030.0
    assert watch.idle_for() == 30.0

    sent = await call(watch, "POST", "/conch/hold", b'{"holder": 4242}')
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"]) == {"launcher": 7}
    clock.now = 90_000.0
    assert watch.idle_for() == 0.0  # held by a living Conch
    living.clear()  # that Conch died without letting go
    assert watch.idle_for() == 90_000.0 - 5_030.0

    bad = await call(watch, "POST", "/conch/hold", b"{}")
    assert bad[0]["status"] == 400

    watch.closing = True  # the watchdog decided to end: a late asker must start its own
    late = await call(watch, "POST", "/conch/hold", b'{"holder": 4242}')
    assert late[0]["status"] == 503 and not watch.holders


def test_the_launcher_takes_its_options_out_of_the_servers() -> None:
    theirs = ["--model", "m.gguf", "--model_alias", "a", "--n_ctx", "4096", "--port", "9"]
    ours = ["--idle-exit", "2.5", "--exits", "/tmp/x", "--holder", "12"]
    launch = serve.parse([*theirs, *ours, "--n_parallel", "1"])
    assert (launch.model, launch.alias, launch.n_ctx, launch.port) == ("m.gguf", "a", 4096, 9)
    assert launch.idle_exit == 2.5 and launch.exits == Path("/tmp/x") and launch.holder == 12
    assert not {"--idle-exit", "--exits", "--holder"} & set(launch.args)
    assert launch.args[-2:] == ("--n_parallel", "1")
    assert serve.parse(["--idle-exit", "0"]).idle_exit is None


def test_the_idle_time_comes_from_the_environment() -> None:
    assert idle_exit_setting({}) == (IDLE_EXIT, "")
    assert idle_exit_setting({IDLE_ENV: "45"}) == (45.0, "")
    assert idle_exit_setting({IDLE_ENV: "0"}) == (None, "")  # stops with the command
    seconds, problem = idle_exit_setting({IDLE_ENV: "ten minutes"})
    assert seconds == IDLE_EXIT
    assert problem.startswith(f"{IDLE_ENV}='ten minutes' is not a number of seconds")


def test_a_launcher_nobody_uses_ends_by_itself(data_dir: Path) -> None:
    exits = data_dir / EXITS_NAME
    args = [sys.executable, str(FAKE), "--model", "m.gguf", "--host", "127.0.0.1"]
    args += ["--port", str(free_port()), "--idle-exit", "0.3", "--exits", str(exits)]
    proc = subprocess.Popen(args, cwd=data_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert b"no request for 0.3 seconds and nobody holds the server: ending" in out
    assert serve.recorded_exit(exits, proc.pid) == 0


# --- finding and using a warm runtime ---------------------------------------------------------


async def test_a_command_leaves_the_runtime_warm_and_the_next_one_uses_it(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    first = runtime_in(data_dir)
    made.append(first)
    assert (await first.start()).phase == "ready"
    pid = first.pid
    assert pid is not None and first.shared
    assert await answer(first) == "Red, green and blue."
    await first.stop()  # the command is done
    assert _alive(pid)
    assert shared_record(data_dir)["pid"] == pid

    second = runtime_in(data_dir)
    made.append(second)
    assert (await second.start()).phase == "ready"
    assert second.pid == pid and starts(data_dir) == 1  # no second model load
    assert await answer(second) == "Red, green and blue."
    await second.stop()
    assert _alive(pid)


async def test_two_commands_starting_at_once_start_one_runtime(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    one, two = runtime_in(data_dir), runtime_in(data_dir)
    made.extend([one, two])
    states = await asyncio.gather(one.start(), two.start())
    assert [s.phase for s in states] == ["ready", "ready"]
    assert one.pid == two.pid and starts(data_dir) == 1


async def test_a_warm_runtime_ends_by_itself_once_let_go(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    runtime = runtime_in(data_dir, idle=0.3)
    made.append(runtime)
    assert (await runtime.start()).phase == "ready"
    pid = runtime.pid
    assert pid is not None
    await runtime.stop()
    assert wait_gone(pid), "the idle runtime did not end by itself"
    assert serve.recorded_exit(data_dir / EXITS_NAME, pid) == 0

    again = runtime_in(data_dir, idle=0.3)
    made.append(again)
    assert (await again.start()).phase == "ready"  # a clean idle end is not a crash
    assert again.pid != pid and starts(data_dir) == 2
    assert CrashBook(data_dir).last() is None


async def test_a_warm_runtime_for_another_window_is_not_used(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    small = runtime_in(data_dir, n_ctx=4_096)
    made.append(small)
    assert (await small.start()).phase == "ready"
    small_pid = small.pid
    await small.stop()

    full = runtime_in(data_dir)
    made.append(full)
    assert (await full.start()).phase == "ready"
    assert full.pid != small_pid and starts(data_dir) == 2
    assert shared_record(data_dir)["pid"] == full.pid


async def test_the_window_uses_a_warm_runtime_and_leaves_it_running(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    command = runtime_in(data_dir)
    made.append(command)
    assert (await command.start()).phase == "ready"
    pid = command.pid
    assert pid is not None
    await command.stop()

    window = runtime_in(data_dir, idle=None)
    made.append(window)
    assert (await window.start()).phase == "ready"
    assert window.pid == pid and window.shared and starts(data_dir) == 1
    assert await answer(window) == "Red, green and blue."
    await window.stop()
    assert _alive(pid)  # it was never the window's to stop
    assert not (data_dir / "local-model.pid").exists()


def spawn(args: list[str]) -> subprocess.Popen[str]:
    """A child whose output is read line by line (a plain function: starting one is quick)."""
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


WINDOW_PROCESS = """
import asyncio, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from engines.local.bundled import BundledRuntime

async def main():
    runtime = BundledRuntime(
        Path({data!r}), server=({python!r}, {fake!r}, "--crash", "none"),
        model_path=Path({model!r}), start_timeout=60,
    )
    state = await runtime.start()
    print(state.phase, runtime.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_a_warm_runtime_held_by_a_window_that_died_ends_by_itself(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    command = runtime_in(data_dir, idle=0.3)
    made.append(command)
    assert (await command.start()).phase == "ready"
    pid = command.pid
    assert pid is not None
    code = WINDOW_PROCESS.format(
        root=str(ROOT),
        data=str(data_dir),
        python=sys.executable,
        fake=str(FAKE),
        model=str(data_dir.parent / "model.gguf"),
    )
    with spawn([sys.executable, "-c", code]) as window:
        try:
            assert window.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(window.stdout.readline), GUARD)
            assert line.split() == ["ready", str(pid)]  # the window holds the warm runtime
            await command.stop()  # the command lets go; the window still holds it
            assert _alive(pid)
        finally:
            window.kill()  # the window crashes without letting go
            window.wait()
    assert pid is not None and wait_gone(pid), "the runtime outlived the window that held it"


@pytest.mark.allow_log("conch.local.bundled")  # the crash it provokes is logged
async def test_a_crash_of_a_found_runtime_is_named_from_the_launchers_record(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    first = runtime_in(data_dir, crash="answer-SIGILL")
    made.append(first)
    assert (await first.start()).phase == "ready"
    pid = first.pid
    await first.stop()

    second = runtime_in(data_dir, crash="answer-SIGILL")  # not the server's parent
    made.append(second)
    assert (await second.start()).phase == "ready" and second.pid == pid
    with pytest.raises(RuntimeCrashError) as info:
        await answer(second)
    assert info.value.to_problem().message.startswith(
        "The local model's runtime stopped (illegal instruction) part-way through an answer."
    )
    assert serve.recorded_exit(data_dir / EXITS_NAME, pid or 0) == -int(signal.SIGILL)
    crash = CrashBook(data_dir).last()
    assert crash is not None and crash.count == 1 and crash.pid == pid
    assert "fake served: chat" in "\n".join(crash.log)  # the shared server's own log
    assert not (data_dir / SHARED_NAME).exists()


async def test_a_garbled_shared_record_is_ignored(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    (data_dir / SHARED_NAME).write_text("{not json")
    runtime = runtime_in(data_dir)
    made.append(runtime)
    assert (await runtime.start()).phase == "ready"
    assert shared_record(data_dir)["pid"] == runtime.pid


async def test_the_launcher_answers_hold_only_with_a_holder(
    data_dir: Path, made: list[BundledRuntime]
) -> None:
    runtime = runtime_in(data_dir)
    made.append(runtime)
    assert (await runtime.start()).phase == "ready"
    port = shared_record(data_dir)["port"]
    async with httpx.AsyncClient(trust_env=False) as client:
        said = await client.post(f"http://127.0.0.1:{port}{serve.HOLD_PATH}", content=b"hi")
    assert said.status_code == 400
