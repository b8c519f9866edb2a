"""Codex as an engine: a Conch chat is one Codex thread, driven by ``codex exec --json``.

Why ``exec --json`` and not the app-server protocol: it is Codex's documented machine-readable
mode, one short process per turn resumed by thread id (``codex exec resume <id>``), so a turn
that goes wrong leaves nothing running and a restart of Conch resumes the same thread. Its
events come per item (a whole message, a command run), not per word, so an answer arrives a
message at a time. ``exec`` never stops to ask: what Codex may do is its sandbox
(``sandbox``, read-only unless set), so there is no permission question to hand over.

``exec`` offers no ``/compact`` and reports no compaction, so this engine does not declare the
context capability: Codex keeps and compacts its thread by itself, and ``/compact`` on such a
chat says so. ``oss`` runs Codex on a model of this computer (``--oss`` with Ollama or LM
Studio), which keeps the chat local.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from engines.base import (
    Done,
    Event,
    HandedOff,
    Note,
    Problem,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    TurnInput,
    TurnProblem,
    Usage,
)
from engines.context.session import FoldLoader, HistoryLoader, render_attachments
from engines.programs import problems
from engines.programs.handoff import HANDOFF_CHARS, ChatHandoff
from engines.programs.process import IDLE_TIMEOUT, SessionFile, keep_stderr, last_words, reap, start

PROGRAM = "Codex"
INSTALL = "npm install -g @openai/codex"
LOGIN = "codex login"
EXIT_SECONDS = 10.0  # Codex ends by itself after its last line; then it is stopped
LINE_LIMIT = 16 * 1024 * 1024
MODE = "JSON (codex exec --json)"
_LOST = re.compile(r"no (rollout|session|thread|conversation)|not found", re.I)
_AUTH = re.compile(r"\b401\b|unauthori[sz]ed|not logged in|api key", re.I)

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]


class CodexEngine:
    """One chat on Codex."""

    def __init__(
        self,
        *,
        chat_id: str,
        state_dir: Path,
        cwd: Path,
        history: HistoryLoader,
        latest_fold: FoldLoader,
        command: Sequence[str] = ("codex",),
        model: str | None = None,
        oss: Literal["ollama", "lmstudio"] | None = None,
        config: Sequence[str] = (),  # extra ``-c key=value`` overrides (a custom provider)
        sandbox: Sandbox = "read-only",
        env: Mapping[str, str] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        handoff_chars: int = HANDOFF_CHARS,
    ) -> None:
        self.chat_id = chat_id
        self.session = SessionFile(state_dir, chat_id)
        self.cwd = cwd
        self._history = history
        self._latest_fold = latest_fold
        self.command = tuple(command)
        self._model = model
        self._oss = oss
        self._config = tuple(config)
        self._sandbox = sandbox
        self._env = dict(env or {})
        self.idle_timeout = idle_timeout
        self.handing = ChatHandoff(history, latest_fold, PROGRAM, handoff_chars)
        self._stderr = last_words()
        self._lock = asyncio.Lock()

    @property
    def thread_id(self) -> str:
        return self.session.session_id

    # -- Engine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        async with self._lock:
            message = render_attachments(turn.text, turn.attachments)
            resumed = bool(self.session.session_id)
            prompt, handed = (message, None) if resumed else self._handoff(turn.seq, message)
            lost = False
            async for event in self._run(prompt, resumed=resumed, handed=handed):
                if isinstance(event, _Lost):
                    lost = True
                    break
                yield event
            if lost:
                # Codex no longer has the thread: start a new one, handed the chat so far.
                self.session.forget()
                prompt, handed = self._handoff(turn.seq, message)
                async for event in self._run(prompt, resumed=False, handed=handed):
                    if not isinstance(event, _Lost):
                        yield event

    async def aclose(self) -> None:
        return None

    # -- internals --

    def _handoff(self, seq: int, message: str) -> tuple[str, HandedOff | None]:
        handoff, handed = self.handing(seq, message)
        return handoff.text, handed

    def _argv(self, *, resumed: bool) -> list[str]:
        argv = [*self.command, "exec", "--json", "--skip-git-repo-check", "-s", self._sandbox]
        for item in self._config:
            argv += ["-c", item]
        if self._oss is not None:
            argv += ["--oss", "--local-provider", self._oss]
        if self._model:
            argv += ["-m", self._model]
        if resumed:
            argv += ["resume", self.session.session_id]
        # The prompt goes on stdin ("-"), never on the command line: an argument is limited
        # to 128 KiB (a long paste failed with "Argument list too long") and anyone on the
        # computer can read a process's arguments with ``ps``.
        return [*argv, "-"]

    async def _run(
        self, prompt: str, *, resumed: bool, handed: HandedOff | None = None
    ) -> AsyncIterator[Event | _Lost]:
        """One ``codex exec`` process; ``handed``: the handoff it is given (said once Codex
        has started the thread with it)."""
        self._stderr.clear()
        argv = self._argv(resumed=resumed)
        proc = await start(
            PROGRAM,
            self.command,
            argv[len(self.command) :],
            cwd=self.cwd,
            env=self._env,
            install=INSTALL,
            limit=LINE_LIMIT,
            stdin=True,
        )
        if isinstance(proc, TurnProblem):
            yield Problem(problem=proc)
            return
        assert proc.stdout is not None and proc.stderr is not None
        loop = asyncio.get_running_loop()
        pump = loop.create_task(keep_stderr(proc.stderr, self._stderr))
        feed = loop.create_task(_feed(proc, prompt))
        wrote = False
        finished = False
        messages = 0
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(proc.stdout.readline(), self.idle_timeout)
                except TimeoutError:
                    yield Problem(
                        problem=problems.silent(PROGRAM, self.idle_timeout, partial=wrote)
                    )
                    return
                except (ValueError, OSError) as exc:  # a line past LINE_LIMIT
                    line = f"(unreadable output: {type(exc).__name__})"
                    yield Problem(
                        problem=problems.not_protocol(PROGRAM, line, partial=wrote, mode=MODE)
                    )
                    return
                if not raw:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(proc.wait(), EXIT_SECONDS)
                    await asyncio.sleep(0)
                    yield self._ended(proc.returncode, resumed=resumed, wrote=wrote)
                    return
                text = raw.decode("utf-8", "replace").strip()
                if not text:
                    continue
                try:
                    data = json.loads(text)
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    yield Problem(
                        problem=problems.not_protocol(PROGRAM, text, partial=wrote, mode=MODE)
                    )
                    return
                kind = data.get("type")
                if kind == "thread.started":
                    self.session.remember(data.get("thread_id"))
                    if handed is not None:
                        yield handed
                elif kind in ("item.started", "item.completed"):
                    for event in self._item(data.get("item"), kind, messages):
                        if isinstance(event, TextDelta):
                            wrote = True
                            messages += 1
                        yield event
                elif kind == "turn.completed":
                    yield from_usage(data.get("usage"), self.session)
                    finished = True
                    yield Done()
                    return
                elif kind in ("turn.failed", "error"):
                    said = _message_of(data)
                    if resumed and not wrote and _LOST.search(said):
                        yield _Lost()
                        return
                    yield Problem(problem=self._failed(said, wrote))
                    return
        finally:
            # Codex ends by itself after its last event; stopped or broken, it is killed.
            await reap(proc, grace=EXIT_SECONDS if finished else 0.0)
            for task in (feed, pump):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def _item(self, item: Any, kind: str, messages: int) -> list[Event]:
        if not isinstance(item, dict):
            return []
        what = item.get("type")
        done = kind == "item.completed"
        if what == "agent_message" and done and item.get("text"):
            gap = "\n\n" if messages else ""  # messages of one turn read as paragraphs
            return [TextDelta(text=gap + str(item["text"]))]
        if what == "reasoning" and done and item.get("text"):
            return [ThinkingDelta(text=str(item["text"]))]
        if what == "command_execution" and not done:
            args = {"command": str(item.get("command", ""))}
            return [
                ToolCall(
                    call=ToolCallData(id=str(item.get("id", "")), name="shell", arguments=args)
                )
            ]
        if what == "file_change" and done:
            changes = item.get("changes")
            listed: dict[str, Any] = {"changes": changes if isinstance(changes, list) else []}
            return [
                ToolCall(
                    call=ToolCallData(
                        id=str(item.get("id", "")), name="file_change", arguments=listed
                    )
                )
            ]
        if what == "error" and done and item.get("message"):
            # A warning Codex carries on after (unknown model metadata, ...): for Health.
            return [Note(topic="other", text=f"Codex: {item['message']}"[:500])]
        return []

    def _ended(self, code: int | None, *, resumed: bool, wrote: bool) -> Event | _Lost:
        said = "\n".join(self._stderr)
        if resumed and not wrote and _LOST.search(said):
            return _Lost()
        if _AUTH.search(said):
            return Problem(problem=problems.not_logged_in(PROGRAM, LOGIN))
        return Problem(problem=problems.exited(PROGRAM, code, self._stderr, partial=wrote))

    def _failed(self, said: str, wrote: bool) -> TurnProblem:
        if _AUTH.search(said):
            return problems.not_logged_in(PROGRAM, LOGIN)
        return problems.reported(PROGRAM, said or "the turn failed", partial=wrote)


class _Lost:
    """Codex no longer has the chat's thread (its files were removed)."""


async def _feed(proc: asyncio.subprocess.Process, prompt: str) -> None:
    """Write the prompt to Codex's stdin and close it (Codex reads to the end before it
    starts). A Codex that ends first closes the pipe; what it said then is the problem."""
    assert proc.stdin is not None
    with contextlib.suppress(ConnectionError, OSError):
        proc.stdin.write(prompt.encode("utf-8"))
        await proc.stdin.drain()
    with contextlib.suppress(ConnectionError, OSError):
        proc.stdin.close()


def _message_of(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))
    return str(data.get("message", "") or error or "")


def from_usage(usage: Any, session: SessionFile) -> Usage:
    usage = usage if isinstance(usage, dict) else {}
    fresh = int(usage.get("input_tokens") or 0)
    cached = int(usage.get("cached_input_tokens") or 0)
    session.set_used(fresh)
    return Usage(
        input_tokens=fresh,
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=cached,
    )
