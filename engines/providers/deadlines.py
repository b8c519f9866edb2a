"""How long a streamed answer may take: before its first word, between words, and in all.

A socket read timeout only notices silence. A server can keep a connection alive with bytes
that carry no answer (SSE comments, blank lines, empty deltas, pings) and hold a turn open
forever, so the stream is also measured by *meaningful* events: a piece of text or thinking, a
piece of a tool call, usage, the end. Each adapter says which of its events mean progress
(``Pace.progress``); every chunk read gives the clock a chance to run out (``paced``). Silence
itself is left to the read timeout (``engines.providers.http``), which is never longer than the
first-event wait here.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from engines.base import ProblemKind
from engines.providers.base import ProviderError, closing_stream

T = TypeVar("T")

Clock = Callable[[], float]  # seconds, only ever compared with itself


@dataclass(frozen=True)
class Deadlines:
    """Seconds one answer may take. ``first_event`` counts from the request being sent."""

    first_event: float
    between_events: float
    whole_answer: float


# A local model may first load from disk, then read a long prompt on a CPU at a few dozen
# tokens a second: ten minutes before its first word is slow but real. Once it writes, a
# quiet spell is a tool call being written where the server holds it back until complete.
FIRST_EVENT = 600.0
BETWEEN_EVENTS = 300.0
# The whole answer: at least half an hour, more when the answer may be long enough to need it
# at the slowest pace a CPU writes (a backstop against a server that trickles forever; the
# person can always press Stop sooner).
WHOLE_ANSWER = 1800.0
SLOWEST_TOKENS_PER_SECOND = 2.0


def deadlines_for(max_output_tokens: int) -> Deadlines:
    """The deadlines for an answer of at most ``max_output_tokens``."""
    writing = max(0, max_output_tokens) / SLOWEST_TOKENS_PER_SECOND
    return Deadlines(
        first_event=FIRST_EVENT,
        between_events=BETWEEN_EVENTS,
        whole_answer=max(WHOLE_ANSWER, FIRST_EVENT + writing),
    )


def _span(seconds: float) -> str:
    if seconds >= 120:
        return f"{round(seconds / 60)} minutes"
    if seconds == 1:
        return "1 second"
    return f"{seconds:g} seconds"


class StreamDeadlineError(Exception):
    """A deadline ran out while the stream was still open. ``sentence`` says which."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence

    def to_error(self, *, partial: bool) -> ProviderError:
        return ProviderError(
            ProblemKind.TIMEOUT, self.sentence, message=self.sentence, partial=partial
        )


class Pace:
    """The clock of one streamed answer. Created when the request is sent."""

    def __init__(self, deadlines: Deadlines, clock: Clock = time.monotonic) -> None:
        self.deadlines = deadlines
        self._clock = clock
        self._start = clock()
        self._last: float | None = None  # when the last meaningful event arrived
        self.events = 0  # meaningful events so far

    def progress(self) -> None:
        """A meaningful event arrived: the between-events clock starts again."""
        self._last = self._clock()
        self.events += 1

    def check(self, *, idle: bool) -> None:
        """Raise ``StreamDeadlineError`` when a deadline has passed.

        ``idle``: nothing meaningful arrived since the last check, so the first-event and
        between-events deadlines apply too; the whole-answer deadline always does.
        """
        now = self._clock()
        d = self.deadlines
        if now - self._start > d.whole_answer:
            raise StreamDeadlineError(
                f"The answer was still going after {_span(d.whole_answer)}, so Conch stopped it."
            )
        if not idle:
            return
        if self._last is None and now - self._start > d.first_event:
            raise StreamDeadlineError(
                f"The server kept the connection open but sent no answer for "
                f"{_span(d.first_event)}, so Conch stopped waiting."
            )
        if self._last is not None and now - self._last > d.between_events:
            raise StreamDeadlineError(
                f"The server kept the connection open but sent nothing new for "
                f"{_span(d.between_events)}, so Conch stopped waiting."
            )


async def paced(chunks: AsyncIterator[T], pace: Pace) -> AsyncIterator[T]:
    """``chunks`` as they come, checking ``pace`` each time the reader asks for the next one.

    The reader handles a chunk fully (parsing it, reporting progress) before it asks again, so
    a chunk that brought no progress (a keep-alive, half a line) counts as idle time.
    """
    async with closing_stream(chunks) as source:
        async for chunk in source:
            before = pace.events
            yield chunk
            pace.check(idle=pace.events == before)
