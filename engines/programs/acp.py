"""An ACP program (Gemini CLI, GitHub Copilot CLI, any Agent Client Protocol agent) as an engine.

Conch is the ACP client (the ``agent-client-protocol`` SDK). The program runs as a child
process started from its command line and stays up between turns. A chat is one ACP session:
opened with the handoff of the chat so far (``handoff.py``), then prompted with each new
message only. Its id is kept in the chat's session file, so when the agent advertises
``loadSession`` a Conch started again resumes it with ``session/load``; a session the agent no
longer has (or cannot load), or one that missed messages of the chat (the person spoke to
another model, or asked again) is replaced by a new one handed the chat. The program keeps its
own context, which is why this engine does not declare the context capability: ``/compact``
on such a chat says the program manages it.

What the agent does besides answering shows as Conch's events: its tool calls and their
updates as tool rows with their status and output (``_Calls``), its plan as one row. Its
slash commands are kept (``slash_commands``, in a file beside the session file). Conch's MCP
servers go in ``session/new`` and ``session/load`` only when the person allowed it for the
program (``mcp_servers``).

Trouble is read from the process itself: a command that is not there, a line on stdout that
is not JSON (a program started without its ACP flag prints a banner), a process that ends
mid-turn, a permission the person declines, and silence longer than ``idle_timeout``. Each
becomes one ``TurnProblem`` with a next step; what arrived before it is kept by the
conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AudioContentBlock,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ContentToolCallContent,
    DeniedOutcome,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    PermissionOption,
    PlanEntry,
    PromptResponse,
    RequestPermissionResponse,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from engines.base import (
    Approval,
    Approver,
    Done,
    Event,
    FoldLoader,
    HandedOff,
    HistoryLoader,
    PermissionAsk,
    Problem,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolStarted,
    ToolStatus,
    TurnInput,
    TurnProblem,
    Usage,
    render_attachments,
)
from engines.context.tool_loop import preview
from engines.files import write_atomically
from engines.programs import problems
from engines.programs.handoff import HANDOFF_CHARS, ChatHandoff
from engines.programs.mcp import AcpServer, SharedSource, acp_servers
from engines.programs.process import IDLE_TIMEOUT, SessionFile, keep_stderr, last_words, reap, start
from engines.programs.slash import SlashCommand

log = logging.getLogger("conch.programs.acp")

START_TIMEOUT = 60.0  # seconds a program may take to start and answer ``initialize``
LINE_LIMIT = 50 * 1024 * 1024  # one ACP message may carry pictures
AUTH_REQUIRED = -32000  # ACP's "authentication required" error code
MODE = "ACP"

# The ACP option kinds that carry out each of the card's answers, best first. "Allow once"
# never becomes an "always" option: without an ``allow_once`` the request is declined, since
# granting more than the person chose is not Conch's to decide. "Always" falls back to
# once (less than asked, so the program asks again next time).
_KINDS: dict[Approval, tuple[str, ...]] = {
    Approval.ONCE: ("allow_once",),
    Approval.ALWAYS: ("allow_always", "allow_once"),
    Approval.DENY: ("reject_once", "reject_always"),
}


def option_for(choice: Approval, options: Sequence[PermissionOption]) -> PermissionOption | None:
    """The option the program offered that does what the person chose, by its kind, never by
    its place in the list; ``None`` when it offered none (the request is then cancelled)."""
    for kind in _KINDS[choice]:
        for option in options:
            if option.kind == kind:
                return option
    return None


def error_text(error: RequestError) -> str:
    """An ACP error in the agent's own words: its message, and what its ``data`` says (agents
    put the real cause there; the message alone is often just "Internal error")."""
    said = str(error).strip()
    data = error.data
    found: list[str] = []
    if isinstance(data, str):
        found.append(data)
    elif isinstance(data, Mapping):
        for key in ("message", "details", "detail", "error", "reason"):
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                found.append(value)
            elif isinstance(value, Mapping) and isinstance(value.get("message"), str):
                found.append(value["message"])
        if not found and data:
            with contextlib.suppress(TypeError, ValueError):
                found.append(json.dumps(data, ensure_ascii=False))
    own = " ".join(" ".join(x.split()) for x in found if x.strip())
    if not own or own in said:
        return said
    if not said or said.lower() in {"internal error", "unknown error"}:
        return own
    return f"{said}: {own}"


def _commands_from(update: AvailableCommandsUpdate) -> tuple[SlashCommand, ...]:
    out: list[SlashCommand] = []
    for command in update.available_commands:
        name = " ".join(command.name.split()).lstrip("/")
        if not name or " " in name:
            continue
        given = command.input.root if command.input is not None else None
        hint = getattr(given, "hint", "") or ""
        out.append(SlashCommand(name, " ".join(command.description.split()), str(hint)))
    return tuple(out)


# What an ACP tool call's status becomes on its tool row.
_ENDED: dict[str, ToolStatus] = {"completed": "done", "failed": "failed"}
NO_END = "The program did not say how this call ended."
DECLINED = "You did not allow it."
PLAN_TOOL = "Plan"
PLAN_ID = "plan"
_PLAN_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


def plan_text(entries: Sequence[PlanEntry]) -> str:
    """The agent's plan as lines with a mark for each step's status: ``[x] done``."""
    return "\n".join(
        f"{_PLAN_MARKS.get(e.status, '[ ]')} {' '.join(e.content.split())}" for e in entries
    )


def _content_text(update: ToolCallStart | ToolCallProgress) -> str:
    """What a call gave back, as text: its text blocks, each file edit as a diff of the file,
    and otherwise the raw output the agent reported."""
    parts: list[str] = []
    for item in update.content or ():
        if isinstance(item, ContentToolCallContent):
            block = item.content
            if isinstance(block, TextContentBlock):
                parts.append(block.text)
            elif isinstance(block, ResourceContentBlock):
                parts.append(block.uri)
        elif isinstance(item, FileEditToolCallContent):
            old = (item.old_text or "").splitlines()
            new = item.new_text.splitlines()
            diff = difflib.unified_diff(old, new, item.path, item.path, lineterm="")
            parts.append("\n".join(diff) or item.path)
    if not parts and update.raw_output is not None:
        raw = update.raw_output
        parts.append(raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False))
    return "\n".join(p for p in parts if p)


@dataclass
class _Call:
    id: str
    title: str
    arguments: dict[str, Any]
    began: float
    started: bool = False
    ended: bool = False
    text: str = ""


class _Calls:
    """The turn's tool calls, folded from ``tool_call`` and ``tool_call_update`` into Conch's
    ``ToolCall`` (the row appears), ``ToolStarted`` (it runs) and ``ToolResult`` (how it ended,
    with what it gave back: the conversation keeps it in the chat log, untrusted)."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.calls: dict[str, _Call] = {}
        self.declined: set[str] = set()

    def update(self, update: ToolCallStart | ToolCallProgress) -> list[Event]:
        events: list[Event] = []
        call = self.calls.get(update.tool_call_id)
        args = update.raw_input if isinstance(update.raw_input, dict) else None
        if call is None:
            call = _Call(
                update.tool_call_id,
                " ".join((update.title or "a tool").split()),
                dict(args or {}),
                time.monotonic(),
            )
            self.calls[call.id] = call
            data = ToolCallData(id=call.id, name=call.title, arguments=call.arguments)
            events.append(ToolCall(call=data))
        elif call.ended:
            return events
        else:
            if update.title:
                call.title = " ".join(update.title.split())
            if args is not None:
                call.arguments = dict(args)
        text = _content_text(update)
        if text:
            call.text = text
        status = update.status
        if status in ("in_progress", "completed", "failed") and not call.started:
            call.started = True
            events.append(self._started(call))
        if status in _ENDED:
            events.append(self._end(call, _ENDED[status], call.text))
        return events

    def _started(self, call: _Call) -> ToolStarted:
        return ToolStarted(
            call_id=call.id, tool=call.title, server=self.program, arguments=call.arguments
        )

    def _end(self, call: _Call, status: ToolStatus, text: str, *, outside: bool = True) -> Event:
        call.ended = True
        return ToolResult(
            call_id=call.id,
            tool=call.title,
            server=self.program,
            arguments=call.arguments,
            status=status,
            text=text,
            preview=preview(text),
            seconds=round(time.monotonic() - call.began, 3),
            sent_chars=len(text),
            total_chars=len(text),
            untrusted=outside,
        )

    def decline(self, call_id: str) -> list[Event]:
        """The person did not allow the call: its row says so at once."""
        call = self.calls.get(call_id)
        if call is None or call.ended:
            return []
        return [self._end(call, "denied", DECLINED, outside=False)]

    def unfinished(self) -> list[Event]:
        """Rows for calls the agent never finished, so none is left running."""
        out: list[Event] = []
        for call in self.calls.values():
            if not call.ended:
                text = call.text or NO_END
                out.append(self._end(call, "stopped", text, outside=bool(call.text)))
        return out


@dataclass(frozen=True)
class _End:
    response: PromptResponse | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class _NotProtocol:
    line: str


@dataclass(frozen=True)
class _Refused:
    """The program ended, or printed something else, before it answered ``initialize``."""

    problem: TurnProblem


_Item = Event | _End | _NotProtocol
_Block = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)


class _Process:
    """One running program: its process, the ACP connection and what it said on stderr."""

    def __init__(self, proc: asyncio.subprocess.Process, client: _Client) -> None:
        self.proc = proc
        self.stderr = last_words()
        self.reader = asyncio.StreamReader(limit=LINE_LIMIT)
        self.client = client
        assert proc.stdin is not None and proc.stderr is not None
        # _Client implements the part of acp.Client an agent may call (no files, no terminal).
        self.conn: ClientSideConnection = connect_to_agent(
            cast(Client, client), proc.stdin, self.reader
        )
        self.info: InitializeResponse | None = None
        self.sessions: set[str] = set()  # the ACP sessions open in this process
        self._pumps = [
            asyncio.get_running_loop().create_task(self._pump_stdout()),
            asyncio.get_running_loop().create_task(keep_stderr(proc.stderr, self.stderr)),
        ]

    async def _pump_stdout(self) -> None:
        # Only JSON objects reach the SDK: it would skip anything else silently, and a turn
        # would wait for an answer that never comes.
        assert self.proc.stdout is not None
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                stripped = line.strip()
                if not stripped:
                    continue
                try:
                    ok = isinstance(json.loads(stripped), dict)
                except ValueError:
                    ok = False
                if ok:
                    self.reader.feed_data(stripped + b"\n")
                else:
                    self.client.put(_NotProtocol(stripped.decode("utf-8", "replace")))
        except (OSError, ValueError) as exc:  # a line past LINE_LIMIT, a closed pipe
            self.client.put(_NotProtocol(f"(unreadable output: {type(exc).__name__})"))
        finally:
            self.reader.feed_eof()

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    @property
    def loads(self) -> bool:
        """Whether the agent resumes a session of an earlier process (``session/load``)."""
        caps = self.info.agent_capabilities if self.info is not None else None
        return bool(caps is not None and caps.load_session)

    async def stop(self) -> None:
        """Close the connection, then stop the program and wait until it is reaped."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.close(), 2.0)
        await reap(self.proc)
        for task in self._pumps:
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)


class _Client:
    """The ACP client side: session updates become Conch events on the current turn's queue."""

    def __init__(
        self,
        program: str,
        approve: Approver | None,
        on_commands: Callable[[tuple[SlashCommand, ...]], None] | None = None,
    ) -> None:
        self.program = program
        self.approve = approve
        self.on_commands = on_commands
        self.queue: asyncio.Queue[_Item] | None = None
        self.asking = 0  # permission questions waiting for the person (no idle deadline then)
        self.declined: list[str] = []
        self.unoffered: set[str] = set()  # allowed by the person, but in no way it offered
        self.replaying = False  # a loaded session's conversation, replayed: not this turn's
        self.calls = _Calls(program)
        self.plan: list[PlanEntry] = []
        self.plan_shown = False  # the plan's row is up this turn

    def new_turn(self) -> None:
        self.declined = []
        self.unoffered = set()
        self.calls = _Calls(self.program)
        self.plan = []
        self.plan_shown = False

    def put(self, item: _Item) -> None:
        if self.queue is not None:
            self.queue.put_nowait(item)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AvailableCommandsUpdate):
            # Also while a loaded session is replayed: agents send them right after a load.
            if self.on_commands is not None:
                self.on_commands(_commands_from(update))
            return
        if self.replaying:
            return
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.put(TextDelta(text=update.content.text))
        elif isinstance(update, AgentThoughtChunk) and isinstance(update.content, TextContentBlock):
            self.put(ThinkingDelta(text=update.content.text))
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            for event in self.calls.update(update):
                self.put(event)
        elif isinstance(update, AgentPlanUpdate):
            # Each update is the whole plan; its row shows the last one when the turn ends.
            self.plan = list(update.entries)
            if self.plan and not self.plan_shown:
                self.plan_shown = True
                self.put(ToolCall(call=ToolCallData(id=PLAN_ID, name=PLAN_TOOL)))
                self.put(ToolStarted(call_id=PLAN_ID, tool=PLAN_TOOL, server=self.program))
        # Modes and usage gauges have no Conch event yet.

    def closing(self) -> list[Event]:
        """The plan's row and the rows of calls left unfinished, as the turn ends."""
        events = self.calls.unfinished()
        if self.plan_shown:
            text = plan_text(self.plan)
            events.append(
                ToolResult(
                    call_id=PLAN_ID,
                    tool=PLAN_TOOL,
                    server=self.program,
                    status="done",
                    text=text,
                    preview=preview(text),
                    sent_chars=len(text),
                    total_chars=len(text),
                    untrusted=True,
                )
            )
            self.plan_shown = False
        return events

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        title = tool_call.title or "do something"
        choice = Approval.DENY
        self.asking += 1
        try:
            if self.approve is not None:
                choice = await self.approve(
                    PermissionAsk(self.program, title, tool_call.kind or "")
                )
        finally:
            self.asking -= 1
            self.put(_Activity)
        chosen = option_for(choice, options)
        if chosen is None or chosen.kind.startswith("reject"):
            self.declined.append(title)
            for event in self.calls.decline(tool_call.tool_call_id):
                self.put(event)
            if choice is not Approval.DENY:
                self.unoffered.add(title)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    # The client offers no files and no terminal (ClientCapabilities says so), so an agent
    # never calls the rest; these answer plainly if one does.
    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None


class _ActivityMark:
    """Something happened (a question answered) though no event is due: restart the clock."""


_Activity: Any = _ActivityMark()


def _report_end(client: _Client, task: asyncio.Future[PromptResponse]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    client.put(_End(error=error) if error is not None else _End(response=task.result()))


class AcpEngine:
    """One chat on an ACP program. ``command`` is the program and its arguments."""

    def __init__(
        self,
        *,
        program: str,
        command: Sequence[str],
        cwd: Path,
        history: HistoryLoader,
        latest_fold: FoldLoader,
        approve: Approver | None = None,
        chat_id: str = "",
        state_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        login: str = "",
        install: str = "",
        idle_timeout: float = IDLE_TIMEOUT,
        start_timeout: float = START_TIMEOUT,
        handoff_chars: int = HANDOFF_CHARS,
        older: Sequence[Sequence[str]] = (),
        mcp_servers: SharedSource | None = None,
    ) -> None:
        self.program = program
        self.command = tuple(command)
        # Commands an older version of the program takes instead, tried in turn when it
        # refuses ``command`` at once (Gemini CLI before its ACP flag became ``--acp``).
        self._older = [tuple(c) for c in older]
        self.cwd = cwd
        self._history = history
        self._latest_fold = latest_fold
        self._approve = approve
        self._env = dict(env or {})
        self._login = login
        self._install = install
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.handing = ChatHandoff(history, latest_fold, program, handoff_chars)
        # The chat's ACP session (in memory only without a ``state_dir``).
        self.session = SessionFile(state_dir, chat_id)
        # Conch's MCP servers, when the person lets this program have them (read as a session
        # starts, so a change in Settings → Tools reaches the next one).
        self._mcp_servers = mcp_servers
        # The agent's slash commands, kept beside the session file so "/" offers them before
        # the first turn after a restart.
        self._commands_path = (
            state_dir / f"{chat_id}.commands.json" if state_dir is not None else None
        )
        self._commands = self._read_commands()
        self._process: _Process | None = None
        self._lock = asyncio.Lock()  # one turn at a time on one process

    # -- Engine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        async with self._lock:
            inner = cast(AsyncGenerator[Event, None], self._turn(turn))
            try:
                async for event in inner:
                    yield event
            finally:
                await inner.aclose()

    async def aclose(self) -> None:
        if self._process is not None:
            process, self._process = self._process, None
            await process.stop()

    @property
    def slash_commands(self) -> tuple[SlashCommand, ...]:
        """The agent's own commands as it last listed them for this chat."""
        return self._commands

    # -- internals --

    def _read_commands(self) -> tuple[SlashCommand, ...]:
        if self._commands_path is None:
            return ()
        try:
            raw = json.loads(self._commands_path.read_text("utf-8"))
            return tuple(
                SlashCommand(str(c["name"]), str(c.get("description", "")), str(c.get("hint", "")))
                for c in raw["commands"]
                if raw.get("program") == self.program
            )
        except (OSError, ValueError, KeyError, TypeError):
            return ()  # none kept (or unreadable): the agent lists them again

    def _commands_changed(self, commands: tuple[SlashCommand, ...]) -> None:
        if commands == self._commands:
            return
        self._commands = commands
        if self._commands_path is None:
            return
        data = {
            "program": self.program,
            "commands": [
                {"name": c.name, "description": c.description, "hint": c.hint} for c in commands
            ],
        }
        try:
            write_atomically(self._commands_path, json.dumps(data).encode("utf-8"))
        except OSError as exc:  # only the offer after a restart is lost
            log.info("the slash commands of %s were not kept: %s", self.program, exc)

    def _servers(self, process: _Process) -> list[AcpServer]:
        """The MCP servers to give a session: none unless the person allowed it."""
        if self._mcp_servers is None:
            return []
        servers, left_out = self._mcp_servers()
        for sentence in left_out:
            log.info("%s: %s", self.program, sentence)
        caps = process.info.agent_capabilities if process.info is not None else None
        mcp = caps.mcp_capabilities if caps is not None else None
        return acp_servers(servers, http=bool(mcp is not None and mcp.http))

    async def _start(self) -> _Process | TurnProblem:
        if self._process is not None and self._process.running:
            return self._process
        if self._process is not None:
            await self._process.stop()
            self._process = None
        started = await self._launch(self.command)
        while isinstance(started, _Refused) and self._older:
            # An older version that does not know the flag: its own flag, from now on.
            self.command = self._older.pop(0)
            started = await self._launch(self.command)
        if isinstance(started, _Refused):
            return started.problem
        if isinstance(started, _Process):
            self._process = started
        return started

    async def _launch(self, command: Sequence[str]) -> _Process | TurnProblem | _Refused:
        """Start ``command`` and initialize ACP; ``_Refused`` when it ended or talked before
        answering (what a program says to a flag it does not know)."""
        proc = await start(
            self.program,
            command,
            cwd=self.cwd,
            env=self._env,
            install=self._install,
            limit=LINE_LIMIT,
            stdin=True,
        )
        if isinstance(proc, TurnProblem):
            return proc
        process = _Process(proc, _Client(self.program, self._approve, self._commands_changed))
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        process.client.queue = queue
        init = asyncio.ensure_future(
            process.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="conch", version="0.1"),
            )
        )
        garbage = asyncio.ensure_future(queue.get())
        try:
            done, _ = await asyncio.wait(
                {init, garbage}, timeout=self.start_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            garbage.cancel()
        problem: TurnProblem | None = None
        refused = False
        first = garbage.result() if garbage in done else None
        if isinstance(first, _NotProtocol):
            line = first.line
            problem = problems.not_protocol(self.program, line, partial=False, mode=MODE)
            refused = True
        elif init not in done:
            init.cancel()
            problem = problems.did_not_start(
                self.program, f"it did not answer within {self.start_timeout:g} seconds."
            )
        elif init.exception() is not None:
            await asyncio.sleep(0)  # let the stderr pump read the program's last words
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 2.0)
            code = proc.returncode
            why = (
                f"it ended at once (exit code {code})."
                if code is not None
                else f"it did not speak ACP ({init.exception()})."
            )
            problem = problems.did_not_start(self.program, why, process.stderr)
            refused = code is not None
        if problem is not None:
            init.cancel()  # nobody waits for its answer any more
            await process.stop()
            # Collected, so a failure as the connection closes is not reported as lost.
            await asyncio.gather(init, return_exceptions=True)
            return _Refused(problem) if refused else problem
        process.info = init.result()
        return process

    def _prompt_blocks(
        self, process: _Process, turn: TurnInput, *, fresh: bool
    ) -> tuple[list[_Block], HandedOff | None]:
        """The prompt: a new session's is the handoff of the chat so far, a kept one's only
        the new message."""
        new_message = render_attachments(turn.text, turn.attachments)
        handoff, handed = self.handing(turn.seq, new_message) if fresh else (None, None)
        text = handoff.text if handoff is not None else new_message
        blocks: list[_Block] = [TextContentBlock(type="text", text=text)]
        caps = process.info.agent_capabilities if process.info is not None else None
        prompt_caps = caps.prompt_capabilities if caps is not None else None
        if prompt_caps is not None and prompt_caps.image:
            blocks.extend(
                ImageContentBlock(type="image", data=p.data, mime_type=p.mime)
                for p in turn.pictures
            )
        return blocks, handed

    def _kept_session(self, seq: int) -> str:
        """The chat's session, when it has every message of the chat before ``seq``: the last
        it was given was before ``seq`` (not a message asked again), and the person said
        nothing since that it did not hear (to another model, before coming back)."""
        sid = self.session.session_id
        last = self.session.seq
        if not sid or self.session.program != self.program or last < 0 or seq <= last:
            return ""
        missed = any(m.role == "user" for s, m in self._history() if last < s < seq)
        return "" if missed else sid

    async def _open(self, process: _Process, seq: int) -> tuple[str, bool] | TurnProblem:
        """The session for the message at ``seq`` and whether it is new (to be handed the
        chat): the one this process has open, or the chat's loaded into a new process, else a
        new one."""
        sid = self._kept_session(seq)
        try:
            if sid and sid in process.sessions:
                return sid, False
            if sid and process.loads and await self._load(process, sid):
                process.sessions.add(sid)
                return sid, False
            opened = await asyncio.wait_for(
                process.conn.new_session(cwd=str(self.cwd), mcp_servers=self._servers(process)),
                self.start_timeout,
            )
        except (TimeoutError, RequestError, ConnectionError) as exc:
            await self.aclose()
            return self._session_problem(exc, process)
        process.sessions.add(opened.session_id)
        self.session.remember(opened.session_id, self.program)
        return opened.session_id, True

    async def _load(self, process: _Process, sid: str) -> bool:
        """Resume the chat's session with ``session/load``; False when the agent no longer has
        it (a new session is handed the chat then). Being logged out is raised."""
        client = process.client
        client.replaying = True  # the agent replays the session's conversation first
        try:
            await asyncio.wait_for(
                process.conn.load_session(
                    cwd=str(self.cwd), session_id=sid, mcp_servers=self._servers(process)
                ),
                self.start_timeout,
            )
        except RequestError as exc:
            if exc.code == AUTH_REQUIRED:
                raise
            log.info("%s could not load its session: %s", self.program, error_text(exc))
            return False
        finally:
            # The replay's updates arrived before the answer; let any still queued pass.
            await asyncio.sleep(0)
            client.replaying = False
        return True

    async def _turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        started = await self._start()
        if isinstance(started, TurnProblem):
            yield Problem(problem=started)
            return
        process = started
        client = process.client
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        client.queue = queue
        client.new_turn()
        opened = await self._open(process, turn.seq)
        if isinstance(opened, TurnProblem):
            yield Problem(problem=opened)
            return
        session_id, fresh = opened
        blocks, handed = self._prompt_blocks(process, turn, fresh=fresh)
        if handed is not None:
            yield handed  # where the program's memory of the chat starts
        self.session.given(turn.seq)
        prompt = asyncio.ensure_future(process.conn.prompt(session_id=session_id, prompt=blocks))
        prompt.add_done_callback(functools.partial(_report_end, client))
        wrote = False
        finished = False
        try:
            while True:
                try:
                    # Not ``wait_for``: on Python 3.11 it drops a Stop that comes as the
                    # program's next word does, and the turn then waits for nobody.
                    async with asyncio.timeout(self.idle_timeout):
                        item = await queue.get()
                except TimeoutError:
                    if client.asking:
                        continue  # the person is deciding; that is not the program hanging
                    for event in client.closing():
                        yield event
                    yield Problem(
                        problem=problems.silent(self.program, self.idle_timeout, partial=wrote)
                    )
                    await self._abandon(session_id)
                    return
                if item is _Activity:
                    continue
                if isinstance(item, _NotProtocol):
                    for event in client.closing():
                        yield event
                    yield Problem(
                        problem=problems.not_protocol(
                            self.program, item.line, partial=wrote, mode=MODE
                        )
                    )
                    await self._abandon(session_id)
                    return
                if isinstance(item, _End):
                    finished = True
                    for event in client.closing():
                        yield event
                    for event in await self._ending(item, process, wrote):
                        yield event
                    return
                if isinstance(item, TextDelta):
                    wrote = wrote or bool(item.text)
                yield item
        finally:
            client.queue = None
            if not finished and not prompt.done():
                prompt.cancel()
                # Stopped by the person (or the window closed): tell the program to stop too.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.conn.cancel(session_id=session_id), 2.0)

    async def _abandon(self, session_id: str) -> None:
        """A program that hangs or talks nonsense is stopped; the next turn starts it anew."""
        process = self._process
        if process is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.conn.cancel(session_id=session_id), 1.0)
        await self.aclose()

    async def _ending(self, end: _End, process: _Process, wrote: bool) -> list[Event]:
        if end.error is not None:
            if isinstance(end.error, RequestError):
                if end.error.code == AUTH_REQUIRED:
                    return [Problem(problem=problems.not_logged_in(self.program, self._login))]
                said = error_text(end.error)
                return [Problem(problem=problems.reported(self.program, said, partial=wrote))]
            if not isinstance(end.error, ConnectionError) and process.running:
                return [
                    Problem(problem=problems.reported(self.program, repr(end.error), partial=wrote))
                ]
            # The connection closed under the turn: the program ended.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.proc.wait(), 5.0)
            code = process.proc.returncode
            await self.aclose()
            return [
                Problem(problem=problems.exited(self.program, code, process.stderr, partial=wrote))
            ]
        response = end.response
        assert response is not None
        events: list[Event] = []
        if response.usage is not None:
            events.append(
                Usage(
                    input_tokens=response.usage.input_tokens or 0,
                    output_tokens=response.usage.output_tokens or 0,
                    cache_read_tokens=response.usage.cached_read_tokens or 0,
                    cache_write_tokens=response.usage.cached_write_tokens or 0,
                )
            )
        reason = response.stop_reason
        declined = process.client.declined
        if declined and not wrote:
            asked = self._approve is not None
            what = declined[0]
            events.append(
                Problem(
                    problem=problems.declined(
                        self.program,
                        what,
                        asked_person=asked,
                        only_always=what in process.client.unoffered,
                    )
                )
            )
        elif reason == "refusal":
            events.append(Problem(problem=problems.refused(self.program, partial=wrote)))
        elif reason == "cancelled":
            events.append(Problem(problem=TurnProblem.of(ProblemKind.CANCELLED, partial=wrote)))
        else:
            events += [problems.declined_note(self.program, what) for what in declined]
            events.append(Done(stop_reason="length" if reason == "max_tokens" else "stop"))
        return events

    def _session_problem(self, exc: BaseException, process: _Process) -> TurnProblem:
        if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
            return problems.not_logged_in(self.program, self._login)
        if isinstance(exc, asyncio.TimeoutError):
            return problems.silent(self.program, self.start_timeout, partial=False)
        if isinstance(exc, RequestError):
            return problems.reported(self.program, error_text(exc), partial=False)
        return problems.exited(self.program, process.proc.returncode, process.stderr, partial=False)
