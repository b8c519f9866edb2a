"""Folding: whole turns dropped from the front of the transcript, summarised.

A fold inside a turn never waits for a summary: the turn comes first. A summary written ahead
is used when it covers what is dropped; what no summary covers keeps its facts word for word
(the fact keeper's list, on the summary before), the answer goes ahead, and the summary of those
turns is written in the background right after it (``engines.context.ahead``), then sent from
the next turn on. Those turns are saved with the transcript until their summary is written, so
when closing the chat or the app cut the writing off, the chat opened again writes it
(``resume_writing``), or its next turn does. ``compact`` folds on request and waits for its
summary: the person asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass

from engines.base import (
    Compacted,
    Done,
    Event,
    Message,
    ModelInfo,
    Note,
    SummaryWritten,
    Usage,
)
from engines.context.ahead import FoldsAhead
from engines.context.prepare import WRITING_SUMMARY, Prepared
from engines.context.protocols import SummaryResult
from engines.context.state import summary_block
from engines.context.summarise import facts_kept, fit, summary_cap
from engines.window import budget, estimate_message, estimate_tokens


@dataclass
class _Summarising:
    """One fold's summarising: what it reads, and what came of it."""

    previous: str  # the summary the new one extends
    todo: list[Message]  # what it still has to summarise
    prepared: Prepared | None  # the summary written ahead that the fold takes
    result: SummaryResult | None = None
    deferred: bool = False  # what no summary covers is summarised after the turn


def _fold_note(got: _Summarising, summarised: bool, summariser: bool) -> Note | None:
    """What to tell of a fold whose summary is missing or partly facts (one whose summary is
    written after the turn says so in its ``Compacted``)."""
    result = got.result
    if got.deferred:
        return None
    if summariser and not summarised:
        why = result.problem if result is not None and result.problem else "no summary"
        return Note(
            topic="summary-failed",
            text=f"The start of the chat was dropped without a new summary ({why}).",
        )
    if summarised and result is not None and result.problem:
        return Note(
            topic="summary-failed",
            text=f"No model summarised the start of the chat ({result.problem}); "
            "its facts were kept word for word.",
        )
    return None


class Folding(FoldsAhead):
    """Dropping turns from the front with a summary of them, in a turn or on request."""

    async def _fold(
        self,
        drop: int,
        model: ModelInfo,
        focus: str = "",
        *,
        bounded: bool = True,
    ) -> AsyncGenerator[Event, None]:
        """Drop the first ``drop`` messages (whole turns), summarising them; emits Compacted.

        A summary prepared ahead is used when it covers the start of what is dropped. Inside a
        turn (``bounded``) nothing waits for a model: what the prepared summary lacks (or all
        of it, with none) keeps its facts word for word now and is summarised after the turn
        (``Compacted.writing``). On request (``compact``) the summariser takes as long as it
        takes.
        """
        drop = max(0, min(drop, self._current_turn_start()))
        if drop == 0:
            return
        folded = self._messages[:drop]
        dropped_turns = sum(1 for m in folded if m.role == "user")
        # Size the summary for the window the model really has (a refusal may have taught a
        # smaller one than its listing says).
        window = self.window_for(model)
        # Turns folded before whose summary is still to be written go with these, on the
        # summary they extend.
        todo: list[Message] = [*self._late, *folded]
        previous = self._late_base if self._late else self._summary
        prepared = None if focus else self._prepared_for(dropped_turns)
        while self._notes:
            yield self._notes.pop(0)
        got = _Summarising(previous=previous, todo=todo, prepared=prepared)
        if prepared is not None:
            starts = self._ledger.turn_starts
            covered = len(prepared.covers)
            got.previous = prepared.text
            got.todo = folded[starts[covered] :] if covered < len(starts) else []
        if bounded and self._prep_task is not None:
            # What was being written ahead no longer applies after this fold (and the turn
            # does not wait for it): it stops here.
            await self._stop_preparing()
        await self._summarise_fold(got, model, window, focus, bounded)
        summarised = self._take_summary(got, window)
        self._drop_front(drop, dropped_turns)
        spent = (got.result.tokens if got.result is not None else 0) + (
            prepared.tokens if prepared else 0
        )
        self._pending_summary_tokens += spent
        self._prepared = None
        self._prep_failed = None
        note = _fold_note(got, summarised, self.summariser is not None)
        if note is not None:
            yield note
        note = await self._persist()
        if note is not None:
            yield note
        yield Compacted(
            first_kept_seq=self._first_kept_seq(),
            summary=self._summary,
            model=model.name,
            summarised=summarised,
            writing=bool(self._late),
        )

    async def _summarise_fold(
        self, got: _Summarising, model: ModelInfo, window: int, focus: str, bounded: bool
    ) -> None:
        """Summarise what the fold drops (what a prepared summary lacks) now, only when the
        person asked (not ``bounded``); otherwise it is left for after the turn. The outcome
        lands in ``got``."""
        prepared = got.prepared
        if prepared is not None and not got.todo:
            got.result = SummaryResult(text=prepared.text, model=prepared.model)
        elif self.summariser is None:
            return
        elif bounded:
            got.deferred = True
        else:
            sized = model
            if model.context != window:
                sized = model.model_copy(update={"context": window})
            got.result = await self._summarise_now(got.todo, got.previous, sized, focus)

    def _take_summary(self, got: _Summarising, window: int) -> bool:
        """The chat's summary after the fold, within its cap for ``window``; whether what was
        dropped was summarised (what is left for after the turn is kept in ``_late``)."""
        result, previous, todo = got.result, got.previous, got.todo
        text = (result.text or "").strip() if result is not None else ""
        summarised = bool(text)
        self._late = []
        if not text and (got.deferred or got.prepared is not None):
            # No (new) summary yet: what there is, with the facts of what it lacks.
            text = facts_kept(previous, previous, todo, window)
            summarised = got.prepared is not None
            if got.deferred:
                self._late = self._capped_late(todo, window)
                self._late_base = previous
                text = text or WRITING_SUMMARY
        if text:
            self._summary = text
        if self._summary:
            # An old summary written for a larger window must not crowd out the new one.
            self._summary = fit(self._summary, *summary_cap(window))
        self._summary_tokens = estimate_tokens(summary_block(self._summary)) if self._summary else 0
        return summarised

    def _drop_front(self, drop: int, turns: int) -> None:
        """The first ``drop`` messages, ``turns`` whole turns, leave the transcript."""
        del self._messages[:drop]
        self._ledger.drop_front(drop)
        del self._seqs[:turns]
        if self._seqs:
            self._joined = [j for j in self._joined if j > self._seqs[0]]

    async def _summarise_now(
        self, todo: Sequence[Message], previous: str, model: ModelInfo, focus: str
    ) -> SummaryResult | None:
        """The summariser's result (None without one); its failure is a result's problem."""
        summariser = self.summariser
        if summariser is None:
            return None
        try:
            return await summariser.summarise(todo, previous, model=model, focus=focus)
        except Exception as exc:  # a summariser must not end the turn: it is a help
            return SummaryResult(text=None, problem=f"{type(exc).__name__}: {exc}")

    def _capped_late(self, messages: Sequence[Message], window: int) -> list[Message]:
        """The newest whole turns of ``messages`` within one budget (what waits for a summary)."""
        room = budget(window)
        kept: list[Message] = []
        used = 0
        for m in reversed(messages):
            used += estimate_message(m)
            if used > room:
                break
            kept.append(m)
        kept.reverse()
        while kept and kept[0].role != "user":
            kept.pop(0)
        return kept

    async def fold_to_fit(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> AsyncIterator[Event]:
        """Fold a transcript that outgrew ``model``'s window now, outside any turn (a long
        chat just imported), by the rules of a fold in a turn: whole turns dropped with the
        summary before and the fact keeper's list, and their summary written in the
        background (``SummaryWritten``), giving way to the person's turn on this computer.
        The chat's first turn then neither folds nor waits. Yields the fold's events
        (``Compacted``, notes); nothing when the chat fits."""
        async with (
            self._lock,
            contextlib.aclosing(self._fold_to_fit(model, system, answer_tokens)) as events,
        ):
            async for ev in events:
                yield ev

    async def _fold_to_fit(
        self, model: ModelInfo, system: str, answer_tokens: int | None
    ) -> AsyncGenerator[Event, None]:
        self._ensure_loaded()
        await self._catch_up(None)
        while self._notes:
            yield self._notes.pop(0)
        self._last_model = model
        window = self._window(model, estimate_tokens(system), 0)
        b = self._budget(window, system, (), answer_tokens)
        if b <= 0 or self._closed:
            return
        plan = self._plan(b)
        if not plan.drop:
            return
        async for ev in self._fold(self._drop_for(plan.drop), model):
            yield ev
        self._prepare_next_fold(model, window, b)

    def resume_writing(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> bool:
        """Write again, in the background, the summary a fold went ahead without when its
        writing was cut off (the chat or the app closed first): the same turns on the same
        summary before, so the same request, by the same rules (on this computer it gives way
        to the person's turn); ``SummaryWritten`` says when it is done. True when it is being
        written now; False when there is none to write, or it cannot start here (the chat's
        next turn writes it then)."""
        self._ensure_loaded()
        if not self._late or self._closed or self.summariser is None:
            return False
        if self.preparing:
            return True  # after a turn, what comes first is this summary
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        # The session's background task: the person's turn on this computer stops it (and
        # writes it again after the answer), and closing the chat stops it without waiting.
        self._prep_task = loop.create_task(
            self._resume_writing(model, system, answer_tokens),
            name=f"write-summary-again:{self.chat_id}",
        )
        return True

    async def _resume_writing(
        self, model: ModelInfo, system: str, answer_tokens: int | None
    ) -> None:
        async with self._lock:  # never in the middle of a turn
            await self._catch_up(None)
            window = self._window(model, estimate_tokens(system), 0)
            b = self._budget(window, system, (), answer_tokens)
            if self._closed:
                return
            if not self._late or b <= 0:
                # The chat log no longer has that fold (an edit, another process): nothing
                # is being written after all.
                self._tell(
                    SummaryWritten(
                        first_kept_seq=self._first_kept_seq(), summary="", model=model.name
                    )
                )
                return
            self._last_model = model
        await self._write_late(model, window, None, b)

    async def compact(
        self, focus: str = "", *, model: ModelInfo | None = None
    ) -> AsyncIterator[Event]:
        async with self._lock, contextlib.aclosing(self._compact(focus, model)) as events:
            async for ev in events:
                yield ev

    async def _compact(self, focus: str, model: ModelInfo | None) -> AsyncGenerator[Event, None]:
        self._ensure_loaded()
        await self._stop_preparing()
        await self._catch_up(None)
        while self._notes:
            yield self._notes.pop(0)
        chat_model = model or self._last_model
        if self._ledger.turns <= 1:
            yield Note(topic="other", text="There is nothing to summarise yet.")
            yield Done()
            return
        if chat_model is None:
            yield Note(
                topic="other",
                text="Conch needs to know the chat's model to summarise; send a message first.",
            )
            yield Done()
            return
        # Asked for: the person waits for the summary, however long it takes.
        async for ev in self._fold(
            self._current_turn_start(), chat_model, focus=focus, bounded=False
        ):
            yield ev
        if self._pending_summary_tokens:
            extra, self._pending_summary_tokens = self._pending_summary_tokens, 0
            yield Usage(summary_tokens=extra)
        yield Done()
