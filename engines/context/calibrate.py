"""Correcting the estimate by counting, where a server reports no usage in a stream.

Each response's real input usage corrects the chat's ``factor`` (only upward where it leaves
out cached tokens, as Ollama's does).
llama-cpp-python (the bundled runtime, and servers people run themselves) never streams usage,
so there the factor stayed 1.0 while a table of numbers cost 3.5 times the estimate. Instead the
session asks the server to count the request as it will be sent, with the server's own
tokenizer (``count_tokens`` on the adapter, ``engines.providers.tokens``), and feeds the count to
``update_factor`` exactly as usage would be.

Counting costs a round trip, so it is done when it matters (``needs_calibration``): once per
fold (the first request whose transcript says something, ``MIN_SAMPLE``), and whenever the text
not yet counted could bring the transcript within 10% of the budget. Text not yet counted is
taken at its worst (``FACTOR_CAP`` tokens per estimated token), so a large paste the estimate
miscounts is counted before it is sent, not after a refusal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engines.providers.base import ChatRequest, ProviderError
from engines.window import FACTOR_CAP

log = logging.getLogger("conch.context.calibrate")

NEAR_BUDGET = 0.9  # count whenever the transcript may be within 10% of the budget
MIN_SAMPLE = 1_000  # estimated tokens: a smaller transcript says little about the tokenizer


@runtime_checkable
class TokenCounter(Protocol):
    """An adapter whose server can count a request's tokens (the OpenAI-style adapter, the
    bundled model's, a gated local server's)."""

    async def count_tokens(self, request: ChatRequest) -> int | None: ...


@dataclass(frozen=True)
class Calibrated:
    """The last successful count: in which fold, and the transcript estimate it covered."""

    fold: int  # anything that changes when a fold drops turns (the first kept seq)
    transcript: int  # estimated transcript tokens (uncorrected) when counted


def needs_calibration(
    transcript: int,
    budget: int,
    factor: float,
    fold: int,
    last: Calibrated | None,
    *,
    worst: float = FACTOR_CAP,
) -> bool:
    """Whether to count the next request before sending it.

    ``transcript`` is the uncorrected estimate of what the budget must hold (the kept messages
    and the summary block), ``budget`` the session's budget for it, ``factor`` the chat's
    current factor, ``fold`` the current fold and ``last`` the last successful count.
    ``worst`` is what text not yet counted is assumed to cost per estimated token (the bench
    compares it with the chat's own factor).
    """
    near = NEAR_BUDGET * max(0, budget)
    f = max(1.0, factor)
    w = max(f, worst)
    if last is None or last.fold != fold:
        # Once per fold; a tiny transcript only when even its worst case may come near.
        return transcript >= MIN_SAMPLE or transcript * w >= near
    counted = min(transcript, last.transcript)
    unknown = transcript - counted
    return counted * f + unknown * w >= near


async def count_request(adapter: object, request: ChatRequest) -> int | None:
    """The real input tokens of ``request`` as it will be sent, counted by the adapter's server;
    None when the adapter cannot count (its server reports usage instead, or has no tokenizer
    endpoint) or the count failed. Never raises for a provider failure."""
    if not isinstance(adapter, TokenCounter):
        return None
    try:
        counted = await adapter.count_tokens(request)
    except ProviderError as exc:  # a count is a help: no failure of it may end a turn
        log.debug("counting tokens failed: %s", exc.detail)
        return None
    return counted if counted is not None and counted > 0 else None
