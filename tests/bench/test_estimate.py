"""The estimate bench's per-kind chats: each kind calibrated once the way the session does it,
then judged on the rest of its text."""

from __future__ import annotations

import random

from bench.estimate import (
    KIND_CHARS,
    OVER_LIMIT,
    UNDER_LIMIT,
    Tokenizer,
    corpus,
    kind_chat,
    kind_messages,
)
from engines.context.calibrate import MIN_SAMPLE
from engines.window import estimate_tokens


def _tokenizer(chars_per_token: int, digit_tokens: int = 0) -> Tokenizer:
    """A tokenizer spending a token per ``chars_per_token`` characters, and ``digit_tokens``
    more per digit; a prompt adds a BOS token, as llama-cpp-python counts."""

    def count(text: str) -> int:
        return -(-len(text) // chars_per_token) + digit_tokens * sum(c.isdigit() for c in text)

    return Tokenizer("fake", count, lambda text: count(text) + 1, "")


ENGLISH = corpus(KIND_CHARS)["english"]


def test_a_kind_costing_twice_the_estimate_meets_the_goal_after_its_first_count() -> None:
    figures = kind_chat(_tokenizer(2), ENGLISH)

    assert 1.9 < figures["factor"] < 2.2
    assert OVER_LIMIT <= figures["after"] <= UNDER_LIMIT
    assert figures["verdict"] == "ok"
    assert "why" not in figures


def test_prose_the_estimate_overcounts_stays_over_and_the_result_says_why() -> None:
    figures = kind_chat(_tokenizer(6), ENGLISH)

    assert figures["factor"] == 1.0  # the first count would lower it: only upward
    assert figures["after"] < OVER_LIMIT
    assert figures["verdict"] == "over"
    assert "only ever goes up" in figures["why"]
    # Set both ways, the same count would have met the goal.
    assert OVER_LIMIT <= figures["after_both_ways"] <= UNDER_LIMIT


def test_a_rest_that_costs_more_than_the_counted_part_is_reported_under() -> None:
    # Prose first, then a table of numbers: a token per digit the first count never saw.
    rows = "\n".join(
        f"{i:04d},{i * 7919 % 10_000:04d},{i * 104_729 % 100_000:05d}" for i in range(900)
    )
    figures = kind_chat(_tokenizer(4, digit_tokens=1), ENGLISH[:6_000] + "\n" + rows)

    assert figures["after"] > UNDER_LIMIT
    assert figures["verdict"] == "under"
    assert "counts again" in figures["why"]


def test_the_count_comes_when_the_chat_first_reaches_the_sessions_sample() -> None:
    messages = kind_messages(ENGLISH, random.Random(11))
    counted, judged = kind_chat(_tokenizer(4), ENGLISH, seed=11)["messages"]

    assert counted + judged == len(messages)
    assert sum(estimate_tokens(m.text) for m in messages[:counted]) >= MIN_SAMPLE
    assert sum(estimate_tokens(m.text) for m in messages[: counted - 1]) < MIN_SAMPLE
    assert judged >= 3 * counted  # most of the kind is judged, not counted
