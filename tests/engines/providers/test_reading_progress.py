"""Reading progress: llama.cpp's ``prompt_progress`` chunks, sent while it reads a prompt,
become ``Reading`` events the answer's placeholder can show ("Reading the chat… 35%").

The chunks are the server's own (as its streamed answer writes them, see docs/runtime.md); the
real runtime sends them in tests/engines/local/test_bundled.py.
"""

from __future__ import annotations

from typing import Any

from engines.base import Event, Reading, TextDelta
from engines.providers.openai_stream import AnswerStream


def progress(total: int, cache: int, processed: int) -> dict[str, Any]:
    delta = {"role": "assistant", "content": None}
    return {
        "choices": [{"finish_reason": None, "index": 0, "delta": delta}],
        "object": "chat.completion.chunk",
        "prompt_progress": {"total": total, "cache": cache, "processed": processed, "time_ms": 5},
    }


def word(text: str) -> dict[str, Any]:
    return {"choices": [{"finish_reason": None, "index": 0, "delta": {"content": text}}]}


def feed(chunks: list[dict[str, Any]]) -> list[Event]:
    stream = AnswerStream(thinking_fields=("reasoning_content",))
    return [event for chunk in chunks for event in stream.feed(chunk)]


def test_each_step_of_reading_is_an_event_before_the_first_word() -> None:
    events = feed(
        [
            progress(3_000, 1_000, 1_000),
            progress(3_000, 1_000, 1_512),
            progress(3_000, 1_000, 1_512),  # said again: nothing new to show
            progress(3_000, 1_000, 3_000),
            word("Hello"),
        ]
    )
    assert events == [
        Reading(done=1_000, total=3_000, cached=1_000),
        Reading(done=1_512, total=3_000, cached=1_000),
        Reading(done=3_000, total=3_000, cached=1_000),
        TextDelta(text="Hello"),
    ]
    shares = [round(e.share, 2) for e in events if isinstance(e, Reading)]
    assert shares == [0.33, 0.5, 1.0]


def test_progress_that_is_garbled_or_comes_after_the_answer_began_is_left_out() -> None:
    events = feed(
        [
            {"prompt_progress": "half"},
            {"prompt_progress": {"total": 0, "processed": 0}},
            {"prompt_progress": {"total": 100, "processed": True}},
            word("Hi"),
            progress(100, 0, 100),
        ]
    )
    assert events == [TextDelta(text="Hi")]


def test_a_stream_still_being_read_is_moving_on() -> None:
    # The wait for a first word is measured by meaningful events: a server that says it is
    # still reading a long prompt has not stalled.
    stream = AnswerStream(thinking_fields=())
    before = stream.mark()
    list(stream.feed(progress(8_000, 0, 2_048)))
    assert stream.mark() != before
