"""``python -m engines.local.serve``: llama-cpp-python's server, run so Conch can share it.

It takes llama-cpp-python's own server arguments (``--model``, ``--n_ctx``, ``--port``, …) and
builds the same app (``llama_cpp.server.app.create_app``) behind a small ASGI layer of Conch's,
plus options of its own:

- ``--idle-exit SECONDS``: end by itself once no request has come for that long and no Conch
  holds it (below) -- including when nobody came at all. Without it, it runs until stopped.
- ``--exits FILE``: where to add a line saying how it ended (``{"pid", "returncode", "time"}``).
- ``--holder PID``: that process holds it from the start (below): the Conch starting it, so
  it cannot end by itself before that Conch has even connected.

Two routes are answered before llama-cpp-python sees a request:

- ``POST /conch/hold`` with ``{"holder": <pid>}``: that process is using the server, which does
  not idle out while that process lives (a Conch that dies lets the idle clock run again). The
  answer says what is served (``launcher``, ``model``, ``alias``, ``n_ctx``, ``idle_exit``) so
  a Conch can check this is the server it wants before using it. Once the server has decided
  to end for idleness, a hold is refused (503) and the asker starts a server of its own.
- ``POST /conch/release`` with the same body: that process is done with it.

On POSIX the launcher forks first: the parent only waits for the child (which loads the model
and serves), adds how the child ended to the exits file, and then ends the same way (the same
signal, or the same code). So the Conch that started it sees the server's real exit status,
and a Conch that only found it (and is not its parent) reads it from the file -- a crash is
named the same either way. The child dies with the parent (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.local.processes import alive, die_with

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
AppBuilder = Callable[[Sequence[str]], ASGIApp]

MODULE = "engines.local.serve"
HOLD_PATH = "/conch/hold"
RELEASE_PATH = "/conch/release"
EXITS_KEPT = 50  # lines of the exits file kept when it is trimmed
EXITS_MAX_BYTES = 16_000


@dataclass(frozen=True)
class Launch:
    """What the launcher was asked to serve, and how long it may sit idle."""

    model: str
    alias: str
    n_ctx: int
    host: str
    port: int
    idle_exit: float | None
    exits: Path | None
    holder: int | None
    args: tuple[str, ...]  # llama-cpp-python's own arguments (the launcher's taken out)

    def describe(self, launcher: int) -> dict[str, Any]:
        return {
            "launcher": launcher,
            "model": self.model,
            "alias": self.alias,
            "n_ctx": self.n_ctx,
            "idle_exit": self.idle_exit,
        }


def parse(argv: Sequence[str]) -> Launch:
    """The launcher's options, and what it needs to know of llama-cpp-python's (its defaults)."""
    ours = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    ours.add_argument("--idle-exit", type=float, default=None)
    ours.add_argument("--exits", type=Path, default=None)
    ours.add_argument("--holder", type=int, default=None)
    known, rest = ours.parse_known_args(list(argv))
    theirs = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    theirs.add_argument("--model", default="")
    theirs.add_argument("--model_alias", default=None)
    theirs.add_argument("--n_ctx", type=int, default=2048)
    theirs.add_argument("--host", default="localhost")
    theirs.add_argument("--port", type=int, default=8000)
    seen, _ = theirs.parse_known_args(rest)
    idle = known.idle_exit if known.idle_exit is not None and known.idle_exit > 0 else None
    return Launch(
        model=seen.model,
        alias=seen.model_alias or seen.model,
        n_ctx=seen.n_ctx,
        host=seen.host,
        port=seen.port,
        idle_exit=idle,
        exits=known.exits,
        holder=known.holder,
        args=tuple(rest),
    )


# --- the ASGI layer -----------------------------------------------------------------------------


class Watch:
    """Counts requests under way and the time since the last one; answers the hold routes."""

    def __init__(
        self,
        app: ASGIApp,
        about: dict[str, Any],
        *,
        clock: Callable[[], float] = time.monotonic,
        is_alive: Callable[[int], bool] = alive,
    ) -> None:
        self.app = app
        self.about = about
        self.clock = clock
        self.is_alive = is_alive
        self.under_way = 0
        self.last = clock()  # serving began: nobody coming at all is idle time too
        self.holders: set[int] = set()
        self.closing = False  # ending for idleness: no new holder is taken on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":  # lifespan and the like pass straight through
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", "")).rstrip("/")
        if scope.get("method") == "POST" and path in (HOLD_PATH, RELEASE_PATH):
            await self._hold(path == HOLD_PATH, receive, send)
            return
        self.under_way += 1
        self.last = self.clock()
        try:
            await self.app(scope, receive, send)
        finally:
            self.under_way -= 1
            self.last = self.clock()

    async def _hold(self, hold: bool, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                return
            body += bytes(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            holder = int(json.loads(body or b"{}")["holder"])
        except (ValueError, KeyError, TypeError):
            await _answer(send, 400, {"error": {"message": 'send {"holder": <pid>}'}})
            return
        if hold and self.closing:  # the asker starts a server of its own instead
            await _answer(send, 503, {"error": {"message": "this server is ending"}})
            return
        if hold:
            self.holders.add(holder)
        else:
            self.holders.discard(holder)
        self.last = self.clock()
        await _answer(send, 200, self.about)

    def idle_for(self) -> float:
        """Seconds with nothing under way and nobody holding the server (0 while there is)."""
        self.holders = {pid for pid in self.holders if self.is_alive(pid)}
        if self.under_way or self.holders:
            return 0.0
        return max(0.0, self.clock() - self.last)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def serve(app: ASGIApp, launch: Launch, launcher: int) -> int:
    """Serve ``app`` behind ``Watch`` until stopped, or idle for ``launch.idle_exit``."""
    import uvicorn

    watch = Watch(app, launch.describe(launcher))
    if launch.holder is not None:
        watch.holders.add(launch.holder)
    server = uvicorn.Server(uvicorn.Config(watch, host=launch.host, port=launch.port))

    async def watchdog(idle: float) -> None:
        tick = min(1.0, max(0.05, idle / 10))
        while not server.should_exit:
            await asyncio.sleep(tick)
            if watch.idle_for() >= idle:
                watch.closing = True  # before any await: a hold now is refused, not lost
                print(
                    f"conch: no request for {idle:g} seconds and nobody holds the server: ending",
                    flush=True,
                )
                server.should_exit = True

    dog = asyncio.create_task(watchdog(launch.idle_exit)) if launch.idle_exit else None
    try:
        await server.serve()
    finally:
        if dog is not None:
            dog.cancel()
    return 0 if server.started else 1


def llama_app(args: Sequence[str]) -> ASGIApp:
    """llama-cpp-python's server app from its own arguments (what ``-m llama_cpp.server``
    builds); loads the model."""
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    add_args_from_model(parser, Settings)
    parsed = parser.parse_args(list(args))
    # Typed there as returning the class itself; it returns an instance.
    server: Any = parse_model_from_args(ServerSettings, parsed)
    model: Any = parse_model_from_args(ModelSettings, parsed)
    app: ASGIApp = create_app(server_settings=server, model_settings=[model])
    # The library's cache leaves each state's logits out of its size; see state_cache.
    from llama_cpp.server import app as app_module

    from engines.local.state_cache import count_states

    count_states(app_module)
    return app


# --- how it ended -------------------------------------------------------------------------------


def record_exit(path: Path | None, pid: int, returncode: int) -> None:
    """Add how launcher ``pid`` ended to the exits file (kept short)."""
    if path is None:
        return
    line = json.dumps({"pid": pid, "returncode": returncode, "time": time.time()}) + "\n"
    with contextlib.suppress(OSError):
        if path.exists() and path.stat().st_size > EXITS_MAX_BYTES:
            kept = path.read_text(encoding="utf-8", errors="replace").splitlines()[-EXITS_KEPT:]
            tmp = path.with_name(f"{path.name}.{pid}.tmp")
            tmp.write_text("".join(f"{k}\n" for k in kept), encoding="utf-8")
            os.replace(tmp, path)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)


def recorded_exit(path: Path, pid: int) -> int | None:
    """How launcher ``pid`` ended, from the exits file; None when it is not there."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
            if int(entry["pid"]) == pid:
                return int(entry["returncode"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _supervise(launch: Launch, launcher: int) -> int | None:
    """Fork (see the module doc): None in the child, which goes on to serve; in the parent,
    the child's exit code once it has ended (a signal is passed on by ending the same way)."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        die_with(launcher)
        return None

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            signal.signal(getattr(signal, name), forward)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    record_exit(launch.exits, launcher, code)
    if code < 0:
        return _end_like(-code)
    return code


def _end_like(signum: int) -> int:
    """End by ``signum`` as the child did (no core file: the child's crash is the news)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    return 128 + signum  # a signal whose default is to carry on


def main(argv: Sequence[str] | None = None, build: AppBuilder = llama_app) -> int:
    """Run the launcher; ``build`` makes the app from llama-cpp-python's arguments."""
    launch = parse(sys.argv[1:] if argv is None else argv)
    launcher = os.getpid()
    if hasattr(os, "fork"):
        code = _supervise(launch, launcher)
        if code is not None:
            return code
    app = build(launch.args)
    return asyncio.run(serve(app, launch, launcher))


if __name__ == "__main__":
    raise SystemExit(main())
