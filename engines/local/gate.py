"""One server on this computer, one piece of work at a time: the person's turn first.

A local server has one model in memory and (on two cores) no room for two requests at once:
the bundled runtime has one slot, so a turn sent while learning streams would wait for all of
it, and some servers cut a streaming answer short when a second request arrives (the bundled
runtime's earlier server did, and a fold turn then failed whenever learning started beside it).
So requests to a local server go through a ``ServerGate``:

- *foreground* requests (the person's turn, and the summary a fold inside that turn needs)
  never wait for background work: a background request that is streaming is stopped at once,
  its HTTP response closed, and the turn goes ahead;
- *background* requests (learning, titles, prepared summaries, calibration) run one at a time
  and only while no turn is streaming on that server; stopped by a turn, they fail with
  ``GaveWayError`` and their caller tries again later (nothing is marked read).

Which kind a request is comes from the caller's context (``background()``), so the adapters'
one ``stream(request)`` method serves both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

from engines.base import Event, ModelInfo, ProblemKind
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError, closing_stream

_BACKGROUND: ContextVar[bool] = ContextVar("conch_background_request", default=False)


@contextlib.contextmanager
def _raised(flag: ContextVar[bool]) -> Iterator[None]:
    token = flag.set(True)
    try:
        yield
    finally:
        flag.reset(token)


def background() -> contextlib.AbstractContextManager[None]:
    """Requests made inside this block are background work: they give way to a turn."""
    return _raised(_BACKGROUND)


def in_background() -> bool:
    return _BACKGROUND.get()


_FOR_THE_CHAT: ContextVar[bool] = ContextVar("conch_read_for_the_chat", default=False)


def for_the_chat() -> contextlib.AbstractContextManager[None]:
    """Background requests made inside this block read the chat's own next prompt ahead (the
    chat as it is, or with the summary its next turn sends): a server with a slot for each
    kind of work reads them in the chat's slot, where that turn looks for its prefix."""
    return _raised(_FOR_THE_CHAT)


def reads_for_the_chat() -> bool:
    return _FOR_THE_CHAT.get()


class GaveWayError(ProviderError):
    """A background request stopped so the person's turn could use the server."""

    def __init__(self) -> None:
        super().__init__(ProblemKind.CANCELLED, "gave way to the person's turn")


class ServerGate:
    """Who may use one local server now. All methods run on the event loop's thread."""

    def __init__(self) -> None:
        self._foreground = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._background_lock = asyncio.Lock()
        self._running_background: set[asyncio.Event] = set()
        self.gave_way = 0  # how many background requests were stopped for a turn (Health, tests)

    @property
    def busy(self) -> bool:
        """Whether a turn is using the server."""
        return self._foreground > 0

    @property
    def working(self) -> bool:
        """Whether the server is reading or answering anything for Conch, a turn or background
        work: a slow answer to anything else then means busy, not gone."""
        return self._foreground > 0 or bool(self._running_background)

    @contextlib.asynccontextmanager
    async def foreground(self) -> AsyncIterator[None]:
        self._foreground += 1
        self._idle.clear()
        for stop in list(self._running_background):
            stop.set()
        # Wait until the stopped background requests have closed their responses, so the
        # server is free when the turn's request arrives.
        async with self._background_lock:
            pass
        try:
            yield
        finally:
            self._foreground -= 1
            if self._foreground == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def background(self) -> AsyncIterator[asyncio.Event]:
        """Hold the server for one background request; the event is set when it must stop."""
        while True:
            await self._idle.wait()
            await self._background_lock.acquire()
            if self._foreground == 0:
                break
            self._background_lock.release()  # a turn came in meanwhile: wait again
        stop = asyncio.Event()
        self._running_background.add(stop)
        try:
            yield stop
        finally:
            self._running_background.discard(stop)
            self._background_lock.release()


class GatedAdapter:
    """A local server's adapter with its ``ServerGate`` in front of ``stream``."""

    def __init__(self, inner: ProviderAdapter, gate: ServerGate | None = None) -> None:
        self.inner = inner
        self.gate = gate or ServerGate()
        self.name = inner.name
        self.label = inner.label
        self.local = inner.local

    async def list_models(self) -> list[ModelInfo]:
        return await self.inner.list_models()

    def cheap_models(self) -> tuple[str, ...]:
        return self.inner.cheap_models()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """Count through the gate like any request: some servers cut a streaming answer short
        when another request (even a count) arrives."""
        count = getattr(self.inner, "count_tokens", None)
        if count is None:
            return None
        if in_background():
            async with self.gate.background():
                counted: int | None = await count(request)
                return counted
        async with self.gate.foreground():
            counted = await count(request)
            return counted

    def __getattr__(self, name: str) -> object:
        # Adapter-specific extras (the bundled runtime, Ollama's context_for) stay reachable.
        return getattr(self.inner, name)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if not in_background():
            async with self.gate.foreground(), closing_stream(self.inner.stream(request)) as ev:
                async for event in ev:
                    yield event
            return
        async with self.gate.background() as stop:
            if stop.is_set():
                raise GaveWayError()
            async with closing_stream(self.inner.stream(request)) as events:
                iterator = aiter(events)
                stopped = asyncio.ensure_future(stop.wait())
                following: asyncio.Future[Event] | None = None
                try:
                    while True:
                        following = asyncio.ensure_future(anext(iterator))
                        await asyncio.wait(
                            {following, stopped}, return_when=asyncio.FIRST_COMPLETED
                        )
                        if not following.done():
                            following.cancel()
                            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                                await following
                            self.gate.gave_way += 1
                            raise GaveWayError()
                        try:
                            event = following.result()
                        except StopAsyncIteration:
                            return
                        yield event
                finally:
                    stopped.cancel()
                    if following is not None and not following.done():
                        # Cancelled from outside (the caller stopped waiting): the pending read
                        # must end before the stream can be closed and its response hung up.
                        following.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await following


def gated(adapter: ProviderAdapter) -> ProviderAdapter:
    """``adapter`` behind a gate when it is a server on this computer, else as it is."""
    if not adapter.local or isinstance(adapter, GatedAdapter):
        return adapter
    return GatedAdapter(adapter)
