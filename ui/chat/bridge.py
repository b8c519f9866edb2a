"""The one QObject between a chat's widgets and its ``Conversation``.

A turn runs as an ``asyncio.Task`` on the running qasync loop; the bridge keeps the task so
Stop can cancel it (``qasync.asyncSlot`` would hide it), re-emits every event as a Qt signal,
and always ends a turn in ``finally`` with ``busy_changed(False)``, whether it finished, failed
or was stopped. Widgets only connect to the signals; they never touch the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject, Signal
from shiboken6 import Shiboken

from app.answer_stats import AnswerClock, stats_book
from app.conversation import Conversation, MessageSaved
from app.reading import ReadingWait, reading_wait
from app.sqlite import StorageError
from engines.base import (
    Approval,
    Attachment,
    Compacted,
    Done,
    HandedOff,
    Healed,
    Note,
    PermissionAsk,
    Picture,
    Problem,
    ProblemKind,
    Reading,
    Shortened,
    SummaryWritten,
    TextDelta,
    ThinkingDelta,
    ToolAsk,
    ToolCall,
    ToolResult,
    ToolStarted,
    TurnProblem,
    Usage,
)
from engines.providers.base import closing_stream

log = logging.getLogger("conch.ui.bridge")


def _tool_of(ask: PermissionAsk) -> str:
    # Claude Code names the tool in ``kind``; an ACP program may name only the action.
    return f"{ask.program}:{ask.kind or ask.title}"


class ConversationBridge(QObject):
    """Runs one conversation's turns and reports them as signals.

    Signals:
        text_delta(str): a piece of the answer.
        thinking_delta(str): a piece of the model's thinking.
        message_saved(int, str): a message is in the chat log (seq, role).
        compacted(Compacted): the model's word-for-word memory now starts elsewhere.
        summary_written(SummaryWritten): the summary a fold went ahead without is written (it
            may come after the turn); ``summary_writing`` is False again.
        handed_off(HandedOff): a program was handed the chat; its memory starts there.
        problem(TurnProblem): the turn failed (the partial answer is kept and marked).
        healed(Healed), note(Note), usage(Usage): for Health and the context meter.
        shortened(Shortened): less than half of the person's message was sent.
        done(str): the turn or fold ended: the stop reason, "problem", "cancelled" or "error".
        busy_changed(bool): a turn started (True) or ended (False, always, in ``finally``).
        learning_done(LearningRun): a learning run finished (it may outlive the turn).
        approval_changed(object): a program's permission request (a ``PermissionAsk``) or a
            model's tool call (a ``ToolAsk``) now waits for the person, or none does (None).
        tool_event(object): a tool call of the running turn was asked for (``ToolCall``),
            started (``ToolStarted``) or ended (``ToolResult``); ``tool_events`` has them all.
        reading(object): the model is still reading the prompt (a ``Reading``: how far);
            ``reading_words`` says what the answer's placeholder shows.
    """

    text_delta = Signal(str)
    thinking_delta = Signal(str)
    message_saved = Signal(int, str)
    compacted = Signal(object)
    summary_written = Signal(object)
    handed_off = Signal(object)
    problem = Signal(object)
    healed = Signal(object)
    note = Signal(object)
    shortened = Signal(object)
    usage = Signal(object)
    done = Signal(str)
    busy_changed = Signal(bool)
    learning_done = Signal(object)
    approval_changed = Signal(object)
    tool_event = Signal(object)
    reading = Signal(object)

    def __init__(
        self,
        conversation: Conversation,
        parent: QObject | None = None,
        *,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(parent)
        self._conversation = conversation
        self._now = now  # what the answer's figures are timed by (tests move it by hand)
        self._task: asyncio.Task[None] | None = None
        self._mode = ""
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._clock: AnswerClock | None = None
        self._wait: ReadingWait | None = None  # the running turn's wait for its first word
        self._continuing: int | None = None  # the stopped answer the running turn goes on with
        self._closed = False
        self._asking: tuple[PermissionAsk | ToolAsk, asyncio.Future[str]] | None = None
        self._tool_events: list[ToolCall | ToolStarted | ToolResult] = []
        self._always: set[str] = set()  # tools allowed for the rest of this conversation
        self._handed: HandedOff | None = None  # not in the chat log: kept for a re-opened view
        self._writing = False  # the latest fold's summary is being written after its turn
        self._folding: asyncio.Task[None] | None = None  # a fold before the first turn
        # Learning runs end on their own schedule; hear about them whatever else is listening.
        previous = conversation.on_learning

        def on_learning(run: Any) -> None:
            if previous is not None:
                previous(run)
            self._emit(self.learning_done, run)

        conversation.on_learning = on_learning
        # A fold's summary is written after its turn, so it is heard of outside any turn.
        previous_summary = conversation.on_summary

        def on_summary(event: SummaryWritten) -> None:
            if previous_summary is not None:
                previous_summary(event)
            self._writing = False
            self._emit(self.summary_written, event)

        conversation.on_summary = on_summary

    # --- state ----------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation:
        return self._conversation

    @property
    def continues_answers(self) -> bool:
        """Whether the chat's engine can go on with a stopped answer ("Continue")."""
        return self._conversation.continues_answers

    @property
    def continuing(self) -> int | None:
        """The seq of the stopped answer the running turn goes on with, if it does."""
        return self._continuing if self.busy else None

    @property
    def chat_id(self) -> str:
        return self._conversation.chat_id

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def mode(self) -> str:
        """ "turn" or "compact" while busy, "" when idle."""
        return self._mode if self.busy else ""

    @property
    def partial_text(self) -> str:
        """The answer so far in the running turn (a re-opened chat view shows it)."""
        return "".join(self._text)

    @property
    def partial_thinking(self) -> str:
        return "".join(self._thinking)

    def reading_words(self, after: float) -> str:
        """What the running turn's answer placeholder says while the model reads the prompt
        (``app.reading``), once ``after`` seconds have passed without a first word; "" when
        nothing needs saying."""
        wait = self._wait
        return wait.words(after) if wait is not None and self.busy else ""

    @property
    def handoff(self) -> HandedOff | None:
        """Where the program's memory of the chat starts, if it was handed the chat and has
        not compacted since."""
        return self._handed

    @property
    def summary_writing(self) -> bool:
        """Whether the latest fold's summary is still being written (the divider says so)."""
        return self._writing

    @property
    def pending_approval(self) -> PermissionAsk | ToolAsk | None:
        """The request waiting for the person (a re-opened chat shows its card)."""
        return self._asking[0] if self._asking is not None else None

    @property
    def tool_events(self) -> list[ToolCall | ToolStarted | ToolResult]:
        """The running turn's tool calls so far (a re-opened chat view shows their rows)."""
        return list(self._tool_events)

    # --- a program asks permission, or a model asks to use a tool -------------------------

    async def approve(self, ask: PermissionAsk) -> Approval:
        """A program's approver: wait for the person's answer on the card (a future the
        card's buttons resolve, so the event loop never blocks). Stop withdraws the question.
        The answer goes to the program as chosen: "Allow once" is never sent as "always"."""
        if _tool_of(ask) in self._always:
            return Approval.ALWAYS
        choice = Approval(await self._ask(ask))
        if choice is Approval.ALWAYS:
            self._always.add(_tool_of(ask))
        return choice

    async def approve_tool(self, ask: ToolAsk) -> Approval:
        """The tool loop's approver (``engines.base.ToolApprover``): the person's answer to a
        model's tool call. The engine remembers "Always for this tool" itself."""
        return Approval(await self._ask(ask))

    async def _ask(self, ask: PermissionAsk | ToolAsk) -> str:
        while self._asking is not None:  # one card at a time; the next waits its turn
            waiting = self._asking[1]
            if waiting.done():
                await asyncio.sleep(0)  # its asker is clearing the card away
            else:
                await asyncio.wait({waiting})
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._asking = (ask, future)
        # The answer's figures leave out the time the card waited for the person's click.
        clock = self._clock
        if clock is not None:
            clock.hold()
        self._emit(self.approval_changed, ask)
        try:
            return await future
        finally:
            if clock is not None:
                clock.release()
            self._asking = None
            self._emit(self.approval_changed, None)

    def answer_approval(self, choice: str) -> None:
        """The person's answer: "once", "always" (this tool, for the rest of the chat) or
        "deny"."""
        if self._asking is None:
            return
        future = self._asking[1]
        if not future.done():
            future.set_result(choice if choice in ("once", "always") else "deny")

    def _withdraw_approval(self) -> None:
        # A program asks from its own task, not the turn's: Stop answers "no" for the person.
        if self._asking is not None and not self._asking[1].done():
            self._asking[1].set_result("deny")

    # --- actions --------------------------------------------------------------------------

    def send(
        self,
        text: str,
        pictures: Sequence[Picture] = (),
        attachments: Sequence[Attachment] = (),
        pasted: bool = False,
    ) -> bool:
        """Start a turn. False (and nothing happens) while another turn or fold runs.
        ``pasted``: the text was pasted into the box (it counts as untrusted)."""
        if self.busy or self._closed:
            return False
        stream = self._conversation.turn(
            text, pictures=tuple(pictures), attachments=tuple(attachments), pasted=pasted
        )
        self._start(stream, "turn")
        return True

    def resend(self, seq: int) -> bool:
        """Send the person's message at ``seq`` again, as it is (no second copy of it in the
        chat). False while another turn or fold runs, or when there is no such message."""
        if self.busy or self._closed:
            return False
        try:
            stream = self._conversation.retry(seq)
        except ValueError:
            return False
        self._start(stream, "turn")
        return True

    def edit(self, seq: int, text: str) -> bool:
        """Replace the person's message at ``seq`` with ``text`` and send it again (what came
        after it is deleted). False while busy, or when there is no such message."""
        if self.busy or self._closed or not text.strip():
            return False
        if self._conversation.store.message(self.chat_id, seq) is None:
            return False
        self._start(self._conversation.edit(seq, text), "turn")
        return True

    def regenerate(self, seq: int) -> bool:
        """Answer again in place of the answer at ``seq`` (kept as an earlier version). False
        while busy, or when there is no such answer."""
        if self.busy or self._closed:
            return False
        message = self._conversation.store.message(self.chat_id, seq)
        if message is None or message.role != "assistant":
            return False
        self._start(self._conversation.regenerate(seq), "turn")
        return True

    def can_continue(self, seq: int) -> bool:
        """Whether the stopped answer at ``seq`` can go on now ("Continue")."""
        return not self.busy and not self._closed and self._conversation.can_continue(seq)

    def continue_answer(self, seq: int) -> bool:
        """Go on with the stopped answer at ``seq`` where it stopped; the words that come are
        added to it (``partial_text`` holds the whole answer). False when it cannot now."""
        if not self.can_continue(seq):
            return False
        message = self._conversation.store.message(self.chat_id, seq)
        self._start(self._conversation.continue_answer(seq), "turn")
        self._continuing = seq
        if message is not None:  # the same answer grows: it starts with what it has
            self._text = [message.text]
            self._thinking = [message.thinking] if message.thinking else []
        return True

    def delete_message(self, seq: int) -> float | None:
        """Delete the message at ``seq``; the stamp undoes it (``undelete``). None while busy."""
        if self.busy or self._closed:
            return None
        return self._conversation.delete(seq)

    def undelete(self, stamp: float) -> None:
        self._conversation.undelete(stamp)

    def show_version(self, seq: int) -> bool:
        """Show the version at ``seq`` of its answer (the model reads it from the next turn)."""
        if self.busy or self._closed:
            return False
        self._conversation.show_version(seq)
        return True

    def compact(self, focus: str = "") -> bool:
        """Fold all but the newest turn now (``/compact``). False while busy."""
        if self.busy or self._closed:
            return False
        self._start(self._conversation.compact(focus), "compact")
        return True

    def fold_to_fit(self) -> None:
        """Fold a chat too long for its model now, before its first turn (a long imported
        chat): the divider shows at once, saying its summary is being written, and the
        person's turn is not held up (the fold sends nothing; the summary gives way)."""
        if self._closed or self._folding is not None:
            return

        async def run() -> None:
            try:
                async with closing_stream(self._conversation.fold_to_fit()) as events:
                    async for event in events:
                        if isinstance(event, Compacted):
                            self._handed = None
                            self._writing = event.writing
                            self._emit(self.compacted, event)
                        elif isinstance(event, Note):
                            self._emit(self.note, event)
            except asyncio.CancelledError:
                raise
            except Exception:  # a fold ahead is a help: the first turn folds as usual
                log.warning(
                    "folding an imported chat ahead of its first turn failed", exc_info=True
                )

        self._folding = asyncio.get_running_loop().create_task(
            run(), name=f"fold-to-fit:{self.chat_id}"
        )

    def resume_summary(self) -> None:
        """A fold's summary whose writing was cut off (the chat or the app closed first) is
        written again now, in the background; the divider says so until it is done."""
        if not self._closed and self._conversation.resume_summary():
            self._writing = True

    async def wait_folded(self) -> None:
        """Until the fold ``fold_to_fit`` started (if any) is done (tests)."""
        if self._folding is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._folding)

    def stop(self) -> None:
        """Cancel the running turn; the conversation keeps what arrived, marked "Stopped"."""
        self._withdraw_approval()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait(self) -> None:
        """Until the running turn (if any) has ended and cleaned up."""
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def aclose(self, *, quitting: bool = False) -> None:
        """Stop the turn, wait for it, and close the conversation (its engine). ``quitting``:
        Conch is closing, so an answer cut short says that, not that the person stopped it."""
        self._closed = True
        if quitting:
            self._conversation.closing()
        self.stop()
        if self._folding is not None:
            self._folding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._folding
        await self.wait()
        try:
            await self._conversation.aclose()
        except Exception:  # closing must never stop the window from closing
            log.exception("closing the conversation failed")

    # --- the turn -------------------------------------------------------------------------

    def _start(self, stream: AsyncIterator[Any], mode: str) -> None:
        loop = asyncio.get_running_loop()  # raises outside the app's loop: a wiring bug
        self._mode = mode
        self._continuing = None
        self._text = []
        self._thinking = []
        self._tool_events = []
        self._clock = AnswerClock(self._now) if mode == "turn" else None
        self._wait = reading_wait(self._conversation) if mode == "turn" else None
        self._emit(self.busy_changed, True)
        self._task = loop.create_task(self._run(stream), name=f"turn:{self.chat_id}")

    async def _run(self, stream: AsyncIterator[Any]) -> None:
        reason = ""
        try:
            # Closed now, not at garbage collection, so the conversation's own cleanup runs.
            async with closing_stream(stream) as events:
                async for event in events:
                    reason = self._dispatch(event, reason)
            reason = reason or "stop"
        except asyncio.CancelledError:
            reason = "cancelled"
            # The task ends here on purpose: Stop is not an error, and the conversation has
            # already saved the partial answer in its own ``finally``.
        except Exception as exc:
            log.exception("a turn failed outside the engine")
            reason = "error"
            # A full disk or a damaged file has its own sentence saying what to do.
            told = isinstance(exc, StorageError)
            self._emit(
                self.problem,
                TurnProblem.of(
                    ProblemKind.BROKEN_STREAM,
                    detail="" if told else type(exc).__name__,
                    partial=bool(self._text),
                    message=str(exc)
                    if told
                    else "Something went wrong while saving this chat; nothing was lost.",
                ),
            )
        finally:
            self._withdraw_approval()  # a question nobody can answer any more
            self._emit(self.done, reason)
            self._emit(self.busy_changed, False)

    def _dispatch(self, event: Any, reason: str) -> str:
        if self._clock is not None:
            self._clock.observe(event)
        if self._wait is not None:
            self._wait.observe(event)
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            self._emit(self.text_delta, event.text)
        elif isinstance(event, ThinkingDelta):
            self._thinking.append(event.text)
            self._emit(self.thinking_delta, event.text)
        elif isinstance(event, MessageSaved):
            if event.role == "assistant":
                self._keep_stats(event.seq)
            self._emit(self.message_saved, event.seq, event.role)
        elif isinstance(event, Compacted):
            self._handed = None
            self._writing = event.writing
            self._emit(self.compacted, event)
        elif isinstance(event, HandedOff):
            self._handed = event
            self._emit(self.handed_off, event)
        elif isinstance(event, Problem):
            self._emit(self.problem, event.problem)
            return "problem"
        elif isinstance(event, Healed):
            self._emit(self.healed, event)
        elif isinstance(event, Note):
            self._emit(self.note, event)
        elif isinstance(event, Shortened):
            self._emit(self.shortened, event)
        elif isinstance(event, Usage):
            self._emit(self.usage, event)
        elif isinstance(event, Reading):
            self._emit(self.reading, event)
        elif isinstance(event, ToolCall | ToolStarted | ToolResult):
            self._tool_events.append(event)
            self._emit(self.tool_event, event)
        elif isinstance(event, Done):
            return "problem" if reason == "problem" else event.stop_reason
        return reason

    def _keep_stats(self, seq: int) -> None:
        """Save the answer's figures beside it, before the view reads it back."""
        stats = self._clock.stats() if self._clock is not None else None
        book = stats_book(self._conversation.store) if stats is not None else None
        if stats is None or book is None:
            return
        try:
            book.save(self.chat_id, seq, stats)
        except sqlite3.Error:
            log.warning("the answer's figures could not be saved", exc_info=True)

    def _emit(self, signal: Any, *args: Any) -> None:
        # A chat deleted mid-turn may take its bridge with it; the task still finishes.
        if Shiboken.isValid(self):
            signal.emit(*args)
