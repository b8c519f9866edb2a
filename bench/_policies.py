"""The two reference policies the benchmarks compare Conch with, in one place.

- *drop-oldest*: cut the oldest messages until the transcript fits the budget, every turn
  (so the request's prefix changes on every turn once the window is full);
- *summarise-at-75%*: when the request passes 75% of the window, summarise everything but
  the last ``KEEP`` messages inside that turn (the person waits for the summary).

And one scenario Conch meets rather than a policy: the *surprise paste*, a chat well inside
its budget (so no summary is written ahead) into which the person pastes a page big enough to
force a fold on that very turn (``surprise_paste``).

Both work on token counts (estimates), so ``bench.prefix`` can simulate them and
``bench.ttft`` / ``bench.recall`` can run them on a real model.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.window import answer_reserve

SUMMARISE_AT = 0.75
KEEP = 20  # messages kept word for word by the summarise-at-75% policy
SUMMARY_TOKENS = 400  # what a summary costs in the simulated summarise-at-75% policy
# The surprise paste: the chat holds this share of the budget when the page comes (under the
# share at which the next fold's summary is written ahead, even after a real count raises the
# estimate by a third), and the page this share: together past the budget; alone, with the
# next short message, inside it even so (so the turn after the paste does not fold again).
SURPRISE_BEFORE = 0.55
SURPRISE_PASTE = 0.5


def drop_oldest(costs: Sequence[int], room: int) -> int:
    """How many of the oldest messages to drop so the rest fit ``room`` (the newest stays)."""
    total = sum(costs)
    drop = 0
    while total > room and drop < len(costs) - 1:
        total -= costs[drop]
        drop += 1
    return drop


def summarise_now(sent: int, window: int, messages: int) -> bool:
    """Whether the summarise-at-75% policy folds before sending a request of ``sent`` tokens."""
    return sent > SUMMARISE_AT * window and messages > KEEP


def over_window(sent: int, window: int) -> bool:
    """A request that leaves less than the usual answer room (it may be refused or cut)."""
    return sent + answer_reserve(window) > window


def surprise_paste(used: int, room: int, factor: float) -> int:
    """The surprise paste's page, in estimated tokens, once a chat holding ``used`` of its
    ``room`` (both in its own count, ``factor`` times the estimate) is ready for it; 0 while
    it takes more short messages first."""
    if used < SURPRISE_BEFORE * room:
        return 0
    return int(SURPRISE_PASTE * room / factor)
