"""Two processes on one chat (the window and ``conch ask``) while a fold's summary is written
after its turn: when one writes it, the transcript file and the chat log end up agreeing, and
neither process nor a third one rebuilds its copy from the log (that costs the provider's
prompt cache and puts a note in Health).

The interleavings: the writer commits after the other process answered a turn, or just after
the other saved (its own save refused), or while the other's turn is in flight (the other's
save refused); the other folds again before the summary is done (the late one is dropped, never
written over the newer fold); a process wrote the summary to the log and closed before saving
its file (the copies take the log's).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from bench._scripted import Answer, ScriptedAdapter
from engines.base import Compacted, Done, Event, ModelInfo, SummaryWritten
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.base import ChatRequest
from tests.engines.test_fold_turn import SlowSummariser
from tests.engines.test_session import CHAT, ChatLog, ending, only, recovered
from tests.waits import HANG_SECONDS

WINDOW = ModelInfo(provider="openai", id="w", context=4_096)


@dataclass
class HeldAdapter(ScriptedAdapter):
    """A scripted server that, while ``hold`` is on, keeps a request (``held`` set) until
    ``go`` is set: a turn in flight in another process."""

    hold: bool = False
    held: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if self.hold:
            self.held.set()
            await self.go.wait()
        async for ev in super().stream(request):
            yield ev


class PausingLog(ChatLog):
    """A chat log whose next read of its latest fold, once ``pause`` is called, waits in the
    reading session's worker thread until ``resume``: another process acts in between."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = asyncio.Event()
        self._resume = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def pause(self) -> None:
        self._loop = asyncio.get_running_loop()

    def resume(self) -> None:
        self._resume.set()

    def latest_fold(self) -> tuple[int, str] | None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(self.paused.set)
            self._resume.wait(HANG_SECONDS)
        return self.fold


async def folded_with_summary_on_its_way(
    log: ChatLog, writer: ApiSession, words: str = "Round"
) -> Compacted:
    """The writer's turns until one folds without waiting for its summary; that summary is
    then being written, and held until ``summariser.release`` is set."""
    for i in range(30):
        events = await log.send(writer, f"{words} {i}: tell me about the garden.", WINDOW)
        assert isinstance(ending(events), Done)
        folds = only(events, Compacted)
        if folds:
            (fold,) = folds
            assert fold.writing and writer.writing
            fold_event: Compacted = fold
            return fold_event
    raise AssertionError("the chat never folded")


def two_processes(
    data_dir: Path, adapter: ScriptedAdapter, log: ChatLog | None = None
) -> tuple[ChatLog, ApiSession, SlowSummariser, ApiSession, SlowSummariser]:
    log = log or ChatLog()
    writer_summariser, other_summariser = SlowSummariser(), SlowSummariser()
    writer = log.session(data_dir, adapter, writer_summariser)
    other = log.session(data_dir, adapter, other_summariser)
    return log, writer, writer_summariser, other, other_summariser


async def the_file_agrees(log: ChatLog, data_dir: Path, answered_seq: int) -> None:
    """The file holds the log's summary (the one written late), no late turns, and the other
    process's answered turn; a third process rebuilds nothing and sends that summary."""
    assert log.fold is not None and log.fold[1].startswith("Summary ")
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == log.fold[1]
    assert not saved.late
    assert answered_seq in saved.seqs
    adapter = ScriptedAdapter(default=Answer("c" * 400))
    third = log.session(data_dir, adapter)
    events = await log.send(third, "And a third process?", WINDOW)
    assert isinstance(ending(events), Done)
    assert not recovered(events)
    assert adapter.requests[-1].messages[0].text.startswith(SUMMARY_OPEN + log.fold[1])


async def test_a_late_summary_saved_after_the_other_process_answered_keeps_its_turn(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("b" * 1_200))
    log, writer, written, other, others = two_processes(data_dir, adapter)
    fold = await folded_with_summary_on_its_way(log, writer)
    # The other process answers a turn (and saves the file) while the summary is written.
    answered = log.next_seq
    events = await log.send(other, "Meanwhile, from the terminal.", WINDOW)
    assert isinstance(ending(events), Done) and not recovered(events)
    # The writer finishes: the log gets the summary of the folded turns, and so does the file,
    # with the other process's turn kept.
    written.release.set()
    await asyncio.wait_for(writer.wait_written(), HANG_SECONDS)
    late, previous, _focus = written.calls[0]
    assert late[0].text.startswith("Round 0:") and previous == ""
    assert log.fold == (fold.first_kept_seq, writer.summary)
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == writer.summary and not saved.late
    # The other process was writing the same summary: it takes the writer's, not its own.
    others.release.set()
    await asyncio.wait_for(other.wait_prepared(), HANG_SECONDS)
    assert other.summary == writer.summary and not other.writing
    assert log.fold == (fold.first_kept_seq, writer.summary)
    for session, text in ((other, "Back in the terminal."), (writer, "Back in the window.")):
        events = await log.send(session, text, WINDOW)
        assert isinstance(ending(events), Done) and not recovered(events)
    await asyncio.wait_for(writer.wait_prepared(), HANG_SECONDS)
    await the_file_agrees(log, data_dir, answered)


async def test_a_late_summary_saved_just_after_the_other_process_saved_keeps_its_turn(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("b" * 1_200))
    pausing = PausingLog()
    log, writer, written, other, others = two_processes(data_dir, adapter, pausing)
    fold = await folded_with_summary_on_its_way(log, writer)
    pausing.pause()
    written.release.set()
    try:
        # The writer has its summary and has read the file; while it checks the log, the
        # other process answers a turn and saves the file first.
        await asyncio.wait_for(pausing.paused.wait(), HANG_SECONDS)
        answered = log.next_seq
        events = await log.send(other, "Meanwhile, from the terminal.", WINDOW)
        assert isinstance(ending(events), Done) and not recovered(events)
    finally:
        pausing.resume()
    # The writer's save is refused (the file changed), so it joins the other's file: the
    # summary goes into the file with the other process's turn kept.
    await asyncio.wait_for(writer.wait_written(), HANG_SECONDS)
    assert log.fold == (fold.first_kept_seq, writer.summary)
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == writer.summary and not saved.late and answered in saved.seqs
    others.release.set()
    for session in (writer, other):
        await asyncio.wait_for(session.wait_prepared(), HANG_SECONDS)
    await the_file_agrees(log, data_dir, answered)


async def test_a_late_summary_written_during_the_other_process_turn_keeps_that_turn(
    data_dir: Path,
) -> None:
    adapter = HeldAdapter(default=Answer("b" * 1_200))
    log, writer, written, other, others = two_processes(data_dir, adapter)
    await folded_with_summary_on_its_way(log, writer)
    # The other process's turn is in flight (its message saved, its answer on its way) ...
    adapter.hold = True
    answered = log.next_seq
    turn = asyncio.create_task(log.send(other, "Meanwhile, from the terminal.", WINDOW))
    await asyncio.wait_for(adapter.held.wait(), HANG_SECONDS)
    adapter.hold = False
    # ... when the writer writes the summary: the log and the file get it.
    written.release.set()
    await asyncio.wait_for(writer.wait_written(), HANG_SECONDS)
    assert log.fold is not None and log.fold[1] == writer.summary
    # The other process's turn ends: its save takes the written summary and keeps the turn.
    adapter.go.set()
    events = await asyncio.wait_for(turn, HANG_SECONDS)
    assert isinstance(ending(events), Done) and not recovered(events)
    assert other.summary == writer.summary and not other.writing
    others.release.set()
    for session in (writer, other):
        await asyncio.wait_for(session.wait_prepared(), HANG_SECONDS)
    await the_file_agrees(log, data_dir, answered)


ELSEWHERE = "Summary written by a process that closed before it saved its file."


async def test_a_copy_whose_late_turns_the_log_has_summarised_takes_that_summary(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("b" * 1_200))
    log, writer, written, other, others = two_processes(data_dir, adapter)
    fold = await folded_with_summary_on_its_way(log, writer)
    # Another process wrote the fold's summary to the log and closed before saving its file.
    log.fold = (fold.first_kept_seq, ELSEWHERE)
    # The next process on the chat finds the file waiting for that summary: it takes the
    # log's, with its turns as they are, instead of rebuilding them.
    events = await log.send(other, "Meanwhile, from the terminal.", WINDOW)
    assert isinstance(ending(events), Done) and not recovered(events)
    assert adapter.requests[-1].messages[0].text.startswith(SUMMARY_OPEN + ELSEWHERE)
    assert not other.writing
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == ELSEWHERE and not saved.late
    # The writer's own summary, finished later, is dropped: the log keeps the one it has.
    written.release.set()
    others.release.set()
    for session in (writer, other):
        await asyncio.wait_for(session.wait_prepared(), HANG_SECONDS)
    assert log.fold == (fold.first_kept_seq, ELSEWHERE)
    assert writer.summary == ELSEWHERE and not writer.writing


async def test_a_writer_that_finds_its_summary_in_the_log_already_takes_that_one(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("b" * 1_200))
    log, writer, written, _other, _others = two_processes(data_dir, adapter)
    heard: list[SummaryWritten] = []
    writer.listen(heard.append)
    fold = await folded_with_summary_on_its_way(log, writer)
    log.fold = (fold.first_kept_seq, ELSEWHERE)
    written.release.set()
    await asyncio.wait_for(writer.wait_written(), HANG_SECONDS)
    # The writer takes the log's summary and saves it to the file at once; it writes nothing
    # to the log, and the divider hears that the writing is over.
    assert writer.summary == ELSEWHERE and not writer.writing
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == ELSEWHERE and not saved.late
    assert log.fold == (fold.first_kept_seq, ELSEWHERE)
    assert [e.summary for e in heard] == [""]
    await asyncio.wait_for(writer.wait_prepared(), HANG_SECONDS)
    events = await log.send(writer, "Back in the window.", WINDOW)
    assert isinstance(ending(events), Done) and not recovered(events)


async def test_a_late_summary_never_goes_over_the_other_process_newer_fold(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("b" * 1_200))
    log, writer, written, other, others = two_processes(data_dir, adapter)
    first = await folded_with_summary_on_its_way(log, writer)
    # The other process goes on until it folds again, before the writer's summary is done:
    # its fold takes the turns still waiting for a summary along with the ones it drops.
    second = await folded_with_summary_on_its_way(log, other, "Later")
    assert second.first_kept_seq > first.first_kept_seq
    written.release.set()
    await asyncio.wait_for(writer.wait_prepared(), HANG_SECONDS)
    # The writer's summary, of the first fold only, is dropped: the log and the file keep the
    # newer fold, whose turns (the first fold's too) wait for the other process's summary.
    assert log.fold == (second.first_kept_seq, second.summary)
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.seqs[0] == second.first_kept_seq and saved.summary == second.summary
    assert saved.late[0].text.startswith("Round ")  # the first fold's turns
    others.release.set()
    await asyncio.wait_for(other.wait_written(), HANG_SECONDS)
    late, _previous, _focus = others.calls[0]
    assert late[0].text.startswith("Round ")  # what the first fold dropped is summarised
    assert log.fold is not None and log.fold[0] == second.first_kept_seq
    for session in (writer, other):
        await asyncio.wait_for(session.wait_prepared(), HANG_SECONDS)
    await the_file_agrees(log, data_dir, second.first_kept_seq)
