"""Seams of the transcript-keeping engine: who writes summaries, who knows the other models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from engines.base import Message, ModelInfo


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
