"""The benches read what the bundled runtime evaluated from llama.cpp's own ``timings``: the
parsing of one answer line, and the smallest time-to-first-token run on the real model."""

from __future__ import annotations

import asyncio

import pytest

from bench import ttft
from bench._bundled import Timings, timings_in
from engines.local.bundled import available, missing

needs_bundled = pytest.mark.skipif(
    not available(), reason=f"the bundled model is not installed here ({missing()})"
)

LAST_CHUNK = (
    b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],'
    b'"object":"chat.completion.chunk","timings":{"cache_n":24,"prompt_n":14,'
    b'"prompt_ms":642.6,"predicted_n":8,"predicted_ms":489.3}}'
)


def test_the_last_streamed_chunk_and_a_whole_answer_give_their_timings() -> None:
    assert timings_in(LAST_CHUNK) == Timings(
        prompt_n=14, cache_n=24, prompt_ms=642.6, predicted_n=8, predicted_ms=489.3
    )
    whole = b'{"usage":{"prompt_tokens":38},"timings":{"cache_n":37,"prompt_n":1,"prompt_ms":9.5}}'
    assert timings_in(whole) == Timings(
        prompt_n=1, cache_n=37, prompt_ms=9.5, predicted_n=0, predicted_ms=0.0
    )


def test_lines_without_timings_or_broken_ones_give_none() -> None:
    assert timings_in(b'data: {"choices":[{"delta":{"content":"The"}}]}') is None
    assert timings_in(b"data: [DONE]") is None
    assert timings_in(b'data: {"timings": {"prompt_n": ') is None
    assert timings_in(b'data: {"timings": "soon"}') is None


@pytest.mark.bundled
@pytest.mark.slow
@needs_bundled
def test_the_smallest_ttft_run_reports_every_turns_evaluated_tokens() -> None:
    figures = asyncio.run(ttft.run(3, [1_024], policies=("conch", "no_fold"), control_window=2_048))

    control = figures["no_fold"]
    conch = figures["1024"]["conch"]  # type: ignore[index]
    assert isinstance(control, dict) and isinstance(conch, dict)
    for run in (control, conch):
        by_turn = run["by_turn"]
        assert len(by_turn) == 3
        # Every turn's prompt tokens evaluated and reading time came from the server.
        assert all(isinstance(t[1], int) and t[1] > 0 for t in by_turn)
        assert all(isinstance(t[4], float) for t in by_turn)
    # The first turn reads the system prompt and the message; the next ones reuse that.
    assert control["by_turn"][0][1] > control["by_turn"][2][1]
    # Each of Conch's turns is set against the same turn of the control.
    assert conch["matched"]["extra_evaluated_normal"]["n"] == 3
