"""What every provider adapter speaks: one request shape in, engine events out, typed errors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from engines.base import Event, Message, ModelInfo, NextStep, ProblemKind, TurnProblem
from engines.window import UNKNOWN_WINDOW_LOCAL

T = TypeVar("T")


class ChatRequest(BaseModel):
    """A request exactly as it will be sent: the session has already fitted it to the window."""

    model_config = ConfigDict(frozen=True)

    model: str
    system: str = ""
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    max_output_tokens: int = 1024
    temperature: float | None = None  # None: the server's own (the chat's settings)
    # The window the session budgeted against (Ollama sends it as num_ctx).
    window: int = UNKNOWN_WINDOW_LOCAL
    extra: dict[str, Any] = Field(default_factory=dict)


class ProviderError(Exception):
    """A request failed. ``too_long`` plus ``window`` let the session heal the refusal.

    ``message`` replaces the kind's usual sentence when the failure has a clearer one of its
    own (a redirect, a deadline); ``next_step`` replaces the kind's usual next step.
    """

    def __init__(
        self,
        kind: ProblemKind,
        detail: str = "",
        *,
        status: int | None = None,
        too_long: bool = False,
        window: int | None = None,
        retry_after: float | None = None,
        partial: bool = False,
        message: str | None = None,
        next_step: NextStep | None = None,
    ) -> None:
        super().__init__(detail or kind.value)
        self.kind = ProblemKind.TOO_LONG if too_long else kind
        self.detail = detail
        self.status = status
        self.too_long = too_long
        self.window = window
        self.retry_after = retry_after
        self.partial = partial
        self.message = message
        self.next_step = next_step
        # (window, input tokens) when the refusal was for the answer's room, not the prompt:
        # a smaller max_tokens heals it (``too_long.answer_room_in``).
        self.answer_room: tuple[int, int] | None = None

    def to_problem(
        self, next_step: NextStep | None = None, *, partial: bool = False
    ) -> TurnProblem:
        step = next_step or self.next_step
        if step is None:
            step = default_next_step(self.kind, self.retry_after)
        return TurnProblem.of(
            self.kind,
            self.detail,
            step,
            partial=partial or self.partial,
            message=self.message,
        )


def default_next_step(kind: ProblemKind, retry_after: float | None = None) -> NextStep | None:
    """The generic next step for a problem that is not about length."""
    if kind in (ProblemKind.UNREACHABLE, ProblemKind.AUTH, ProblemKind.MODEL_MISSING):
        label = {
            ProblemKind.UNREACHABLE: "Check that the server is running, then try again",
            ProblemKind.AUTH: "Check the API key in Settings",
            ProblemKind.MODEL_MISSING: "Pick another model, or download this one",
        }[kind]
        return NextStep(kind="open-settings", label=label)
    # A busy server (503) may say when to come back, as a rate limit does.
    if kind is ProblemKind.RATE_LIMITED or (
        kind is ProblemKind.SERVER_ERROR and retry_after is not None
    ):
        secs = retry_after if retry_after is not None else 30.0
        return NextStep(kind="wait", label=f"Try again in {round(secs)} seconds", seconds=secs)
    if kind in (
        ProblemKind.TIMEOUT,
        ProblemKind.SERVER_ERROR,
        ProblemKind.BROKEN_STREAM,
        ProblemKind.REFUSED,
    ):
        return NextStep(kind="retry", label="Try again")
    return None


@runtime_checkable
class ProviderAdapter(Protocol):
    """One wire protocol (and, for OpenAI-style, one company's row of it).

    ``stream`` yields ``TextDelta``, ``ThinkingDelta``, ``ToolCall``, ``Usage``, ``AssistantRaw``
    and finally ``Done``; any failure raises ``ProviderError`` (too-long refusals with
    ``too_long=True`` and the window the body names). A stream that ends without the protocol's
    done marker raises ``ProviderError(BROKEN_STREAM)``; one that stops moving on (only
    keep-alives arrive) or outlasts its whole-answer deadline raises ``ProviderError(TIMEOUT)``
    (``engines.providers.deadlines``); a redirect raises ``ProviderError(UNREACHABLE)``.
    """

    name: str  # short provider name: "ollama", "openai", "local", "anthropic", ...
    label: str  # "Ollama", "OpenAI", "Bundled with Conch", ... (engines/providers/registry.py)
    local: bool  # a server on this computer: summaries only ever use the chat's own model

    async def list_models(self) -> list[ModelInfo]: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[Event]: ...

    def cheap_models(self) -> tuple[str, ...]:
        """Cheapest model first, then the small one; empty for a local server."""
        ...

    async def aclose(self) -> None: ...


@contextlib.asynccontextmanager
async def closing_stream(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Use an async iterator (an adapter's stream, a response's chunks) and close it on the way
    out, even when left early (at Done).

    An async generator left suspended keeps its HTTP response open until garbage collection,
    which under qasync may run outside the event loop, where closing it fails.
    """
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
