"""The next fold's summary, written ahead in the background once the fold is near; and the
summary a fold went ahead without, written right after the turn that folded.

On this computer it runs only while no turn needs the server and stops when the person sends;
a local server also evaluates the request the prepared fold will send, so the fold turn finds
it in the server's prompt cache. A prepared summary is used only while it still matches the
chat (``engines.context.prepare``).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging

from engines.base import Message, ModelInfo, Note, SummaryListener, SummaryWritten
from engines.context.prepare import (
    DEEPER_MARGIN,
    PAGE_TURNS,
    PREPARE_AT,
    PREPARE_TRIES,
    RECENT_TURNS,
    WRITING_SUMMARY,
    Job,
    Mark,
    Prepared,
    fingerprint,
    marks,
    warm,
    warm_request,
)
from engines.context.protocols import SummaryResult
from engines.context.state import summary_block
from engines.context.summarise import facts_kept, fit, summary_cap
from engines.context.windows import LearnedWindows
from engines.local.gate import GaveWayError, background, for_the_chat
from engines.providers.base import ChatRequest
from engines.window import estimate_tokens

log = logging.getLogger("conch.context.session")


class FoldsAhead(LearnedWindows):
    """Writing the next fold's summary ahead, and warming a local server's cache for it."""

    # After a summary written ahead was turned down on every try (``_prep_failed``): the
    # turns the chat had then, and the fold in which it was tried once more.
    _failed_turns: int = 0
    _retried: int | None = None

    @property
    def preparing(self) -> bool:
        """Whether the next fold's summary is being written in the background now."""
        return self._prep_task is not None and not self._prep_task.done()

    @property
    def prepared(self) -> str | None:
        """The next fold's summary, written ahead and not sent yet (None: none ready)."""
        return self._prepared.text if self._prepared is not None else None

    async def wait_prepared(self) -> None:
        """Until the summary being written ahead (if any) is finished or has given up: what
        the time a person takes to read and type gives it (tests, benchmarks)."""
        task = self._prep_task
        if task is not None and not task.done():
            await asyncio.wait({task})

    def _marks(self, turns: int) -> list[Mark]:
        """The marks of the first ``turns`` kept turns."""
        starts = self._ledger.turn_starts
        n = max(0, min(turns, len(starts)))
        end = starts[n] if n < len(starts) else len(self._messages)
        return marks(self._messages[:end], starts[:n], self._seqs[:n])

    def _valid(self, p: Prepared) -> bool:
        return p.valid(self._summary, fingerprint(self._late), self._marks(len(p.covers)))

    def _discard_prepared(self) -> None:
        p, self._prepared = self._prepared, None
        if p is not None and p.facts_only:
            return  # no summary was written ahead: nothing of the person's is lost
        self._notes.append(
            Note(
                topic="summary-failed",
                text="A summary Conch had written ahead of the next fold no longer matched the "
                "chat (a message was edited, sent again or taken from the chat log), so it was "
                "thrown away; the fold summarises then.",
            )
        )

    def _prepared_for(self, dropped_turns: int) -> Prepared | None:
        """The prepared summary, taken, when it covers the start of the turns a fold drops."""
        p = self._prepared
        self._prepared = None
        if p is None:
            return None
        if len(p.covers) > dropped_turns or not self._valid(p):
            self._prepared = p
            self._discard_prepared()
            return None
        if p.facts_only:
            # The fold builds the same facts itself (the request read ahead) and has a model
            # summarise them after the turn, as it does with nothing written ahead.
            return None
        return p

    def _drop_for(self, drop: int) -> int:
        """The fold's drop, widened to the whole turns a prepared summary covers (never the
        current one), so the summary is used as it was written, or to the deeper fold whose
        request was read ahead."""
        p = self._prepared
        if p is None or not p.covers:
            return drop
        starts = self._ledger.turn_starts
        n = len(p.covers)
        if n >= len(starts) or not self._valid(p):
            return drop
        if starts[n] >= drop:
            return starts[n]
        if self._deeper is not None and self._deeper[0] is p:
            # Deeper than the summary goes, but not as deep as the fold read ahead for a big
            # message: widened to that one, whose request the server has read already.
            deeper = self._deeper[1]
            if drop < deeper < self._current_turn_start():
                return deeper
        return drop

    async def _stop_preparing(self) -> None:
        """Cancel the summary being written ahead, and wait until its request has hung up."""
        task = self._prep_task
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task})

    def _prepare_next_fold(
        self, model: ModelInfo, window: int, b: int, template: ChatRequest | None = None
    ) -> None:
        """After a turn: when the next fold is near, start writing its summary (a task this
        session owns; on this computer it runs only while no turn needs the server), and
        have a local server evaluate the request that fold will send (``template``: this
        turn's request)."""
        if self.summariser is None or self._closed or b <= 0:
            return
        task = self._prep_task
        if task is not None and not task.done():
            return
        job = None if self._late else self._next_job(b)
        if self._late:
            # A fold of this turn went ahead without its summary: that comes first.
            work = self._write_late(model, window, template, b)
        elif job is not None:
            work = self._run_job(job, model, window, template, b)
        elif (
            template is not None
            and self.warm_folds
            and (self._prepared is not None or self._keeps_nothing(b))
        ):
            work = self._warm_fold(model, template, b)  # the turn just added is read ahead too
        else:
            return
        self._prep_task = asyncio.get_running_loop().create_task(
            work, name=f"prepare-fold:{self.chat_id}"
        )

    def listen(self, listener: SummaryListener) -> None:
        """Be told when the summary a fold went ahead without is written (``SummaryWritten``)."""
        self._listeners.append(listener)

    @property
    def writing(self) -> bool:
        """Whether a fold's summary is still to be written, after the turn that folded."""
        return bool(self._late)

    async def wait_written(self) -> None:
        """Until the summary a fold went ahead without is written, or has given up or given
        way to a turn (``conch ask`` waits for it before its process ends)."""
        while self._late:
            task = self._prep_task
            if task is None or task.done():
                return
            self._written.clear()
            told = asyncio.ensure_future(self._written.wait())
            try:
                await asyncio.wait({task, told}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                told.cancel()

    async def _write_late(
        self, model: ModelInfo, window: int, template: ChatRequest | None, b: int
    ) -> None:
        """Write the summary of the turns a fold dropped without one (``_late``, on the summary
        they extend), make it the chat's and say so; then go on as after any turn (the next
        fold's summary ahead). On this computer it gives way to the person's next turn, and
        is written again after it."""
        summariser = self.summariser
        if summariser is None:
            return
        late, base, interim = list(self._late), self._late_base, self._summary
        pending = fingerprint(late)
        # Sized for the window the model really has (a refusal in this turn may have taught
        # a smaller one than ``window``).
        window = min(window, self.window_for(model))
        sized = model if model.context == window else model.model_copy(update={"context": window})
        result: SummaryResult | None = None
        why, spent = "", 0
        for _ in range(PREPARE_TRIES):  # a small model's summary turned down: once more
            try:
                with background():
                    result = await summariser.summarise(late, base, model=sized)
            except GaveWayError:
                return  # the person's turn needed the server: written again after it
            except Exception as exc:  # a summary is a help: the fold keeps its facts
                log.warning("writing a fold's summary after its turn failed", exc_info=True)
                result, why = None, f"{type(exc).__name__}: {exc}"
                break
            spent += result.tokens
            if (result.text or "").strip() and not result.problem:
                break
            log.info("a fold's summary was turned down: %s", result.problem or "empty")
        # The last try's facts-only summary (some pieces summarised, the rest's facts) still
        # beats the facts the fold went ahead with.
        text = (result.text or "").strip() if result is not None else ""
        if result is not None:
            why = result.problem or ("" if text else "no summary")
        async with self._lock:  # never in the middle of a turn
            # Another process on the chat may have saved since: its newer turns are kept, and
            # a fold it made or this summary it wrote first is seen here.
            self._sync_with_disk()
            if self._closed or self._summary != interim or fingerprint(self._late) != pending:
                return  # a fold, an edit, a rebuild or another process's summary came first
            if self.latest_fold is not None:
                logged = await asyncio.to_thread(self.latest_fold)
                if logged is not None and self._written_elsewhere(logged):
                    # Another process wrote it first: the log's is the fold's, and so the file's.
                    self._take_written(logged)
                    note = await self._persist()
                    if note is not None:
                        self._notes.append(note)
                    self._written.set()
                    return
                if logged != (self._first_kept_seq(), interim):
                    # The chat log no longer has this fold: an edit before it, or a newer fold
                    # by another process (whose summary may be the same placeholder).
                    return
            self._late = []
            self._pending_summary_tokens += spent
            if text:
                self._summary = fit(text, *summary_cap(window))
                self._summary_tokens = estimate_tokens(summary_block(self._summary))
            if why:
                self._notes.append(
                    Note(
                        topic="summary-failed",
                        text=f"No model summarised the start of the chat ({why}); "
                        "its facts are kept word for word.",
                    )
                )
            self._tell(
                SummaryWritten(
                    first_kept_seq=self._first_kept_seq(),
                    summary=self._summary if text else "",
                    model=model.name,
                )
            )
            note = await self._persist()
            if note is not None:
                self._notes.append(note)
            self._written.set()
        job = self._next_job(b)
        if job is None:
            if template is not None and (text or self._keeps_nothing(b)):
                # The next turn sends the new summary: the server reads it now, not then (and
                # first the fold keeping only the next message, when that is likely).
                await self._warm_fold(model, template, b)
            return
        adapter = self.adapters.get(model.provider)
        if text and template is not None and self.warm_folds and adapter and adapter.local:
            # The next turn sends the new summary: the server reads it now, not then.
            request = warm_request(template, summary_block(self._summary), self._messages)
            if request is not None:
                with background(), for_the_chat():
                    await warm(adapter, request)
        await self._run_job(job, model, window, template, b)

    def _next_job(self, b: int) -> Job | None:
        """What to summarise ahead now: the turns the next fold will drop (the B/2 rule with
        room for one more message of the usual size) and any turns folded while their summary
        was late; None when that is written already, or the fold is not near."""
        p = self._prepared
        if p is not None and not self._valid(p):
            self._discard_prepared()
            p = None
        if p is not None and p.facts_only:
            p = None  # held for reading ahead only: the one more try starts from scratch
        fold = self._first_kept_seq()
        f, r = self._factor, self._reserved()
        ahead = self._ledger.recent_person_tokens(RECENT_TURNS)
        # The next message may be as big as the biggest recent one (a pasted page).
        big = self._ledger.recent_person_tokens(RECENT_TURNS, largest=True)
        room = max(0, b - int(big * f))  # what the transcript may hold before such a message
        if self._prep_failed == fold and (
            # Turned down on every try: a small model often summarises the same chat a turn
            # longer well, so it is tried once more in this fold, when the chat has grown and
            # the next message may bring the fold (without that, the first fold of SmolLM2 at
            # 2,048 went ahead with nothing written or read ahead).
            self._retried == fold
            or self._ledger.turns <= self._failed_turns
            or not self._ledger.near(room, f, r)
        ):
            return None
        near = self._ledger.near(b, f, r, PREPARE_AT) or self._ledger.near(room, f, r)
        if not near and not self._late:
            return None
        cut = 0
        if near:
            cut = self._ledger.cut_ahead(b, f, r, ahead)
        starts = self._ledger.turn_starts
        wanted = bisect.bisect_left(starts, cut) if cut > 0 else 0
        late = fingerprint(self._late)
        if p is not None:
            have = len(p.covers)
            if have >= wanted:
                return None  # written already
            # Extended once more when the next message may bring the fold, not after every
            # turn (each extension is a request, and rewrites the summary).
            if not self._ledger.near(room, f, r):
                return None
            messages: list[Message] = self._messages[starts[have] : cut]
            previous, spent = p.text, p.tokens
        else:
            messages = [*self._late, *self._messages[:cut]]
            previous, spent = self._summary, 0
        if not messages:
            return None
        return Job(
            base=self._summary,
            pending=late,
            covers=tuple(self._marks(wanted)),
            messages=tuple(messages),
            previous=previous,
            fold=fold,
            spent=spent,
        )

    async def _run_job(
        self,
        job: Job,
        model: ModelInfo,
        window: int,
        template: ChatRequest | None = None,
        b: int = 0,
    ) -> None:
        summariser = self.summariser
        if summariser is None:
            return
        if self._prep_failed == job.fold:
            self._prep_failed, self._retried = None, job.fold  # the one more try
        sized = model if model.context == window else model.model_copy(update={"context": window})
        # A small model's summary is often turned down (a copy of the chat, another topic)
        # and the next try is often fine: tried again once, else the fold goes ahead with
        # facts and its summary is written after the turn.
        for _ in range(PREPARE_TRIES):
            try:
                with background():
                    result = await summariser.summarise(
                        list(job.messages), job.previous, model=sized
                    )
            except GaveWayError:
                return  # the person's turn needed the server; after it, preparing starts again
            except Exception:  # a summary written ahead is a help: the fold summarises then
                log.warning("writing the next fold's summary ahead failed", exc_info=True)
                self._prep_failed, self._failed_turns = job.fold, self._ledger.turns
                return
            text = (result.text or "").strip()
            if text and not result.problem:
                break
            log.info("a summary written ahead was turned down: %s", result.problem or "empty")
        else:
            # Not a whole summary (a refusal, facts only): the fold summarises then, and this
            # fold's turns are tried again in the background at most once more (``_next_job``).
            self._prep_failed, self._failed_turns = job.fold, self._ledger.turns
            held = self._prepared
            if held is None or held.facts_only:
                # Nothing written ahead: the fold keeps these turns' facts on the summary
                # before, and that request is read ahead like any other.
                self._prepared = self._facts_only(job, model)
            if template is not None and self._prepared is not None:
                # (An extension turned down: the summary written before it still serves the
                # fold, whose request now holds this turn too.)
                await self._warm_fold(model, template, b)
            return
        if job.base != self._summary or job.pending != fingerprint(self._late):
            return  # a fold came first
        self._prepared = Prepared(
            base=job.base,
            pending=job.pending,
            covers=job.covers,
            text=fit(text, *summary_cap(window)),
            tokens=job.spent + result.tokens,
            model=result.model,
        )
        if template is not None:
            await self._warm_fold(model, template, b)

    def _facts_only(self, job: Job, model: ModelInfo) -> Prepared | None:
        """What the fold of ``job``'s turns sends when no summary of them was written: the
        summary before with their facts (None when that is nothing, or a fold came first)."""
        if job.base != self._summary or job.pending != fingerprint(self._late):
            return None
        starts = self._ledger.turn_starts
        n = len(job.covers)
        if not n or n >= len(starts):
            return None
        held = Prepared(
            base=job.base,
            pending=job.pending,
            covers=job.covers,
            text="",
            tokens=0,
            model="",
            facts_only=True,
        )
        text = self._fold_summary(held, starts[n], self.window_for(model))
        return dataclasses.replace(held, text=text) if text else None

    def _fold_summary(self, p: Prepared, cut: int, window: int) -> str:
        """The summary a fold dropping the first ``cut`` messages sends, ``p`` prepared: built
        as the fold builds it (``Folding._fold``), so the request read ahead is the same."""
        starts = self._ledger.turn_starts
        covered = starts[len(p.covers)] if len(p.covers) < len(starts) else len(self._messages)
        if p.facts_only:
            # The fold takes no summary written ahead: the facts of all it drops.
            before = self._late_base if self._late else self._summary
            kept = facts_kept(before, before, [*self._late, *self._messages[:cut]], window)
            text = kept or WRITING_SUMMARY
        elif cut <= covered:
            return p.text
        else:
            text = facts_kept(p.text, p.text, self._messages[covered:cut], window)
        return fit(text, *summary_cap(window)) if text else ""

    def _next_big(self) -> int:
        """How big the next message may be, for the folds read ahead: somewhat bigger than the
        biggest of the person's recent ones (a pasted page), turns folded away included."""
        recent = self._ledger.recent_person_tokens(PAGE_TURNS, largest=True, folded=True)
        return int(recent * DEEPER_MARGIN)

    def _keeps_nothing(self, b: int) -> bool:
        """Whether the next message, if that big, brings a fold that keeps nothing before it:
        at 2,048 tokens most folds do, and one often comes right after another or before any
        summary is written ahead."""
        return self._ledger.keeps_nothing(b, self._factor, self._reserved(), self._next_big())

    async def _warm_fold(self, model: ModelInfo, template: ChatRequest, b: int) -> None:
        """Have a local server evaluate the requests the next fold may send, so the fold turn
        finds its prompt already read, then the chat as it is.

        llama.cpp saves a slot's prompt to its RAM cache when the next request takes the slot,
        but loading one out of the cache removes it there, and any later request sharing a
        quarter of a cached prompt may load it: so the likely folds' prompts are read in the
        chat's slot just before the chat as it is, and nothing after them can take them."""
        p = self._prepared
        adapter = self.adapters.get(model.provider)
        if not self.warm_folds or adapter is None or not adapter.local:
            return
        if p is not None and not self._valid(p):
            return
        starts = self._ledger.turn_starts
        window = self.window_for(model)
        alone = self._keeps_nothing(b)
        self._deeper = None
        cuts: list[int] = []
        if p is None:
            # No summary written ahead: a fold then sends the summary the chat has with the
            # facts of every turn it drops, which is known now.
            p = Prepared(
                base=self._summary,
                pending=fingerprint(self._late),
                covers=(),
                text="",
                tokens=0,
                model="",
                facts_only=True,
            )
        else:
            if len(p.covers) >= len(starts):
                return
            # The folds likely next: the one keeping the turns after the summary; the one a
            # message somewhat bigger than the biggest recent one brings (deeper: what the
            # summary lacks keeps its facts; a fold between the two is widened to it).
            covered = starts[len(p.covers)]
            deeper = self._ledger.cut_ahead(b, self._factor, self._reserved(), self._next_big())
            cuts = [deeper] if covered < deeper < len(self._messages) else []
            self._deeper = (p, deeper) if cuts else None
            cuts.append(covered)
        held = p

        def fold_to(cut: int) -> ChatRequest | None:
            kept = self._messages[cut:] or [Message(role="user", text="")]
            block = summary_block(self._fold_summary(held, cut, window))
            return warm_request(template, block, kept)

        # The fold dropping every turn but the next (a small window, a pasted page): in the
        # chat's slot when such a message is likely, else in the background slot (the least
        # likely fold; with no summary written ahead, not at all).
        whole = fold_to(len(self._messages))
        elsewhere = [whole] if cuts and not alone else []
        # Read in the chat's slot: the likely folds, each saved to the cache when the next one
        # takes the slot, the likelier last, so nothing read after it can take it; and last
        # the chat as it is, which stays in the slot for a turn that does not fold.
        chats = [whole] if alone else []
        chats.extend(fold_to(cut) for cut in cuts)
        chats.append(warm_request(template, summary_block(self._summary), self._messages))
        with background():
            for request in elsewhere:
                if request is not None and not await warm(adapter, request):
                    return
            with for_the_chat():
                for request in chats:
                    if request is not None and not await warm(adapter, request):
                        return
