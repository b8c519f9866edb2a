"""The tool loop's parts: which tools a chat has, asking the person, running one call.

When a model's answer ends with tool calls, ``ApiSession`` runs each call here and asks the
model again, at most ``MAX_ROUNDS`` times a turn. One call goes: arguments checked (not JSON,
a required field missing: the model is told, nothing runs), Conch's own lean-mode tools
answered without asking, an unknown tool named, the person asked (``ToolHost.approve``; an
"Always for this tool" is remembered for the chat), then the tool run through its server with
a time limit. Whatever happens, the model gets one tool message back, and the window one
``ToolResult``: a failure is a sentence, never an exception, and the turn goes on.

What the model is sent of a result is shortened at once when it is bigger than a share of the
budget (``engines.tools.rules.result_cap``); the event keeps the whole text for the chat log.
No Qt; the servers (``engines.tools.servers.ToolServers``) and the approver are injected.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engines.base import (
    Approval,
    Message,
    ToolApprover,
    ToolAsk,
    ToolCallData,
    ToolResult,
    ToolStarted,
    ToolStatus,
)
from engines.tools import approvals, lean
from engines.tools.catalogue import Catalogue
from engines.tools.rules import shorten_tool_result, unknown_tool
from engines.tools.servers import CALL_TIMEOUT, ToolOutcome
from engines.window import estimate_tokens

MAX_ROUNDS = 8  # tool rounds a turn may take; the model's next calls are then not run
PREVIEW_LINES = 4  # lines of a result a tool row shows before it is opened
PREVIEW_CHARS = 400
CANCEL_GRACE = 10.0  # seconds past the call's own limit before Conch stops waiting regardless

ROUNDS_TEXT = (
    "The model asked for tools {n} times in this answer, the most Conch runs in one turn, so "
    "it stopped here. Send a message to let it go on."
)
NO_TOOLS_MODEL = (
    "{model} cannot use tools on this server, so this chat's tools were not offered to it. "
    "Pick a model that can use tools to use them."
)
NOT_RUN = (
    "Not run: this answer already used tools {n} times, the most allowed in one turn. Tell the "
    "person what you found so far."
)
DENIED = "The person did not allow this call. Do not try it again; answer without it."
STOPPED = "The person stopped this call before it finished."
NO_APPROVER = "Not run: nobody was there to allow this call. (Headless: pass --allow-tools {tool}.)"


class ToolRunner(Protocol):
    """What runs tools: ``engines.tools.servers.ToolServers`` (or a test's stand-in)."""

    async def catalogue(self, allowed: Collection[str] | None = None) -> Catalogue: ...

    async def call(
        self,
        catalogue: Catalogue,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        time_limit: float = CALL_TIMEOUT,
    ) -> ToolOutcome | None: ...


def _servers(runner: ToolRunner) -> list[Any]:
    """The runner's servers, where it lets them be listed (``ToolServers`` and the app's
    settings-backed runner do): each has ``id``, ``name`` and ``state``."""
    servers: list[Any] = []
    if isinstance(runner, Iterable):
        servers.extend(runner)
    return servers


def server_names(runner: ToolRunner) -> dict[str, str]:
    """Server id -> the name the person gave it, where the runner knows its servers."""
    return {str(s.id): str(s.name) for s in _servers(runner)}


def unavailable(runner: ToolRunner, allowed: Collection[str] | None) -> dict[str, str]:
    """Server id -> a sentence, for each server this chat may use that failed to start."""
    out: dict[str, str] = {}
    for server in _servers(runner):
        state: Any = getattr(server, "state", None)
        sid = str(server.id)
        if (allowed is None or sid in allowed) and getattr(state, "phase", "") == "failed":
            out[sid] = (
                f"The tool server “{server.name}” is not available ({state.reason}), so its "
                "tools were left out. Start it again in Settings → Tools."
            )
    return out


@dataclass
class ToolHost:
    """A chat's tools: the servers it may use, who allows a call, and what it remembers.

    ``allowed``: the ids of the servers this chat may use (None: every enabled one); the app
    may change it between turns (the per-chat toggles). ``approve`` None denies every call that
    would need an OK (and says so). ``always`` holds the tools the person allowed for the rest
    of the chat, each with its server (keys from ``engines.tools.approvals``; ``--allow-tools``
    names them with ``approvals.by_name``); ``loaded`` the lean-mode tools whose schemas the model
    fetched, sent in full from then on.
    """

    runner: ToolRunner
    approve: ToolApprover | None = None
    allowed: Collection[str] | None = None
    time_limit: float = CALL_TIMEOUT
    always: set[str] = field(default_factory=set)
    loaded: list[str] = field(default_factory=list)

    async def catalogue(self) -> Catalogue:
        return await self.runner.catalogue(self.allowed)

    def ready_catalogue(self) -> Catalogue:
        """The tools of this chat's servers that are running already (none is started), where
        the runner can tell (``ToolServers.ready_catalogue``); empty otherwise."""
        ready = getattr(self.runner, "ready_catalogue", None)
        if ready is None:
            return Catalogue()
        found = ready(self.allowed)
        return found if isinstance(found, Catalogue) else Catalogue()


def specs_for(
    catalogue: Catalogue, loaded: Sequence[str], *, lean_mode: bool
) -> tuple[dict[str, Any], ...]:
    """The tool list a request sends: every schema, or in lean mode the two small tools and
    the fetched ones."""
    if lean_mode:
        return lean.lean_specs(catalogue, loaded)
    return catalogue.specs()


def preview(text: str) -> str:
    """The first lines of a result, as a collapsed tool row shows them."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()][:PREVIEW_LINES]
    out = "\n".join(lines)
    if len(out) > PREVIEW_CHARS:
        out = out[: PREVIEW_CHARS - 1].rstrip() + "…"
    return out


def _check_arguments(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> str | None:
    """Why the arguments cannot be right (said to the model), or None. The server checks the
    rest; this spares the person a question about a call that cannot work."""
    if "_unparsed" in arguments:
        return "The arguments were not valid JSON. Call the tool again with a JSON object."
    if "_value" in arguments and len(arguments) == 1:
        return "The arguments must be a JSON object of named fields. Call the tool again."
    required = parameters.get("required") if isinstance(parameters, Mapping) else None
    if isinstance(required, list):
        missing = [str(r) for r in required if isinstance(r, str) and r not in arguments]
        if missing:
            return (
                f"Missing required argument{'s' if len(missing) > 1 else ''}: "
                + ", ".join(missing)
                + ". Call the tool again with them."
            )
    return None


@dataclass
class CallOutcome:
    """One call's end: the tool message for the model and the event for the window."""

    message: Message
    event: ToolResult


def _finish(
    call: ToolCallData,
    server: str,
    status: ToolStatus,
    text: str,
    cap: int,
    seconds: float = 0.0,
    *,
    outside: bool = False,
) -> CallOutcome:
    sent = shorten_tool_result(text, cap)
    shortened = estimate_tokens(text) > cap
    message = Message(
        role="tool",
        text=sent,
        tool_call_id=call.id,
        tool_name=call.name,
        tool_failed=status != "done",
        untrusted=True,
    )
    event = ToolResult(
        call_id=call.id,
        tool=call.name,
        server=server,
        arguments=dict(call.arguments),
        status=status,
        text=text,
        preview=preview(sent),
        seconds=seconds,
        shortened=shortened,
        sent_chars=len(sent),
        total_chars=len(text),
        untrusted=outside,
    )
    return CallOutcome(message, event)


def not_run(call: ToolCallData, rounds: int, cap: int) -> CallOutcome:
    """A call past the round limit: answered without running, so the transcript stays whole."""
    return _finish(call, "", "not-run", NOT_RUN.format(n=rounds), cap)


def stopped(call: ToolCallData, cap: int) -> CallOutcome:
    return _finish(call, "", "stopped", STOPPED, cap)


async def run_call(
    host: ToolHost | None,
    catalogue: Catalogue,
    call: ToolCallData,
    *,
    lean_mode: bool,
    cap: int,
    servers: Mapping[str, str] | None = None,
    out: list[CallOutcome],
) -> AsyncGenerator[ToolStarted, None]:
    """Run one call as described in the module docstring; the outcome is appended to ``out``.

    Yields ``ToolStarted`` once the call runs (after the person's OK). Cancelling the caller
    cancels the call on its server; the caller then answers the call with ``stopped``.
    """
    names = servers or {}
    tool = catalogue.find(call.name)
    server = names.get(tool.server, tool.server) if tool is not None else ""
    arguments = dict(call.arguments)

    if host is None:
        out.append(_finish(call, "", "unknown", unknown_tool(call.name, ()), cap))
        return
    if lean_mode and (lean.is_meta(call.name) or tool is not None):
        reply = lean.answer(catalogue, call.name, arguments, host.loaded)
        if reply is not None:
            host.loaded[:] = list(reply.loaded)
            # Conch answers its own tools: no server, nothing from outside.
            yield ToolStarted(call_id=call.id, tool=call.name, arguments=arguments)
            status: ToolStatus = "invalid" if reply.error else "done"
            out.append(_finish(call, "", status, reply.text, cap))
            return
    if tool is None:
        out.append(_finish(call, "", "unknown", unknown_tool(call.name, catalogue.names()), cap))
        return
    wrong = _check_arguments(arguments, tool.parameters)
    if wrong is not None:
        out.append(_finish(call, server, "invalid", wrong, cap))
        return

    if not approvals.allowed(host.always, host.runner, tool):
        if host.approve is None:
            text = NO_APPROVER.format(tool=call.name)
            out.append(_finish(call, server, "denied", text, cap))
            return
        ask = ToolAsk(
            call_id=call.id,
            tool=call.name,
            server=server,
            description=lean.one_line(tool.description),
            arguments=arguments,
        )
        answer = await host.approve(ask)
        if answer is Approval.ALWAYS:
            host.always.add(approvals.key_for(host.runner, tool))
        elif answer is not Approval.ONCE:
            out.append(_finish(call, server, "denied", DENIED, cap))
            return

    yield ToolStarted(call_id=call.id, tool=call.name, server=server, arguments=arguments)
    began = time.monotonic()
    try:
        # The server's own limit answers first; this one only guards a server that never does.
        async with asyncio.timeout(host.time_limit + CANCEL_GRACE):
            outcome = await host.runner.call(
                catalogue, call.name, arguments, time_limit=host.time_limit
            )
    except TimeoutError:
        text = (
            f"“{call.name}” did not finish within {host.time_limit:g} seconds; Conch stopped "
            "waiting for it."
        )
        out.append(_finish(call, server, "failed", text, cap, time.monotonic() - began))
        return  # Conch's own words: nothing came from the server
    seconds = time.monotonic() - began
    if outcome is None:
        out.append(
            _finish(call, server, "unknown", unknown_tool(call.name, catalogue.names()), cap)
        )
        return
    text = outcome.text
    if outcome.pictures:
        n = len(outcome.pictures)
        text += f"\n[{n} picture{'s' if n > 1 else ''} from the tool not shown to the model]"
    status = "failed" if outcome.error else "done"
    out.append(_finish(call, server, status, text, cap, outcome.seconds or seconds, outside=True))
