"""How often a request starts with the same bytes as the one before (provider prompt caches).

Runs 1,000 turns of a seeded, mixed chat (short questions, long answers, now and then a pasted
file) through the real ``ApiSession`` (scripted adapter, no summariser, nothing on disk) on
8K, 16K, 32K and 128K windows. For each window: the share of turns whose request begins with
the previous request byte for byte, the number of folds, and the mean tokens sent; beside two
reference policies: "drop the oldest messages to fit every turn" and "at 75% of the window,
summarise all but the last 20 messages". The same seeded chat runs once more with its pasted
files replaced by short questions, to show how much the mix matters: between two folds the
transcript grows from half the budget to all of it, so the stable share is about
1 - (tokens per turn) / (budget / 2). Beside that, the **cached-token share**: the tokens in
the common prefix with the previous request divided by the tokens sent, over the whole chat
(what a provider's prompt cache or llama.cpp's reused prefix saves). Prints one JSON object on
its last line; the goals are >= 97% stable and >= 90% cached tokens at 16K (the mixed chat).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass

from bench import _policies
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Compacted, Message, ModelInfo, TurnInput
from engines.context.session import ApiSession
from engines.providers.base import ChatRequest
from engines.window import budget, estimate_message, estimate_tokens

TURNS = 1_000
WINDOWS = (8_192, 16_384, 32_768, 128_000)
SEED = 20261003
SYSTEM = (
    "You are Conch, a friendly assistant on the person's own computer. Answer clearly, use "
    "Markdown where it helps, and say when you are unsure. "
) * 6
GOAL_STABLE = 0.97
GOAL_CACHED = 0.90


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


def conversation(rng: random.Random, *, pastes: bool = True) -> list[Turn]:
    """A seeded chat: mostly short questions, longish answers, a pasted file now and then."""
    words = ("the", "a", "garden", "bed", "soil", "water", "rota", "script", "larch", "slug")

    def text(chars: int) -> str:
        out: list[str] = []
        n = 0
        while n < chars:
            w = rng.choice(words)
            out.append(w)
            n += len(w) + 1
        return " ".join(out)[:chars]

    turns: list[Turn] = []
    for _ in range(TURNS):
        roll = rng.random()
        if roll < 0.75:
            q = rng.randint(20, 300)
        elif roll < 0.95:
            q = rng.randint(300, 1_500)
        else:  # a pasted file (or, without pastes, another short question)
            size = int(math.exp(rng.uniform(math.log(2_000), math.log(40_000))))
            q = size if pastes else rng.randint(20, 300)
        a = int(min(12_000, max(40, rng.lognormvariate(math.log(900), 0.8))))
        turns.append(Turn(text(q), text(a)))
    return turns


# --- Conch's policy, through the real session -------------------------------------------------


class Wire:
    """Each message's JSON, cached by identity: the session re-sends the same objects."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Message, str]] = {}

    def parts(self, request: ChatRequest) -> list[str]:
        head = json.dumps([request.model, request.system, list(request.tools)], sort_keys=True)
        out = [head, str(request.max_output_tokens), str(request.window)]
        for m in request.messages:
            hit = self._cache.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, m.model_dump_json())
                self._cache[id(m)] = hit
            out.append(hit[1])
        return out


def common_tokens(previous: list[str], parts: list[str], costs: list[int]) -> int:
    """Tokens in the leading parts two requests share (``costs`` are ``parts``' tokens)."""
    n = 0
    for before, now, cost in zip(previous, parts, costs, strict=False):
        if before != now:
            break
        n += cost
    return n


async def run_session(window: int, turns: list[Turn]) -> dict[str, float]:
    model = ModelInfo(provider="bench", id=f"model-{window}", context=window, local=True)

    def usage(request: ChatRequest) -> int:
        # A real tokenizer counts a little differently from the estimate.
        sent = estimate_tokens(request.system) + sum(map(estimate_message, request.messages))
        return int(sent * 1.05)

    adapter = ScriptedAdapter(name="bench")
    session = ApiSession(chat_id="bench", data_dir=None, adapters={"bench": adapter})
    wire = Wire()
    previous: list[str] | None = None
    stable = folds = 0
    sent_total = cached_total = shared_sent = 0
    for i, t in enumerate(turns):
        adapter.add([Answer(t.answer, input_tokens=usage, chunk=len(t.answer) or 1)])
        turn = TurnInput(chat_id="bench", seq=2 * i, text=t.question, model=model, system=SYSTEM)
        async for ev in session.turn(turn):
            if isinstance(ev, Compacted):
                folds += 1
        request = adapter.requests[-1]
        parts = wire.parts(request)
        costs = [estimate_tokens(request.system), 0, 0, *map(estimate_message, request.messages)]
        sent = sum(costs)
        if previous is not None:  # the first request has nothing before it to share
            if parts[: len(previous)] == previous:
                stable += 1
            cached_total += common_tokens(previous, parts, costs)
            shared_sent += sent
        previous = parts
        sent_total += sent
        adapter.requests.clear()
    return {
        "stable": stable / (len(turns) - 1),
        "cached_share": cached_total / shared_sent if shared_sent else 0.0,
        "folds": folds,
        "mean_tokens_sent": sent_total / len(turns),
    }


# --- reference policies (same chat, same estimates) -------------------------------------------


def reference(window: int, turns: list[Turn], policy: str) -> dict[str, float]:
    """Simulate a simpler policy; messages are token counts, identified by position."""
    sys_tokens = estimate_tokens(SYSTEM)
    b = budget(window, sys_tokens)
    kept: list[tuple[int, int]] = []  # (message id, tokens)
    summary = (0, 0)
    previous: list[tuple[int, int]] | None = None
    prev_summary = (0, 0)  # (which summary, its tokens)
    stable = folds = overflows = 0
    sent_total = cached_total = shared_sent = 0
    for i, t in enumerate(turns):
        q = min(estimate_tokens(t.question), b)  # the newest message is shortened to fit
        kept.append((2 * i, q))
        total = sum(n for _, n in kept)
        if policy == "drop-oldest":
            drop = _policies.drop_oldest([n for _, n in kept], b)
            if drop:
                folds += 1
                kept = kept[drop:]
                total = sum(n for _, n in kept)
        elif _policies.summarise_now(total + summary[1], window, len(kept)):
            folds += 1
            kept = kept[-_policies.KEEP :]
            summary = (folds, _policies.SUMMARY_TOKENS)
            total = sum(n for _, n in kept)
        sent = sys_tokens + total + summary[1]
        if _policies.over_window(sent, window):
            overflows += 1
        if previous is not None:
            cached = sys_tokens
            if summary == prev_summary:
                cached += summary[1]
                for before, now in zip(previous, kept, strict=False):
                    if before != now:
                        break
                    cached += now[1]
            if kept[: len(previous)] == previous and summary == prev_summary:
                stable += 1
            cached_total += cached
            shared_sent += sent
        sent_total += sent
        previous, prev_summary = list(kept), summary
        kept.append((2 * i + 1, estimate_tokens(t.answer)))
    return {
        "stable": stable / (len(turns) - 1),
        "cached_share": cached_total / shared_sent if shared_sent else 0.0,
        "folds": folds,
        "mean_tokens_sent": sent_total / len(turns),
        "overflows": overflows,
    }


def label(window: int) -> str:
    return f"{round(window / 1024)}k" if window < 100_000 else f"{window // 1000}k"


def scenario(turns: list[Turn], name: str) -> dict[str, object]:
    per_turn = sum(estimate_tokens(t.question) + estimate_tokens(t.answer) for t in turns)
    out: dict[str, object] = {"mean_tokens_per_turn": round(per_turn / len(turns))}
    for window in WINDOWS:
        ours = asyncio.run(run_session(window, turns))
        drop = reference(window, turns, "drop-oldest")
        hermes = reference(window, turns, "summarise-75")
        out[label(window)] = {
            "conch": {k: round(v, 4) for k, v in ours.items()},
            "drop_oldest": {k: round(v, 4) for k, v in drop.items()},
            "summarise_at_75": {k: round(v, 4) for k, v in hermes.items()},
        }
        print(
            f"{name:>9} {window:>7,}: conch {ours['stable']:.1%} stable, "
            f"{ours['cached_share']:.1%} cached, {ours['folds']:.0f} folds, "
            f"{ours['mean_tokens_sent']:,.0f} tokens | drop-oldest {drop['stable']:.1%}, "
            f"{drop['cached_share']:.1%} cached, {drop['mean_tokens_sent']:,.0f} | 75%/20 "
            f"{hermes['stable']:.1%}, {hermes['cached_share']:.1%} cached, "
            f"{hermes['mean_tokens_sent']:,.0f} ({hermes['overflows']:.0f} over the window)"
        )
    return out


def main() -> dict[str, object]:
    started = time.perf_counter()
    mixed = scenario(conversation(random.Random(SEED)), "mixed")
    light = scenario(conversation(random.Random(SEED), pastes=False), "no pastes")
    stable_16k = mixed["16k"]["conch"]["stable"]  # type: ignore[index]
    cached_16k = mixed["16k"]["conch"]["cached_share"]  # type: ignore[index]
    return {
        "turns": TURNS,
        "mixed": mixed,
        "no_pastes": light,
        "stable_16k": stable_16k,
        "goal_stable_16k": GOAL_STABLE,
        "meets_goal": stable_16k >= GOAL_STABLE,
        "cached_share_16k": cached_16k,
        "goal_cached_share_16k": GOAL_CACHED,
        "meets_cached_goal": cached_16k >= GOAL_CACHED,
        "seconds": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
