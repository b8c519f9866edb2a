"""A scripted engine for tests and ``conch --mock``: streams, fails, refuses and folds on cue.

It declares the context capability like the transcript-keeping engine: it remembers what the
person asked, folds on its own every few turns (emitting ``Compacted`` with a summary that lists
the folded questions), and ``compact`` folds all but the newest turn on request. When its
script runs out it keeps answering with a made-up echo, so a mock chat can go on forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass

from engines.base import (
    Compacted,
    Done,
    Event,
    ModelInfo,
    NextStep,
    Note,
    Problem,
    ProblemKind,
    Reading,
    Shortened,
    TextDelta,
    ThinkingDelta,
    TurnInput,
    TurnProblem,
    Usage,
)
from engines.providers.base import default_next_step
from engines.window import PICTURE_TOKENS, budget, estimate_tokens

# --- the script -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Answer with ``text`` (after ``thinking``, if any), in chunks."""

    text: str
    thinking: str = ""
    chunk_delay: float = 0.02
    chunk_size: int = 12


@dataclass(frozen=True)
class Fail:
    """Stream ``after_chars`` characters of ``text`` (the echo if empty), then fail."""

    after_chars: int = 40
    kind: ProblemKind = ProblemKind.BROKEN_STREAM
    text: str = ""
    detail: str = "the mock engine was told to fail here"
    chunk_delay: float = 0.02
    chunk_size: int = 12


@dataclass(frozen=True)
class Refuse:
    """Refuse the turn before any text, as a provider would."""

    kind: ProblemKind = ProblemKind.TOO_LONG
    next_step: NextStep | None = None
    detail: str = "the mock engine was told to refuse this turn"


@dataclass(frozen=True)
class CompactBefore:
    """Emit ``Compacted`` before the turn's reply (the next step answers the turn).

    ``first_kept_seq`` None keeps only the turn being answered.
    """

    first_kept_seq: int | None = None
    summary: str = ""


@dataclass(frozen=True)
class ShortenBefore:
    """Say the turn's message was cut to ``sent_chars`` before the reply (the next step answers
    the turn), offering ``next_step``, as the real engine does for a message too big to send."""

    sent_chars: int = 1_000
    next_step: NextStep | None = None


@dataclass(frozen=True)
class ReadFirst:
    """Read the prompt before the next step answers, as a slow local server does: one
    ``Reading`` per (done, total) in ``steps`` (none, like a server that never says), then
    no word until ``until`` is set, when one is given."""

    steps: tuple[tuple[int, int], ...] = ()
    until: asyncio.Event | None = None


Step = Reply | Fail | Refuse | CompactBefore | ShortenBefore | ReadFirst


@dataclass
class _Turn:
    seq: int
    text: str
    answer: str = ""
    attached: int = 0  # tokens of the turn's attached files and pictures


_FILLER = (
    "This is Conch's mock engine, so nothing here came from a real model.",
    "It streams a few words at a time, the way a model would.",
    "Every few turns it summarises the start of the chat, so the summary line shows up.",
    "Type /compact to fold the chat now, or keep going: the mock never runs out of words.",
    "A real model would answer your question here instead of repeating it.",
)


def first_line(text: str, limit: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def echo_reply(text: str, n: int) -> str:
    """The answer the mock gives once its script has run out (deterministic)."""
    quoted = first_line(text, 200) or "(an empty message)"
    a = _FILLER[n % len(_FILLER)]
    b = _FILLER[(n + 2) % len(_FILLER)]
    return f"You said: {quoted}\n\n{a} {b}"


# --- the engine -------------------------------------------------------------------------------


class MockEngine:
    """Scripted ``ContextEngine``.

    ``script`` steps are used one per turn (a ``CompactBefore`` is used together with the step
    after it). ``fold_every`` turns (0 to never) it folds on its own, keeping ``keep_turns``
    turns. ``seed`` is the chat so far as (seq, person's text) pairs, or (seq, person's text,
    answer, tokens attached) so its meter counts what a live chat's does, and ``summary`` the
    summary it already has, so a seeded demo chat keeps folding where it left off.
    """

    continues_answers = True  # "Continue" goes on with the reply it was writing when stopped

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        fold_every: int = 6,
        keep_turns: int = 3,
        delay: float = 0.02,
        seed: Sequence[tuple[int, str] | tuple[int, str, str, int]] = (),
        summary: str = "",
        cue: Callable[[TurnInput], Reply | Fail | Refuse | None] | None = None,
    ) -> None:
        self._script: list[Step] = list(script)
        self._cue = cue  # picks a step from the person's words when the script has none
        self.fold_every = max(0, fold_every)
        self.keep_turns = max(1, keep_turns)
        self.delay = max(0.0, delay)
        self._turns: list[_Turn] = [_Turn(*turn) for turn in seed]
        self._asked: list[str] = []  # the person's folded questions, oldest first
        self._summary = summary
        self._since_fold = 0
        self._answered = 0
        self._model_name = "the mock model"
        self.closed = False
        self.inputs: list[TurnInput] = []  # every turn it was given, for tests
        self._writing: dict[int, str] = {}  # the whole reply each message was getting

    # -- script --

    def extend(self, steps: Iterable[Step]) -> None:
        """Queue more steps after the ones still waiting."""
        self._script.extend(steps)

    @property
    def summary(self) -> str:
        return self._summary

    @property
    def kept_seqs(self) -> list[int]:
        return [t.seq for t in self._turns]

    # -- ContextEngine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        self.inputs.append(turn)
        self._model_name = turn.model.name
        attached = sum(estimate_tokens(a.text) for a in turn.attachments)
        current = _Turn(
            turn.seq, turn.text, attached=attached + PICTURE_TOKENS * len(turn.pictures)
        )
        # A message sent again (a retry) replaces its earlier try, as the real engine does.
        self._turns = [t for t in self._turns if t.seq < turn.seq]
        self._turns.append(current)
        self._since_fold += 1

        step = self._script.pop(0) if self._script else None
        folded_by_script = False
        while isinstance(step, CompactBefore | ShortenBefore | ReadFirst):
            if isinstance(step, ReadFirst):
                for done, total in step.steps:
                    yield Reading(done=done, total=total)
                if step.until is not None:
                    await step.until.wait()
            elif isinstance(step, CompactBefore):
                folded_by_script = True
                yield self._fold(step.first_kept_seq, summary=step.summary or None)
            else:
                half = step.sent_chars // 2
                yield Shortened(
                    seq=turn.seq,
                    sent_chars=step.sent_chars,
                    total_chars=len(turn.text),
                    text=f"Conch sent the first and last {half:,} characters of your message.",
                    next_step=step.next_step,
                )
            step = self._script.pop(0) if self._script else None

        if not folded_by_script and self.fold_every and self._since_fold >= self.fold_every:
            keep = self._turns[-self.keep_turns :]
            if len(keep) < len(self._turns):
                yield self._fold(keep[0].seq)

        if step is None and turn.continue_from:
            planned = self._writing.get(turn.seq, "")
            if planned.startswith(turn.continue_from):
                step = Reply(planned[len(turn.continue_from) :], chunk_delay=self.delay)
        if step is None and self._cue is not None:
            step = self._cue(turn)
        if step is None:
            step = Reply(echo_reply(turn.text, self._answered), chunk_delay=self.delay)
        self._answered += 1

        if isinstance(step, Refuse):
            next_step = step.next_step
            if next_step is None and step.kind is ProblemKind.TOO_LONG:
                next_step = NextStep(
                    kind="new-chat", label="Start a new chat with this message", text=turn.text
                )
            elif next_step is None:
                next_step = default_next_step(step.kind)
            yield Problem(problem=TurnProblem.of(step.kind, step.detail, next_step))
            return

        if isinstance(step, Fail):
            text = (step.text or echo_reply(turn.text, self._answered))[: max(0, step.after_chars)]
            async for delta in _chunks(text, step.chunk_size, step.chunk_delay, thinking=False):
                yield delta
            current.answer = text  # kept in the chat log, so counted as a reopened chat counts it
            problem = TurnProblem.of(
                step.kind, step.detail, default_next_step(step.kind), partial=bool(text)
            )
            yield Problem(problem=problem)
            return

        self._writing[turn.seq] = turn.continue_from + step.text
        async for delta in _chunks(step.thinking, step.chunk_size, step.chunk_delay, thinking=True):
            yield delta
        # What was sent: the chat so far and this message (with the words a continued answer
        # goes on from), counted before this answer joins the chat.
        sent = self._used(turn.system) + estimate_tokens(turn.continue_from)
        async for delta in _chunks(step.text, step.chunk_size, step.chunk_delay, thinking=False):
            yield delta
        current.answer = turn.continue_from + step.text  # the answer as the chat log keeps it
        yield Usage(
            input_tokens=sent,
            output_tokens=estimate_tokens(step.thinking) + estimate_tokens(step.text),
        )
        yield Done()

    async def compact(
        self, focus: str = "", *, model: ModelInfo | None = None
    ) -> AsyncIterator[Event]:
        if model is not None:
            self._model_name = model.name
        await asyncio.sleep(self.delay)  # a real fold takes a moment (and can be cancelled)
        if len(self._turns) <= 1:
            yield Note(topic="other", text="There is nothing to summarise yet.")
            yield Done()
            return
        yield self._fold(self._turns[-1].seq, focus=focus)
        yield Done()

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        b = budget(model.context, estimate_tokens(system), 0, answer_tokens)
        return self._used(""), b

    async def aclose(self) -> None:
        self.closed = True

    # -- folding --

    def _used(self, system: str) -> int:
        total = estimate_tokens(self._summary) + estimate_tokens(system)
        for t in self._turns:
            total += estimate_tokens(t.text) + t.attached + estimate_tokens(t.answer)
        return total

    def _fold(
        self, first_kept_seq: int | None, *, focus: str = "", summary: str | None = None
    ) -> Compacted:
        if first_kept_seq is None:
            first_kept_seq = self._turns[-1].seq
        folded = [t for t in self._turns if t.seq < first_kept_seq]
        self._turns = [t for t in self._turns if t.seq >= first_kept_seq]
        self._asked.extend(first_line(t.text) for t in folded if t.text.strip())
        self._summary = summary if summary is not None else self._summary_text(focus)
        self._since_fold = 0
        return Compacted(
            first_kept_seq=first_kept_seq, summary=self._summary, model=self._model_name
        )

    def _summary_text(self, focus: str) -> str:
        lines = ["What the person asked earlier in this chat:"]
        shown = self._asked[-30:]
        if len(self._asked) > len(shown):
            lines.append(f"- ({len(self._asked) - len(shown)} earlier questions)")
        lines.extend(f"- {q}" for q in shown)
        if focus.strip():
            lines.append(f"Kept in focus, as asked: {focus.strip()}")
        return "\n".join(lines)


async def _chunks(
    text: str, size: int, delay: float, *, thinking: bool
) -> AsyncIterator[TextDelta | ThinkingDelta]:
    step = max(1, size)
    for i in range(0, len(text), step):
        # Sleeping even for 0 seconds gives the loop (and a Stop click) a chance between chunks.
        await asyncio.sleep(max(0.0, delay))
        piece = text[i : i + step]
        yield ThinkingDelta(text=piece) if thinking else TextDelta(text=piece)
