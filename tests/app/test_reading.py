"""What a wait before the first word says, and when (app/reading.py), on a clock the test
moves: nothing for a short wait, the share read when the server says, else the prompt's size
and the time so far; the first word, thinking or a tool call ends it, a tool's result starts
the next request's wait."""

from __future__ import annotations

from app.reading import READING_AFTER_S, ReadingWait, about
from engines.base import Reading, TextDelta, ThinkingDelta, ToolCall, ToolCallData, ToolResult


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_short_wait_says_nothing_and_a_long_one_says_what_it_is() -> None:
    clock = Clock()
    wait = ReadingWait(size=lambda: 12_437, clock=clock)
    clock.now += READING_AFTER_S - 0.1
    assert wait.words() == ""
    clock.now += 14.1 - READING_AFTER_S
    assert wait.words() == "Reading about 12,400 tokens… 14 s"
    clock.now += 155
    assert wait.words() == "Reading about 12,400 tokens… 2 min 49 s"


def test_the_server_s_progress_is_said_as_a_share_never_rounded_up() -> None:
    clock = Clock()
    wait = ReadingWait(size=lambda: 12_437, clock=clock)
    wait.observe(Reading(done=1_050, total=3_000, cached=0))
    assert wait.words() == ""  # still a short wait
    clock.now += 3
    assert wait.words() == "Reading the chat… 35%"
    wait.observe(Reading(done=2_999, total=3_000))
    assert wait.words() == "Reading the chat… 99%"


def test_the_first_word_or_thought_or_tool_call_ends_the_wait() -> None:
    for first in (
        TextDelta(text="Larch"),
        ThinkingDelta(text="The person asks"),
        ToolCall(call=ToolCallData(id="1", name="read_file", arguments={})),
    ):
        clock = Clock()
        wait = ReadingWait(size=lambda: 800, clock=clock)
        clock.now += 5
        assert wait.words() == "Reading about 800 tokens… 5 s"
        wait.observe(first)
        assert wait.words() == ""


def test_a_tool_s_result_starts_the_wait_for_the_next_request() -> None:
    clock = Clock()
    wait = ReadingWait(size=lambda: 800, clock=clock)
    wait.observe(Reading(done=800, total=800))
    wait.observe(ToolCall(call=ToolCallData(id="1", name="read_file", arguments={})))
    clock.now += 30  # the tool ran
    wait.observe(ToolResult(call_id="1", tool="read_file", status="done", text="…", preview="…"))
    assert wait.words() == ""  # a fresh wait, a short one so far
    clock.now += 3
    assert wait.words() == "Reading about 800 tokens… 3 s"  # not the last request's 100%


def test_an_unknown_or_failing_estimate_still_says_the_model_is_reading() -> None:
    def broken() -> int | None:
        raise RuntimeError("no transcript")

    for size in (lambda: None, broken):
        clock = Clock()
        wait = ReadingWait(size=size, clock=clock)
        clock.now += 7
        assert wait.words() == "Reading the chat… 7 s"


def test_estimates_are_rounded_as_they_deserve() -> None:
    assert [about(n) for n in (42, 437, 12_437, 128_951)] == ["42", "440", "12,400", "129,000"]
