"""Time to first token on the real bundled model, turn by turn, folds included.

A seeded chat of ``--turns`` turns (60 by default: mostly short messages, now and then a
longer one or a pasted note) runs on the bundled SmolLM2-135M (llama.cpp's server) at each of
``--windows`` (2,048 and 4,096 by default), once per policy, each on a freshly started server
(so no policy finds another's prompts in the server's cache):

- **conch**: the real ``ApiSession`` with the real summariser and the estimate corrected by the
  runtime's tokenizer, behind the server gate as the app wires it. Between turns the bench
  waits for the summary being written ahead, as a person reading the answer and typing gives
  it time, and for the server reading the request the fold will send (that work is counted
  apart, as background);
- **conch-unwarmed**: the same, without the fold's request read ahead (how it was before), so
  the two fold ÷ normal ratios come from one run;
- **drop-oldest**: the oldest messages cut every turn so the request fits the budget;
- **summarise-at-75%**: at 75% of the window, everything but the last 20 messages summarised
  inside the turn by the same model and summariser;
- **surprise-paste**: a chat of short messages well inside the budget (so nothing is written
  ahead) into which the person pastes a page that forces a fold on that very turn
  (``bench._policies.surprise_paste``), then one short message more, run through Conch and on
  a no-fold control server that holds it all (twice the window, at least ``--control-window``)
  and also reads the page: the paste turn's time to first token ÷ the control's (goal
  ``GOAL_SURPRISE``), and the summary requests sent before its first token (goal: none);
- **no-fold** (the matched control): the same messages with nothing folded, on a server whose
  window (``--control-window``, 8,192 by default: SmolLM2's trained window) holds the whole
  chat, run once and compared turn by turn with each window's Conch runs. A fold turn's time
  to first token ÷ the same turn's here is what the fold costs, without what the person's
  message costs (a long pasted message is read in both). The control's prompt grows to the
  whole chat, so its normal turns are compared the same way (``normal_vs_control``): a fold
  turn is judged against that, not against 1.0.

Per turn: the time from sending to the first token of the answer (what a person waits), and
the prompt tokens the server had to evaluate and its time reading them (the ``timings`` it
sends with each answer: llama.cpp reuses the prompt prefix it holds). The turns right after
background work are given apart (``after_background``): what that work left of the chat's own
prompt state. Answers are capped at 24 tokens and summaries at 256 to keep
the run bounded. Goals: a fold turn's median time to first token at most 1.5 x a normal
turn's, and Conch's median at most 0.5 x drop-oldest's. A fold turn that brings a long message
waits for the server to read that message, as any turn would, so the ratio is also given for
the turns whose message is short (under ``SHORT`` estimated tokens), fold or not, and, with
``no_fold`` among the policies, per fold turn against the same turn in the control, with the
prompt tokens the server evaluated beyond what the control evaluated for that turn (the
turn's own new text).

    python -m bench.ttft [--turns N] [--windows 2048,4096] [--policies conch,...]
                         [--control-window N] [--fake]

``--fake`` runs every policy on ``bench._timed.TimedServer`` instead of the bundled model: a
stand-in that takes a CPU server's time (prompt tokens read, answer written, its prompt cache)
in a fraction of it, for a machine too busy or too slow for the real run.

Prints a line per window and policy, then one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _policies  # noqa: E402
from bench._bundled import Probe, UnavailableError, running  # noqa: E402
from bench._garden import counted_prose, prose  # noqa: E402
from bench._timed import TimedServer  # noqa: E402
from engines.base import (  # noqa: E402
    Compacted,
    Done,
    Message,
    ModelInfo,
    Problem,
    TextDelta,
    TurnInput,
)
from engines.context.session import ApiSession, summary_block  # noqa: E402
from engines.context.summarise import ModelSummariser  # noqa: E402
from engines.local import bundled  # noqa: E402
from engines.local.gate import gated  # noqa: E402
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError  # noqa: E402
from engines.resources import read_prompt  # noqa: E402
from engines.window import answer_reserve, budget, estimate_message, estimate_tokens  # noqa: E402

TURNS = 60
WINDOWS = (2_048, 4_096)
SEED = 20_261_011
ANSWER_TOKENS = 24
SUMMARY_TOKENS = 256
GOAL_FOLD = 1.5  # a fold turn's median time to first token / a normal turn's
GOAL_WORST = 1.0  # the worst fold turn's time to first token / the same turn's in the control
GOAL_VS_DROP = 0.5  # Conch's median / drop-oldest's
SHORT = 100  # estimated tokens: a message under this costs the server little to read
CHAT_ID = "ttft-bench"
CONTROL_WINDOW = 8_192  # SmolLM2's trained window: the 60-turn chat fits (about 6,500 tokens)
POLICIES = (
    "conch",
    "conch_unwarmed",
    "drop_oldest",
    "summarise_at_75",
    "surprise_paste",
    "no_fold",
)
GOAL_SURPRISE = 1.5  # the paste turn's time to first token / the no-fold control's
SURPRISE_NEXT = 20  # estimated tokens of the short message after the paste
# The stand-in's speeds (--fake): SmolLM2 on one loaded core reads about 100-250 prompt tokens
# a second and writes about a tenth of that; the stand-in keeps that proportion, 4-10 x faster
# (faster still, Conch's own work in a turn would weigh more than it does beside a real model).
FAKE_PROMPT_RATE = 1_000.0
FAKE_ANSWER_RATE = 100.0
CONCH = ("conch", "conch_unwarmed")
Recorder = Probe | TimedServer  # what records a server's requests and what they made it read


def chat_script(turns: int, seed: int = SEED) -> list[str]:
    """The person's messages: mostly short, some longer, now and then a pasted note."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(turns):
        roll = rng.random()
        if roll < 0.7:
            tokens = rng.randint(15, 50)
        elif roll < 0.93:
            tokens = rng.randint(60, 150)
        else:
            tokens = rng.randint(250, 400)
        out.append(prose(rng, tokens))
    return out


@dataclass
class TurnFigures:
    ttft: float | None  # seconds to the first token; None: no answer came
    fold: bool  # the policy folded, cut or summarised in this turn
    evaluated: int | None  # prompt tokens the server evaluated for the answer's request
    cached: int | None  # prompt tokens it reused from its cache
    in_turn_evaluated: int  # all requests the person waited for (a summary in the turn too)
    sent: int  # estimated tokens of the answer's request
    problem: str = ""
    read_ahead: bool = False  # a fold whose request starts with one the server read before
    in_chat_slot: bool = False  # ... read in the chat's slot (else only in background work's)
    message: int = 0  # estimated tokens of the person's message
    prompt_ms: float | None = None  # the server's time reading the answer's prompt (timings)
    after_background: int = 0  # background requests the server answered since the last turn


@dataclass
class PolicyRun:
    turns: list[TurnFigures] = field(default_factory=list)
    background_evaluated: int = 0  # written ahead while the person reads (Conch only)
    background_requests: int = 0
    overflows: int = 0  # requests leaving less than the usual answer room
    seconds: float = 0.0
    counts: int = 0  # requests counted with the runtime's tokenizer


class Lockstep:
    """Runs taking their turns in a fixed order: each run's turn i (with what it does in the
    background after it), then each run's turn i + 1. A fold turn and the same turn of the
    control then meet the same load on the machine, seconds apart, not minutes."""

    def __init__(self, names: Sequence[str]) -> None:
        self._order = list(names)
        self._at = 0  # whose turn it is (an index into ``_order``)
        self._turn = 0
        self._changed = asyncio.Condition()

    async def take(self, name: str, turn: int) -> None:
        """Until it is ``name``'s turn ``turn``."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: self._turn == turn and self._order[self._at] == name
            )

    async def give(self) -> None:
        """The turn taken is over: the next run's."""
        async with self._changed:
            self._at += 1
            if self._at >= len(self._order):
                self._at, self._turn = 0, self._turn + 1
            self._changed.notify_all()

    async def leave(self, name: str) -> None:
        """``name`` takes no more turns (it ran them all, or failed)."""
        async with self._changed:
            k = self._order.index(name)
            del self._order[k]
            if k < self._at:
                self._at -= 1
            if self._at >= len(self._order):
                self._at, self._turn = 0, self._turn + 1
            self._changed.notify_all()


def _requests_since(probe: Recorder, start: int, *, background: bool) -> list[int]:
    return [i for i in range(start, len(probe.sent)) if probe.sent[i].background is background]


def _read_ahead(probe: Recorder, before: int, request: ChatRequest) -> str:
    """Where ``request``'s start was read ahead in the background since index ``before`` (a
    request it starts with; that one's last message may be the start of the request's message
    at that place): "chat" (one read in the chat's slot), "background" (only ones read in
    background work's), "" nowhere."""
    found = ""
    for sent in probe.sent[before:]:
        if not sent.background or sent.kind != "background":
            continue
        if bundled.goes_on_from(request, sent.request):
            found = "chat" if sent.for_the_chat else found or "background"
    return found


def _figures(
    probe: Recorder, start: int, ttft: float | None, fold: bool, problem: str
) -> TurnFigures:
    fg = _requests_since(probe, start, background=False)
    chats = [i for i in fg if probe.sent[i].kind == "chat"]
    last = chats[-1] if chats else None
    ev = probe.evaluated(last) if last is not None else None
    in_turn = 0
    for i in fg:
        e = probe.evaluated(i)
        in_turn += e.evaluated if e is not None else 0
    sent = 0
    if last is not None:
        r = probe.sent[last].request
        sent = estimate_tokens(r.system) + sum(map(estimate_message, r.messages))
    previous = [i for i in range(start) if probe.sent[i].kind == "chat"]
    before = previous[-1] + 1 if previous else 0
    where = ""
    if fold and last is not None:
        where = _read_ahead(probe, before, probe.sent[last].request)
    return TurnFigures(
        read_ahead=bool(where),
        in_chat_slot=where == "chat",
        ttft=ttft,
        fold=fold,
        evaluated=ev.evaluated if ev else None,
        cached=ev.cached if ev else None,
        in_turn_evaluated=in_turn,
        sent=sent,
        problem=problem,
        prompt_ms=ev.prompt_ms if ev else None,
    )


async def run_conch(
    adapter: ProviderAdapter,
    probe: Recorder,
    model: ModelInfo,
    script: Sequence[str],
    *,
    warm: bool = True,
    pace: Lockstep | None = None,
    name: str = "",
) -> PolicyRun:
    adapters = {adapter.name: adapter}
    session = ApiSession(
        chat_id=CHAT_ID, data_dir=None, adapters=adapters, summariser=ModelSummariser(adapters)
    )
    session.warm_folds = warm
    system = read_prompt("system_lean.txt")
    out = PolicyRun()
    began = time.monotonic()
    background = 0  # requests written in the background since the last turn
    busy = 0.0  # seconds of its own turns (in lockstep, not the others')
    try:
        for i, text in enumerate(script):
            if pace is not None:
                await pace.take(name, i)
            step = time.monotonic()
            start = len(probe.sent)
            turn = TurnInput(
                chat_id=CHAT_ID, seq=2 * i, text=text, model=model, system=system, lean=True
            )
            t0 = time.monotonic()
            ttft: float | None = None
            fold = False
            problem = ""
            async for event in session.turn(turn):
                if isinstance(event, TextDelta) and ttft is None and event.text:
                    ttft = time.monotonic() - t0
                elif isinstance(event, Compacted):
                    fold = True
                elif isinstance(event, Problem):
                    problem = f"{event.problem.kind.value}: {event.problem.detail}"[:200]
            out.turns.append(_figures(probe, start, ttft, fold, problem))
            out.turns[-1].message = estimate_tokens(text)
            out.turns[-1].after_background = background
            policy = "conch" if warm else "conch_unwarmed"
            _progress(policy, model.context, i, len(script), out.turns[-1])
            # The person reads the answer and types the next message meanwhile.
            after = len(probe.sent)
            await session.wait_prepared()
            background = 0
            for k in _requests_since(probe, after, background=True):
                e = probe.evaluated(k)
                background += e is not None
                out.background_requests += 1
                out.background_evaluated += e.evaluated if e is not None else 0
            busy += time.monotonic() - step
            if pace is not None:
                await pace.give()
    finally:
        if pace is not None:
            await pace.leave(name)
        await session.aclose()
    out.seconds = busy if pace is not None else time.monotonic() - began
    return out


async def _answer(
    adapter: ProviderAdapter, request: ChatRequest, t0: float
) -> tuple[str, float | None, str]:
    parts: list[str] = []
    ttft: float | None = None
    try:
        async for event in adapter.stream(request):
            if isinstance(event, TextDelta) and event.text:
                if ttft is None:
                    ttft = time.monotonic() - t0
                parts.append(event.text)
            elif isinstance(event, Done):
                break
    except ProviderError as exc:
        return "".join(parts), ttft, f"{exc.kind.value}: {exc}"[:200]
    return "".join(parts), ttft, ""


def _with_summary(messages: list[Message], summary: str) -> list[Message]:
    block = summary_block(summary)
    if not block or not messages:
        return messages
    first = messages[0]
    return [first.model_copy(update={"text": block + first.text}), *messages[1:]]


async def run_reference(
    policy: str,
    adapter: ProviderAdapter,
    probe: Recorder,
    model: ModelInfo,
    script: Sequence[str],
    pace: Lockstep | None = None,
    name: str = "",
) -> PolicyRun:
    window = model.context
    system = read_prompt("system_lean.txt")
    sys_tokens = estimate_tokens(system)
    room = budget(window, sys_tokens)
    summariser = ModelSummariser({adapter.name: adapter})
    kept: list[Message] = []
    summary = ""
    out = PolicyRun()
    try:
        for i, text in enumerate(script):
            if pace is not None:
                await pace.take(name, i)
            start = len(probe.sent)
            t0 = time.monotonic()
            kept.append(Message(role="user", text=text))
            fold = False
            if policy == "no_fold":
                pass  # the control: its window holds the whole chat
            elif policy == "drop_oldest":
                drop = _policies.drop_oldest([estimate_message(m) for m in kept], room)
                if drop and drop < len(kept) - 1 and kept[drop].role == "assistant":
                    drop += 1  # whole turns: the request starts with the person's message
                fold = drop > 0
                kept = kept[drop:]
            else:
                total = sum(map(estimate_message, kept)) + estimate_tokens(summary)
                if _policies.summarise_now(total, window, len(kept)):
                    fold = True
                    cut = len(kept) - _policies.KEEP
                    if kept[cut].role == "assistant":
                        cut += 1
                    result = await summariser.summarise(kept[:cut], summary, model=model)
                    summary = (result.text or summary).strip()
                    kept = kept[cut:]
            messages = _with_summary(kept, summary)
            request = ChatRequest(
                model=model.id,
                system=system,
                messages=tuple(messages),
                max_output_tokens=answer_reserve(window),
                window=window,
            )
            sent = sys_tokens + sum(map(estimate_message, messages))
            if _policies.over_window(sent, window):
                out.overflows += 1
            answer, ttft, problem = await _answer(adapter, request, t0)
            kept.append(Message(role="assistant", text=answer or "(no answer)"))
            out.turns.append(_figures(probe, start, ttft, fold, problem))
            out.turns[-1].message = estimate_tokens(text)
            _progress(policy, window, i, len(script), out.turns[-1])
            out.seconds += time.monotonic() - t0
            if pace is not None:
                await pace.give()
    finally:
        if pace is not None:
            await pace.leave(name)
    return out


def _progress(policy: str, window: int, i: int, n: int, t: TurnFigures) -> None:
    ttft = f"{t.ttft:6.2f} s" if t.ttft is not None else "  none  "
    print(
        f"{window:>5} {policy:<16} turn {i + 1:3d}/{n}  ttft {ttft}  "
        f"evaluated {t.evaluated if t.evaluated is not None else '?':>5}"
        f"{'  FOLD' if t.fold else ''}{'  ' + t.problem if t.problem else ''}",
        file=sys.stderr,
        flush=True,
    )


def _p95(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarise_run(run: PolicyRun) -> dict[str, object]:
    answered = [t.ttft for t in run.turns if t.ttft is not None]
    folds = [t.ttft for t in run.turns if t.fold and t.ttft is not None]
    normal = [t.ttft for t in run.turns if not t.fold and t.ttft is not None]
    # A fold turn that brings a long message waits for the server to read that message, as
    # any turn would: apart, the turns whose message is short, fold or not.
    short_folds = [t.ttft for t in run.turns if t.fold and t.ttft is not None and t.message < SHORT]
    short_normal = [
        t.ttft for t in run.turns if not t.fold and t.ttft is not None and t.message < SHORT
    ]
    short_fold_median, short_normal_median = _median(short_folds), _median(short_normal)
    evaluated = [t.evaluated for t in run.turns if t.evaluated is not None]
    share = [
        t.cached / (t.cached + t.evaluated)
        for t in run.turns
        if t.cached is not None and t.evaluated is not None and t.cached + t.evaluated
    ]
    median_fold, median_normal = _median(folds), _median(normal)
    # Turns that did not fold, right after the server answered background work (a summary
    # written ahead, a read-ahead): what that work left of the chat's own prompt state.
    behind = [t for t in run.turns if not t.fold and t.after_background and t.evaluated is not None]
    behind_evaluated = [float(t.evaluated) for t in behind if t.evaluated is not None]
    return {
        "turns": len(run.turns),
        "answered": len(answered),
        "problems": [f"turn {i}: {t.problem}" for i, t in enumerate(run.turns) if t.problem],
        "folds": sum(t.fold for t in run.turns),
        # Folds whose request began with one the server had read ahead in the background.
        "folds_read_ahead": sum(t.read_ahead for t in run.turns),
        # ... of those, read in the chat's slot (the rest only in background work's).
        "folds_read_in_chat_slot": sum(t.in_chat_slot for t in run.turns),
        "ttft_median": _r(_median(answered)),
        "ttft_p95": _r(_p95(answered)),
        "ttft_fold_median": _r(median_fold),
        "ttft_fold_p95": _r(_p95(folds)),
        "ttft_fold_max": _r(max(folds) if folds else None),
        "ttft_normal_median": _r(median_normal),
        "ttft_normal_p95": _r(_p95(normal)),
        "fold_vs_normal": _r(
            median_fold / median_normal if median_fold and median_normal else None
        ),
        "short_folds": len(short_folds),
        "ttft_short_fold_median": _r(short_fold_median),
        "ttft_short_normal_median": _r(short_normal_median),
        "fold_vs_normal_short": _r(
            short_fold_median / short_normal_median
            if short_fold_median and short_normal_median
            else None
        ),
        "evaluated_median": _median([float(e) for e in evaluated]),
        # The longest prompt in real tokens (cached + evaluated), for the control's window.
        "prompt_tokens_max": max(
            (
                t.cached + t.evaluated
                for t in run.turns
                if t.cached is not None and t.evaluated is not None
            ),
            default=None,
        ),
        "evaluated_mean": _r(statistics.fmean(evaluated) if evaluated else None, 1),
        "in_turn_evaluated_total": sum(t.in_turn_evaluated for t in run.turns),
        "cached_share_mean": _r(statistics.fmean(share) if share else None),
        "background_evaluated": run.background_evaluated,
        "background_requests": run.background_requests,
        "after_background": {
            "turns": len(behind),
            "evaluated_median": _median(behind_evaluated),
            "evaluated_max": max(behind_evaluated, default=None),
            # The same turns' own new text: the person's message, estimated.
            "message_median": _median([float(t.message) for t in behind]),
            "ttft_median": _r(_median([t.ttft for t in behind if t.ttft is not None])),
        },
        "overflows": run.overflows,
        "seconds": round(run.seconds, 1),
        # Turn by turn: seconds to the first token, prompt tokens evaluated (for the answer,
        # and in all the turn's requests), F for a fold (F+: its request was read ahead in the
        # chat's slot, F~: only in background work's), the server's seconds reading the
        # answer's prompt, background requests answered before.
        "by_turn": [
            [
                _r(t.ttft, 2),
                t.evaluated,
                t.in_turn_evaluated,
                ("F+" if t.in_chat_slot else "F~" if t.read_ahead else "F") if t.fold else "",
                _r(t.prompt_ms / 1000, 2) if t.prompt_ms is not None else None,
                t.after_background,
            ]
            for t in run.turns
        ],
    }


def _ratios(pairs: Sequence[tuple[float, float]]) -> dict[str, object]:
    values = [a / b for a, b in pairs if b > 0]
    return {
        "n": len(values),
        "median": _r(_median(values)),
        "max": _r(max(values) if values else None),
    }


def _differences(pairs: Sequence[tuple[int, int]]) -> dict[str, object]:
    values = [float(a - b) for a, b in pairs]
    return {
        "n": len(values),
        "median": _median(values),
        "max": max(values) if values else None,
    }


def matched(run: PolicyRun, control: PolicyRun) -> dict[str, object]:
    """Each turn of ``run`` against the same turn of the no-fold control (the same message).

    ``fold_vs_control``: a fold turn's time to first token ÷ the control's for that turn;
    ``normal_vs_control`` the same for the turns that did not fold (what a shorter prompt
    alone changes); ``same_work_vs_control`` for those that read as many tokens as the
    control's turn (what the moment's load alone changes: the spread a fold turn's ratio is
    read against). ``extra_evaluated_*``: prompt tokens the server evaluated for the answer
    beyond what it evaluated for that turn in the control, where only the turn's own new text
    (the message, the last answer's tail, the template around them) is read."""
    pairs = list(zip(run.turns, control.turns, strict=False))
    fold_t = [(t.ttft, c.ttft) for t, c in pairs if t.fold and t.ttft and c.ttft]
    normal_t = [(t.ttft, c.ttft) for t, c in pairs if not t.fold and t.ttft and c.ttft]
    fold_e = [
        (t.evaluated, c.evaluated)
        for t, c in pairs
        if t.fold and t.evaluated is not None and c.evaluated is not None
    ]
    normal_e = [
        (t.evaluated, c.evaluated)
        for t, c in pairs
        if not t.fold and t.evaluated is not None and c.evaluated is not None
    ]
    behind = [(t, c) for t, c in pairs if not t.fold and t.after_background]
    behind_t = [(t.ttft, c.ttft) for t, c in behind if t.ttft and c.ttft]
    behind_e = [
        (t.evaluated, c.evaluated)
        for t, c in behind
        if t.evaluated is not None and c.evaluated is not None
    ]
    # Normal turns that read as many tokens as the control's (within 5%): the same work on both
    # servers, so their ratios are what the moment alone does to one turn's time.
    same_t = [
        (t.ttft, c.ttft)
        for t, c in pairs
        if not t.fold
        and t.ttft
        and c.ttft
        and t.evaluated is not None
        and c.evaluated
        and abs(t.evaluated - c.evaluated) <= 0.05 * c.evaluated
    ]
    fold, normal = _ratios(fold_t), _ratios(normal_t)
    fm, nm = fold["median"], normal["median"]
    return {
        "fold_vs_control": fold,
        "normal_vs_control": normal,
        # The fold's own cost with the shorter prompt's gain taken out.
        "fold_vs_control_over_normal": _r(
            fm / nm if isinstance(fm, float) and isinstance(nm, float) and nm else None
        ),
        "same_work_vs_control": _ratios(same_t),
        # Tokens a fold turn read ÷ the control's for that turn: its cost without the timing.
        "fold_evaluated_vs_control": _ratios([(float(a), float(b)) for a, b in fold_e]),
        "extra_evaluated_fold": _differences(fold_e),
        "extra_evaluated_normal": _differences(normal_e),
        # The turns that did not fold, right after background work.
        "after_background_vs_control": _ratios(behind_t),
        "extra_evaluated_after_background": _differences(behind_e),
        # Turn by turn for the fold turns: [turn, ttft here, ttft in the control, evaluated
        # here, evaluated in the control].
        "fold_turns": [
            [i, _r(t.ttft, 2), _r(c.ttft, 2), t.evaluated, c.evaluated]
            for i, (t, c) in enumerate(pairs)
            if t.fold
        ],
    }


def _model(window: int) -> ModelInfo:
    return ModelInfo(
        provider="local",
        id=bundled.MODEL_ID,
        label=bundled.MODEL_LABEL,
        context=window,
        local=True,
        loaded=True,
    )


@contextlib.asynccontextmanager
async def _server(
    window: int, extra_args: tuple[str, ...], fake: bool
) -> AsyncIterator[tuple[ProviderAdapter, Recorder, ModelInfo]]:
    """A fresh server of ``window`` tokens (the bundled model, or the stand-in when ``fake``)
    behind the gate as the app wires it: (adapter, what records its requests, the model)."""
    if fake:
        probe: Recorder = TimedServer(
            window,
            prompt_rate=FAKE_PROMPT_RATE,
            answer_rate=FAKE_ANSWER_RATE,
            answer_tokens=ANSWER_TOKENS,
            summary_tokens=SUMMARY_TOKENS,
        )
        adapter = gated(probe)
        try:
            yield adapter, probe, _model(window).model_copy(update={"provider": adapter.name})
        finally:
            await adapter.aclose()
        return
    async with running(window, extra_args) as runtime:
        probe = Probe(
            runtime,
            answer_tokens=ANSWER_TOKENS,
            summary_tokens=SUMMARY_TOKENS,
        )
        adapter = gated(probe)
        try:
            yield adapter, probe, _model(window).model_copy(update={"provider": adapter.name})
        finally:
            await adapter.aclose()


async def run_policy(
    policy: str,
    window: int,
    script: Sequence[str],
    extra_args: tuple[str, ...] = (),
    fake: bool = False,
) -> PolicyRun:
    """One policy on a freshly started server of ``window`` tokens."""
    async with _server(window, extra_args, fake) as (adapter, probe, model):
        if policy in CONCH:
            run = await run_conch(adapter, probe, model, script, warm=policy == "conch")
        else:
            run = await run_reference(policy, adapter, probe, model, script)
        run.counts = probe.counts
    return run


async def _surprise_conch(
    adapter: ProviderAdapter, probe: Recorder, model: ModelInfo, window: int
) -> tuple[list[str], PolicyRun, list[int]]:
    """Conch through the surprise paste: short messages until the chat holds
    ``SURPRISE_BEFORE`` of the budget, the page (``SURPRISE_PASTE`` of it), one short message
    more; both sized by the chat's own count, which the server's real counts correct. Returns
    the messages sent (the control's script), the figures of each turn, and how many summary
    requests each turn sent before its first token."""
    adapters = {adapter.name: adapter}
    session = ApiSession(
        chat_id=CHAT_ID, data_dir=None, adapters=adapters, summariser=ModelSummariser(adapters)
    )
    system = read_prompt("system_lean.txt")
    rng = random.Random(SEED + window)
    script: list[str] = []
    out = PolicyRun()
    waited: list[int] = []
    stage = "chat"  # then "paste", then "next"
    began = time.monotonic()
    try:
        while stage != "done":
            used, room = session.context_usage(model, system)
            page = _policies.surprise_paste(used, room, session.factor)
            if stage == "chat" and page:
                stage = "paste"
            if stage == "chat":
                text = prose(rng, rng.randint(15, 50))
            elif stage == "paste":
                text = counted_prose(rng, page)
                stage = "next"
            else:
                text = prose(rng, SURPRISE_NEXT)
                stage = "done"
            i = len(script)
            script.append(text)
            start = len(probe.sent)
            turn = TurnInput(
                chat_id=CHAT_ID, seq=2 * i, text=text, model=model, system=system, lean=True
            )
            t0 = time.monotonic()
            ttft: float | None = None
            fold = False
            problem = ""
            summaries = 0
            async for event in session.turn(turn):
                if isinstance(event, TextDelta) and ttft is None and event.text:
                    ttft = time.monotonic() - t0
                    sent = probe.sent[start:]
                    summaries = sum(1 for r in sent if r.kind == "summary" and not r.background)
                elif isinstance(event, Compacted):
                    fold = True
                elif isinstance(event, Problem):
                    problem = f"{event.problem.kind.value}: {event.problem.detail}"[:200]
            out.turns.append(_figures(probe, start, ttft, fold, problem))
            out.turns[-1].message = estimate_tokens(text)
            waited.append(summaries)
            _progress("surprise_paste", model.context, i, i + 1, out.turns[-1])
            # The person reads the answer: what is written in the background gets its time.
            await session.wait_prepared()
    finally:
        await session.aclose()
    out.seconds = time.monotonic() - began
    return script, out, waited


async def run_surprise(
    window: int, extra_args: tuple[str, ...], fake: bool, control_window: int
) -> dict[str, object]:
    """The surprise paste at ``window``: Conch against a no-fold control, turn for turn."""
    async with _server(window, extra_args, fake) as (adapter, probe, model):
        script, conch, waited = await _surprise_conch(adapter, probe, model, window)
        # Written while the person reads: the paste turn's summary, the read-ahead after it.
        background = sum(1 for r in probe.sent if r.background)
    paste_at = len(script) - 2
    # Twice the window holds the whole chat and its answer, whatever the tokenizer says.
    wide = max(control_window, 2 * window)
    async with _server(wide, extra_args, fake) as (adapter, probe, model):
        control = await run_reference("no_fold", adapter, probe, model, script)
    fold, against = conch.turns[paste_at], control.turns[paste_at]
    after, after_control = conch.turns[-1], control.turns[-1]

    def ratio(a: float | None, b: float | None) -> float | None:
        return _r(a / b) if a is not None and b else None

    vs_control = ratio(fold.ttft, against.ttft)
    normal = [
        t.ttft / c.ttft
        for t, c in zip(conch.turns[:paste_at], control.turns[:paste_at], strict=True)
        if t.ttft is not None and c.ttft
    ]
    return {
        "turns": len(script),
        "paste_tokens": fold.message,
        # Turns before the paste that folded (a real count may bring the fold earlier).
        "folds_before_paste": sum(t.fold for t in conch.turns[:paste_at]),
        "control_window": wide,
        "folded": fold.fold,
        "problems": [f"turn {i}: {t.problem}" for i, t in enumerate(conch.turns) if t.problem],
        "summary_requests_before_first_token": waited[paste_at],
        "ttft_paste": _r(fold.ttft),
        "ttft_paste_control": _r(against.ttft),
        "paste_vs_control": vs_control,
        "goal_paste_vs_control_met": vs_control is not None and vs_control <= GOAL_SURPRISE,
        "evaluated_paste": fold.evaluated,
        "evaluated_paste_control": against.evaluated,
        # The turn after: it sends the summary written after the paste turn.
        "ttft_next": _r(after.ttft),
        "ttft_next_control": _r(after_control.ttft),
        "next_vs_control": ratio(after.ttft, after_control.ttft),
        "normal_vs_control_median": _r(_median(normal)),
        "background_requests": background,
        "seconds": round(conch.seconds + control.seconds, 1),
    }


async def run_lockstep(
    script: Sequence[str],
    windows: Sequence[int],
    control_window: int,
    extra_args: tuple[str, ...] = (),
    fake: bool = False,
) -> tuple[PolicyRun, dict[int, PolicyRun]]:
    """The no-fold control and Conch at each window, each on its own freshly started server,
    in lockstep: the control's turn i, then Conch's turn i at each window (with what it reads
    and writes in the background after it), then turn i + 1. A fold turn and the same turn of
    the control are then timed seconds apart, under the same load."""
    names = ["no_fold", *(str(w) for w in windows)]
    pace = Lockstep(names)
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(_server(w, extra_args, fake))
            for w in (control_window, *windows)
        ]
        (adapter, probe, model), *conch_servers = servers
        jobs = [run_reference("no_fold", adapter, probe, model, script, pace, "no_fold")]
        jobs.extend(
            run_conch(a, p, m, script, pace=pace, name=name)
            for (a, p, m), name in zip(conch_servers, names[1:], strict=True)
        )
        control, *runs = await asyncio.gather(*jobs)
        for (_a, p, _m), run in zip(servers, [control, *runs], strict=True):
            run.counts = p.counts
    return control, dict(zip(windows, runs, strict=True))


def _said(window: int, policy: str, figures: dict[str, object]) -> None:
    print(
        f"{window:>5} {policy:<16} ttft median {figures['ttft_median']} s, p95 "
        f"{figures['ttft_p95']} s; folds {figures['folds']} (median "
        f"{figures['ttft_fold_median']} s, normal {figures['ttft_normal_median']} s); "
        f"evaluated median {figures['evaluated_median']} tokens",
        flush=True,
    )
    against = figures.get("matched")
    if isinstance(against, dict):
        print(
            f"{window:>5} {policy:<16} fold turns / the control's: {against['fold_vs_control']}; "
            f"tokens read {against['fold_evaluated_vs_control']}; the same work on both "
            f"{against['same_work_vs_control']}",
            flush=True,
        )


async def run_window(
    window: int,
    script: Sequence[str],
    extra_args: tuple[str, ...] = (),
    policies: Sequence[str] = POLICIES,
    control: PolicyRun | None = None,
    fake: bool = False,
    control_window: int = CONTROL_WINDOW,
    ran: dict[str, PolicyRun] | None = None,
) -> dict[str, object]:
    """Each policy at ``window`` (``ran``: runs already made, in lockstep with the control)."""
    out: dict[str, object] = {}
    against: dict[str, dict[str, object]] = {}  # each Conch run against the control
    for policy in policies:
        if policy == "no_fold":
            continue  # run once for every window, in ``run``
        if policy == "surprise_paste":
            surprise = await run_surprise(window, extra_args, fake, control_window)
            out[policy] = surprise
            print(
                f"{window:>5} surprise_paste   paste turn {surprise['ttft_paste']} s against "
                f"{surprise['ttft_paste_control']} s in the control "
                f"({surprise['paste_vs_control']} x); summary requests before its first "
                f"token: {surprise['summary_requests_before_first_token']}",
                flush=True,
            )
            continue
        done = (ran or {}).get(policy)
        run = (
            done if done is not None else await run_policy(policy, window, script, extra_args, fake)
        )
        figures = summarise_run(run)
        if policy in CONCH:
            figures["tokenizer_counts"] = run.counts
            if control is not None:
                against[policy] = figures["matched"] = matched(run, control)
        out[policy] = figures
        _said(window, policy, figures)
    conch, drop = out.get("conch"), out.get("drop_oldest")
    unwarmed = out.get("conch_unwarmed")
    if isinstance(unwarmed, dict):
        out["fold_vs_normal_unwarmed"] = unwarmed["fold_vs_normal"]
        if "conch_unwarmed" in against:
            out["fold_vs_control_unwarmed"] = against["conch_unwarmed"]["fold_vs_control"]
    if not isinstance(conch, dict):
        return out
    out["fold_vs_normal"] = conch["fold_vs_normal"]
    out["fold_vs_normal_short"] = conch["fold_vs_normal_short"]
    if isinstance(unwarmed, dict):
        out["fold_vs_normal_short_unwarmed"] = unwarmed["fold_vs_normal_short"]
    if "conch" in against:
        fold = against["conch"]["fold_vs_control"]
        out["fold_vs_control"] = fold
        out["normal_vs_control"] = against["conch"]["normal_vs_control"]
        out["same_work_vs_control"] = against["conch"]["same_work_vs_control"]
        out["fold_evaluated_vs_control"] = against["conch"]["fold_evaluated_vs_control"]
        if isinstance(fold, dict):
            # The goal read against the matched control: the same turn, not folded.
            median, worst = fold["median"], fold["max"]
            out["goal_fold_vs_control_met"] = isinstance(median, float) and median <= GOAL_FOLD
            out["goal_fold_vs_control_worst_met"] = isinstance(worst, float) and worst <= GOAL_WORST
    vs_drop = (
        conch["ttft_median"] / drop["ttft_median"]
        if isinstance(drop, dict) and conch["ttft_median"] and drop["ttft_median"]
        else None
    )
    out["conch_vs_drop_oldest"] = _r(vs_drop)
    out["goal_fold_met"] = conch["fold_vs_normal"] is not None and (
        conch["fold_vs_normal"] <= GOAL_FOLD
    )
    # None: drop-oldest was not run.
    out["goal_vs_drop_met"] = None if vs_drop is None else vs_drop <= GOAL_VS_DROP
    return out


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


async def run(
    turns: int,
    windows: Sequence[int],
    extra_args: tuple[str, ...] = (),
    policies: Sequence[str] = POLICIES,
    control_window: int = CONTROL_WINDOW,
    fake: bool = False,
    apart: bool = False,
) -> dict[str, object]:
    """The whole bench. With both ``conch`` and ``no_fold``, Conch at each window and the
    control run in lockstep, turn by turn (``Lockstep``), unless ``apart``."""
    script = chat_script(turns)
    started = time.monotonic()
    result: dict[str, object] = {
        "bench": "ttft",
        "model": f"bundled {bundled.MODEL_ID}",
        "turns": turns,
        "answer_tokens": ANSWER_TOKENS,
        "summary_tokens": SUMMARY_TOKENS,
        "goal_fold_vs_normal": GOAL_FOLD,
        "goal_fold_vs_control_worst": GOAL_WORST,
        "goal_conch_vs_drop_oldest": GOAL_VS_DROP,
        "goal_surprise_paste_vs_control": GOAL_SURPRISE,
        # The timed stand-in (bench._timed), not the bundled model, when true.
        "fake": fake,
        "cores": os.cpu_count(),
        "server_args": list(extra_args),
        "load_before": _load(),
    }
    control: PolicyRun | None = None
    ran: dict[int, dict[str, PolicyRun]] = {}
    if "no_fold" in policies and "conch" in policies and not apart:
        control, conch = await run_lockstep(script, windows, control_window, extra_args, fake)
        ran = {window: {"conch": run} for window, run in conch.items()}
        result["lockstep"] = True
    elif "no_fold" in policies:
        control = await run_policy("no_fold", control_window, script, extra_args, fake)
    if control is not None:
        figures = summarise_run(control)
        peak = figures["prompt_tokens_max"]
        figures["window"] = control_window
        figures["trained_window"] = bundled.WINDOW
        # Whether the control's window had room for every request and its answer (else the
        # chat should be shorter, or the window larger than the model was trained on).
        figures["held_whole_chat"] = (
            isinstance(peak, int)
            and peak + ANSWER_TOKENS <= control_window
            and not figures["folds"]
            and figures["answered"] == len(script)  # llama.cpp caps a slot's window
        )
        result["no_fold"] = figures
        result["load_after_control"] = _load()
        _said(control_window, "no_fold", figures)
    for window in windows:
        result[str(window)] = await run_window(
            window, script, extra_args, policies, control, fake, control_window, ran.get(window)
        )
        result[f"load_after_{window}"] = _load()
        # Each window's figures as soon as they are known (a long run stopped before its end
        # keeps them); the last line on stdout stays the whole run's.
        said = {"bench": "ttft", "window": window, **result}
        print(json.dumps(said, ensure_ascii=False), file=sys.stderr, flush=True)
    result["load_after"] = _load()
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ttft", description=__doc__)
    parser.add_argument("--turns", type=int, default=TURNS, help=f"turns (default {TURNS})")
    parser.add_argument(
        "--windows",
        default=",".join(str(w) for w in WINDOWS),
        help="comma-separated windows (default 2048,4096)",
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma-separated, any of {', '.join(POLICIES)} (default all)",
    )
    parser.add_argument(
        "--control-window",
        type=int,
        default=CONTROL_WINDOW,
        help=f"the no_fold control's window (default {CONTROL_WINDOW}, the model's trained "
        "window; llama.cpp's server caps each slot there, so a larger one still refuses "
        "requests past it: about 74 turns of the default chat)",
    )
    parser.add_argument(
        "--apart",
        action="store_true",
        help="run Conch and the no-fold control one after the other, not in lockstep "
        "(two servers at a time at most, but the load may change between them)",
    )
    parser.add_argument(
        "--fake",
        action="store_true",
        help="run on a timed stand-in for the bundled model (bench._timed), not the model",
    )
    args = parser.parse_args(argv)
    policies = [p.strip() for p in str(args.policies).split(",") if p.strip()]
    if not policies or any(p not in POLICIES for p in policies):
        parser.error(f"--policies takes any of {', '.join(POLICIES)}, separated by commas")
    try:
        windows = [int(w) for w in str(args.windows).split(",") if w.strip()]
    except ValueError:
        parser.error("--windows takes numbers separated by commas, for example 2048,4096")
    if args.turns < 2 or not windows or min(windows) < 1_024:
        parser.error("--turns must be at least 2 and every window at least 1024")
    try:
        extra: tuple[str, ...] = ()
        figures = asyncio.run(
            run(args.turns, windows, extra, policies, args.control_window, args.fake, args.apart)
        )
    except UnavailableError as exc:
        print(json.dumps({"bench": "ttft", "error": str(exc)}, ensure_ascii=False))
        raise SystemExit(2) from None
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    main()
