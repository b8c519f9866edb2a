"""The real bundled model for benchmarks: a runtime in a temp dir, and an adapter that times.

``Probe`` sits between the server gate and the bundled adapter, so it sees each request when
it really gets the server. It caps how long replies get (answers and summaries; only
``max_output_tokens`` changes) and keeps, for each request, the ``timings`` llama.cpp's server
sends with its last streamed chunk (or its whole answer): ``prompt_n`` prompt tokens it had to
evaluate, ``cache_n`` it took from the prompt it held, and how long reading took. They are read
off the HTTP answer on its way to the adapter (``TimingsTransport``), so nothing Conch sends
changes and no log is parsed.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench._common import is_summary_request
from engines.base import Event, ModelInfo
from engines.context.calibrate import count_request
from engines.local import bundled, serve
from engines.local.gate import in_background, reads_for_the_chat
from engines.providers.base import ChatRequest
from engines.providers.http import LOCAL_TIMEOUT
from engines.resources import read_prompt


class UnavailableError(Exception):
    """The bundled model cannot run here; the text says why."""


@dataclass(frozen=True)
class Timings:
    """What llama.cpp's server says one request cost (its ``timings`` object)."""

    prompt_n: int  # prompt tokens it evaluated
    cache_n: int  # prompt tokens it reused from the prompt state it held
    prompt_ms: float  # reading those ``prompt_n`` tokens
    predicted_n: int  # tokens it wrote
    predicted_ms: float

    @classmethod
    def of(cls, data: Any) -> Timings | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                prompt_n=int(data.get("prompt_n", 0)),
                cache_n=int(data.get("cache_n", 0)),
                prompt_ms=float(data.get("prompt_ms", 0.0)),
                predicted_n=int(data.get("predicted_n", 0)),
                predicted_ms=float(data.get("predicted_ms", 0.0)),
            )
        except (TypeError, ValueError):
            return None


def timings_in(line: bytes) -> Timings | None:
    """The ``timings`` in one line of an answer: an SSE ``data:`` line or a whole JSON body."""
    if b'"timings"' not in line:
        return None
    text = line.strip()
    if text.startswith(b"data:"):
        text = text[5:].strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return Timings.of(obj.get("timings")) if isinstance(obj, dict) else None


@dataclass
class Sent:
    kind: str  # "chat", "summary", "learn" or "background"
    request: ChatRequest
    background: bool  # sent as background work (it gives way to a turn)
    timings: Timings | None = None  # from the server's answer; None: none came (given way)
    for_the_chat: bool = False  # read ahead in the chat's slot (``for_the_chat``)


@dataclass(frozen=True)
class Evaluated:
    cached: int  # prompt tokens reused from the prompt state the server held
    evaluated: int  # prompt tokens the server had to evaluate
    prompt_ms: float = 0.0  # how long evaluating them took, by the server's clock


# The request being sent from this task, so the transport knows whose answer it is reading.
_sending: contextvars.ContextVar[Sent | None] = contextvars.ContextVar(
    "bench_sending", default=None
)


class _TimedStream(httpx.AsyncByteStream):
    """An answer's bytes, passed on unchanged, with its ``timings`` noted on ``sent``."""

    def __init__(self, inner: httpx.AsyncByteStream, sent: Sent) -> None:
        self.inner = inner
        self.sent = sent
        self.rest = b""

    def _look(self, line: bytes) -> None:
        found = timings_in(line)
        if found is not None:
            self.sent.timings = found

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            lines = (self.rest + chunk).split(b"\n")
            self.rest = lines.pop()
            for line in lines:
                self._look(line)
            yield chunk
        self._look(self.rest)
        self.rest = b""

    async def aclose(self) -> None:
        await self.inner.aclose()


class TimingsTransport(httpx.AsyncBaseTransport):
    """Passes requests on; notes the ``timings`` of each chat answer on the ``Sent`` being
    sent from the task that sent it (background work reads its answer from other tasks)."""

    def __init__(self) -> None:
        # No kept-alive connections, as the bundled adapter's own client: a request closed
        # part-way hangs up on the runtime.
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = _sending.get()
        response = await self.inner.handle_async_request(request)
        if sent is None or not request.url.path.endswith("/chat/completions"):
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TimedStream(response.stream, sent),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class Probe:
    """A pass-through bundled adapter that records requests, caps replies and keeps the
    server's ``timings`` for each."""

    def __init__(
        self,
        runtime: bundled.BundledRuntime,
        *,
        answer_tokens: int | None,
        summary_tokens: int | None,
        learn_tokens: int | None = None,
    ) -> None:
        self._client = httpx.AsyncClient(
            timeout=LOCAL_TIMEOUT,
            trust_env=False,
            follow_redirects=False,
            transport=TimingsTransport(),
            headers={"user-agent": "Conch"},
        )
        self.inner = bundled.bundled_adapter(runtime, client=self._client)
        self.name = self.inner.name
        self.label = self.inner.label
        self.local = self.inner.local
        self.caps = {"chat": answer_tokens, "summary": summary_tokens, "learn": learn_tokens}
        self.sent: list[Sent] = []
        self.counts = 0
        self._learn_prompt = read_prompt("learn.txt")

    async def list_models(self) -> list[ModelInfo]:
        return await self.inner.list_models()

    def cheap_models(self) -> tuple[str, ...]:
        return self.inner.cheap_models()

    async def aclose(self) -> None:
        await self.inner.aclose()
        await self._client.aclose()

    async def count_tokens(self, request: ChatRequest) -> int | None:
        counted = await count_request(self.inner, request)
        if counted is not None:
            self.counts += 1
        return counted

    def _kind(self, request: ChatRequest) -> str:
        if is_summary_request(request):
            return "summary"
        if request.system == self._learn_prompt:
            return "learn"
        return "background" if in_background() else "chat"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        kind = self._kind(request)
        sent = Sent(kind, request, in_background(), for_the_chat=reads_for_the_chat())
        self.sent.append(sent)
        cap = self.caps.get(kind)
        if cap is not None:
            request = request.model_copy(
                update={"max_output_tokens": min(request.max_output_tokens, cap)}
            )
        token = _sending.set(sent)
        try:
            async for event in self.inner.stream(request):
                yield event
        finally:
            with contextlib.suppress(ValueError):  # reset from another context: harmless
                _sending.reset(token)

    def evaluated(self, index: int) -> Evaluated | None:
        """What request ``index`` (in ``sent``) made the server evaluate, from its timings."""
        t = self.sent[index].timings
        if t is None:
            return None
        return Evaluated(cached=t.cache_n, evaluated=t.prompt_n, prompt_ms=t.prompt_ms)


@contextlib.asynccontextmanager
async def running(
    window: int, extra_args: tuple[str, ...] = ()
) -> AsyncIterator[bundled.BundledRuntime]:
    """A bundled runtime with ``window`` tokens in a temp dir, stopped afterwards.

    ``extra_args`` go to the launcher before the runtime's own (``serve.llama_args``), for
    an experiment; where both name an option, the runtime's wins."""
    why = bundled.missing()
    if why is not None:
        raise UnavailableError(why)
    with tempfile.TemporaryDirectory(prefix="conch-bench-") as tmp:
        server = (sys.executable, "-m", serve.MODULE, *extra_args) if extra_args else None
        runtime = bundled.BundledRuntime(Path(tmp), n_ctx=window, server=server)
        try:
            state = await runtime.start()
            if state.phase != "ready":
                raise UnavailableError(f"The bundled model did not start: {state.text}")
            yield runtime
        finally:
            await runtime.stop()
