"""``bench.first_start`` in its smallest configuration on the real bundled model, so the bench
keeps working: a short chat reopened after a restart, and a one-turn chat's peak memory."""

from __future__ import annotations

import pytest

from bench import first_start
from engines.local.bundled import available, missing

pytestmark = [
    pytest.mark.bundled,
    pytest.mark.slow,
    pytest.mark.skipif(
        not available(), reason=f"the bundled model is not installed here ({missing()})"
    ),
]


def test_a_short_chat_reopened_and_a_one_turn_chat_are_measured() -> None:
    figures = first_start.run(("reopen", "rss"), chat_tokens=150, rss_turns=1, rss_window=1_024)

    reopen = figures["reopen"]
    assert isinstance(reopen, dict)
    cold, warm = reopen["cold"], reopen["warm"]
    assert isinstance(cold, dict) and isinstance(warm, dict)
    # The warm turn finds the chat in the runtime: it reads only its own new text.
    assert warm["cached"] >= cold["evaluated"] > warm["evaluated"] > 0
    assert isinstance(reopen["reopened_vs_warm"], float)
    assert isinstance(reopen["cold_vs_warm"], float)

    rss = figures["rss"]
    assert isinstance(rss, dict)
    assert rss["peak_rss_mb"] >= rss["rss_at_start_mb"] > 0
    assert len(rss["evaluated_by_turn"]) == 1
    assert rss["peak_vs_old"] == round(rss["peak_rss_mb"] / first_start.OLD_PEAK_MB, 2)
