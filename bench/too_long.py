"""How well ``engines.providers.too_long`` reads real refusals, beside a plain keyword matcher.

Runs both over ``tests/data/too_long_corpus.json`` (bodies people posted publicly, each with
its source) and prints, for each: recall on the too-long bodies, false positives on the near
misses, and the share of too-long bodies whose window is read exactly. The keyword matcher is
what a first attempt usually looks like: a few phrases and "the number after 'maximum'".
Prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engines.providers.too_long import _NEVER_STATUSES, is_too_long, window_in

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "too_long_corpus.json"
ROUNDS = 5

_KEYWORDS = (
    "context length",
    "context window",
    "context size",
    "maximum context",
    "too long",
    "too many tokens",
    "token limit",
    "max length",
    "exceeds",
    "exceeded",
)
_KEYWORD_WINDOW = re.compile(r"(?:maximum|max|limit|context)\D{0,40}?(\d[\d,]*)")


def keyword_is_too_long(body: str, status: int | None = None) -> bool:
    """The baseline: any of a few phrases, with the same status rule as the recogniser."""
    if status in _NEVER_STATUSES:
        return False
    lowered = body.lower()
    return any(keyword in lowered for keyword in _KEYWORDS)


def keyword_window_in(body: str) -> int | None:
    """The baseline's window: the first number after "maximum", "max", "limit" or "context"."""
    for match in _KEYWORD_WINDOW.finditer(body.lower()):
        value = int(match.group(1).replace(",", ""))
        if 16 <= value <= 100_000_000:
            return value
    return None


def score(
    corpus: list[dict[str, Any]],
    classify: Callable[[str, int | None], bool],
    read_window: Callable[[str], int | None],
) -> dict[str, Any]:
    positives = [entry for entry in corpus if entry["too_long"]]
    negatives = [entry for entry in corpus if not entry["too_long"]]
    found = [entry for entry in positives if classify(entry["body"], entry["status"])]
    false = [entry for entry in negatives if classify(entry["body"], entry["status"])]
    windows = [entry for entry in positives if read_window(entry["body"]) == entry["window"]]
    return {
        "recall": round(len(found) / len(positives), 4),
        "false_positives": len(false),
        "window_share": round(len(windows) / len(positives), 4),
        "missed": [entry["source"] for entry in positives if entry not in found],
        "false": [entry["source"] for entry in false],
        "wrong_window": [entry["source"] for entry in positives if entry not in windows],
    }


def microseconds_per_body(corpus: list[dict[str, Any]]) -> float:
    """Median time to classify a body and read its window."""
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for entry in corpus:
            is_too_long(entry["body"], entry["status"])
            window_in(entry["body"])
        rounds.append((time.perf_counter() - start) / len(corpus) * 1e6)
    return statistics.median(rounds)


def main() -> dict[str, Any]:
    corpus: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))
    grammar = score(corpus, is_too_long, window_in)
    keywords = score(corpus, keyword_is_too_long, keyword_window_in)
    positives = sum(entry["too_long"] for entry in corpus)
    print(
        f"{len(corpus)} bodies from {len({e['provider'] for e in corpus})} providers: "
        f"{positives} too long, {len(corpus) - positives} near misses"
    )
    for name, result in (("grammar", grammar), ("keywords", keywords)):
        print(
            f"  {name:9} recall {result['recall']:.1%}  false positives "
            f"{result['false_positives']}  window {result['window_share']:.1%}"
        )
    for kind in ("missed", "false", "wrong_window"):
        for source in grammar[kind]:
            print(f"  grammar {kind}: {source}")
    figures = {
        "bench": "too_long",
        "bodies": len(corpus),
        "too_long": positives,
        "near_misses": len(corpus) - positives,
        "providers": len({entry["provider"] for entry in corpus}),
        "recall": grammar["recall"],
        "false_positives": grammar["false_positives"],
        "window_share": grammar["window_share"],
        "keyword_recall": keywords["recall"],
        "keyword_false_positives": keywords["false_positives"],
        "keyword_window_share": keywords["window_share"],
        "microseconds_per_body": round(microseconds_per_body(corpus), 1),
    }
    return figures


if __name__ == "__main__":
    print(json.dumps(main()))
