"""A fold never fails the turn it happens in.

An empty answer right after a fold is checked: an overflow the server did not call one is
healed; a model that really said nothing is asked once more and then the turn says so, keeping
the fold. A fold never waits for a summary: it goes ahead with the dropped turns' facts, and
their summary is written in the background right after the answer, for the next turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._scripted import Answer, ScriptedAdapter
from engines.base import (
    Compacted,
    Done,
    Healed,
    Message,
    ModelInfo,
    Note,
    Problem,
    ProblemKind,
    SummaryWritten,
    Usage,
)
from engines.context.prepare import WRITING_SUMMARY
from engines.context.protocols import SummaryResult
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.base import ChatRequest
from tests.engines.test_session import (
    CHAT,
    FakeSummariser,
    ending,
    only,
    run,
    text_of,
)

HANG_GUARD = 60.0
TURN = "q" * 1_200  # with a 1,600-character answer: about 700 tokens a turn
FOLDS_AT = 9  # the turn an 8K model folds in, with turns that size (checked below)


@dataclass
class CountingAdapter(ScriptedAdapter):
    """A scripted server that can also count a request (None: it does not know)."""

    counts: list[int | None] = field(default_factory=list)
    counted: list[ChatRequest] = field(default_factory=list)

    async def count_tokens(self, request: ChatRequest) -> int | None:
        self.counted.append(request)
        return self.counts.pop(0) if self.counts else None


def counting(**kw: object) -> CountingAdapter:
    return CountingAdapter(default=Answer("a" * 1_600), **kw)  # type: ignore[arg-type]


def make(data_dir: Path, adapter: ScriptedAdapter, summariser: object) -> ApiSession:
    return ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        summariser=summariser,  # type: ignore[arg-type]
    )


async def up_to_the_fold(session: ApiSession, first: str = "") -> None:
    for i in range(FOLDS_AT):
        text = f"Question {i}: " + (first if i == 0 and first else TURN)
        assert isinstance(ending(await run(session, 2 * i, text)), Done)


async def test_an_empty_answer_after_a_fold_that_overflowed_is_healed(data_dir: Path) -> None:
    adapter = counting()
    session = make(data_dir, adapter, FakeSummariser())
    await up_to_the_fold(session)
    # At the fold the server answers nothing; counted, the request was over its window.
    adapter.add([Answer(""), Answer("The healed answer.")])
    adapter.counts = [None, 8_000]  # after the fold: unknown; after the empty answer: full
    events = await run(session, 2 * FOLDS_AT, f"Question {FOLDS_AT}: " + TURN)

    assert only(events, Compacted)
    assert not only(events, Problem)
    assert text_of(events) == "The healed answer."
    assert only(events, Healed)
    assert isinstance(ending(events), Done)
    empty, healed = adapter.requests[-2:]
    assert sum(len(m.text) for m in healed.messages) < sum(len(m.text) for m in empty.messages)


async def test_a_model_silent_after_a_fold_is_asked_once_more(data_dir: Path) -> None:
    adapter = counting()
    session = make(data_dir, adapter, FakeSummariser())
    await up_to_the_fold(session)
    adapter.add([Answer(""), Answer("Second time lucky.")])
    adapter.counts = [None, 900]  # far inside the window: not an overflow
    before = len(adapter.requests)
    events = await run(session, 2 * FOLDS_AT, f"Question {FOLDS_AT}: " + TURN)

    assert text_of(events) == "Second time lucky."
    assert isinstance(ending(events), Done)
    assert not only(events, Healed)
    first, again = adapter.requests[before:]
    assert first == again  # the same request: the server has it cached


async def test_a_model_that_stays_silent_after_a_fold_says_so_and_keeps_the_fold(
    data_dir: Path,
) -> None:
    adapter = counting()
    session = make(data_dir, adapter, FakeSummariser())
    await up_to_the_fold(session)
    adapter.add([Answer(""), Answer("")])
    events = await run(session, 2 * FOLDS_AT, f"Question {FOLDS_AT}: " + TURN)

    (compacted,) = only(events, Compacted)
    end = ending(events)
    assert isinstance(end, Problem)
    assert end.problem.kind is ProblemKind.REFUSED
    assert "wrote nothing" in end.problem.message and "summary is kept" in end.problem.message
    assert end.problem.next_step is not None and end.problem.next_step.kind == "retry"
    # The fold stays: the transcript on disk starts where it said.
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.seqs[0] == compacted.first_kept_seq > 0
    assert saved.summary == compacted.summary


class SlowSummariser(FakeSummariser):
    """Takes as long as it is made to: no answer until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.cancelled = 0
        self.answered = asyncio.Event()
        self.asked = asyncio.Event()  # a summary was asked for (and is held)

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        self.asked.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        result = await super().summarise(folded, previous, model=model, focus=focus)
        self.answered.set()
        return result


PLANTED = (
    "My colleague Ana Lopez keeps the plan at https://example.org/garden-plan and the rota "
    "in rota-2026.xlsx. "
)


async def test_a_fold_never_waits_for_its_summary(data_dir: Path) -> None:
    adapter = ScriptedAdapter(default=Answer("a" * 1_600))
    summariser = SlowSummariser()  # holds every summary until released
    session = make(data_dir, adapter, summariser)
    written: list[SummaryWritten] = []
    session.listen(written.append)
    await up_to_the_fold(session, first=PLANTED + TURN)
    events = await run(session, 2 * FOLDS_AT, f"Question {FOLDS_AT}: " + TURN)

    # The answer came at once, after a fold that kept the dropped turns' facts word for word.
    assert isinstance(ending(events), Done)
    assert text_of(events) == "a" * 1_600
    (compacted,) = only(events, Compacted)
    assert compacted.writing and not compacted.summarised
    assert "https://example.org/garden-plan" in compacted.summary
    assert "rota-2026.xlsx" in compacted.summary
    sent = adapter.requests[-1].messages[0].text
    assert sent.startswith(SUMMARY_OPEN) and "rota-2026.xlsx" in sent
    assert not only(events, Note)  # nothing went wrong: the summary is on its way
    assert not written and session.writing

    # The summary is written after the answer, of the folded questions, and the chat's from
    # then on: the listener (the chat log, the divider) hears it and the next turn sends it.
    summariser.release.set()
    await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    late, previous, _focus = summariser.calls[-1]
    assert late[0].text.startswith("Question 0: " + PLANTED)
    assert previous == ""
    (done,) = written
    assert done.first_kept_seq == compacted.first_kept_seq
    assert done.summary.startswith("Summary ")
    assert session.summary == done.summary and not session.writing
    saved = load_transcript(data_dir, CHAT).transcript
    assert saved.summary == done.summary
    events = await run(session, 2 * (FOLDS_AT + 1), "And one more: " + TURN)
    assert isinstance(ending(events), Done)
    assert adapter.requests[-1].messages[0].text.startswith(SUMMARY_OPEN + done.summary)
    # What writing it cost is counted in the next turn's usage.
    assert sum(u.summary_tokens for u in only(events, Usage)) > 0


async def test_the_next_turn_on_this_computer_stops_the_summary_and_it_is_written_after(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("a" * 1_600), local=True)
    summariser = SlowSummariser()
    session = make(data_dir, adapter, summariser)
    await up_to_the_fold(session, first=PLANTED + TURN)
    events = await run(session, 2 * FOLDS_AT, f"Question {FOLDS_AT}: " + TURN)
    (compacted,) = only(events, Compacted)
    assert compacted.writing
    summariser.asked.clear()
    await asyncio.wait_for(summariser.asked.wait(), HANG_GUARD)  # being written now
    cancelled = summariser.cancelled
    # The person sends again before the summary is done: their turn comes first ...
    events = await run(session, 2 * (FOLDS_AT + 1), "Quick one: " + TURN)
    assert isinstance(ending(events), Done)
    assert summariser.cancelled > cancelled
    assert session.writing
    # ... and the summary is written again after it.
    summariser.release.set()
    await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert not session.writing and session.summary.startswith("Summary ")


async def test_a_fold_with_nothing_to_keep_still_leaves_a_summary(data_dir: Path) -> None:
    adapter = ScriptedAdapter(default=Answer("a" * 1_600))
    summariser = SlowSummariser()
    session = make(data_dir, adapter, summariser)
    for i in range(FOLDS_AT):
        assert isinstance(ending(await run(session, 2 * i, "Tell me more. " + TURN)), Done)
    events = await run(session, 2 * FOLDS_AT, "Tell me more. " + TURN)
    (compacted,) = only(events, Compacted)
    # No summary before and no fact in what was dropped: the model is told what happened,
    # and the chat log gets a fold it keeps (an empty summary reads as a withdrawn fold).
    assert compacted.writing and compacted.summary == WRITING_SUMMARY
    assert adapter.requests[-1].messages[0].text.startswith(SUMMARY_OPEN + WRITING_SUMMARY)
    summariser.release.set()
    await asyncio.wait_for(session.wait_written(), HANG_GUARD)
    assert session.summary.startswith("Summary ")
