"""The real bundled model for benchmarks: a runtime in a temp dir, and an adapter that times.

``Probe`` sits between the server gate and the bundled adapter, so it sees each request when
it really gets the server. It caps how long replies get (answers and summaries; only
``max_output_tokens`` changes), notes where the runtime's log stood when the request began,
and afterwards reads from the log how many prompt tokens the server had to evaluate:
llama-cpp-python prints "Llama.generate: N prefix-match hit, remaining M prompt tokens to
eval" for each request that reuses its cached prefix.
"""

from __future__ import annotations

import contextlib
import re
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench._common import is_summary_request
from engines.base import Event, ModelInfo
from engines.context.calibrate import count_request
from engines.local import bundled, serve
from engines.local.gate import in_background
from engines.providers.base import ChatRequest, ProviderAdapter
from engines.resources import read_prompt

_GENERATE = re.compile(rb"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_PROMPT_EVAL = re.compile(rb"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


class UnavailableError(Exception):
    """The bundled model cannot run here; the text says why."""


@dataclass
class Sent:
    kind: str  # "chat", "summary", "learn" or "background"
    request: ChatRequest
    log_at: int  # the runtime log's size when the request got the server
    background: bool  # sent as background work (it gives way to a turn)


@dataclass(frozen=True)
class Evaluated:
    cached: int  # prompt tokens reused from the previous request
    evaluated: int  # prompt tokens the server had to evaluate


def evaluated_in(segment: bytes) -> Evaluated | None:
    """What the last generation logged in ``segment`` evaluated (None: nothing logged)."""
    hits = _GENERATE.findall(segment)
    if hits:
        cached, rest = hits[-1]
        return Evaluated(int(cached), int(rest))
    evals = _PROMPT_EVAL.findall(segment)
    if evals:  # no prefix reused at all: the whole prompt was evaluated
        return Evaluated(0, int(evals[-1]))
    return None


class Probe:
    """A pass-through adapter that records requests, caps replies and reads the server log."""

    def __init__(
        self,
        inner: ProviderAdapter,
        log_path: Path,
        *,
        answer_tokens: int | None,
        summary_tokens: int | None,
        learn_tokens: int | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.label = inner.label
        self.local = inner.local
        self.log_path = log_path
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

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        kind = self._kind(request)
        self.sent.append(Sent(kind, request, self._log_size(), in_background()))
        cap = self.caps.get(kind)
        if cap is not None:
            request = request.model_copy(
                update={"max_output_tokens": min(request.max_output_tokens, cap)}
            )
        async for event in self.inner.stream(request):
            yield event

    def evaluated(self, index: int) -> Evaluated | None:
        """What request ``index`` (in ``sent``) made the server evaluate, from its log."""
        start = self.sent[index].log_at
        end = self.sent[index + 1].log_at if index + 1 < len(self.sent) else self._log_size()
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                segment = f.read(max(0, end - start))
        except OSError:
            return None
        return evaluated_in(segment)


@contextlib.asynccontextmanager
async def running(
    window: int, extra_args: tuple[str, ...] = ()
) -> AsyncIterator[bundled.BundledRuntime]:
    """A bundled runtime with ``window`` tokens in a temp dir, stopped afterwards.

    ``extra_args`` go to llama-cpp-python's server as well (an experiment: ``--cache True``
    keeps the states of several prompts, not just the last one)."""
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
