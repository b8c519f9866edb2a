"""How an answer went: time to its first token, tokens per second, and tokens used.

``AnswerClock`` watches one turn's events; time the turn spent waiting for the person (a tool
call's approval card) is left out of both figures, since it says nothing about the model. The
token counts are the provider's own (its
``Usage``) where it gives them, otherwise the answer's estimated size, marked as an estimate.
``AnswerStatsBook`` keeps the figures beside each answer, in a table of the chat log's own
file (``answer_stats``, keyed like ``messages`` by chat and seq), made by the chat log's
schema step 3 (app/store.py).
Nothing here is ever sent anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.chat_log_tables import ChatLogFile, ChatLogTable, book_of
from engines.base import Problem, TextDelta, ThinkingDelta, Usage
from engines.window import estimate_tokens

MIN_SPAN_S = 0.05  # a shorter stream says nothing about speed (it came in one piece)


@dataclass(frozen=True, slots=True)
class AnswerStats:
    first_token_s: float | None  # from sending to the first token (thinking counts), less
    # the time an approval card waited for the person
    tokens_per_s: float | None
    input_tokens: int  # 0: the provider did not say
    output_tokens: int
    estimated: bool  # output_tokens is Conch's estimate, not the provider's count

    def line(self) -> str:
        """One quiet line: "41.2 tokens/s · first token 0.35 s · 1,234 in · 256 out"."""
        approx = "≈" if self.estimated else ""
        parts: list[str] = []
        if self.tokens_per_s is not None:
            parts.append(f"{approx}{self.tokens_per_s:.1f} tokens/s")
        if self.first_token_s is not None:
            parts.append(f"first token {self.first_token_s:.2f} s")
        if self.input_tokens:
            parts.append(f"{self.input_tokens:,} in")
        if self.output_tokens:
            parts.append(f"{approx}{self.output_tokens:,} out")
        return " · ".join(parts)


class AnswerClock:
    """Times one turn; ``observe`` every event, ``stats`` when the answer is saved."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._sent = now()
        self._first: float | None = None
        self._last: float | None = None
        self._text: list[str] = []
        self._usage: Usage | None = None
        self._failed = False
        self._held_at: float | None = None  # since when the turn waits for the person
        self._waits: list[tuple[float, float]] = []

    def hold(self) -> None:
        """The turn waits for the person (an approval card is up): the clock stops."""
        if self._held_at is None:
            self._held_at = self._now()

    def release(self) -> None:
        """The person answered: the clock runs again."""
        if self._held_at is not None:
            self._waits.append((self._held_at, self._now()))
            self._held_at = None

    def _waited(self, start: float, end: float) -> float:
        """How long of ``start``..``end`` the turn waited for the person."""
        spans = list(self._waits)
        if self._held_at is not None:
            spans.append((self._held_at, max(end, self._held_at)))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    def observe(self, event: object) -> None:
        if isinstance(event, TextDelta | ThinkingDelta) and event.text:
            at = self._now()
            if self._first is None:
                self._first = at
            self._last = at
            if isinstance(event, TextDelta):
                self._text.append(event.text)
        elif isinstance(event, Usage) and (event.input_tokens or event.output_tokens):
            self._usage = event  # the answer's own request (a healed turn: the last one)
        elif isinstance(event, Problem):
            self._failed = True  # a cut-off answer's figures would mislead

    def stats(self) -> AnswerStats | None:
        """The figures, or None when no token arrived or the answer failed."""
        if self._failed:
            return None
        return self._figures()

    def _figures(self) -> AnswerStats | None:
        if self._first is None or self._last is None:
            return None
        usage = self._usage
        counted = usage.output_tokens if usage is not None else 0
        estimated = not counted
        output = counted or estimate_tokens("".join(self._text))
        span = self._last - self._first - self._waited(self._first, self._last)
        speed = output / span if span >= MIN_SPAN_S and output else None
        to_first = self._first - self._sent - self._waited(self._sent, self._first)
        return AnswerStats(
            first_token_s=max(0.0, to_first),
            tokens_per_s=speed,
            input_tokens=usage.input_tokens if usage is not None else 0,
            output_tokens=output,
            estimated=estimated,
        )


class AnswerStatsBook(ChatLogTable):
    """The ``answer_stats`` table of a chat log file (see the module doc)."""

    def save(self, chat_id: str, seq: int, stats: AnswerStats) -> None:
        self._store.write(
            "INSERT OR REPLACE INTO answer_stats (chat_id, seq, first_token_s, "
            "tokens_per_s, input_tokens, output_tokens, estimated) VALUES (?,?,?,?,?,?,?)",
            (
                chat_id,
                seq,
                stats.first_token_s,
                stats.tokens_per_s,
                stats.input_tokens,
                stats.output_tokens,
                int(stats.estimated),
            ),
        )

    def between(self, chat_id: str, first: int, last: int) -> dict[int, AnswerStats]:
        """The figures of answers ``first`` ≤ seq ≤ ``last`` in ``chat_id``, by seq."""
        rows = self._store.query(
            "SELECT seq, first_token_s, tokens_per_s, input_tokens, output_tokens, estimated "
            "FROM answer_stats WHERE chat_id = ? AND seq BETWEEN ? AND ?",
            (chat_id, first, last),
        )
        return {int(r[0]): AnswerStats(r[1], r[2], int(r[3]), int(r[4]), bool(r[5])) for r in rows}


def stats_book(store: ChatLogFile) -> AnswerStatsBook | None:
    """The book of ``store``'s file, or None when its table cannot be written (a read-only
    file: the figures are a nicety)."""
    return book_of(AnswerStatsBook, store)
