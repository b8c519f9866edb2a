"""The scrub bench: what it counts as caught, and its figures beside the baseline's."""

from __future__ import annotations

import json

from bench.scrub import baseline, load, main, score, survivors
from engines.scrub import MARKER, scrub


def test_a_secret_counts_as_caught_only_when_no_piece_of_it_is_left() -> None:
    text = "my key is Ab3dEf6hIj9kLm2n ok"
    assert survivors(text, "Ab3dEf6hIj9kLm2n", f"my key is {MARKER} ok") == []
    # Half the key left behind is not caught.
    assert survivors(text, "Ab3dEf6hIj9kLm2n", f"my key is Ab3dEf6h{MARKER} ok") != []
    # Words the text holds anyway ("key") do not count as the secret surviving.
    assert survivors("key key9x", "key9x", f"key {MARKER}") == []


def test_conch_catches_every_shape_and_changes_no_near_miss_where_the_baseline_does_not() -> None:
    corpus = load()
    conch = score(corpus, scrub)
    plain = score(corpus, baseline)
    assert conch["caught"] == 1.0 and conch["false_positives"] == 0.0
    assert plain["caught"] < 0.5  # the shapes people write: cards, IBANs, sentences, seeds
    assert plain["false_positives"] > 0.0


def test_the_bench_reports_one_json_object_with_both_figures() -> None:
    figures = main()
    line = json.dumps(figures)
    assert json.loads(line)["bench"] == "scrub"
    assert figures["secrets"] >= 200 and figures["near_misses"] >= 200
    for key in ("caught", "false_positives", "ms_per_text", "baseline_caught"):
        assert isinstance(figures[key], float)
    assert figures["caught"] > figures["baseline_caught"]
