"""Claude Code as an engine: a Conch chat is one Claude Code session.

Claude Code keeps the chat itself and compacts it when it grows, so this engine declares the
context capability by handing compaction over: ``compact(focus)`` sends Claude Code its own
``/compact <focus>``, and every ``compact_boundary`` it reports (asked for, or automatic)
becomes Conch's ``Compacted`` with the summary Claude Code wrote, so the same divider shows.

Driven through the ``claude-agent-sdk`` package, which runs the ``claude`` CLI (its wheel
carries one). Each turn starts the CLI resumed on the chat's session id, kept in
``<state_dir>/<chat-id>.json``; a chat that had no session yet (new, or moved here from
another model) starts one with the bounded handoff of the chat so far. Permission questions go
to ``approve``; without one Conch declines and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    CLIConnectionError,
    CLIJSONDecodeError,
    CLINotFoundError,
    McpServerConfig,
    PermissionMode,
    PermissionResultAllow,
    PermissionResultDeny,
    ProcessError,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from engines.base import (
    Approval,
    Approver,
    Compacted,
    Done,
    Event,
    FoldLoader,
    HandedOff,
    HistoryLoader,
    ModelInfo,
    Note,
    PermissionAsk,
    Problem,
    ProblemKind,
    ProgramMode,
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
from engines.programs.handoff import HANDOFF_CHARS, KEEPS_ITS_OWN, ChatHandoff
from engines.programs.mcp import ClaudeServers, SharedSource, claude_servers
from engines.programs.process import IDLE_TIMEOUT, SessionFile, last_words
from engines.providers.base import default_next_step
from engines.window import estimate_tokens

log = logging.getLogger(__name__)

PROGRAM = "Claude Code"
INSTALL = "npm install -g @anthropic-ai/claude-code"
LOGIN = "claude /login"
KEY_VARIABLE = "ANTHROPIC_API_KEY"  # a key here is used before a login
# Conch's permission modes as Claude Code names them (its --permission-mode).
PERMISSION_MODES: dict[ProgramMode, PermissionMode] = {
    "ask": "default",
    "accept-edits": "acceptEdits",
    "plan": "plan",
}
FINISH_SECONDS = 30.0  # the CLI's own shutdown is bounded at about 20 seconds

# Claude Code's own words around the summary it carries after a compaction.
_SUMMARY_LEAD = "The summary below covers the earlier portion of the conversation."
_SUMMARY_OPENERS = ("This session is being continued from a previous conversation",)
_SUMMARY_ENDS = (
    "\nIf you need specific details from before compaction",
    "\nContinue the conversation from where it left off",
    "\nPlease continue the conversation from where",
)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.S)
_NO_SESSION = re.compile(r"no conversation found|session .*not found", re.I)


def _refused_key(data: dict[str, Any]) -> bool:
    return data.get("error_status") in (401, 403) or data.get("error") == "authentication_failed"


def summary_from(text: str) -> str:
    """The summary inside the message Claude Code continues a compacted session with."""
    body = _REMINDER.sub("", text)
    if _SUMMARY_LEAD in body:
        body = body.split(_SUMMARY_LEAD, 1)[1]
    for end in _SUMMARY_ENDS:
        cut = body.find(end)
        if cut >= 0:
            body = body[:cut]
    body = body.strip()
    if body.lower().startswith("summary:"):
        body = body[len("summary:") :].strip()
    return body


def text_of(message: UserMessage) -> str:
    """A user message's text (a string when asked for, text blocks when automatic)."""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


def is_summary_message(message: UserMessage) -> bool:
    return text_of(message).startswith(_SUMMARY_OPENERS)


# --- one run of the CLI -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Finished:
    error: BaseException | None = None


class _Run:
    """The CLI answering one prompt, its messages put on a queue by a task of its own."""

    def __init__(self, options: ClaudeAgentOptions, prompt: str) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run(options, prompt))

    async def _run(self, options: ClaudeAgentOptions, prompt: str) -> None:
        try:
            async with ClaudeSDKClient(options) as client:
                await client.query(prompt)
                async for message in client.receive_response():
                    self.queue.put_nowait(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the turn, which says what happened
            self.queue.put_nowait(_Finished(exc))
            return
        self.queue.put_nowait(_Finished())

    async def finish(self) -> None:
        """Let the CLI end by itself after its result (closing it cleanly), else stop it."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.task), FINISH_SECONDS)
        await self.stop()

    async def stop(self) -> None:
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


@dataclass(frozen=True)
class _Call:
    """A tool call Claude Code made, waiting for its result."""

    tool: str
    arguments: dict[str, Any]
    started: float  # time.monotonic() when the call arrived


def result_text(content: str | list[dict[str, Any]] | None) -> str:
    """A tool result's words (a string, or text blocks; a picture is named, not kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            parts.append("[a picture]")
    return "\n".join(parts)


def _tokens(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class _Turn:
    """What one turn has seen so far; the message handlers read and change it."""

    name: str  # the model's name, for the divider
    first_kept_seq: int  # where Claude Code's word-for-word memory starts after a compaction
    resumed: bool  # the run resumes a session (which Claude Code may have lost)
    handed: HandedOff | None  # the handoff the prompt is, said once the session has started
    run: _Run
    wrote: bool = False  # some answer text arrived
    streamed: set[str] = field(default_factory=set)  # messages whose text came as deltas
    gap: bool = False  # a new assistant message began after text: it starts a paragraph
    boundary: bool = False  # Claude Code compacted; its summary message follows
    calls: dict[str, _Call] = field(default_factory=dict)  # by tool_use id, until the result
    request: Mapping[str, Any] = field(default_factory=dict)  # the newest request's usage
    model: str = ""  # the model the newest request went to
    compacted_to: int = 0  # about the tokens the session holds after a compaction (its summary)
    lost: bool = False  # Claude Code no longer has the session: start anew with the handoff
    over: bool = False  # the turn's Done or Problem is said


_Handler = Callable[[_Turn, Any], Awaitable[list[Event]]]


def reported_window(result: ResultMessage, model: str) -> int:
    """The window the CLI reports for ``model`` (the one the turn's answer came from), or for
    its only model; 0 when it reports none."""
    usage = result.model_usage or {}
    found = usage.get(model) if model else None
    if found is None and len(usage) == 1:
        found = next(iter(usage.values()))
    window = found.get("contextWindow") if found is not None else None
    return window if isinstance(window, int) and window > 0 else 0


def bundled_cli() -> Path | None:
    """The ``claude`` CLI the Claude Agent SDK's wheel carries (what the SDK runs first)."""
    import claude_agent_sdk

    name = "claude.exe" if os.name == "nt" else "claude"
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / name
    return path if path.is_file() else None


def login_command(cli_path: str | None) -> str:
    """How to log in to the CLI the engine runs: ``claude /login`` when that is what a terminal
    would run; the CLI's own path when it came from the SDK's wheel and no ``claude`` is on
    the PATH (or it was set in Settings)."""
    if cli_path:
        return LOGIN if cli_path == "claude" else f"{shlex.quote(cli_path)} /login"
    bundled = bundled_cli()
    if bundled is not None and shutil.which("claude") is None:
        return f"{shlex.quote(str(bundled))} /login"
    return LOGIN


class ClaudeCodeEngine:
    """One chat on Claude Code (a ``ContextEngine``: compaction is handed over)."""

    def __init__(
        self,
        *,
        chat_id: str,
        state_dir: Path,
        cwd: Path,
        history: HistoryLoader,
        latest_fold: FoldLoader,
        approve: Approver | None = None,
        model: str | None = None,
        cli_path: str | None = None,
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
        self._approve = approve
        self._model = model
        self._mode: ProgramMode | None = None  # the chat's choice, read at each turn
        self._chosen_model = ""  # the chat's choice of model, read at each turn
        self._cli_path = cli_path
        self._env = dict(env or {})
        self.idle_timeout = idle_timeout
        self.handing = ChatHandoff(history, latest_fold, PROGRAM, handoff_chars)
        self._stderr = last_words()
        self._asking = 0
        self._declined: list[str] = []
        self._denied: set[str] = set()  # the tool_use ids of calls the person did not allow
        self._lock = asyncio.Lock()
        # What each message of the CLI means for the turn, by its type.
        self._handlers: dict[type, _Handler] = {
            _Finished: self._on_finished,
            SystemMessage: self._on_system,
            UserMessage: self._on_user,
            StreamEvent: self._on_stream,
            AssistantMessage: self._on_assistant,
            ResultMessage: self._on_result,
        }

    @property
    def session_id(self) -> str:
        return self.session.session_id

    # -- Engine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        async with self._lock:
            self._mode, self._chosen_model = turn.program_mode, turn.program_model
            message = render_attachments(turn.text, turn.attachments)
            handed: HandedOff | None = None
            prompt = message
            if not self.session.session_id:
                prompt, handed = self._handoff(turn.seq, message)
            drive = self._drive(prompt, turn.model, first_kept_seq=turn.seq, handed=handed)
            async for event in drive:
                yield event

    async def compact(
        self, focus: str = "", *, model: ModelInfo | None = None
    ) -> AsyncIterator[Event]:
        async with self._lock:
            name = model.name if model is not None else PROGRAM
            if not self.session.session_id:
                yield Note(topic="other", text="There is nothing to summarise yet.")
                yield Done()
                return
            logged = self._history()
            next_seq = (max(seq for seq, _ in logged) + 1) if logged else 0
            command = f"/compact {' '.join(focus.split())}".rstrip()
            drive = self._drive(command, model, first_kept_seq=next_seq, name=name, restart=False)
            async for event in drive:
                yield event

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        # What the newest request read, of the window the CLI reported (Claude Code keeps its
        # own answer room); the model's listed window until it has reported one.
        return self.session.used, self.session.window or model.context

    async def aclose(self) -> None:
        return None

    # -- internals --

    def _handoff(self, seq: int, message: str) -> tuple[str, HandedOff | None]:
        handoff, handed = self.handing(seq, message)
        return handoff.text, handed

    async def _anew(self, run: _Run, seq: int, message: str) -> tuple[_Run, HandedOff | None]:
        """Claude Code no longer has the session (its files were removed): a new one, handed
        the chat so far."""
        self.session.forget()
        await run.stop()
        prompt, handed = self._handoff(seq, message)
        return _Run(self._options(), prompt), handed

    def _servers(self) -> ClaudeServers:
        """Conch's MCP servers, read as each run starts (none unless the person allowed it)."""
        if self._tools is None:
            return ClaudeServers()
        servers, left_out = self._tools()
        for sentence in left_out:
            log.info("%s: %s", PROGRAM, sentence)
        return claude_servers(servers)

    def _options(self) -> ClaudeAgentOptions:
        self._stderr.clear()
        self.cwd.mkdir(parents=True, exist_ok=True)
        tools = self._servers()
        return ClaudeAgentOptions(
            resume=self.session.session_id or None,
            cwd=str(self.cwd),
            # The servers' secrets only here: the CLI expands the references to them.
            env={**self._env, **tools.env},
            # Its forms are TypedDicts; ``claude_servers`` builds them as plain dicts.
            mcp_servers=cast("dict[str, McpServerConfig]", tools.servers),
            model=self._chosen_model or self._model,
            permission_mode=PERMISSION_MODES[self._mode] if self._mode else None,
            cli_path=self._cli_path,
            include_partial_messages=True,
            can_use_tool=self._can_use_tool,
            stderr=self._stderr.append,
        )

    async def _can_use_tool(
        self, tool: str, arguments: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        what = (
            arguments.get("description") or arguments.get("command") or arguments.get("file_path")
        )
        title = f"use {tool}" + (f" ({what})" if isinstance(what, str) and what else "")
        choice = Approval.DENY
        self._asking += 1
        try:
            if self._approve is not None:
                choice = await self._approve(PermissionAsk(PROGRAM, title, tool))
        finally:
            self._asking -= 1
        if choice is not Approval.DENY:
            return PermissionResultAllow(updated_input=arguments)
        self._declined.append(title)
        if context.tool_use_id:
            self._denied.add(context.tool_use_id)
        return PermissionResultDeny(message="The person did not allow this.")

    async def _drive(
        self,
        prompt: str,
        model: ModelInfo | None,
        *,
        first_kept_seq: int,
        name: str = "",
        restart: bool = True,
        handed: HandedOff | None = None,
    ) -> AsyncIterator[Event]:
        """Run the CLI on ``prompt``; ``restart``: a lost session starts anew with the handoff;
        ``handed``: the handoff ``prompt`` is, said once Claude Code has started its session.

        Each message the CLI sends goes to the handler for its type (``_handlers``), which says
        what the person sees and whether the turn is over or must start again."""
        self._declined = []
        self._denied = set()
        turn = _Turn(
            name=name or (model.name if model is not None else PROGRAM),
            first_kept_seq=first_kept_seq,
            resumed=restart and bool(self.session.session_id),
            handed=handed,
            run=_Run(self._options(), prompt),
        )
        try:
            while not turn.over:
                try:
                    # Not ``wait_for``: on Python 3.11 it drops a Stop that comes as the
                    # program's next message does.
                    async with asyncio.timeout(self.idle_timeout):
                        item = await turn.run.queue.get()
                except TimeoutError:
                    if self._asking:
                        continue  # the person is deciding
                    silent = problems.silent(PROGRAM, self.idle_timeout, partial=turn.wrote)
                    yield Problem(problem=silent)
                    return
                # By the message's class or the nearest it comes from (the SDK's task
                # messages are system messages of their own class).
                kinds = type(item).__mro__
                handler = next((self._handlers[k] for k in kinds if k in self._handlers), None)
                if handler is None:
                    continue
                for event in await handler(turn, item):
                    yield event
                if turn.lost:
                    turn.run, turn.handed = await self._anew(turn.run, first_kept_seq, prompt)
                    turn.resumed = turn.lost = False
        finally:
            await turn.run.stop()

    async def _on_finished(self, turn: _Turn, item: _Finished) -> list[Event]:
        """The CLI's run ended: without its result message, or with an error."""
        if item.error is None:
            turn.over = True
            return [
                Problem(problem=problems.exited(PROGRAM, None, self._stderr, partial=turn.wrote))
            ]
        if turn.resumed and not turn.wrote and self._lost_session(str(item.error)):
            turn.lost = True
            return []
        turn.over = True
        return [Problem(problem=self._problem(item.error, partial=turn.wrote))]

    async def _on_system(self, turn: _Turn, item: SystemMessage) -> list[Event]:
        if item.subtype == "init":
            self.session.remember(item.data.get("session_id"))
            if turn.handed is not None:
                handed, turn.handed = turn.handed, None
                return [handed]
        elif item.subtype == "compact_boundary":
            turn.boundary = True
            # The requests before it read the chat as it was; only later ones measure it now.
            turn.request = {}
        elif item.subtype == "api_retry" and _refused_key(item.data):
            # Claude Code would retry a refused key for minutes; say it now.
            turn.over = True
            return [Problem(problem=self._not_logged_in())]
        return []

    async def _on_user(self, turn: _Turn, item: UserMessage) -> list[Event]:
        if turn.boundary and is_summary_message(item):
            turn.boundary = False
            summary = summary_from(text_of(item)) or KEEPS_ITS_OWN
            turn.compacted_to = estimate_tokens(text_of(item))
            return [Compacted(first_kept_seq=turn.first_kept_seq, summary=summary, model=turn.name)]
        if item.parent_tool_use_id is not None or isinstance(item.content, str):
            return []  # a sub-agent's tools are its own; a string is no tool's result
        results = [b for b in item.content if isinstance(b, ToolResultBlock)]
        return [self._tool_result(turn, b) for b in results if b.tool_use_id in turn.calls]

    def _tool_result(self, turn: _Turn, block: ToolResultBlock) -> ToolResult:
        """How one of Claude Code's tool calls ended, for its tool row and the chat log."""
        call = turn.calls.pop(block.tool_use_id)
        text = result_text(block.content)
        denied = block.tool_use_id in self._denied
        status = "denied" if denied else "failed" if block.is_error else "done"
        return ToolResult(
            call_id=block.tool_use_id,
            tool=call.tool,
            server=PROGRAM,
            arguments=call.arguments,
            status=status,
            text=text,
            preview=preview(text),
            seconds=0.0 if denied else max(0.0, time.monotonic() - call.started),
            total_chars=len(text),
            sent_chars=len(text),
            # What a tool read or ran came from outside the person; Conch's own refusal not.
            untrusted=not denied,
        )

    async def _on_stream(self, turn: _Turn, item: StreamEvent) -> list[Event]:
        if item.parent_tool_use_id is not None:
            return []  # a sub-agent's words are its own
        started = item.event.get("type") == "message_start"
        turn.gap = turn.gap or (turn.wrote and started)
        message = item.event.get("message")
        if started and isinstance(message, dict) and isinstance(message.get("usage"), dict):
            turn.request = message["usage"]  # what this request read, for the meter
        out: list[Event] = []
        for event in self._delta(item.event, turn.streamed):
            if isinstance(event, TextDelta) and turn.gap:
                # Claude Code's messages of one turn read as paragraphs, not run together
                # ("Let me run it.Understood;").
                event, turn.gap = TextDelta(text="\n\n" + event.text), False
            turn.wrote = turn.wrote or isinstance(event, TextDelta)
            out.append(event)
        return out

    async def _on_assistant(self, turn: _Turn, item: AssistantMessage) -> list[Event]:
        if item.parent_tool_use_id is not None:
            return []
        out: list[Event] = []
        for block in item.content:
            if isinstance(block, TextBlock) and item.message_id not in turn.streamed:
                if block.text:
                    out.append(TextDelta(text=("\n\n" if turn.wrote else "") + block.text))
                turn.wrote = turn.wrote or bool(block.text)
            elif isinstance(block, ToolUseBlock):
                call = ToolCallData(id=block.id, name=block.name, arguments=block.input)
                turn.calls[block.id] = _Call(block.name, dict(block.input), time.monotonic())
                # Claude Code runs it (after asking the person, when it must): its row shows
                # it running until the result comes.
                out.append(ToolCall(call=call))
                out.append(
                    ToolStarted(
                        call_id=block.id, tool=block.name, server=PROGRAM, arguments=block.input
                    )
                )
        if item.usage:
            turn.request = item.usage
        turn.model = item.model or turn.model
        return out

    async def _on_result(self, turn: _Turn, item: ResultMessage) -> list[Event]:
        lost = item.is_error and self._lost_session(" ".join(item.errors or []))
        if turn.resumed and not turn.wrote and lost:
            turn.lost = True
            return []
        turn.over = True
        out: list[Event] = []
        if turn.boundary:
            out.append(
                Compacted(
                    first_kept_seq=turn.first_kept_seq, summary=KEEPS_ITS_OWN, model=turn.name
                )
            )
        await turn.run.finish()
        return out + self._result(turn, item)

    def _delta(self, event: dict[str, Any], streamed: set[str]) -> list[Event]:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("id"), str):
                streamed.add(message["id"])
            return []
        if kind != "content_block_delta":
            return []
        delta = event.get("delta") or {}
        if delta.get("type") == "text_delta" and delta.get("text"):
            return [TextDelta(text=str(delta["text"]))]
        if delta.get("type") == "thinking_delta" and delta.get("thinking"):
            return [ThinkingDelta(text=str(delta["thinking"]))]
        return []

    def _result(self, turn: _Turn, result: ResultMessage) -> list[Event]:
        """The turn's end: the meter's figures, then Done or the problem.

        The meter is what the newest request read (never the sum of the turn's requests: each
        one reads the whole session again) against the window the CLI reports for its model."""
        wrote = turn.wrote
        self.session.remember(result.session_id)
        events: list[Event] = []
        # After /compact no request followed the compaction: the summary is what it holds.
        request = turn.request or ({} if turn.compacted_to else result.usage or {})
        if not request and turn.compacted_to:
            self.session.set_used(turn.compacted_to)
        read = _tokens(request, "cache_read_input_tokens")
        write = _tokens(request, "cache_creation_input_tokens")
        fresh = _tokens(request, "input_tokens")
        self.session.set_window(reported_window(result, turn.model))
        if fresh or read or write:
            self.session.set_used(fresh + read + write)
            events.append(
                Usage(
                    input_tokens=fresh,
                    output_tokens=_tokens(result.usage or {}, "output_tokens"),
                    cache_read_tokens=read,
                    cache_write_tokens=write,
                )
            )
        if result.is_error:
            events.append(Problem(problem=self._result_problem(result, wrote)))
        elif self._declined and not wrote:
            events.append(
                Problem(
                    problem=problems.declined(
                        PROGRAM, self._declined[0], asked_person=self._approve is not None
                    )
                )
            )
        else:
            events += [problems.declined_note(PROGRAM, what) for what in self._declined]
            reason = "length" if result.stop_reason == "max_tokens" else "stop"
            events.append(Done(stop_reason=reason))
        return events

    def _result_problem(self, result: ResultMessage, wrote: bool) -> TurnProblem:
        said = " ".join([*(result.errors or []), result.result or ""]).strip() or result.subtype
        status = result.api_error_status
        if status in (401, 403) or "login" in said.lower() or "api key" in said.lower():
            return self._not_logged_in()
        if status == 429:
            return TurnProblem.of(
                ProblemKind.RATE_LIMITED,
                detail=said,
                partial=wrote,
                next_step=default_next_step(ProblemKind.RATE_LIMITED),
            )
        return problems.reported(PROGRAM, said, partial=wrote)

    def _problem(self, error: BaseException, *, partial: bool) -> TurnProblem:
        if isinstance(error, CLINotFoundError):
            return problems.missing(PROGRAM, (self._cli_path or "claude",), INSTALL)
        if isinstance(error, CLIJSONDecodeError):
            return problems.not_protocol(
                PROGRAM, str(error.line), partial=partial, mode="Claude Code's JSON"
            )
        if isinstance(error, ProcessError):
            lines = [*self._stderr, *(error.stderr or "").splitlines()]
            said = "\n".join(lines).lower()
            if "login" in said or "api key" in said or "authentication" in said:
                return self._not_logged_in()
            return problems.exited(PROGRAM, error.exit_code, lines, partial=partial)
        if isinstance(error, CLIConnectionError):
            return problems.did_not_start(PROGRAM, f"{error}.", self._stderr)
        return problems.reported(PROGRAM, f"{type(error).__name__}: {error}", partial=partial)

    def _not_logged_in(self) -> TurnProblem:
        key = KEY_VARIABLE if {**os.environ, **self._env}.get(KEY_VARIABLE) else ""
        return problems.not_logged_in(PROGRAM, login_command(self._cli_path), key=key)

    def _lost_session(self, error: str) -> bool:
        said = "\n".join([error, *self._stderr])
        return bool(_NO_SESSION.search(said))
