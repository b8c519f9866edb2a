"""Seams of the transcript-keeping engine: who writes summaries, who knows the other models,
and what a layer of ``ApiSession`` needs from the turn driver above it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from engines.base import Event, Message, ModelInfo, TurnInput
from engines.providers.base import ProviderAdapter

if TYPE_CHECKING:
    from engines.context.sending import Attempt


class SummaryResult(BaseModel):
    """What a summariser produced. ``text`` is None when no usable summary came back."""

    model_config = ConfigDict(frozen=True)

    text: str | None
    tokens: int = 0  # input + output tokens spent, counted in the turn's usage
    model: str = ""  # the model that wrote it
    problem: str = ""  # why there is no summary, in words (for Health)


@runtime_checkable
class Summariser(Protocol):
    async def summarise(
        self,
        folded: Sequence[Message],
        previous: str,
        *,
        model: ModelInfo,
        focus: str = "",
    ) -> SummaryResult:
        """Fold ``folded`` (oldest first) into ``previous``, summarising for the chat ``model``.

        Never raises for a provider failure: it returns ``SummaryResult(text=None, problem=...)``.
        Work done in the background may raise ``GaveWayError`` when a turn needs the server.
        """
        ...


@runtime_checkable
class ModelDirectory(Protocol):
    """The ready models the app knows of (for a too-long card's "switch to" step)."""

    def ready_models(self) -> Sequence[ModelInfo]: ...


# The session's layers build on each other (sync, windows, folding, sending, healing, tools);
# healing and the tool rounds hand the turn back to the driver (``ApiSession``), which is
# defined above them. Each declares what it calls there as an attribute of one of these types.


class FinishTurn(Protocol):
    """Finish the turn with what came back (``ApiSession._finish``): an answer, a refusal
    to heal, or the tool calls the answer ended with."""

    def __call__(
        self,
        turn: TurnInput,
        out: Attempt,
        window: int,
        turn_tokens: int,
        adapter: ProviderAdapter,
    ) -> AsyncGenerator[Event, None]: ...


class AnswerTurn(Protocol):
    """Send the request as the transcript stands and go on with what comes back
    (``ApiSession._answer``); ``folded``: the chat was just folded."""

    def __call__(
        self,
        turn: TurnInput,
        adapter: ProviderAdapter,
        window: int,
        turn_tokens: int,
        whole: str,
        *,
        folded: bool = False,
    ) -> AsyncGenerator[Event, None]: ...
