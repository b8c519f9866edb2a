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
import collections
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from engines.api.session import FoldLoader, HistoryLoader, render_attachments
from engines.base import (
    Done,
    Event,
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
from engines.local.processes import close_transport
from engines.programs import problems
from engines.programs.handoff import HANDOFF_CHARS, build_handoff
from engines.programs.state import SessionState, load_state, save_state

PROGRAM = "Codex"
INSTALL = "npm install -g @openai/codex"
LOGIN = "codex login"
IDLE_TIMEOUT = 600.0  # seconds without a line from Codex before a turn is stopped
STDERR_LINES = 20
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
        self.state_path = state_dir / f"{chat_id}.json"
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
        self.handoff_chars = handoff_chars
        self._state = load_state(self.state_path)
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._lock = asyncio.Lock()

    @property
    def thread_id(self) -> str:
        return self._state.session_id

    # -- Engine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        async with self._lock:
            prompt = render_attachments(turn.text, turn.attachments)
            resumed = bool(self._state.session_id)
            if not resumed:
                prompt = self._handoff(turn.seq, prompt)
            lost = False
            async for event in self._run(prompt, resumed=resumed):
                if isinstance(event, _Lost):
                    lost = True
                    break
                yield event
            if lost:
                # Codex no longer has the thread: start a new one, handed the chat so far.
                self._state = SessionState()
                save_state(self.state_path, self._state)
                prompt = self._handoff(turn.seq, render_attachments(turn.text, turn.attachments))
                async for event in self._run(prompt, resumed=False):
                    if not isinstance(event, _Lost):
                        yield event

    async def aclose(self) -> None:
        return None

    # -- internals --

    def _handoff(self, seq: int, prompt: str) -> str:
        logged = [m for s, m in self._history() if s < seq]
        fold = self._latest_fold()
        summary = fold[1] if fold is not None else ""
        return build_handoff(logged, prompt, summary=summary, limit=self.handoff_chars).text

    def _argv(self, prompt: str, *, resumed: bool) -> list[str]:
        argv = [*self.command, "exec", "--json", "--skip-git-repo-check", "-s", self._sandbox]
        for item in self._config:
            argv += ["-c", item]
        if self._oss is not None:
            argv += ["--oss", "--local-provider", self._oss]
        if self._model:
            argv += ["-m", self._model]
        if resumed:
            argv += ["resume", self._state.session_id]
        # "--" so a message that starts with "-" is never read as an option.
        return [*argv, "--", prompt]

    async def _run(self, prompt: str, *, resumed: bool) -> AsyncIterator[Event | _Lost]:
        self._stderr.clear()
        self.cwd.mkdir(parents=True, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(prompt, resumed=resumed),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(self.cwd),
                env={**os.environ, **self._env},
                limit=LINE_LIMIT,
            )
        except FileNotFoundError:
            yield Problem(problem=problems.missing(PROGRAM, self.command, INSTALL))
            return
        except PermissionError:
            why = f"“{self.command[0]}” cannot be run (no permission)."
            yield Problem(problem=problems.did_not_start(PROGRAM, why))
            return
        assert proc.stdout is not None and proc.stderr is not None
        pump = asyncio.get_running_loop().create_task(self._pump(proc.stderr))
        wrote = False
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
                        await asyncio.wait_for(proc.wait(), 10.0)
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
                    self._remember(data.get("thread_id"))
                elif kind in ("item.started", "item.completed"):
                    for event in self._item(data.get("item"), kind, messages):
                        if isinstance(event, TextDelta):
                            wrote = True
                            messages += 1
                        yield event
                elif kind == "turn.completed":
                    yield from_usage(data.get("usage"), self._state, self.state_path)
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
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 10.0)
            close_transport(proc)
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

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

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, ValueError):
            async for raw in stream:
                self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def _remember(self, thread_id: object) -> None:
        if isinstance(thread_id, str) and thread_id and thread_id != self._state.session_id:
            self._state.session_id = thread_id
            save_state(self.state_path, self._state)


class _Lost:
    """Codex no longer has the chat's thread (its files were removed)."""


def _message_of(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message", ""))
    return str(data.get("message", "") or error or "")


def from_usage(usage: Any, state: SessionState, path: Path) -> Usage:
    usage = usage if isinstance(usage, dict) else {}
    fresh = int(usage.get("input_tokens") or 0)
    cached = int(usage.get("cached_input_tokens") or 0)
    if fresh:
        state.used = fresh
        save_state(path, state)
    return Usage(
        input_tokens=fresh,
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=cached,
    )
