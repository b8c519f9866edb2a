"""Codex as an engine: a Conch chat is one Codex thread, driven by ``codex exec --json``.

Why ``exec --json`` and not the app-server protocol: it is Codex's documented machine-readable
mode, one short process per turn resumed by thread id (``codex exec resume <id>``), so a turn
that goes wrong leaves nothing running and a restart of Conch resumes the same thread. Its
events come per item (a whole message, a command run), not per word, so an answer arrives a
message at a time. ``exec`` never stops to ask: what Codex may do is its sandbox
(``sandbox``, read-only unless set), so there is no permission question to hand over.

Each command Codex runs and each file change becomes a tool row kept in the chat log
(``ToolStarted`` then ``ToolResult``). The meter is the newest request of the turn against
Codex's window for its model: ``exec`` reports only the turn's sum, so both are read from the
thread's own record (the rollout file Codex keeps under ``CODEX_HOME``).

``exec`` offers no ``/compact`` and reports no compaction, so this engine does not declare the
context capability: Codex keeps and compacts its thread by itself, and ``/compact`` on such a
chat says so. ``oss`` runs Codex on a model of this computer (``--oss`` with Ollama or LM
Studio), which keeps the chat local.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from engines.base import (
    Done,
    Event,
    FoldLoader,
    HandedOff,
    HistoryLoader,
    ModelInfo,
    Note,
    Problem,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolStarted,
    TurnInput,
    TurnProblem,
    Usage,
    render_attachments,
)
from engines.context.tool_loop import preview
from engines.programs import problems
from engines.programs.handoff import HANDOFF_CHARS, ChatHandoff
from engines.programs.mcp import CodexServers, SharedSource, codex_config
from engines.programs.process import IDLE_TIMEOUT, SessionFile, keep_stderr, last_words, reap, start

log = logging.getLogger(__name__)

PROGRAM = "Codex"
INSTALL = "npm install -g @openai/codex"
LOGIN = "codex login"
EXIT_SECONDS = 10.0  # Codex ends by itself after its last line; then it is stopped
LINE_LIMIT = 16 * 1024 * 1024
MODE = "JSON (codex exec --json)"
_LOST = re.compile(r"no (rollout|session|thread|conversation)|not found", re.I)
ROLLOUT_TAIL = 256 * 1024  # bytes of a thread's rollout file read for its newest figures
_ACTING = ("command_execution", "file_change", "mcp_tool_call", "web_search")
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
        tools: SharedSource | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        handoff_chars: int = HANDOFF_CHARS,
    ) -> None:
        self.chat_id = chat_id
        self.session = SessionFile(state_dir, chat_id)
        self._tools = tools  # Conch's MCP servers, when the person allowed it
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
        self._started: dict[str, float] = {}  # when each running item began, by its id

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

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        """What the newest request read, of the window Codex reported for its model (the
        model's listed window until it has reported one); Codex keeps its own answer room."""
        return self.session.used, self.session.window or model.context

    async def aclose(self) -> None:
        return None

    # -- internals --

    def _handoff(self, seq: int, message: str) -> tuple[str, HandedOff | None]:
        handoff, handed = self.handing(seq, message)
        return handoff.text, handed

    def _servers(self) -> CodexServers:
        """Conch's MCP servers, read as each run starts (none unless the person allowed it)."""
        if self._tools is None:
            return CodexServers()
        servers, left_out = self._tools()
        given = codex_config(servers)
        for sentence in (*left_out, *given.left_out):
            log.info("%s: %s", PROGRAM, sentence)
        return given

    def _argv(self, *, resumed: bool, servers: CodexServers) -> list[str]:
        # The servers' overrides go before the subcommand, as Codex's own config does (never
        # a secret: those are in its environment).
        argv = [*self.command, *servers.args, "exec", "--json", "--skip-git-repo-check"]
        argv += ["-s", self._sandbox]
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
        servers = self._servers()
        argv = self._argv(resumed=resumed, servers=servers)
        proc = await start(
            PROGRAM,
            self.command,
            argv[len(self.command) :],
            cwd=self.cwd,
            env={**self._env, **servers.env},
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
        acted = False  # Codex ran something: the turn took more than one request
        try:
            while True:
                try:
                    # Not ``wait_for``: on Python 3.11 it drops a Stop that comes as the
                    # program's next line does.
                    async with asyncio.timeout(self.idle_timeout):
                        raw = await proc.stdout.readline()
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
                    item = data.get("item")
                    acted = acted or (isinstance(item, dict) and item.get("type") in _ACTING)
                    for event in self._item(item, kind, messages):
                        if isinstance(event, TextDelta):
                            wrote = True
                            messages += 1
                        yield event
                elif kind == "turn.completed":
                    yield from_usage(
                        data.get("usage"), self.session, self._newest(), one_request=not acted
                    )
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
        item_id = str(item.get("id", ""))
        if what == "agent_message" and done and item.get("text"):
            gap = "\n\n" if messages else ""  # messages of one turn read as paragraphs
            return [TextDelta(text=gap + str(item["text"]))]
        if what == "reasoning" and done and item.get("text"):
            return [ThinkingDelta(text=str(item["text"]))]
        if what == "command_execution":
            args = {"command": str(item.get("command", ""))}
            if not done:
                self._started[item_id] = time.monotonic()
                return [
                    ToolCall(call=ToolCallData(id=item_id, name="shell", arguments=args)),
                    ToolStarted(call_id=item_id, tool="shell", server=PROGRAM, arguments=args),
                ]
            ok = item.get("exit_code") == 0 and item.get("status") != "failed"
            return [self._ended_item(item_id, "shell", args, ok, item.get("aggregated_output"))]
        if what == "file_change" and done:
            changes = item.get("changes")
            listed: dict[str, Any] = {"changes": changes if isinstance(changes, list) else []}
            ok = item.get("status") != "failed"
            lines = [
                f"{c.get('kind', 'change')} {c.get('path', '')}"
                for c in listed["changes"]
                if isinstance(c, dict)
            ]
            call = ToolCallData(id=item_id, name="file_change", arguments=listed)
            ended = self._ended_item(item_id, "file_change", listed, ok, "\n".join(lines))
            return [ToolCall(call=call), ended]
        if what == "error" and done and item.get("message"):
            # A warning Codex carries on after (unknown model metadata, ...): for Health.
            return [Note(topic="other", text=f"Codex: {item['message']}"[:500])]
        return []

    def _ended_item(
        self, item_id: str, tool: str, args: dict[str, Any], ok: bool, output: Any
    ) -> ToolResult:
        """How a command or a file change of Codex's ended, for its row and the chat log."""
        text = output if isinstance(output, str) else ""
        began = self._started.pop(item_id, None)
        return ToolResult(
            call_id=item_id,
            tool=tool,
            server=PROGRAM,
            arguments=args,
            status="done" if ok else "failed",
            text=text,
            preview=preview(text),
            seconds=time.monotonic() - began if began is not None else 0.0,
            total_chars=len(text),
            sent_chars=len(text),
            untrusted=True,  # what a command printed came from outside the person
        )

    def _newest(self) -> dict[str, Any] | None:
        """The thread's newest figures from Codex's own record of it (``rollout_figures``)."""
        home = self._env.get("CODEX_HOME") or os.environ.get("CODEX_HOME")
        where = Path(home) if home else Path.home() / ".codex"
        return rollout_figures(where, self.session.session_id)

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


def rollout_figures(codex_home: Path, thread_id: str) -> dict[str, Any] | None:
    """The newest ``token_count`` figures Codex recorded for the thread (its ``info``:
    ``last_token_usage``, ``model_context_window``), read from the end of the thread's rollout
    file under ``<codex_home>/sessions``; None when there is none to read."""
    if not thread_id:
        return None
    try:
        found = sorted((codex_home / "sessions").rglob(f"rollout-*{thread_id}.jsonl"))
        if not found:
            return None
        with found[-1].open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - ROLLOUT_TAIL))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(tail):
        if '"token_count"' not in line:
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        payload = data.get("payload") if isinstance(data, dict) else None
        info = payload.get("info") if isinstance(payload, dict) else None
        if isinstance(info, dict):
            return info
    return None


def from_usage(
    usage: Any,
    session: SessionFile,
    newest: dict[str, Any] | None = None,
    *,
    one_request: bool = True,
) -> Usage:
    """The turn's ``Usage`` (its sum, as Codex reports it) and the meter's figures: the newest
    request's input against Codex's window (``newest``, from its record of the thread); the
    turn's input only when the turn was one request. Otherwise the meter stays as it was
    rather than show a sum of requests that each read the whole thread."""
    usage = usage if isinstance(usage, dict) else {}
    fresh = int(usage.get("input_tokens") or 0)
    cached = int(usage.get("cached_input_tokens") or 0)
    last = newest.get("last_token_usage") if newest is not None else None
    window = newest.get("model_context_window") if newest is not None else None
    if isinstance(last, dict) and isinstance(last.get("input_tokens"), int):
        session.set_used(int(last["input_tokens"]))
    elif one_request:
        session.set_used(fresh)
    if isinstance(window, int) and not isinstance(window, bool):
        session.set_window(window)
    return Usage(
        input_tokens=fresh,
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=cached,
    )
