"""A ``ProviderAdapter`` that answers from a script and records every request it was sent.

Used by the session tests and ``bench.prefix``: it speaks the adapter protocol exactly (events
out, ``ProviderError`` raised), without a network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engines.base import (
    AssistantRaw,
    Done,
    Event,
    ModelInfo,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.base import ChatRequest, ProviderError

InputCount = int | Callable[[ChatRequest], int] | None


@dataclass(frozen=True)
class Answer:
    """Stream ``text`` (after ``thinking``) and finish. ``input_tokens`` feeds a Usage event."""

    text: str = "ok"
    thinking: str = ""
    input_tokens: InputCount = None
    raw: tuple[dict[str, Any], ...] | None = None
    tool_calls: tuple[ToolCallData, ...] = ()
    chunk: int = 16


@dataclass(frozen=True)
class Raise:
    """Stream ``after_text`` first (if any), then raise ``error``."""

    error: ProviderError
    after_text: str = ""


@dataclass(frozen=True)
class Hang:
    """Stream ``after_text``, then wait until cancelled (for Stop tests)."""

    after_text: str = ""


@dataclass(frozen=True)
class NoDone:
    """Stream ``text`` and end without a Done (a protocol violation the session must catch)."""

    text: str = "cut"


Step = Answer | Raise | Hang | NoDone


@dataclass
class ScriptedAdapter:
    """Answers requests from ``steps`` in order; once they run out, answers ``default``."""

    steps: list[Step] = field(default_factory=list)
    name: str = "openai"
    label: str = "Scripted"
    local: bool = False
    default: Answer = field(default_factory=Answer)
    models: list[ModelInfo] = field(default_factory=list)
    requests: list[ChatRequest] = field(default_factory=list)
    closed: bool = False
    streams_closed: int = 0  # streams that ran their cleanup (finished, failed or closed early)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, steps: Iterable[Step]) -> None:
        self.steps.extend(steps)

    async def list_models(self) -> list[ModelInfo]:
        return list(self.models)

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        self.closed = True

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        step = self.steps.pop(0) if self.steps else self.default
        try:
            async for ev in self._play(step, request):
                yield ev
        finally:
            self.streams_closed += 1

    async def _play(self, step: Step, request: ChatRequest) -> AsyncIterator[Event]:
        await asyncio.sleep(0)
        if isinstance(step, Raise):
            if step.after_text:
                yield TextDelta(text=step.after_text)
            raise step.error
        if isinstance(step, Hang):
            if step.after_text:
                yield TextDelta(text=step.after_text)
            self.hanging.set()
            await asyncio.Event().wait()
            return
        if isinstance(step, NoDone):
            yield TextDelta(text=step.text)
            return
        if step.thinking:
            yield ThinkingDelta(text=step.thinking)
        for i in range(0, len(step.text), max(1, step.chunk)):
            yield TextDelta(text=step.text[i : i + step.chunk])
        for call in step.tool_calls:
            yield ToolCall(call=call)
        count = step.input_tokens
        if callable(count):
            count = count(request)
        if count is not None:
            yield Usage(input_tokens=count, output_tokens=len(step.text) // 4)
        if step.raw is not None:
            yield AssistantRaw(blocks=step.raw)
        yield Done(stop_reason="tool_use" if step.tool_calls else "stop")
