"""A person's talk about a community garden: the ordinary sentences a long benchmark or test chat
is filled with between the messages that matter.

``bench.recall`` seeds its chats from these words, so its recorded figures hold only while they
stay as they are; the integration tests fill their chats with them too.
"""

from __future__ import annotations

import random

from engines.window import estimate_tokens

OPENERS = (
    "Back to the garden.",
    "A few more thoughts.",
    "Notes from today.",
    "Something that came up at the weekend.",
    "I was thinking about this on the way home.",
    "Before I forget.",
)
SUBJECTS = (
    "the watering rota",
    "the compost bays",
    "the raised beds by the fence",
    "the tool shed",
    "the seed order",
    "the volunteer list",
    "the rainwater barrels",
    "the path along the south wall",
    "the planting corner for the children",
    "the greenhouse door",
    "the herb spiral",
    "the bean poles",
)
VERBS = (
    "needs another look because",
    "worked better than expected, although",
    "was talked through at length, and in the end",
    "still worries me, mostly since",
    "came up twice this week, so",
    "is nearly sorted, except that",
)
CLAUSES = (
    "the soil dries out quickly when the afternoon sun hits that side",
    "two of the regular volunteers are away for most of the month",
    "the neighbours asked whether we could keep the noise down in the mornings",
    "the old hose leaks at the joint and nobody has found a spare washer",
    "we want the beds ready before the weather turns warm",
    "the delivery van cannot get through the narrow gate at the back",
    "last year the slugs ate most of the lettuce within a week",
    "people keep leaving the shed unlocked after their shift",
    "everyone would like a simple plan they can follow",
    "it is hard to know who did what when the notebook goes missing",
    "the wheelbarrow has a flat tyre again",
    "the mulch ran out before we reached the far beds",
)
QUESTIONS = (
    "What would you do first?",
    "Does that sound sensible?",
    "How would you explain this to new volunteers?",
    "Is there a simple way to keep track of it?",
    "What am I missing?",
)


def sentence(rng: random.Random) -> str:
    """One ordinary sentence about the garden."""
    return f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(CLAUSES)}."


def prose(rng: random.Random, tokens: int) -> str:
    """Plain English of about ``tokens`` estimated tokens (four characters a token)."""
    parts = [rng.choice(OPENERS)]
    size = len(parts[0])
    target = max(40, tokens * 4 - 40)
    while size < target:
        line = sentence(rng)
        parts.append(line)
        size += len(line) + 1
    parts.append(rng.choice(QUESTIONS))
    return " ".join(parts)


def counted_prose(rng: random.Random, tokens: int) -> str:
    """Plain English of about ``tokens`` tokens by Conch's own estimate (a page sized against
    the chat's budget, where ``prose``'s four characters a token may fall short)."""
    parts = [rng.choice(OPENERS)]
    question = rng.choice(QUESTIONS)
    # Counted piece by piece (the estimate of joined words is the sum of theirs, give or take
    # a token), so a long page costs one pass.
    size = estimate_tokens(parts[0]) + estimate_tokens(question)
    while size < tokens:
        line = sentence(rng)
        parts.append(line)
        size += estimate_tokens(line)
    parts.append(question)
    return " ".join(parts)
