"""An MCP server run as a child process, spoken to over its stdin and stdout.

The SDK's own stdio client frames messages the same way, but it cannot make the child die
with Conch: here the child runs in its own process group and, on Linux, the kernel kills it
when Conch dies (even after a crash of the window). On a normal stop Conch closes its stdin,
waits a moment, then ends the whole group, so a server's own children (``npx`` starts ``node``)
go with it. ``atexit`` ends any group still running when Python exits.

What the child did is kept in words for the person: how it ended ("exited with code 1"),
the last lines it wrote to stderr, and any line on stdout that was not an MCP message.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from engines.local.processes import close_transport, death_signal_hook, ending_words

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams
    from mcp.shared.message import SessionMessage

log = logging.getLogger("conch.tools.stdio")

CHUNK = 64 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one message larger than this ends the connection
GRACE = 2.0  # seconds a server has to leave on its own once its stdin is closed
KILL_WAIT = 2.0  # seconds after SIGTERM before SIGKILL, and after SIGKILL before giving up
POLL = 0.01  # how often a stopping server is looked at
REAP_WAIT = 30.0  # seconds to wait for a killed server to be reaped (a hang guard)
STDERR_LINES = 20
NOISE_LINES = 3
LINE_CHARS = 300
BROKEN_ANSWER = "its answer was not a valid MCP message"

_LIVE_GROUPS: set[int] = set()


def _end_live_groups() -> None:
    for pgid in list(_LIVE_GROUPS):
        _signal_group(pgid, signal.SIGKILL)


atexit.register(_end_live_groups)


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group (Windows: the process); False when nothing was there."""
    try:
        if sys.platform == "win32":
            os.kill(pgid, sig)
        else:
            os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # something is there that we may not signal; keep treating it as alive
    return True


def _group_alive(pgid: int) -> bool:
    if sys.platform == "win32":
        return False
    return _signal_group(pgid, 0)


def _short(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


class _Lines:
    """Splits a byte stream into lines without rescanning what was already searched."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._searched = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        lines: list[bytes] = []
        start = 0
        while True:
            at = self._buf.find(b"\n", max(start, self._searched))
            if at < 0:
                break
            lines.append(bytes(self._buf[start:at]))
            start = at + 1
        if start:
            del self._buf[:start]
        self._searched = len(self._buf)
        return lines

    @property
    def pending(self) -> int:
        return len(self._buf)


class StdioProcess:
    """One run of a stdio MCP server: the transport for the SDK, and how the run ended."""

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.command = command
        self.args = tuple(args)
        self.env = dict(env or {})
        self.cwd = cwd
        self.pid: int | None = None
        self.returncode: int | None = None
        self.stderr: deque[tuple[int, str]] = deque(maxlen=STDERR_LINES)  # (line number, text)
        self._heard = 0  # stderr lines so far
        self._said_from = 0  # lines before this one explain nothing new (see ``mark``)
        self.noise: list[str] = []  # stdout lines that were not MCP messages
        self.too_big = False
        self.died = False  # it ended (or closed its stdout) before Conch stopped it
        self._eof = False
        self._proc: asyncio.subprocess.Process | None = None

    # --- what the person reads ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def ended_words(self) -> str:
        """How the process ended by itself ("exited with code 1"); "" while it runs, and when
        it ended because Conch stopped it."""
        if self._proc is not None and self._proc.returncode is not None:
            self.returncode = self._proc.returncode
        if not self.died or self.returncode is None:
            return ""
        return ending_words(self.returncode)

    def mark(self) -> None:
        """What the server wrote to stderr so far explains nothing that happens next."""
        self._said_from = self._heard

    def _hear(self, line: str) -> None:
        self.stderr.append((self._heard, _short(line)))
        self._heard += 1

    def said(self) -> str:
        """What the server wrote that explains a failure: stray output on stdout, or its last
        stderr line since ``mark`` (one that names an error, if any does)."""
        if self.too_big:
            return f"it sent a message larger than {MAX_MESSAGE_BYTES // (1024 * 1024)} MB"
        if self.noise:
            return f"it wrote “{self.noise[0]}” where an MCP message belongs"
        recent = [text for n, text in self.stderr if n >= self._said_from and text.strip()]
        errors = [text for text in recent if "error" in text.lower()]
        if errors or recent:
            return f"it said “{(errors or recent)[-1]}”"
        return ""

    # --- the transport -----------------------------------------------------------------------

    async def _spawn(self) -> asyncio.subprocess.Process:
        from mcp.client.stdio import get_default_environment

        kwargs: dict[str, Any] = {}
        if sys.platform == "win32":
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        else:
            kwargs["start_new_session"] = True
            hook = death_signal_hook()
            if hook is not None:
                kwargs["preexec_fn"] = hook
        # Only the variables the SDK deems safe to inherit, plus the server's own: a server
        # sees no API key Conch happens to have in its environment.
        env = get_default_environment() | self.env
        # Started on the event loop's thread, never in a worker thread: the kernel's death
        # signal follows the thread that started the child.
        return await asyncio.create_subprocess_exec(
            self.command,
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=self.cwd or None,
            **kwargs,
        )

    @contextlib.asynccontextmanager
    async def transport(self) -> AsyncIterator[TransportStreams]:
        """The read and write streams the SDK's ``Client`` speaks through.

        Raises OSError when the command cannot be run.
        """
        from mcp.shared.message import SessionMessage

        # A start cancelled while the child is being made (a stop during the start) would lose
        # it: asyncio then kills it but waits for it no more, and it is never reaped. Making
        # it is quick, so it is let finish and the child is stopped below like any other.
        with anyio.CancelScope(shield=True):
            proc = await self._spawn()
        self._proc, self.pid = proc, proc.pid
        _LIVE_GROUPS.add(proc.pid)
        read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_stdout() -> None:
            assert proc.stdout is not None
            lines = _Lines()
            async with read_in:
                while True:
                    try:
                        chunk = await proc.stdout.read(CHUNK)
                    except (OSError, ValueError):
                        return
                    if not chunk:
                        self._eof = True
                        return
                    for line in lines.feed(chunk):
                        message = self._parse(line)
                        if message is None:
                            continue
                        try:
                            await read_in.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
                    if lines.pending > MAX_MESSAGE_BYTES:
                        self.too_big = True
                        return

        async def read_stderr() -> None:
            assert proc.stderr is not None
            lines = _Lines()
            while True:
                try:
                    chunk = await proc.stderr.read(CHUNK)
                except (OSError, ValueError):
                    return
                if not chunk:
                    return
                for line in lines.feed(chunk):
                    self._hear(line.decode("utf-8", "replace"))
                if lines.pending > CHUNK:  # a line with no end in sight: keep what came so far
                    for line in lines.feed(b"\n"):
                        self._hear(line.decode("utf-8", "replace"))

        async def write_stdin() -> None:
            assert proc.stdin is not None
            try:
                async with write_out:
                    async for item in write_out:
                        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                        proc.stdin.write(data.encode("utf-8") + b"\n")
                        await proc.stdin.drain()
            except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                # The server stopped reading: end the read side too, so a waiting request
                # hears the connection close instead of waiting for ever.
                await read_in.aclose()

        stopped = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_stdout)
                tg.start_soon(read_stderr)
                tg.start_soon(write_stdin)
                try:
                    yield read_out, write_in
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(proc)
                    stopped = True
                    tg.cancel_scope.cancel()
        finally:
            if not stopped:  # the readers never got going: the child is still to be stopped
                with anyio.CancelScope(shield=True):
                    await self._stop(proc)
            await read_out.aclose()
            await write_in.aclose()

    def _parse(self, line: bytes) -> SessionMessage | None:
        from mcp.shared.message import SessionMessage
        from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError, jsonrpc_message_adapter

        text = line.decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_json(text, by_name=False))
        except ValueError:
            pass
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        # A garbled answer to one of our requests fails that request at once, with words,
        # instead of leaving it to wait for its timeout. (A request *from* the server has a
        # method; its id is not ours.)
        if isinstance(data, dict) and "method" not in data:
            ident = data.get("id")
            if isinstance(ident, (int, str)) and not isinstance(ident, bool):
                error = ErrorData(code=PARSE_ERROR, message=BROKEN_ANSWER)
                return SessionMessage(JSONRPCError(jsonrpc="2.0", id=ident, error=error))
        if len(self.noise) < NOISE_LINES:
            self.noise.append(_short(text))
        log.debug("a stdio MCP server wrote a line that is not an MCP message")
        return None

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """Close stdin, give the server a moment, then end its whole process group."""
        self.died = self._eof or proc.returncode is not None
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        if not await self._exited(proc, GRACE):
            _signal_group(proc.pid, signal.SIGTERM)
            if not await self._exited(proc, KILL_WAIT):
                _signal_group(proc.pid, signal.SIGKILL)
                # SIGKILL always works; only the reap can be late on a busy machine.
                await self._exited(proc, REAP_WAIT)
        # The leader is gone; children it left in its group go too.
        if _group_alive(proc.pid):
            _signal_group(proc.pid, signal.SIGTERM)
            if not await self._group_gone(proc.pid, KILL_WAIT):
                _signal_group(proc.pid, signal.SIGKILL)
        if proc.returncode is not None:
            _LIVE_GROUPS.discard(proc.pid)
            self.returncode = proc.returncode
        else:
            log.warning("a stdio MCP server (pid %d) outlived the kill", proc.pid)
        close_transport(proc)

    @staticmethod
    async def _exited(proc: asyncio.subprocess.Process, seconds: float) -> bool:
        # Not proc.wait(): on 3.11 it also waits for the pipes to close, which a child the
        # server left behind can hold open.
        for _ in range(max(1, int(seconds / POLL))):
            if proc.returncode is not None:
                return True
            await anyio.sleep(POLL)
        return proc.returncode is not None

    @staticmethod
    async def _group_gone(pgid: int, seconds: float) -> bool:
        for _ in range(max(1, int(seconds / POLL))):
            if not _group_alive(pgid):
                return True
            await anyio.sleep(POLL)
        return not _group_alive(pgid)
