"""The scripted mock engine behaves like a real context engine: streams, fails, refuses, folds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from engines.base import (
    Attachment,
    Compacted,
    ContextEngine,
    Done,
    Event,
    ModelInfo,
    Note,
    Problem,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    TurnInput,
    Usage,
)
from engines.mock import CompactBefore, Fail, MockEngine, Refuse, Reply
from engines.window import budget, estimate_tokens

MODEL = ModelInfo(provider="mock", id="mock-1", label="Mock One", context=8192)


def turn(seq: int, text: str = "hello", system: str = "") -> TurnInput:
    return TurnInput(chat_id="c1", seq=seq, text=text, model=MODEL, system=system)


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def endings(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, Done | Problem)]


def test_declares_the_context_capability() -> None:
    engine = MockEngine()
    assert isinstance(engine, ContextEngine)
    assert isinstance(engine, ContextEngine)


async def test_reply_streams_in_chunks_and_ends_with_one_done() -> None:
    engine = MockEngine(
        [Reply("The quick brown fox jumps.", thinking="hm", chunk_delay=0, chunk_size=5)]
    )
    events = await collect(engine.turn(turn(0)))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 6  # 26 characters in pieces of 5
    assert text_of(events) == "The quick brown fox jumps."
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "hm"
    # thinking comes before the answer text
    first_thinking = next(i for i, e in enumerate(events) if isinstance(e, ThinkingDelta))
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert first_thinking < first_text
    assert endings(events) == [Done()]
    assert isinstance(events[-1], Done)
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].output_tokens > 0


async def test_fail_mid_stream_reports_a_partial_problem() -> None:
    engine = MockEngine([Fail(after_chars=10, text="0123456789abcdef", chunk_delay=0)])
    events = await collect(engine.turn(turn(0)))
    assert text_of(events) == "0123456789"
    assert len(endings(events)) == 1
    last = events[-1]
    assert isinstance(last, Problem)
    assert last.problem.kind is ProblemKind.BROKEN_STREAM
    assert last.problem.partial is True
    assert last.problem.next_step is not None and last.problem.next_step.kind == "retry"


async def test_fail_before_any_text_is_not_partial() -> None:
    engine = MockEngine([Fail(after_chars=0, kind=ProblemKind.UNREACHABLE)])
    events = await collect(engine.turn(turn(0)))
    assert text_of(events) == ""
    assert isinstance(events[-1], Problem)
    assert events[-1].problem.partial is False
    assert events[-1].problem.kind is ProblemKind.UNREACHABLE


async def test_too_long_refusal_offers_a_new_chat_with_the_message() -> None:
    engine = MockEngine([Refuse(ProblemKind.TOO_LONG)])
    events = await collect(engine.turn(turn(0, "a very long question")))
    assert events == endings(events)  # nothing but the problem
    problem = events[0]
    assert isinstance(problem, Problem)
    assert problem.problem.kind is ProblemKind.TOO_LONG
    step = problem.problem.next_step
    assert step is not None and step.kind == "new-chat" and step.text == "a very long question"


async def test_compact_before_emits_compacted_then_the_reply() -> None:
    engine = MockEngine(
        [
            Reply("one", chunk_delay=0),
            Reply("two", chunk_delay=0),
            CompactBefore(first_kept_seq=2, summary="they said hello"),
            Reply("three", chunk_delay=0),
        ],
        fold_every=0,
    )
    await collect(engine.turn(turn(0)))
    await collect(engine.turn(turn(2)))
    events = await collect(engine.turn(turn(4)))
    assert isinstance(events[0], Compacted)
    assert events[0].first_kept_seq == 2
    assert events[0].summary == "they said hello"
    assert events[0].model == "Mock One"
    assert text_of(events) == "three"
    assert engine.kept_seqs == [2, 4]


async def test_script_runs_out_into_an_endless_echo() -> None:
    engine = MockEngine([Reply("scripted", chunk_delay=0)], delay=0, fold_every=0)
    first = await collect(engine.turn(turn(0, "first")))
    assert text_of(first) == "scripted"
    for i in range(1, 20):
        events = await collect(engine.turn(turn(2 * i, f"question number {i}")))
        assert text_of(events).startswith(f"You said: question number {i}")
        assert endings(events) == [Done()]


async def test_folds_on_its_own_every_few_turns() -> None:
    engine = MockEngine(delay=0, fold_every=4, keep_turns=2)
    compactions: list[Compacted] = []
    for i in range(8):
        events = await collect(engine.turn(turn(10 * i, f"question {i}")))
        compactions += [e for e in events if isinstance(e, Compacted)]
        assert len(endings(events)) == 1
    assert [c.first_kept_seq for c in compactions] == [20, 60]
    # the summary lists what the person asked in the folded turns, and keeps the older ones
    assert "question 0" in compactions[1].summary
    assert "question 5" in compactions[1].summary
    assert "question 6" not in compactions[1].summary
    assert engine.kept_seqs == [60, 70]


async def test_compact_folds_all_but_the_newest_turn_with_the_focus() -> None:
    engine = MockEngine(delay=0, fold_every=0)
    for i in range(3):
        await collect(engine.turn(turn(i * 2, f"about topic {i}")))
    events = await collect(engine.compact("the budget figures", model=MODEL))
    assert len(events) == 2
    compacted, done = events
    assert isinstance(compacted, Compacted) and isinstance(done, Done)
    assert compacted.first_kept_seq == 4
    assert "the budget figures" in compacted.summary
    assert "about topic 0" in compacted.summary and "about topic 1" in compacted.summary
    assert engine.kept_seqs == [4]


async def test_compact_with_one_turn_folds_nothing_and_says_so() -> None:
    engine = MockEngine(delay=0)
    await collect(engine.turn(turn(0)))
    events = await collect(engine.compact())
    assert [type(e) for e in events] == [Note, Done]
    assert engine.kept_seqs == [0]


async def test_context_usage_grows_with_the_chat_and_uses_the_real_budget() -> None:
    engine = MockEngine(delay=0, fold_every=0)
    used0, b = engine.context_usage(MODEL, system="You are helpful.")
    assert b == budget(8192, estimate_tokens("You are helpful."))
    await collect(engine.turn(turn(0, "x" * 4000)))
    used1, _ = engine.context_usage(MODEL)
    assert used1 >= used0 + 1000
    await collect(engine.compact())  # one turn: nothing folds
    await collect(engine.turn(turn(2, "short")))
    await collect(engine.compact())
    used2, _ = engine.context_usage(MODEL)
    assert used2 < used1


async def test_context_usage_counts_attached_files_and_a_turn_sent_again_once() -> None:
    engine = MockEngine(delay=0, fold_every=0)
    note = Attachment(name="log.txt", text="y" * 40_000)
    with_file = TurnInput(chat_id="c1", seq=0, text="read this", model=MODEL, attachments=(note,))
    await collect(engine.turn(with_file))
    used, _ = engine.context_usage(MODEL)
    assert used >= 10_000  # the file's 40,000 characters are about 10,000 tokens
    await collect(engine.turn(with_file))  # sent again (a retry): not counted twice
    again, _ = engine.context_usage(MODEL)
    assert again < used + 1_000  # only the new answer's words differ


async def test_the_in_figure_counts_what_was_sent_not_the_answer_it_wrote() -> None:
    # "N in · M out" under an answer: "in" is the prompt (system, earlier turns, this message),
    # never the answer that came back, however long that answer is.
    answer = "word " * 400
    engine = MockEngine([Reply("Short one.", chunk_delay=0), Reply(answer, chunk_delay=0)])
    system = "You are helpful."
    first = await collect(engine.turn(turn(0, "hello", system=system)))
    (used,) = [e for e in first if isinstance(e, Usage)]
    assert used.input_tokens == estimate_tokens(system) + estimate_tokens("hello")
    second = await collect(engine.turn(turn(2, "and more", system=system)))
    (used,) = [e for e in second if isinstance(e, Usage)]
    sent = [system, "hello", "Short one.", "and more"]  # the first answer is in the chat now
    assert used.input_tokens == sum(estimate_tokens(t) for t in sent)
    assert used.output_tokens == estimate_tokens(answer)


async def test_cancellation_propagates_mid_stream() -> None:
    engine = MockEngine([Reply("word " * 200, chunk_delay=0.01, chunk_size=5)])
    seen: list[Event] = []
    started = asyncio.Event()

    async def run() -> None:
        async for e in engine.turn(turn(0)):
            seen.append(e)
            started.set()

    task = asyncio.create_task(run())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen and not endings(seen)
    # the engine still works afterwards
    events = await collect(engine.turn(turn(2)))
    assert len(endings(events)) == 1


async def test_aclose_marks_closed() -> None:
    engine = MockEngine()
    await engine.aclose()
    assert engine.closed
