"""``python -m engines.local.serve``: llama.cpp's own server, run so Conch can share it.

The server is llama.cpp's C++ server from the prebuilt ``xllamacpp`` wheel, run inside this
process and listening on a loopback port of its own. In front of it, on the port Conch was
given, a small ASGI layer of Conch's passes every request through (streams included) and adds
what Conch needs. It takes these options:

- ``--model``, ``--model_alias``, ``--n_ctx``, ``--host``, ``--port``, ``--n_threads``,
  ``--n_threads_batch``, ``--n_parallel``, ``--n_batch``, ``--cache_ram_mib``: what llama.cpp's
  server is started with (``llama_app``);
- ``--idle-exit SECONDS``: end by itself once no request has come for that long and no Conch
  holds it (below) -- including when nobody came at all. Without it, it runs until stopped.
- ``--exits FILE``: where to add a line saying how it ended (``{"pid", "returncode", "time"}``).
- ``--holder PID``: that process holds it from the start (below): the Conch starting it, so
  it cannot end by itself before that Conch has even connected.

Two routes are answered before llama.cpp sees a request:

- ``POST /conch/hold`` with ``{"holder": <pid>}``: that process is using the server, which does
  not idle out while that process lives (a Conch that dies lets the idle clock run again). The
  answer says what is served (``launcher``, ``model``, ``alias``, ``n_ctx``, ``idle_exit``) so
  a Conch can check this is the server it wants before using it. Once the server has decided
  to end for idleness, a hold is refused (503) and the asker starts a server of its own.
- ``POST /conch/release`` with the same body: that process is done with it.

SIGTERM, SIGINT and SIGHUP end the process at once, by that signal: the server in it does not
end by itself on one, and a graceful stop would wait for an answer being read.

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
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx

from engines.local.processes import alive, die_with
from engines.local.slot_states import (
    PREPARE_PATH,
    SAVE_AFTER,
    ChatSlot,
    StateStore,
    chat_slot_of,
)

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
SAVE_TICK = 1.0  # seconds between two looks at whether the chat's slot is idle enough to save


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
    args: tuple[str, ...]  # the server's arguments (the launcher's own taken out)

    def describe(self, launcher: int) -> dict[str, Any]:
        return {
            "launcher": launcher,
            "model": self.model,
            "alias": self.alias,
            "n_ctx": self.n_ctx,
            "idle_exit": self.idle_exit,
        }


def parse(argv: Sequence[str]) -> Launch:
    """The launcher's options, and what it needs to know of the server's (their defaults)."""
    ours = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    ours.add_argument("--idle-exit", type=float, default=None)
    ours.add_argument("--exits", type=Path, default=None)
    ours.add_argument("--holder", type=int, default=None)
    known, rest = ours.parse_known_args(list(argv))
    theirs = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    theirs.add_argument("--model", default="")
    theirs.add_argument("--model_alias", default=None)
    theirs.add_argument("--n_ctx", type=int, default=2048)
    theirs.add_argument("--host", default="127.0.0.1")
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

    class Server(uvicorn.Server):
        # uvicorn's own handlers stop gracefully, waiting for every answer under way (a long
        # prompt being read); the launcher's handlers end the process at once instead.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    watch = Watch(app, launch.describe(launcher))
    if launch.holder is not None:
        watch.holders.add(launch.holder)
    server = Server(uvicorn.Config(watch, host=launch.host, port=launch.port))

    slots = chat_slot(app)

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
                if slots is not None:
                    await slots.save()  # the next start finds the chat's state
                server.should_exit = True

    async def saver(keeper: ChatSlot) -> None:
        while not server.should_exit:
            await asyncio.sleep(SAVE_TICK)
            await keeper.save_if_idle()

    tasks = [asyncio.create_task(watchdog(launch.idle_exit))] if launch.idle_exit else []
    if slots is not None:
        tasks.append(asyncio.create_task(saver(slots)))
    try:
        await server.serve()
    finally:
        for task in tasks:
            task.cancel()
    return 0 if server.started else 1


def chat_slot(app: object) -> ChatSlot | None:
    """The chat's slot keeper of llama.cpp's app (none for a stand-in's)."""
    found = getattr(app, "slots", None)
    return found if isinstance(found, ChatSlot) else None


# --- llama.cpp's server, and the layer that passes requests to it -------------------------------

# Headers about one connection, not about the answer: each side of the layer sets its own.
_HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"upgrade", b"te", b"trailer"}
)
UPSTREAM_TIMEOUT = 5.0  # to connect to the server in this same process; reading waits for it


class PassThrough:
    """An ASGI app that passes every request on to the server at ``base`` and streams its
    answer back as it comes; a client that hangs up closes the request to the server, so
    llama.cpp stops reading or answering it.

    ``keep`` is held for the app's life: the in-process server stops when it is collected.
    ``slots`` (when states are kept) answers ``POST /conch/chat-slot`` and hears of every
    request to the chat's slot."""

    def __init__(self, base: str, keep: object = None, slots: ChatSlot | None = None) -> None:
        self.base = base.rstrip("/")
        self.keep = keep
        self.slots = slots
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=UPSTREAM_TIMEOUT), trust_env=False
            )
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope.get("type") != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                return
            body += bytes(message.get("body", b""))
            if not message.get("more_body"):
                break
        path = bytes(scope.get("raw_path") or str(scope.get("path", "/")).encode())
        if self.slots is not None and scope.get("method") == "POST":
            if path.rstrip(b"/") == PREPARE_PATH.encode():
                query = bytes(scope.get("query_string", b""))
                restore = b"restore=0" not in query.split(b"&")
                await self._prepare(self.slots, bytes(body), send, restore=restore)
                return
            digest = chat_slot_of(bytes(body)) if path.endswith(b"/completions") else None
            if digest is not None:
                self.slots.started(digest)
                try:
                    await self._forward(scope, path, body, receive, send)
                finally:
                    self.slots.ended()
                return
        await self._forward(scope, path, body, receive, send)

    @staticmethod
    async def _prepare(slots: ChatSlot, body: bytes, send: Send, *, restore: bool) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            await _answer(send, 400, {"error": {"message": "send a chat request's body"}})
            return
        await _answer(send, 200, await slots.prepare(request, restore=restore))

    async def _forward(
        self, scope: Scope, path: bytes, body: bytearray, receive: Receive, send: Send
    ) -> None:
        query = bytes(scope.get("query_string", b""))
        url = self.base + path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in _HOP_HEADERS]
        client = self.client()
        request = client.build_request(
            str(scope.get("method", "GET")), url, headers=headers, content=bytes(body)
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await _answer(send, 502, {"error": {"message": f"the model server: {exc!r}"}})
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k, v) for k, v in response.headers.raw if k.lower() not in _HOP_HEADERS
                    ],
                }
            )
            pump = asyncio.ensure_future(self._pump(response, send))
            gone = asyncio.ensure_future(_hung_up(receive))
            try:
                await asyncio.wait((pump, gone), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (pump, gone):
                    task.cancel()
                await asyncio.gather(pump, gone, return_exceptions=True)
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                raise pump.exception()  # type: ignore[misc]
        finally:
            await response.aclose()

    @staticmethod
    async def _pump(response: httpx.Response, send: Send) -> None:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message.get("type") == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message.get("type") == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                if self.slots is not None:
                    await self.slots.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _hung_up(receive: Receive) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass


def llama_args(args: Sequence[str]) -> argparse.Namespace:
    """The server's options (named as Conch has always passed them)."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", allow_abbrev=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--model_alias", default=None)
    parser.add_argument("--n_ctx", type=int, default=0)  # 0: the window the model was trained for
    parser.add_argument("--host", default="127.0.0.1")  # the layer's, not the server's
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--n_threads", type=int, default=-1)
    parser.add_argument("--n_threads_batch", type=int, default=-1)
    parser.add_argument("--n_parallel", type=int, default=1)
    parser.add_argument("--n_batch", type=int, default=0)  # 0: llama.cpp's default
    parser.add_argument("--cache_ram_mib", type=int, default=-1)  # -1: llama.cpp's default
    parser.add_argument("--n_cache_reuse", type=int, default=0)
    # Where the chat slot's state is saved (engines/local/slot_states.py); none: not kept.
    parser.add_argument("--states", type=Path, default=None)
    parser.add_argument("--save_after", type=float, default=SAVE_AFTER)  # idle seconds
    return parser.parse_args(list(args))


def llama_app(args: Sequence[str]) -> ASGIApp:
    """llama.cpp's server from ``args`` (``llama_args``), loaded and listening on a loopback
    port of its own, behind ``PassThrough``."""
    import xllamacpp

    given = llama_args(args)
    params = xllamacpp.CommonParams()
    params.model.path = given.model
    if given.model_alias:
        params.model_alias = {given.model_alias}
    # --n_ctx is each slot's window: llama.cpp splits its context between the slots.
    params.n_ctx = given.n_ctx * max(1, given.n_parallel)
    params.n_parallel = given.n_parallel
    params.kv_unified = False
    if given.n_batch > 0:
        params.n_batch = given.n_batch
    params.cpuparams.n_threads = given.n_threads
    params.cpuparams_batch.n_threads = given.n_threads_batch
    if given.cache_ram_mib >= 0:
        params.cache_ram_mib = given.cache_ram_mib
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # a free one; only the layer in front talks to it
    params.endpoint_props = True  # the window it was started with
    params.n_cache_reuse = given.n_cache_reuse
    if given.states is not None:
        with contextlib.suppress(OSError):
            given.states.mkdir(parents=True, exist_ok=True)
        params.endpoint_slots = True
        params.slot_save_path = f"{given.states}{os.sep}"  # llama.cpp adds the name to it as is
    params.ui = False
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # the library raises whatever llama.cpp said
        print(f"conch: llama.cpp could not load {given.model}: {exc}", flush=True)
        _leave(1)
    base = str(server.listening_address)
    slots = None
    if given.states is not None and given.n_ctx > 0:
        store = StateStore(given.states, Path(given.model), given.n_ctx)
        slots = ChatSlot(base, store, save_after=given.save_after)
    return PassThrough(base, keep=server, slots=slots)


# --- signals ------------------------------------------------------------------------------------

_ENDING_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


_ON_END: list[Callable[[], None]] = []  # done before a signal ends the process (quickly)
_ending: list[int] = []


def end_on_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP end this process at once, by that signal (module doc), after
    saving the chat slot's state when it is idle (a second or two at most)."""

    def end(signum: int, _frame: object) -> None:
        if _ending:
            return  # already ending (the group's signal and the launcher's forwarded one)
        _ending.append(signum)
        for step in _ON_END:
            with contextlib.suppress(Exception):
                step()
        sys.stdout.flush()
        sys.stderr.flush()
        _end_like(signum)

    for name in _ENDING_SIGNALS:
        with contextlib.suppress(AttributeError, ValueError, OSError):
            signal.signal(getattr(signal, name), end)


def _leave(code: int) -> NoReturn:
    """End now with ``code``: the server's threads would keep a normal exit waiting."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
    """Run the launcher; ``build`` makes the app from the server's arguments."""
    launch = parse(sys.argv[1:] if argv is None else argv)
    launcher = os.getpid()
    if hasattr(os, "fork"):
        code = _supervise(launch, launcher)
        if code is not None:
            return code
    end_on_signals()
    app = build(launch.args)
    slots = chat_slot(app)
    if slots is not None:
        _ON_END.append(slots.save_now)
    end_on_signals()  # again: the library may have set handlers of its own while loading
    _leave(asyncio.run(serve(app, launch, launcher)))


if __name__ == "__main__":
    raise SystemExit(main())
