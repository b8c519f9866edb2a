"""An answer's figures: time to first token, tokens per second, tokens used; kept by seq."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.answer_stats import AnswerClock, AnswerStats, AnswerStatsBook, stats_book
from app.store import ChatStore
from engines.base import Done, Problem, ProblemKind, TextDelta, ThinkingDelta, TurnProblem, Usage


class Ticks:
    """A clock the test moves by hand: each event happens at the time the test set."""

    def __init__(self) -> None:
        self.at = 100.0

    def __call__(self) -> float:
        return self.at


def test_the_providers_own_count_gives_the_speed() -> None:
    ticks = Ticks()
    clock = AnswerClock(ticks)
    ticks.at = 100.5
    clock.observe(ThinkingDelta(text="Let me see"))  # thinking is the first token too
    ticks.at = 101.0
    clock.observe(TextDelta(text="Hello"))
    ticks.at = 102.5
    clock.observe(TextDelta(text=", world"))
    clock.observe(Usage(summary_tokens=900))  # a fold's summary is not this answer's count
    clock.observe(Usage(input_tokens=1_234, output_tokens=80))
    clock.observe(Done())
    stats = clock.stats()
    assert stats == AnswerStats(
        first_token_s=0.5, tokens_per_s=40.0, input_tokens=1_234, output_tokens=80, estimated=False
    )
    assert stats.line() == "40.0 tokens/s · first token 0.50 s · 1,234 in · 80 out"


def test_without_a_count_the_estimate_is_shown_as_one() -> None:
    ticks = Ticks()
    clock = AnswerClock(ticks)
    ticks.at = 100.2
    clock.observe(TextDelta(text="a" * 400))
    ticks.at = 102.2
    clock.observe(TextDelta(text="b" * 400))
    stats = clock.stats()
    assert stats is not None and stats.estimated
    assert stats.output_tokens == 200 and stats.tokens_per_s == 100.0
    assert stats.line() == "≈100.0 tokens/s · first token 0.20 s · ≈200 out"


def test_an_answer_in_one_piece_has_no_speed_and_no_token_none_at_all() -> None:
    ticks = Ticks()
    clock = AnswerClock(ticks)
    clock.observe(TextDelta(text="All at once."))
    clock.observe(Usage(input_tokens=10, output_tokens=4))
    stats = clock.stats()
    assert stats is not None and stats.tokens_per_s is None
    assert stats.line() == "first token 0.00 s · 10 in · 4 out"
    assert AnswerClock(ticks).stats() is None


def test_an_answer_that_failed_has_no_figures() -> None:
    clock = AnswerClock(Ticks())
    clock.observe(TextDelta(text="Half an ans"))
    clock.observe(Problem(problem=TurnProblem.of(ProblemKind.BROKEN_STREAM, partial=True)))
    assert clock.stats() is None


def test_figures_are_kept_in_the_chat_log_file_by_chat_and_seq(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    figures = AnswerStats(0.25, 33.3, 500, 120, False)
    book = stats_book(store)
    assert book is not None
    book.save(chat.id, 1, figures)
    book.save(chat.id, 3, AnswerStats(None, None, 0, 9, True))
    store.close()

    # The next run reads them back from the same file; the chat log itself is untouched.
    store = ChatStore.in_dir(data_dir)
    again = AnswerStatsBook(store)
    assert again.between(chat.id, 0, 2) == {1: figures}
    assert set(again.between(chat.id, 0, 10)) == {1, 3}
    assert again.between("other", 0, 10) == {}
    assert store.get_chat(chat.id) is not None
    store.close()


@pytest.mark.allow_log("conch.sqlite")  # said once, on purpose
def test_a_file_a_newer_conch_wrote_gets_no_figures(data_dir: Path) -> None:
    ChatStore.in_dir(data_dir).close()
    path = data_dir / ChatStore.FILE_NAME
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 999")
    db.close()
    before = path.read_bytes()
    store = ChatStore.in_dir(data_dir)
    assert store.read_only
    assert stats_book(store) is None
    store.close()
    assert path.read_bytes() == before


def test_a_wait_for_the_person_counts_neither_before_the_first_token_nor_between_tokens() -> None:
    ticks = Ticks()
    clock = AnswerClock(ticks)
    ticks.at = 101.0
    clock.hold()  # a tool call's card before any word
    ticks.at = 160.0
    clock.release()
    ticks.at = 160.5
    clock.observe(TextDelta(text="First"))
    ticks.at = 161.0
    clock.hold()  # a second card between words
    ticks.at = 200.0
    clock.release()
    ticks.at = 201.0
    clock.observe(TextDelta(text=" and last"))
    clock.observe(Usage(input_tokens=50, output_tokens=30))
    stats = clock.stats()
    assert stats is not None
    assert stats.first_token_s == 1.5  # 1.0 before the card, 0.5 after it
    assert stats.tokens_per_s == 20.0  # 30 tokens in 1.5 s of the model's own time
