"""MCP servers at run time, on the official ``mcp`` SDK.

A server starts when a chat first needs its tools (``tools`` or ``call``), not when Conch
starts. Its state is always one a person can read: off, waiting to be needed, starting, ready
with N tools, or failed with the reason in words. A server that stops by itself is started
again the next time it is needed, once; stopping twice in a row, or failing to start, holds it
until the person asks again (``start_again``) so a broken server does not slow every turn.
``ToolServers.stop`` (on quit) stops them all; stdio servers also die with Conch (see
``engines.tools.stdio``).

Every failure comes back as words: ``call`` never raises for a tool's or server's fault, it
returns a ``ToolOutcome`` with ``error`` set, ready to send to the model and show in the chat.
A call is cancelled by cancelling the task awaiting it; the SDK then tells the server.

The SDK is imported only when a server starts: it takes seconds to import.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import ValidationError

from engines.base import Picture
from engines.scrub import scrub
from engines.tools.catalogue import Catalogue, ServerTool, build_catalogue
from engines.tools.config import (
    HttpServer,
    MissingSecretError,
    SecretLookup,
    ServerConfig,
    StdioServer,
    resolve,
)
from engines.tools.stdio import MAX_MESSAGE_BYTES, StdioProcess

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client._transport import TransportStreams
    from mcp.shared.message import SessionMessage

log = logging.getLogger("conch.tools")

START_TIMEOUT = 30.0  # seconds from starting a server to having its tool list
CALL_TIMEOUT = 120.0  # seconds a tool may run before Conch stops waiting
LOST_WAIT = 10.0  # seconds a failed call waits to learn how the server ended
LIST_PAGES = 50  # pages of tools/list read at most (a server that pages for ever is cut off)
MAX_HTTP_MESSAGE = 64 * 1024 * 1024  # one message over HTTP larger than this is refused
HOLD_AFTER = 2  # unexpected stops in a row after which a server waits for the person
REASON_CHARS = 300

Phase = Literal["off", "idle", "starting", "ready", "failed"]


@dataclass(frozen=True)
class ServerState:
    """What Settings shows about one server."""

    phase: Phase
    tools: int = 0
    reason: str = ""  # why it failed or stopped, in words

    @property
    def text(self) -> str:
        if self.phase == "off":
            return "Off"
        if self.phase == "idle":
            if self.reason:
                return f"Stopped: {self.reason}. It starts again when a chat needs it."
            return "Starts when a chat needs it"
        if self.phase == "starting":
            return "Starting…"
        if self.phase == "ready":
            return f"Ready, {self.tools} tool{'s' if self.tools != 1 else ''}"
        return f"Failed: {self.reason}"


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call gave: the text for the model (a result, or what went wrong in words)."""

    server: str  # the server's id
    tool: str  # the tool's own name on that server
    text: str
    error: bool = False
    pictures: tuple[Picture, ...] = ()
    seconds: float = 0.0


StateListener = Callable[[str, ServerState], None]


def _version() -> str:
    try:
        return metadata.version("conch")
    except metadata.PackageNotFoundError:
        return "0"


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _seconds(n: float) -> str:
    return "1 second" if n == 1 else f"{n:g} seconds"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


# --- a transport that says when it ended --------------------------------------------------------


class _WatchedRead:
    """A read stream that sets ``ended`` when the server's side is gone."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _watched(
    transport: contextlib.AbstractAsyncContextManager[TransportStreams], ended: asyncio.Event
) -> AsyncIterator[TransportStreams]:
    async with transport as (read, write):
        yield _WatchedRead(read, ended), write
    ended.set()


# --- reading what a tool gave -------------------------------------------------------------------


def _outcome_parts(result: Any, tool: str) -> tuple[str, tuple[Picture, ...]]:
    """A CallToolResult as text (and pictures), in the order the server gave its blocks."""
    parts: list[str] = []
    pictures: list[Picture] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            pictures.append(Picture(name=f"{tool} picture", mime=block.mime_type, data=block.data))
        elif kind == "audio":
            parts.append(f"[audio ({block.mime_type}) not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.name} {block.uri}]")
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            if isinstance(text, str):
                parts.append(text)
            else:
                mime = getattr(inner, "mime_type", None) or "binary"
                parts.append(f"[resource: {inner.uri} ({mime}) not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts), tuple(pictures)


def _tool_of(server: str, tool: Any) -> ServerTool:
    return ServerTool(
        server=server,
        name=tool.name,
        description=tool.description or getattr(tool, "title", None) or "",
        parameters=dict(tool.input_schema or {}),
    )


# --- one server ---------------------------------------------------------------------------------


class ToolServer:
    """One configured MCP server: started lazily, its tools listed, its tools called."""

    def __init__(
        self,
        config: ServerConfig,
        lookup: SecretLookup = lambda _key: None,
        *,
        on_state: StateListener | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.config = config
        self._lookup = lookup
        self._on_state = on_state
        self.start_timeout = start_timeout
        self._state = ServerState("idle" if config.enabled else "off")
        self._tools: tuple[ServerTool, ...] = ()
        self._client: Client | None = None
        self._process: StdioProcess | None = None
        self._runner: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._held = False
        self._crashes = 0
        self._secrets: tuple[str, ...] = ()  # resolved secret values, kept out of every reason
        self._lost_reason = ""  # why a call found the connection gone
        self._start_scope: anyio.CancelScope | None = None  # set while a start is under way

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def held(self) -> bool:
        """It failed and waits for the person to start it again (``start_again``)."""
        return self._held

    def hold(self, reason: str) -> None:
        """Hold a server that is not running as failed, without starting it (it failed a
        moment ago in another run of Conch); ``start_again`` lifts the hold."""
        if self._state.phase == "idle" and not self._held:
            self._held = True
            self._set(ServerState("failed", reason=reason))

    @property
    def pid(self) -> int | None:
        """The stdio server's process id while it runs (for Health and tests)."""
        if self._process is None or not self._process.running:
            return None
        return self._process.pid

    def _set(self, state: ServerState) -> None:
        self._state = state
        if self._on_state is not None:
            try:
                self._on_state(self.id, state)
            except Exception:  # a listener's bug must not stop a server's life
                log.exception("a tool server state listener failed")

    def _words(self, text: str) -> str:
        """A reason fit to show and log: no secret of this server's, nor any other."""
        for value in self._secrets:
            if value and len(value) >= 4:
                text = text.replace(value, "[secret left out]")
        return _short(scrub(text))

    # --- starting ------------------------------------------------------------------------------

    async def start(self) -> ServerState:
        """Start the server if it is not running (and not off or held); wait until it is ready
        or failed. Cancelling the caller does not stop a start under way."""
        if self._state.phase in ("ready", "off") or self._held:
            return self._state
        if self._started is None or self._started.done():
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._stopping = False
            self._runner = asyncio.create_task(self._life(self._started))
        await asyncio.shield(self._started)
        return self._state

    async def start_again(self) -> ServerState:
        """The person's own retry: lifts a hold and forgets earlier failures."""
        self._held = False
        self._crashes = 0
        if self._state.phase in ("failed", "idle"):
            self._set(ServerState("idle" if self.config.enabled else "off"))
        return await self.start()

    def _transport(
        self, ended: asyncio.Event
    ) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        config = self.config
        secrets: list[str] = []

        def value(v: Any, what: str) -> str:
            text = resolve(v, self._lookup, what)
            if not isinstance(v, str):
                secrets.append(text)
            return text

        if isinstance(config, StdioServer):
            args = [value(a, f"argument {i + 1}") for i, a in enumerate(config.args)]
            env = {k: value(v, k) for k, v in config.env.items()}
            self._secrets = tuple(secrets)
            self._process = StdioProcess(config.command, args, env, config.cwd or None)
            return _watched(self._process.transport(), ended)
        url = value(config.url, "the URL")
        headers = {k: value(v, k) for k, v in config.headers.items()}
        self._secrets = tuple(secrets)
        self._process = None
        return _watched(_http_transport(url, headers), ended)

    async def _life(self, started: asyncio.Future[None]) -> None:
        """One life of the server: start, serve until stopped or lost, then say how it ended."""
        self._set(ServerState("starting"))
        reason = ""
        became_ready = False
        try:
            for mode in ("legacy", "auto"):
                became_ready, error = await self._connect(mode, started)
                if error is None or became_ready or not _modern_only(error):
                    reason = self._why(error, became_ready) if error is not None else ""
                    break
        except MissingSecretError as exc:
            reason = (
                f"the value of {exc.what} is not in the keyring any more; enter it again in "
                "Settings → Tools"
            )
        except Exception as exc:  # whatever the SDK or the system raised: words, not a trace
            log.warning("tool server %s failed: %s", self.id, self._words(repr(exc)))
            reason = self._why(exc, became_ready)
        finally:
            self._client = None
            if not started.done():
                started.set_result(None)
        if self._stopping:
            self._set(ServerState("idle" if self.config.enabled else "off"))
        elif became_ready and self._too_big():
            # Its answer was too big to read, which says nothing about the server's health.
            self._set(ServerState("idle", reason=reason or "it sent too much at once"))
        elif became_ready:
            self._crashes += 1
            why = reason or "it stopped by itself"
            if self._crashes >= HOLD_AFTER:
                self._held = True
                self._set(
                    ServerState(
                        "failed",
                        reason=f"{why}; it stopped {self._crashes} times in a row, so Conch "
                        "waits for you to start it again",
                    )
                )
            else:
                self._set(ServerState("idle", reason=why))
        else:
            self._held = True
            self._set(ServerState("failed", reason=reason or "it did not start"))

    async def _connect(
        self, mode: str, started: asyncio.Future[None]
    ) -> tuple[bool, BaseException | None]:
        """One connection, from start to its end: (whether it became ready, what ended it)."""
        from mcp import Client
        from mcp_types import Implementation

        if self._stopping:  # stopped before this start got going
            return False, None
        wake = self._wake = asyncio.Event()
        self._lost_reason = ""
        transport = self._transport(wake)
        ready = False
        error: BaseException | None = None
        try:
            # One deadline for the whole start (run, handshake, tool list), lifted once ready.
            with anyio.CancelScope(deadline=anyio.current_time() + self.start_timeout) as scope:
                self._start_scope = scope
                async with Client(
                    transport,
                    mode=mode,
                    cache=None,
                    read_timeout_seconds=self.start_timeout,
                    client_info=Implementation(name="Conch", version=_version()),
                ) as client:
                    tools = await self._list(client)
                    scope.deadline = math.inf
                    self._start_scope = None
                    self._tools = tools
                    self._client = client
                    ready = True
                    if self._process is not None:
                        self._process.mark()
                    self._set(ServerState("ready", tools=len(tools)))
                    if not started.done():
                        started.set_result(None)
                    await wake.wait()
            if scope.cancelled_caught and not ready:
                error = TimeoutError()
        except MissingSecretError:
            raise
        except Exception as exc:
            error = _leaf(exc)
            if isinstance(error, MissingSecretError):
                raise error from None
        finally:
            self._client = None
            self._start_scope = None
        if ready and error is None and not self._stopping:
            error = ConnectionError()  # the connection ended without being asked to
        return ready, error

    async def _list(self, client: Client) -> tuple[ServerTool, ...]:
        tools: list[ServerTool] = []
        cursor: str | None = None
        for _ in range(LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(_tool_of(self.id, t) for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    def _why(self, error: BaseException | None, became_ready: bool) -> str:
        """How a start failed, or how a running server ended, in words."""
        process = self._process
        ended = process.ended_words() if process is not None else ""
        said = process.said() if process is not None else ""
        spawn_failed = process is not None and process.pid is None
        if isinstance(error, OSError) and isinstance(self.config, StdioServer) and spawn_failed:
            what = error.strerror or str(error) or type(error).__name__
            return self._words(f"could not run “{self.config.command}” ({what})")
        if isinstance(error, TimeoutError) and not became_ready:
            text = f"it did not answer within {_seconds(self.start_timeout)}"
            return self._words(f"{text}; {said}" if said else text)
        parts: list[str] = []
        if ended:
            parts.append(ended)
        elif error is not None and not isinstance(error, ConnectionError):
            parts.append(_error_words(error))
        elif self._lost_reason:
            parts.append(self._lost_reason)
        elif isinstance(self.config, HttpServer):
            parts.append("the connection was lost")
        if said:
            parts.append(said)
        return self._words("; ".join(p for p in parts if p) or "it stopped")

    # --- using it --------------------------------------------------------------------------------

    @property
    def listed(self) -> tuple[ServerTool, ...]:
        """The tools it listed when it last started (() before that); starts nothing."""
        return self._tools if self._state.phase == "ready" else ()

    async def tools(self) -> tuple[ServerTool, ...]:
        """The server's tools, starting it if needed; () when it is off or failed."""
        state = await self.start()
        return self._tools if state.phase == "ready" else ()

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        time_limit: float = CALL_TIMEOUT,
    ) -> ToolOutcome:
        """Run ``tool`` with ``arguments``. Never raises for the server's or the tool's fault;
        cancelling the awaiting task cancels the call on the server too."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        began = time.monotonic()

        def outcome(text: str, *, error: bool, pictures: tuple[Picture, ...] = ()) -> ToolOutcome:
            return ToolOutcome(
                server=self.id,
                tool=tool,
                text=text,
                error=error,
                pictures=pictures,
                seconds=time.monotonic() - began,
            )

        state = await self.start()
        client = self._client
        if state.phase != "ready" or client is None:
            why = state.reason or state.text.lower()
            return outcome(f"The tool server “{self.name}” is not available: {why}.", error=True)
        runner = self._runner
        if self._process is not None:
            self._process.mark()  # what it writes to stderr from now on may explain a failure
        try:
            result = await client.call_tool(
                tool, dict(arguments or {}), read_timeout_seconds=time_limit
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return outcome(
                    f"“{tool}” did not finish within {_seconds(time_limit)}; Conch stopped waiting "
                    "and asked the server to cancel it.",
                    error=True,
                )
            if exc.code == CONNECTION_CLOSED and f"{MAX_HTTP_MESSAGE} byte" in exc.message:
                # Over HTTP the SDK drops just that answer (the connection stays up).
                return outcome(_too_big_words(tool, MAX_HTTP_MESSAGE), error=True)
            if exc.code == CONNECTION_CLOSED:
                why = "the connection closed before the answer came"
                return outcome(await self._lost(runner, why, tool), error=True)
            return outcome(
                self._words(f"The tool server “{self.name}” refused the call: {exc.message}"),
                error=True,
            )
        except ValidationError:
            return outcome(
                f"The tool server “{self.name}” answered the call with something that is not a "
                "tool result.",
                error=True,
            )
        except Exception as exc:
            # Anything else is the connection failing under the call (the SDK's own errors are
            # MCPError): end it, so the next use starts afresh.
            leaf = _leaf(exc)
            log.warning("tool call %s/%s failed: %s", self.id, tool, self._words(repr(leaf)))
            return outcome(await self._lost(runner, _error_words(leaf), tool), error=True)
        self._crashes = 0
        text, pictures = _outcome_parts(result, tool)
        return outcome(text, error=bool(result.is_error), pictures=pictures)

    def _too_big(self) -> bool:
        """The connection ended because the server sent more than Conch reads in one message."""
        return self._process is not None and self._process.too_big

    async def _lost(self, runner: asyncio.Task[None] | None, why: str, tool: str) -> str:
        """End a connection that failed under a call of ``tool``, and say what happened in
        words: a result too big to read is called that, not a server that stopped."""
        if runner is not None and not runner.done():
            self._lost_reason = why
            if self._wake is not None:
                self._wake.set()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(runner), LOST_WAIT)
        if self._too_big():
            return _too_big_words(tool, MAX_MESSAGE_BYTES) + (
                " Its server starts again the next time a tool is needed."
            )
        reason = self._state.reason or self._words(why) or "the connection was lost"
        again = (
            "Conch will not start it again until you do, in Settings → Tools."
            if self._held
            else "Conch starts it again the next time a tool is needed."
        )
        return f"The tool server “{self.name}” stopped during the call ({reason}). {again}"

    # --- stopping --------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the server and wait until it is gone (a stdio server's whole process group)."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._start_scope is not None:
            self._start_scope.cancel()  # a server still starting is not waited for
        runner = self._runner
        if runner is not None and not runner.done():
            # The transport's shutdown is shielded and bounded, so this wait is too.
            await asyncio.shield(runner)


def _too_big_words(tool: str, limit: int) -> str:
    """What the model (and the person) is told of a result larger than Conch reads."""
    return (
        f"“{tool}” returned more than {limit // (1024 * 1024)} MB, more than Conch reads from "
        "one tool call, so its result was left out. Ask it for less at a time (a smaller "
        "range, a filter)."
    )


def _modern_only(error: BaseException) -> bool:
    """The server speaks only protocol versions newer than the initialize handshake."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import UNSUPPORTED_PROTOCOL_VERSION

    return isinstance(error, MCPError) and error.code == UNSUPPORTED_PROTOCOL_VERSION


def _error_words(error: BaseException) -> str:
    from mcp.shared.exceptions import MCPError

    if isinstance(error, MCPError):
        return error.message or f"error {error.code}"
    name = type(error).__name__
    text = str(error).strip()
    if "ConnectError" in name or isinstance(error, ConnectionRefusedError):
        return f"could not connect ({text})" if text else "could not connect"
    if "Timeout" in name:
        return "the server did not answer in time"
    if "HTTPStatusError" in name:
        return text
    return text or name


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: Mapping[str, str]) -> AsyncIterator[TransportStreams]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=dict(headers)) as http,
        streamable_http_client(url, http_client=http, max_sse_event_size=MAX_HTTP_MESSAGE) as s,
    ):
        yield s


# --- all of them --------------------------------------------------------------------------------


class ToolServers:
    """Every configured MCP server; what a chat asks for tools and tool calls."""

    def __init__(
        self,
        configs: Iterable[ServerConfig] = (),
        lookup: SecretLookup = lambda _key: None,
        *,
        on_state: StateListener | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self._lookup = lookup
        self._on_state = on_state
        self.start_timeout = start_timeout
        self._servers: dict[str, ToolServer] = {}
        for config in configs:
            self._servers[config.id] = self._make(config)

    def _make(self, config: ServerConfig) -> ToolServer:
        return ToolServer(
            config, self._lookup, on_state=self._on_state, start_timeout=self.start_timeout
        )

    def __getitem__(self, server_id: str) -> ToolServer:
        return self._servers[server_id]

    def __iter__(self) -> Any:
        return iter(self._servers.values())

    def states(self) -> dict[str, ServerState]:
        return {sid: s.state for sid, s in self._servers.items()}

    async def configure(self, configs: Iterable[ServerConfig]) -> None:
        """Take a new list of servers (Settings changed): a removed or changed server is
        stopped, an unchanged one keeps running, a new one waits to be needed."""
        wanted = {c.id: c for c in configs}
        old = self._servers
        gone = [s for sid, s in old.items() if sid not in wanted or wanted[sid] != s.config]
        await asyncio.gather(*(s.stop() for s in gone))
        self._servers = {
            sid: old[sid] if sid in old and old[sid].config == c else self._make(c)
            for sid, c in wanted.items()
        }

    async def catalogue(self, allowed: Collection[str] | None = None) -> Catalogue:
        """The tools of the enabled servers a chat may use (``allowed`` ids; None: all),
        starting the ones not running yet, side by side. Failed servers add nothing."""
        servers = [
            s
            for sid, s in self._servers.items()
            if s.config.enabled and (allowed is None or sid in allowed)
        ]
        listings = await asyncio.gather(*(s.tools() for s in servers))
        return build_catalogue((s.id, tools) for s, tools in zip(servers, listings, strict=True))

    def ready_catalogue(self, allowed: Collection[str] | None = None) -> Catalogue:
        """The tools of the servers already running, without starting any: what a chat would
        be sent now (the context meter counts it before the chat's first message)."""
        ready = [
            s
            for sid, s in self._servers.items()
            if s.config.enabled and s.state.phase == "ready" and (allowed is None or sid in allowed)
        ]
        return build_catalogue((s.id, s.listed) for s in ready)

    async def call(
        self,
        catalogue: Catalogue,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        time_limit: float = CALL_TIMEOUT,
    ) -> ToolOutcome | None:
        """Run the catalogue's tool called ``name`` (as the model saw it); None when there is
        no such tool (the caller tells the model with ``rules.unknown_tool``)."""
        tool = catalogue.find(name)
        if tool is None or tool.server not in self._servers:
            return None
        return await self._servers[tool.server].call(tool.name, arguments, time_limit=time_limit)

    async def stop(self) -> None:
        """Stop every server (Conch is quitting); returns when all are gone."""
        await asyncio.gather(*(s.stop() for s in self._servers.values()))
