"""One chat's turns: the chat log on one side, the engine on the other.

The conversation saves the person's message before the engine sees it, streams the engine's
events through, and saves the answer in a ``finally`` so a Stop, a failure or a closed window
keeps what arrived (marked partial). A fold (``Compacted``) is recorded for the divider and
starts learning alongside the turn, never blocking it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.health import Notes
from app.learning import Learner
from app.store import UNTITLED_TITLE, ChatStore, StoredMessage
from app.tool_calls import keep_tool_call
from app.trust import untrusted_message
from engines.base import (
    Attachment,
    Compacted,
    ContextEngine,
    Done,
    Engine,
    Event,
    FoldsToFit,
    Healed,
    Metered,
    ModelInfo,
    Note,
    Picture,
    Problem,
    ProblemKind,
    Shortened,
    SummaryWritten,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    ToolStarted,
    ToolStatus,
    TurnInput,
    TurnProblem,
    WritesLater,
)
from engines.context.continuation import join_answer
from engines.context.tool_loop import STOPPED, preview
from engines.providers.base import default_next_step
from engines.scrub import scrub
from engines.tools.lean import use_lean

log = logging.getLogger("conch.conversation")

ENDED_FIRST = "The turn ended before this call did."
CLOSED_FIRST = "Conch was closed before this call finished."


@dataclass
class _OpenCall:
    """A tool call of the turn that has no result yet."""

    tool: str
    server: str
    arguments: dict[str, Any]
    began: float  # time.monotonic() when its row appeared


@dataclass(frozen=True, slots=True)
class MessageSaved:
    seq: int
    role: str
    kind: str = "saved"


ConvEvent = Event | MessageSaved

# The chat's own model made ready to answer (the bundled one started), or why it cannot.
ReadyCheck = Callable[[ModelInfo], Awaitable[ModelInfo | TurnProblem]]


def title_from(text: str, limit: int = 48) -> str:
    """A chat title from the first thing the person said."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line or UNTITLED_TITLE
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut or line[:limit]) + "…"


class Conversation:
    """Drives one chat through its engine. Not thread-safe; lives on the app's event loop."""

    def __init__(
        self,
        chat_id: str,
        *,
        store: ChatStore,
        engine: Engine,
        model: ModelInfo,
        learner: Learner | None = None,
        health: Notes | None = None,
        system_prompt: Callable[[ModelInfo], str] | None = None,
        on_learning: Callable[[Any], None] | None = None,
        ready: ReadyCheck | None = None,
        on_summary: Callable[[SummaryWritten], None] | None = None,
    ) -> None:
        self.chat_id = chat_id
        self.store = store
        self.engine = engine
        self._model = model
        self.learner = learner
        self.health = health
        self.system_prompt = system_prompt
        self.on_learning = on_learning
        self.ready = ready
        # A fold's summary written after its turn: recorded here, then passed on (the divider).
        self.on_summary = on_summary
        self._learning: set[asyncio.Task[None]] = set()
        self._closing = False  # Conch is closing: a turn cut short now was not the person's Stop
        if isinstance(engine, WritesLater):
            engine.listen(self._summary_written)

    @property
    def model(self) -> ModelInfo:
        return self._model

    @property
    def continues_answers(self) -> bool:
        """Whether the engine can go on with a stopped answer (``continue_answer``)."""
        return bool(getattr(self.engine, "continues_answers", False))

    def closing(self) -> None:
        """Conch is closing (the window, a stop signal, the display gone): an answer cut short
        from now on is saved as cut by the closing, not as stopped by the person."""
        self._closing = True

    def switch_model(self, model: ModelInfo) -> None:
        self._model = model
        self.store.set_model(self.chat_id, model.key)

    async def _own_model(self) -> ModelInfo | TurnProblem:
        """The chat's model, ready to answer, or why it is not: a model that is not ready is
        never swapped for another here (the person picks one; ``switch_model``)."""
        if self._model.ready or self.ready is None:
            return self._model
        found = await self.ready(self._model)
        if isinstance(found, ModelInfo):
            if found.key != self._model.key:  # a check that offers another model is a bug
                raise ValueError(f"the ready check answered {found.key} for {self._model.key}")
            self._model = found
        return found

    def _system(self) -> str:
        return self.system_prompt(self._model) if self.system_prompt else ""

    def context_usage(self) -> tuple[int, int] | None:
        """(tokens the next request would send, budget): the system prompt the person wrote
        and the answer length they asked for take room from the budget, as they do in a turn."""
        if isinstance(self.engine, ContextEngine | Metered):
            answer = self.store.chat_settings(self.chat_id).max_answer_tokens
            return self.engine.context_usage(self._model, self._system(), answer)
        return None

    async def turn(
        self,
        text: str,
        *,
        pictures: Sequence[Picture] = (),
        attachments: Sequence[Attachment] = (),
        again: int | None = None,
        version_of: int | None = None,
        continues: StoredMessage | None = None,
        pasted: bool = False,
    ) -> AsyncIterator[ConvEvent]:
        """Send one person message and stream the answer (see module docstring).

        ``again``: the seq of the person's message this sends once more (``retry``); the chat
        log gets no second copy of it. ``version_of``: the answer is a new version of that
        answer (``regenerate``). ``continues``: the stopped answer this one goes on with
        (``continue_answer``); what comes is added to it. ``pasted``: the composer saw
        text pasted into the message (it makes the chat untrusted, however short).
        """
        model = self._model
        if again is None:
            chat = self.store.get_chat(self.chat_id)
            if chat is not None and chat.untitled and text.strip():
                self.store.rename_chat(self.chat_id, title_from(text))
            saved = self.store.append_message(
                self.chat_id,
                "user",
                text,
                pictures=pictures,
                attachments=attachments,
                model_key=model.key,
                untrusted=untrusted_message(
                    "user", text, attachments=bool(attachments), pasted=pasted
                ),
            )
            asked = saved.seq
        else:
            asked = again
        yield MessageSaved(asked, "user")

        own = await self._own_model()
        if isinstance(own, TurnProblem):
            # Nothing was sent: the card says so, and the message waits for the person's
            # choice. An answer being continued or answered again stays as it was.
            fresh = continues is None and version_of is None
            seq = self._save_answer(model, [], [], own) if fresh else None
            yield Problem(problem=own)
            if seq is not None:
                yield MessageSaved(seq, "assistant")
            return
        model = own
        settings = self.store.chat_settings(self.chat_id)
        turn = TurnInput(
            chat_id=self.chat_id,
            seq=asked,
            text=text,
            model=model,
            pictures=tuple(pictures),
            attachments=tuple(attachments),
            system=self._system(),
            max_answer_tokens=settings.max_answer_tokens,
            temperature=settings.temperature,
            lean=use_lean(model.context),
            continue_from=continues.text if continues is not None else "",
            program_mode=settings.program_mode,
            program_model=settings.program_model or "",
        )
        # A continued answer starts with the words it already has (they are saved with it).
        answer: list[str] = [continues.text] if continues is not None else []
        thinking: list[str] = [continues.thinking] if continues is not None else []
        before = len(answer)  # the first element, if any, is not new
        problem: TurnProblem | None = None
        finished = False
        called = False
        open_calls: dict[str, _OpenCall] = {}  # by call id, until its result comes
        # The answer is saved in one place, the ``finally``, however the turn ends: finished,
        # failed, stopped (cancelled) or left by its reader (the window closed).
        try:
            try:
                async for event in self.engine.turn(turn):
                    if isinstance(event, TextDelta) and before and len(answer) == before:
                        # The first new words: the join reads as one answer.
                        event = TextDelta(text=join_answer("".join(answer), event.text))
                        if not event.text:
                            continue
                    if isinstance(event, TextDelta):
                        answer.append(event.text)
                    elif isinstance(event, ThinkingDelta):
                        thinking.append(event.text)
                    elif isinstance(event, Problem):
                        problem = event.problem
                    elif isinstance(event, Done):
                        finished = True
                    elif isinstance(event, ToolCall):
                        called = True
                        c = event.call
                        open_calls.setdefault(
                            c.id, _OpenCall(c.name, "", dict(c.arguments), time.monotonic())
                        )
                    elif isinstance(event, ToolStarted):
                        began = open_calls.get(event.call_id)
                        open_calls[event.call_id] = _OpenCall(
                            event.tool,
                            event.server,
                            dict(event.arguments),
                            began.began if began is not None else time.monotonic(),
                        )
                    elif isinstance(event, ToolResult):
                        open_calls.pop(event.call_id, None)
                        # Kept in the chat log (the tool rows read it back, and it marks the
                        # chat untrusted when the result came from outside).
                        keep_tool_call(self.store, self.chat_id, event, model.key)
                    self._observe(event, model)
                    yield event
            except asyncio.CancelledError:
                problem = TurnProblem.cancelled(partial=bool(answer), closing=self._closing)
                raise
            except GeneratorExit:
                # The consumer went away (window closed): keep what arrived.
                if not finished:
                    problem = problem or TurnProblem.cancelled(
                        partial=bool(answer), closing=self._closing
                    )
                raise
            except Exception as exc:  # an engine bug must not lose the person's message
                log.exception("engine failed")
                problem = TurnProblem.of(
                    ProblemKind.BROKEN_STREAM,
                    detail=type(exc).__name__,
                    next_step=default_next_step(ProblemKind.BROKEN_STREAM),
                    partial=bool(answer),
                )
                yield Problem(problem=problem)
            else:
                ended = self._ended_badly(finished, problem, answer, called)
                if ended is not None:
                    problem = ended
                    yield Problem(problem=problem)
        finally:
            self._close_calls(open_calls, problem, model)
            seq = self._save_answer(model, answer, thinking, problem, version_of, continues)
        if seq is not None:
            yield MessageSaved(seq, "assistant")

    def _close_calls(
        self, open_calls: dict[str, _OpenCall], problem: TurnProblem | None, model: ModelInfo
    ) -> None:
        """Calls the turn left without a result (it failed, or was stopped, before the engine
        could say how they ended) are kept as "stopped" -- or "closed" when Conch closing cut
        them, as it does the answer -- so their rows do not stay "Running…" or vanish after
        the turn."""
        closed = problem is not None and problem.cut_by_closing
        stopped = problem is not None and problem.kind is ProblemKind.CANCELLED
        status: ToolStatus = "closed" if closed else "stopped"
        text = CLOSED_FIRST if closed else STOPPED if stopped else ENDED_FIRST
        for call_id, call in open_calls.items():
            ended = ToolResult(
                call_id=call_id,
                tool=call.tool,
                server=call.server,
                arguments=call.arguments,
                status=status,
                text=text,
                preview=preview(text),
                seconds=max(0.0, time.monotonic() - call.began),
                total_chars=len(text),
                sent_chars=len(text),
                untrusted=False,  # Conch's own words: nothing came from outside
            )
            try:
                keep_tool_call(self.store, self.chat_id, ended, model.key)
            except Exception:  # the answer is saved all the same
                log.warning("an unfinished tool call could not be kept", exc_info=True)

    @staticmethod
    def _ended_badly(
        finished: bool, problem: TurnProblem | None, answer: list[str], called: bool
    ) -> TurnProblem | None:
        """The problem a stream that ended without one still is: no ``Done``, or an empty
        answer (a small model sometimes stops at once; an empty bubble would look like a
        hang). None when it ended well or already said what went wrong."""
        if problem is not None:
            return None
        if not finished:
            return TurnProblem.of(
                ProblemKind.BROKEN_STREAM,
                "the engine ended without finishing",
                default_next_step(ProblemKind.BROKEN_STREAM),
                partial=bool(answer),
            )
        if not "".join(answer).strip() and not called:
            return TurnProblem.of(
                ProblemKind.REFUSED,
                "the model's answer was empty",
                default_next_step(ProblemKind.REFUSED),
                message="The model finished without writing anything.",
            )
        return None

    def retry(self, seq: int) -> AsyncIterator[ConvEvent]:
        """Send the person's message at ``seq`` again, as it is (a too-long card's "Switch to
        …", "Try again"): the answer follows the failed one; the question is not repeated."""
        message = self.store.message(self.chat_id, seq)
        if message is None or message.role != "user":
            raise ValueError(f"no message of the person's at {seq} in this chat")
        return self._ask_again(message)

    def _ask_again(
        self,
        asked: StoredMessage,
        *,
        version_of: int | None = None,
        continues: StoredMessage | None = None,
    ) -> AsyncIterator[ConvEvent]:
        """A turn for the person's saved message ``asked``, with what it carried (pictures,
        attached files); the chat log gets no second copy of it."""
        return self.turn(
            asked.text,
            pictures=asked.pictures,
            attachments=asked.attachments,
            again=asked.seq,
            version_of=version_of,
            continues=continues,
        )

    async def regenerate(self, seq: int) -> AsyncIterator[ConvEvent]:
        """Answer the question before the answer at ``seq`` again; the new answer becomes a
        version of it (``ChatStore.versions``) and is the one shown and the one the model
        remembers. The earlier version comes back when nothing new was saved."""
        answer = self.store.message(self.chat_id, seq)
        if answer is None or answer.role != "assistant":
            raise ValueError(f"no answer at {seq} in this chat")
        asked = self.store.asked_before(self.chat_id, seq)
        if asked is None:
            raise ValueError(f"no message of the person's before {seq} in this chat")
        root = answer.version_of if answer.version_of is not None else seq
        shown = self.store.versions(self.chat_id, seq)
        for s in shown.seqs:  # none shows (nor reaches the model) while the new one comes
            self._shelve_answer(s, True)
        saved: int | None = None
        try:
            async for event in self._ask_again(asked, version_of=root):
                if isinstance(event, MessageSaved) and event.role == "assistant":
                    saved = event.seq
                yield event
        finally:
            if saved is None:
                # Nothing came to show: the tool results of the try go with it.
                for s in self.store.tool_results(self.chat_id, shown.seqs[-1], after=True):
                    self.store.set_shelved(self.chat_id, s, True)
                self.show_version(shown.seqs[shown.shown])

    def show_version(self, seq: int) -> None:
        """Show the version at ``seq`` of its answer with its tool results (``ChatStore``)."""
        self.store.show_version(self.chat_id, seq)

    def _shelve_answer(self, seq: int, shelved: bool) -> None:
        for s in (*self.store.tool_results(self.chat_id, seq), seq):
            self.store.set_shelved(self.chat_id, s, shelved)

    def can_continue(self, seq: int) -> bool:
        """Whether the answer at ``seq`` can go on where the person stopped it: the chat's
        last message, stopped with words in it, on an engine that continues answers."""
        message = self.store.message(self.chat_id, seq)
        if message is None or message.role != "assistant" or not message.text.strip():
            return False
        if message.problem is None or message.problem.kind is not ProblemKind.CANCELLED:
            return False
        if not self.continues_answers:
            return False
        last = self.store.messages(self.chat_id, start=seq + 1, limit=1)
        return not last

    async def continue_answer(self, seq: int) -> AsyncIterator[ConvEvent]:
        """Go on with the stopped answer at ``seq`` from its last word ("Continue"): the model
        is given the question and the words so far, and what it writes is added to that
        answer (still one answer in the chat log; stopped again, it keeps what came)."""
        if not self.can_continue(seq):
            raise ValueError(f"no stopped answer to continue at {seq} in this chat")
        answer = self.store.message(self.chat_id, seq)
        asked = self.store.asked_before(self.chat_id, seq)
        if answer is None or asked is None:
            raise ValueError(f"no message of the person's before {seq} in this chat")
        async for event in self._ask_again(asked, continues=answer):
            yield event

    async def edit(self, seq: int, text: str) -> AsyncIterator[ConvEvent]:
        """Replace the person's message at ``seq`` with ``text`` and send it again: what came
        after it is deleted (soft), and a fold that summarised it is withdrawn, so the model's
        memory is rebuilt from the log and folded anew when it is too long."""
        message = self.store.message(self.chat_id, seq)
        if message is None or message.role != "user":
            raise ValueError(f"no message of the person's at {seq} in this chat")
        later = [m.seq for m in self.store.messages(self.chat_id, start=seq + 1)]
        self.store.update_message(self.chat_id, seq, text=text)
        if later:
            self.store.delete_messages(self.chat_id, later)
        self._withdraw_fold_before(seq)
        async for event in self.turn(
            text, pictures=message.pictures, attachments=message.attachments, again=seq
        ):
            yield event

    def delete(self, seq: int) -> float:
        """Delete the message at ``seq`` (soft); ``undelete`` with the stamp undoes it. A
        person's message goes with its answers (an answer to nothing would read as an answer
        to the question before); an answer goes with the tool results it used (read without
        it they would be an answer of their own). A fold that summarised it is withdrawn (the
        model's memory is rebuilt from the log and folded anew)."""
        message = self.store.message(self.chat_id, seq)
        seqs = [seq]
        if message is not None and message.role == "assistant":
            seqs = [*self.store.tool_results(self.chat_id, seq), seq]
        if message is not None and message.role == "user":
            for m in self.store.messages(self.chat_id, start=seq + 1):
                if m.role == "user":
                    break
                seqs.append(m.seq)
        stamp = self.store.delete_messages(self.chat_id, seqs)
        self._withdraw_fold_before(seq)
        return stamp

    def undelete(self, stamp: float) -> None:
        self.store.restore_messages(self.chat_id, stamp)

    async def compact(self, focus: str = "") -> AsyncIterator[ConvEvent]:
        """Fold all but the newest turn now (the /compact command)."""
        if not isinstance(self.engine, ContextEngine):
            yield Note(topic="other", text="This model keeps its own memory; nothing to fold.")
            yield Done()
            return
        own = await self._own_model()
        if isinstance(own, TurnProblem):
            yield Problem(problem=own)
            return
        async for event in self.engine.compact(focus, model=self._model):
            self._observe(event, self._model)
            yield event

    async def fold_to_fit(self) -> AsyncIterator[Event]:
        """Fold a chat too long for its model's window now, before its first turn (a long
        imported chat), with the chat's own model only, and only when that model is ready:
        otherwise nothing is sent and the first turn folds as usual. The fold is recorded
        like a turn's; its summary is written in the background (``on_summary``)."""
        model = self._model
        if not isinstance(self.engine, FoldsToFit) or not model.ready:
            return
        answer = self.store.chat_settings(self.chat_id).max_answer_tokens
        async for event in self.engine.fold_to_fit(model, self._system(), answer):
            self._observe(event, model)
            yield event

    def resume_summary(self) -> bool:
        """Write again, in the background, the summary of a fold that was cut off before it
        was written (the chat or the app closed first), with the chat's own model and only
        when it is ready (else the next turn writes it); True when it is being written now
        (``on_summary`` hears when it is done)."""
        model = self._model
        if not isinstance(self.engine, WritesLater) or not model.ready:
            return False
        answer = self.store.chat_settings(self.chat_id).max_answer_tokens
        return self.engine.resume_writing(model, self._system(), answer)

    async def aclose(self) -> None:
        """Let learning runs that are under way finish (they are short), then close the engine."""
        if self._learning:
            await asyncio.gather(*self._learning, return_exceptions=True)
        await self.engine.aclose()

    # --- internals ------------------------------------------------------------------------

    def _withdraw_fold_before(self, seq: int) -> None:
        fold = self.store.latest_compaction(self.chat_id)
        if fold is not None and seq < fold.first_kept_seq:
            self.store.withdraw_fold(self.chat_id)

    def _save_answer(
        self,
        model: ModelInfo,
        answer: list[str],
        thinking: list[str],
        problem: TurnProblem | None,
        version_of: int | None = None,
        continues: StoredMessage | None = None,
    ) -> int | None:
        text = "".join(answer)
        if not text and not thinking and problem is None:
            return None
        partial = problem is not None and bool(text)
        if continues is not None:
            self.store.update_message(
                self.chat_id,
                continues.seq,
                text=text,
                thinking="".join(thinking),
                partial=partial,
                problem=problem,
            )
            return continues.seq
        msg = self.store.append_message(
            self.chat_id,
            "assistant",
            text,
            thinking="".join(thinking),
            partial=partial,
            problem=problem,
            model_key=model.key,
            version_of=version_of,
        )
        return msg.seq

    def _observe(self, event: Event, model: ModelInfo) -> None:
        if isinstance(event, Compacted):
            self.store.add_compaction(
                self.chat_id, event.first_kept_seq, scrub(event.summary), event.model
            )
            self._start_learning(event.first_kept_seq)
        elif isinstance(event, Healed) and self.health is not None:
            self.health.add("healed", event.what, model=event.model, window=event.window)
        elif isinstance(event, Note) and self.health is not None:
            self.health.add(event.topic, event.text, model=model.name)
        elif isinstance(event, Shortened) and self.health is not None:
            # Shown in the turn (with the offer of a model that reads it all), and kept here.
            self.health.add("shortened", event.text, model=model.name)
        elif isinstance(event, Problem) and self.health is not None:
            p = event.problem
            if p.kind is ProblemKind.TOO_LONG:
                self.health.add("too-long", p.message, model=model.name)
            elif p.kind is ProblemKind.UNREACHABLE:
                self.health.add("unreachable", p.detail or p.message, model=model.name)
            elif p.kind is ProblemKind.RUNTIME_STOPPED:  # with the runtime's last log lines
                self.health.add("local-model", f"{p.message}\n\n{p.detail}", model=model.name)

    def _summary_written(self, event: SummaryWritten) -> None:
        """The summary a fold went ahead without is written: the chat log records it as the
        fold's (the engine sends it from the next turn on, and checks the log agrees)."""
        if event.summary:
            self.store.add_compaction(
                self.chat_id, event.first_kept_seq, scrub(event.summary), event.model
            )
        if self.on_summary is not None:
            self.on_summary(event)

    def _start_learning(self, before_seq: int) -> None:
        if self.learner is None:
            return
        learner = self.learner

        async def run() -> None:
            try:
                result = await learner.review(self.chat_id, before_seq)
            except asyncio.CancelledError:
                raise
            except Exception:  # learning is a help; it never breaks the chat
                log.exception("learning run failed")
                return
            if result is not None and self.on_learning is not None:
                self.on_learning(result)

        task = asyncio.get_running_loop().create_task(run())
        self._learning.add(task)
        task.add_done_callback(self._learning.discard)
