"""How much planning a fold costs as a chat grows: it should not grow with the chat.

Builds ledgers of 100 to 100,000 real messages and times ``Ledger.plan`` when a fold is due
(the expensive case: the cut has to be searched for). Prints one JSON object on its last line;
the goal is ``ratio_100k_over_100`` <= 1.5.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import time

from engines.base import Message
from engines.window import Ledger

SIZES = (100, 1_000, 10_000, 100_000)
ROUNDS = 21
CALLS = 1_000
SEED = 55


def build(n: int, rng: random.Random) -> Ledger:
    ledger = Ledger()
    for i in range(n):
        if i % 2 == 0:
            ledger.append(Message(role="user", text="q" * rng.randint(20, 800)))
        else:
            ledger.append(Message(role="assistant", text="a" * rng.randint(100, 5_000)))
    return ledger


def time_plans(cases: list[tuple[Ledger, int]]) -> list[float]:
    """Median microseconds per ``plan`` call for each case.

    Rounds go round-robin over the cases, so a machine that gets busier halfway through
    slows every size alike instead of skewing the ratio.
    """
    samples: list[list[float]] = [[] for _ in cases]
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for i, (ledger, b) in enumerate(cases):
                start = time.perf_counter()
                for _ in range(CALLS):
                    ledger.plan(b, 1.1, 300)
                samples[i].append((time.perf_counter() - start) / CALLS * 1e6)
    finally:
        gc.enable()
    return [statistics.median(s) for s in samples]


def main() -> dict[str, object]:
    rng = random.Random(SEED)
    cases: list[tuple[Ledger, int]] = []
    for n in SIZES:
        ledger = build(n, rng)
        # A budget well under what the ledger holds, so every plan searches for a cut.
        b = max(2_000, min(100_000, ledger.tokens // 3))
        assert ledger.plan(b, 1.1, 300).drop > 0, "the bench must time a fold that is due"
        cases.append((ledger, b))
    times = time_plans(cases)
    results: dict[str, object] = {}
    for n, (ledger, b), t in zip(SIZES, cases, times, strict=True):
        drop = ledger.plan(b, 1.1, 300).drop
        print(f"{n:>7,} messages: {t:7.2f} µs per plan (drops {drop:,})")
        results[f"plan_us_{n}"] = round(t, 3)
    ratio = times[-1] / times[0]
    results["ratio_100k_over_100"] = round(ratio, 3)
    results["goal_ratio"] = 1.5
    results["meets_goal"] = ratio <= 1.5
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
