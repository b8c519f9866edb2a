"""The estimate bench's per-kind chats: each kind calibrated once the way the session does it,
then judged on the rest of its text."""

from __future__ import annotations

import random
import re

from bench.estimate import (
    KIND_CHARS,
    OVER_LIMIT,
    UNDER_LIMIT,
    Tokenizer,
    after_paste,
    chars_estimate,
    corpus,
    kind_chat,
    kind_messages,
)
from engines.context.calibrate import MIN_SAMPLE
from engines.window import estimate_tokens


def _tokenizer(per_estimated: float, digit_tokens: int = 0) -> Tokenizer:
    """A tokenizer spending ``per_estimated`` tokens per token of Conch's estimate, and
    ``digit_tokens`` more per digit; a prompt adds a BOS token, as llama-cpp-python counts."""

    def count(text: str) -> int:
        digits = sum(c.isdigit() for c in text)
        return round(per_estimated * estimate_tokens(text)) + digit_tokens * digits

    return Tokenizer("fake", count, lambda text: count(text) + 1, "")


ENGLISH = corpus(KIND_CHARS)["english"]


def test_a_kind_costing_twice_the_estimate_meets_the_goal_after_its_first_count() -> None:
    figures = kind_chat(_tokenizer(2), ENGLISH)

    assert 1.9 < figures["factor"] < 2.2
    assert OVER_LIMIT <= figures["after"] <= UNDER_LIMIT
    assert figures["verdict"] == "ok"
    assert "why" not in figures


def test_prose_the_estimate_overcounts_meets_the_goal_once_a_count_lowers_the_factor() -> None:
    figures = kind_chat(_tokenizer(2 / 3), ENGLISH)

    assert 0.6 < figures["factor"] < 0.75  # a tokenizer's count is exact: it may lower it
    assert OVER_LIMIT <= figures["after"] <= UNDER_LIMIT
    assert figures["verdict"] == "ok"
    assert "why" not in figures


def _pieces(text: str) -> int:
    # A tokenizer that splits as byte-pair tokenizers do before merging: a word, a digit, a
    # run of punctuation, a line break each a token.
    return len(re.findall(r"[A-Za-z]+|\d|[^\sA-Za-z\d]+|\n", text))


def test_prose_after_a_pasted_table_is_estimated_within_the_goal_by_words_and_digits() -> None:
    pieces = Tokenizer("pieces", _pieces, lambda text: _pieces(text) + 1, "")
    table = corpus()["numbers"]

    by_words = after_paste(pieces, table, ENGLISH)
    by_characters = after_paste(pieces, table, ENGLISH, estimate=chars_estimate)

    assert by_words["verdict"] == "ok", by_words
    # One factor learned from a table costs prose several times what it is.
    assert by_characters["verdict"] == "over" and by_characters["after"] < 0.5


def test_a_rest_that_costs_more_than_the_counted_part_is_reported_under() -> None:
    # Prose first, then a table of numbers costing three tokens a digit, where the estimate
    # says one: what the first count never saw.
    rows = "\n".join(
        f"{i:04d},{i * 7919 % 10_000:04d},{i * 104_729 % 100_000:05d}" for i in range(900)
    )
    figures = kind_chat(_tokenizer(1, digit_tokens=2), ENGLISH[:6_000] + "\n" + rows)

    assert figures["after"] > UNDER_LIMIT
    assert figures["verdict"] == "under"
    assert "counts again" in figures["why"]


def test_the_count_comes_when_the_chat_first_reaches_the_sessions_sample() -> None:
    messages = kind_messages(ENGLISH, random.Random(11))
    counted, judged = kind_chat(_tokenizer(1), ENGLISH, seed=11)["messages"]

    assert counted + judged == len(messages)
    assert sum(estimate_tokens(m.text) for m in messages[:counted]) >= MIN_SAMPLE
    assert sum(estimate_tokens(m.text) for m in messages[: counted - 1]) < MIN_SAMPLE
    assert judged >= 3 * counted  # most of the kind is judged, not counted
