"""How well ``engines.scrub`` leaves secrets out, beside a plain keyword-and-regex scrubber.

Runs both over ``tests/data/secret_shapes.json`` (secret shapes as providers and standards
document them, and near-misses: ordinary words, versions, dates, order and phone numbers,
UUIDs, commit ids, prices, prose about passwords; every value synthetic) and reports, for each:
the share of secrets caught (not one piece of the secret left in the scrubbed text), the share
of near-misses changed (false positives), and the milliseconds a text takes. The baseline is
what a first attempt usually looks like: a few known prefixes, "password/secret/token/key"
followed by ":" or "=", a URL's password, and long runs of letters and digits.

Run: ``python -m bench.scrub``. Prints the misses, then one JSON object on its last line.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engines.scrub import MARKER, scrub

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "secret_shapes.json"
PIECE = 5  # a secret is caught when no run of this many of its characters is left
ROUNDS = 3

Scrubber = Callable[[str], str]

_BASE_PREFIXES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-]{20,}|gh[pousr]_[A-Za-z0-9]{36}|AKIA[A-Z0-9]{16}"
    r"|xox[bp]-[A-Za-z0-9\-]{10,}|AIza[A-Za-z0-9_\-]{35})"
)
_BASE_NAMED = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key)(\s*[:=]\s*)[\"']?([^\s\"']+)"
)
_BASE_URL = re.compile(r"(://[^\s:/@]+:)([^\s/@]+)(@)")
_BASE_LONG = re.compile(r"\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{32,}\b")


def baseline(text: str) -> str:
    """A plain first attempt at a scrubber, for comparison."""
    text = _BASE_PREFIXES.sub(MARKER, text)
    text = _BASE_NAMED.sub(lambda m: f"{m[1]}{m[2]}{MARKER}", text)
    text = _BASE_URL.sub(lambda m: f"{m[1]}{MARKER}{m[3]}", text)
    return _BASE_LONG.sub(MARKER, text)


def survivors(text: str, secret: str, scrubbed: str) -> list[str]:
    """The pieces of ``secret`` (``PIECE`` characters holding a letter or digit) still in
    ``scrubbed`` that the rest of ``text`` did not hold already."""
    size = min(PIECE, len(secret))
    around = text.replace(secret, "\0")
    found = []
    for i in range(len(secret) - size + 1):
        piece = secret[i : i + size]
        if not any(c.isalnum() for c in piece) or piece in around or piece in MARKER:
            continue
        if piece in scrubbed:
            found.append(piece)
    return found


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def score(corpus: dict[str, Any], scrubber: Scrubber) -> dict[str, Any]:
    secrets, near = corpus["secrets"], corpus["near_misses"]
    missed = [e for e in secrets if survivors(e["text"], e["secret"], scrubber(e["text"])) != []]
    changed = [e for e in near if scrubber(e["text"]) != e["text"]]
    texts = [e["text"] for e in secrets] + [e["text"] for e in near]
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for text in texts:
            scrubber(text)
        best = min(best, time.perf_counter() - started)
    return {
        "caught": round(1 - len(missed) / len(secrets), 4),
        "false_positives": round(len(changed) / len(near), 4),
        "ms_per_text": round(best * 1000 / len(texts), 4),
        "missed": missed,
        "changed": changed,
    }


def main() -> dict[str, Any]:
    corpus = load()
    results = {"conch": score(corpus, scrub), "baseline": score(corpus, baseline)}
    print(f"{len(corpus['secrets'])} secret shapes, {len(corpus['near_misses'])} near-misses")
    for name, result in results.items():
        print(
            f"  {name:8} caught {result['caught']:.1%}  false positives "
            f"{result['false_positives']:.1%}  {result['ms_per_text']:.3f} ms a text"
        )
    for entry in results["conch"]["missed"]:
        print(f"  conch missed ({entry['kind']}): {entry['text'][:100]!r}")
    for entry in results["conch"]["changed"]:
        print(f"  conch changed ({entry['kind']}): {entry['text'][:100]!r}")
    baseline_missed = Counter(e["kind"] for e in results["baseline"]["missed"])
    return {
        "bench": "scrub",
        "secrets": len(corpus["secrets"]),
        "near_misses": len(corpus["near_misses"]),
        "caught": results["conch"]["caught"],
        "false_positives": results["conch"]["false_positives"],
        "ms_per_text": results["conch"]["ms_per_text"],
        "baseline_caught": results["baseline"]["caught"],
        "baseline_false_positives": results["baseline"]["false_positives"],
        "baseline_ms_per_text": results["baseline"]["ms_per_text"],
        "baseline_missed_kinds": dict(baseline_missed.most_common()),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
