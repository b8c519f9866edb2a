"""The work a piece of code does, measured so that a busy machine does not change the answer.

The CPU time of this process counts work done, not the time other processes held the cores:
two CPU-burning processes beside the suite leave it about the same, where they can double the
wall clock. Tests about speed compare the work on a text with the work on eight times that text
(a linear pass does eight times the work, a quadratic one sixty-four), or hold a budget of CPU
time far above what the work needs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# How many times longer the long text is than the short one.
SCALE = 8
# Work on eight times the text, divided by work on the text: about 8 when linear, 64 when
# quadratic. Near the geometric middle, so that the cache misses of a loaded machine (seen to
# double one measure) can push neither answer across it.
LINEAR_GROWTH = 24.0


def cpu_seconds(call: Callable[[], object], tries: int = 1) -> float:
    """The least CPU time this process spends on ``call()`` over ``tries`` calls."""
    least = math.inf
    for _ in range(tries):
        started = time.process_time()
        call()
        least = min(least, time.process_time() - started)
    return least


def growth(call: Callable[[str], object], unit: str, size: int, *, head: str = "") -> float:
    """How many times the work of ``call`` grows when its text is ``SCALE`` times as long.

    The text is ``head`` and then ``unit`` repeated to about ``size`` characters; the longer
    one repeats ``unit`` ``SCALE`` times as often.
    """
    count = max(1, size // len(unit))
    short = head + unit * count
    long = head + unit * (SCALE * count)
    small = cpu_seconds(lambda: call(short), tries=3)
    large = cpu_seconds(lambda: call(long), tries=3)
    return large / small
