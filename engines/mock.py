"""A scripted engine for tests and ``conch --mock``: streams, fails, refuses and folds on cue.

It declares the context capability like the transcript-keeping engine: it remembers what the
person asked, folds on its own every few turns (emitting ``Compacted`` with a summary that lists
the folded questions), and ``compact`` folds all but the newest turn on request. When its
script runs out it keeps answering with a made-up echo, so a mock chat can go on forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from engines.api.context import PICTURE_TOKENS, budget, estimate_tokens
from engines.base import (
    Compacted,
    Done,
    Event,
    ModelInfo,
    NextStep,
    Note,
    Problem,
    ProblemKind,
    Shortened,
    TextDelta,
    ThinkingDelta,
    TurnInput,
    TurnProblem,
    Usage,
)
from engines.providers.base import default_next_step

# --- the script -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Answer with ``text`` (after ``thinking``, if any), in chunks."""

    text: str
    thinking: str = ""
    chunk_delay: float = 0.02
    chunk_size: int = 12


@dataclass(frozen=True)
class Fail:
    """Stream ``after_chars`` characters of ``text`` (the echo if empty), then fail."""

    after_chars: int = 40
    kind: ProblemKind = ProblemKind.BROKEN_STREAM
    text: str = ""
    detail: str = "the mock engine was told to fail here"
    chunk_delay: float = 0.02
    chunk_size: int = 12


@dataclass(frozen=True)
class Refuse:
    """Refuse the turn before any text, as a provider would."""

    kind: ProblemKind = ProblemKind.TOO_LONG
    next_step: NextStep | None = None
    detail: str = "the mock engine was told to refuse this turn"


@dataclass(frozen=True)
class CompactBefore:
    """Emit ``Compacted`` before the turn's reply (the next step answers the turn).

    ``first_kept_seq`` None keeps only the turn being answered.
    """

    first_kept_seq: int | None = None
    summary: str = ""


@dataclass(frozen=True)
class ShortenBefore:
    """Say the turn's message was cut to ``sent_chars`` before the reply (the next step answers
    the turn), offering ``next_step``, as the real engine does for a message too big to send."""

    sent_chars: int = 1_000
    next_step: NextStep | None = None


Step = Reply | Fail | Refuse | CompactBefore | ShortenBefore


@dataclass
class _Turn:
    seq: int
    text: str
    answer: str = ""
    attached: int = 0  # tokens of the turn's attached files and pictures


_FILLER = (
    "This is Conch's mock engine, so nothing here came from a real model.",
    "It streams a few words at a time, the way a model would.",
    "Every few turns it summarises the start of the chat, so the summary line shows up.",
    "Type /compact to fold the chat now, or keep going: the mock never runs out of words.",
    "A real model would answer your question here instead of repeating it.",
)


def _first_line(text: str, limit: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def echo_reply(text: str, n: int) -> str:
    """The answer the mock gives once its script has run out (deterministic)."""
    quoted = _first_line(text, 200) or "(an empty message)"
    a = _FILLER[n % len(_FILLER)]
    b = _FILLER[(n + 2) % len(_FILLER)]
    return f"You said: {quoted}\n\n{a} {b}"


# --- the engine -------------------------------------------------------------------------------


class MockEngine:
    """Scripted ``ContextEngine``.

    ``script`` steps are used one per turn (a ``CompactBefore`` is used together with the step
    after it). ``fold_every`` turns (0 to never) it folds on its own, keeping ``keep_turns``
    turns. ``seed`` is the chat so far as (seq, person's text) pairs and ``summary`` the summary
    it already has, so a seeded demo chat keeps folding where it left off.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        fold_every: int = 6,
        keep_turns: int = 3,
        delay: float = 0.02,
        seed: Sequence[tuple[int, str]] = (),
        summary: str = "",
        cue: Callable[[TurnInput], Reply | Fail | Refuse | None] | None = None,
    ) -> None:
        self._script: list[Step] = list(script)
        self._cue = cue  # picks a step from the person's words when the script has none
        self.fold_every = max(0, fold_every)
        self.keep_turns = max(1, keep_turns)
        self.delay = max(0.0, delay)
        self._turns: list[_Turn] = [_Turn(seq, text) for seq, text in seed]
        self._asked: list[str] = []  # the person's folded questions, oldest first
        self._summary = summary
        self._since_fold = 0
        self._answered = 0
        self._model_name = "the mock model"
        self.closed = False
        self.inputs: list[TurnInput] = []  # every turn it was given, for tests

    # -- script --

    def extend(self, steps: Iterable[Step]) -> None:
        """Queue more steps after the ones still waiting."""
        self._script.extend(steps)

    @property
    def summary(self) -> str:
        return self._summary

    @property
    def kept_seqs(self) -> list[int]:
        return [t.seq for t in self._turns]

    # -- ContextEngine --

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        self.inputs.append(turn)
        self._model_name = turn.model.name
        attached = sum(estimate_tokens(a.text) for a in turn.attachments)
        current = _Turn(
            turn.seq, turn.text, attached=attached + PICTURE_TOKENS * len(turn.pictures)
        )
        # A message sent again (a retry) replaces its earlier try, as the real engine does.
        self._turns = [t for t in self._turns if t.seq < turn.seq]
        self._turns.append(current)
        self._since_fold += 1

        step = self._script.pop(0) if self._script else None
        folded_by_script = False
        while isinstance(step, CompactBefore | ShortenBefore):
            if isinstance(step, CompactBefore):
                folded_by_script = True
                yield self._fold(step.first_kept_seq, summary=step.summary or None)
            else:
                half = step.sent_chars // 2
                yield Shortened(
                    seq=turn.seq,
                    sent_chars=step.sent_chars,
                    total_chars=len(turn.text),
                    text=f"Conch sent the first and last {half:,} characters of your message.",
                    next_step=step.next_step,
                )
            step = self._script.pop(0) if self._script else None

        if not folded_by_script and self.fold_every and self._since_fold >= self.fold_every:
            keep = self._turns[-self.keep_turns :]
            if len(keep) < len(self._turns):
                yield self._fold(keep[0].seq)

        if step is None and self._cue is not None:
            step = self._cue(turn)
        if step is None:
            step = Reply(echo_reply(turn.text, self._answered), chunk_delay=self.delay)
        self._answered += 1

        if isinstance(step, Refuse):
            next_step = step.next_step
            if next_step is None and step.kind is ProblemKind.TOO_LONG:
                next_step = NextStep(
                    kind="new-chat", label="Start a new chat with this message", text=turn.text
                )
            elif next_step is None:
                next_step = default_next_step(step.kind)
            yield Problem(problem=TurnProblem.of(step.kind, step.detail, next_step))
            return

        if isinstance(step, Fail):
            text = (step.text or echo_reply(turn.text, self._answered))[: max(0, step.after_chars)]
            async for delta in _chunks(text, step.chunk_size, step.chunk_delay, thinking=False):
                yield delta
            problem = TurnProblem.of(
                step.kind, step.detail, default_next_step(step.kind), partial=bool(text)
            )
            yield Problem(problem=problem)
            return

        async for delta in _chunks(step.thinking, step.chunk_size, step.chunk_delay, thinking=True):
            yield delta
        async for delta in _chunks(step.text, step.chunk_size, step.chunk_delay, thinking=False):
            yield delta
        current.answer = step.text
        yield Usage(
            input_tokens=self._used(turn.system),
            output_tokens=estimate_tokens(step.thinking) + estimate_tokens(step.text),
        )
        yield Done()

    async def compact(
        self, focus: str = "", *, model: ModelInfo | None = None
    ) -> AsyncIterator[Event]:
        if model is not None:
            self._model_name = model.name
        await asyncio.sleep(self.delay)  # a real fold takes a moment (and can be cancelled)
        if len(self._turns) <= 1:
            yield Note(topic="other", text="There is nothing to summarise yet.")
            yield Done()
            return
        yield self._fold(self._turns[-1].seq, focus=focus)
        yield Done()

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        b = budget(model.context, estimate_tokens(system), 0, answer_tokens)
        return self._used(""), b

    async def aclose(self) -> None:
        self.closed = True

    # -- folding --

    def _used(self, system: str) -> int:
        total = estimate_tokens(self._summary) + estimate_tokens(system)
        for t in self._turns:
            total += estimate_tokens(t.text) + t.attached + estimate_tokens(t.answer)
        return total

    def _fold(
        self, first_kept_seq: int | None, *, focus: str = "", summary: str | None = None
    ) -> Compacted:
        if first_kept_seq is None:
            first_kept_seq = self._turns[-1].seq
        folded = [t for t in self._turns if t.seq < first_kept_seq]
        self._turns = [t for t in self._turns if t.seq >= first_kept_seq]
        self._asked.extend(_first_line(t.text) for t in folded if t.text.strip())
        self._summary = summary if summary is not None else self._summary_text(focus)
        self._since_fold = 0
        return Compacted(
            first_kept_seq=first_kept_seq, summary=self._summary, model=self._model_name
        )

    def _summary_text(self, focus: str) -> str:
        lines = ["What the person asked earlier in this chat:"]
        shown = self._asked[-30:]
        if len(self._asked) > len(shown):
            lines.append(f"- ({len(self._asked) - len(shown)} earlier questions)")
        lines.extend(f"- {q}" for q in shown)
        if focus.strip():
            lines.append(f"Kept in focus, as asked: {focus.strip()}")
        return "\n".join(lines)


async def _chunks(
    text: str, size: int, delay: float, *, thinking: bool
) -> AsyncIterator[TextDelta | ThinkingDelta]:
    step = max(1, size)
    for i in range(0, len(text), step):
        # Sleeping even for 0 seconds gives the loop (and a Stop click) a chance between chunks.
        await asyncio.sleep(max(0.0, delay))
        piece = text[i : i + step]
        yield ThinkingDelta(text=piece) if thinking else TextDelta(text=piece)


# --- the demo chat ----------------------------------------------------------------------------

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class DemoChat:
    """A long chat to seed ``conch --mock`` with; ``first_kept`` indexes ``messages``."""

    messages: tuple[tuple[Role, str], ...]
    first_kept: int
    summary: str
    model: str = "Mock model"
    seeds: tuple[tuple[int, str], ...] = field(default=())


_DEMO: tuple[tuple[str, str], ...] = (
    (
        "Hi! I'm helping start a community garden on the empty lot behind the library. "
        "Where do we even begin?",
        "A good start is to split it into four questions:\n\n"
        "1. **Who** is in — a core group of 4–6 people is plenty.\n"
        "2. **Where** exactly — who owns the lot, and will they agree in writing?\n"
        "3. **What** you grow — raised beds, shared plots, or both.\n"
        "4. **Money** — a small budget for soil, wood and water.\n\n"
        "Which of these do you already know?",
    ),
    (
        "The city owns the lot. We're six people so far.",
        "Six is a great core. With a city-owned lot, ask the parks department about a "
        "*licence to use* — many cities have a standard one-page form for community gardens.",
    ),
    (
        "What should the licence cover?",
        "Usually:\n\n- how long you may use the lot (one to three years, renewable)\n"
        "- who is liable if someone gets hurt\n- water access and who pays for it\n"
        "- what happens to your beds if the city needs the land back",
    ),
    (
        "We'd like raised beds. How many fit on 20 × 30 metres?",
        "With 1.2 m × 3 m beds and 1 m paths you get rows of 2.2 m by 4 m cells:\n\n"
        "| | count |\n|---|---|\n| rows (30 m / 4 m) | 7 |\n| beds per row (20 m / 2.2 m) | 9 |\n"
        "| **total** | **63** |\n\nLeave one row for a shed, compost and a bench: **54 beds**.",
    ),
    (
        "54 beds sounds like a lot. Let's start with 24.",
        "Sensible. 24 beds still leaves room to grow — literally.",
    ),
    (
        "How much wood do 24 beds need?",
        "Each 1.2 × 3 m bed, 30 cm high, needs two boards of 3 m and two of 1.2 m per 15 cm "
        "of height, so:\n\n```\nper bed:  4 × 3 m + 4 × 1.2 m = 16.8 m of board\n"
        "24 beds:  24 × 16.8 m       = 403.2 m\n```\n\nBuy about **420 m** to allow for cuts.",
    ),
    (
        "Untreated larch or treated pine?",
        "Untreated larch: it lasts 8–10 years without chemicals that could reach the "
        "vegetables. It costs more, but you only build once.",
    ),
    (
        "And soil?",
        "Each bed holds 1.2 × 3 × 0.3 = **1.08 m³**, so about 26 m³ for 24 beds. "
        "Ask for a topsoil and compost mix, 70/30.",
    ),
    (
        "Can you estimate a budget?",
        "Roughly:\n\n| Item | Cost |\n|---|---|\n| Larch boards, 420 m | €2,100 |\n"
        "| Soil mix, 26 m³ | €1,300 |\n| Screws and brackets | €150 |\n"
        "| Water butts, 4 | €240 |\n| Tools | €300 |\n| **Total** | **€4,090** |",
    ),
    (
        "That's more than we have. We have €2,500.",
        "Then build 12 beds now and 12 next spring, "
        "or ask a timber yard for offcuts — larch offcuts are often half price.",
    ),
    (
        "Let's do 12 now. Who should get a bed?",
        "A simple, fair rule:\n\n1. One bed per household.\n2. Two beds kept for the library's "
        "children's club.\n3. A waiting list, first come first served.\n4. A bed left unused "
        "for six weeks goes to the next on the list.",
    ),
    (
        "Good. Write that as a short sign?",
        "**Garden beds — how it works**\n\n"
        "One bed per household · two for the children's club · waiting list by date · "
        "a bed left alone for six weeks passes on. Questions? Ask Marta.",
    ),
    (
        "Marta is our coordinator, yes. Also: water. There's a tap on the library wall.",
        "Then ask the library to put a separate meter on that tap, so the garden pays its own "
        "water and nobody argues about the bill.",
    ),
    (
        "How much water will 12 beds use in summer?",
        "About 5 litres per m² on a hot day: 12 beds × 3.6 m² × 5 l ≈ **216 litres a day**. "
        "Four 200-litre butts on the shed roof cover a few dry days.",
    ),
    (
        "Can you make a watering rota for six people?",
        "| Day | Who |\n|---|---|\n| Mon | Marta |\n| Tue | Jonas |\n| Wed | Aisha |\n"
        "| Thu | Pieter |\n| Fri | Lena |\n| Sat | Tom |\n| Sun | whoever harvests |",
    ),
    ("Tom can't do Saturdays.", "Swap Tom and Lena: Lena takes Saturday, Tom Friday."),
    (
        "I want a little script that tells people by e-mail whose day it is.",
        "Here is a small Python script for a daily cron job:\n\n```python\nimport datetime\n"
        'import smtplib\nfrom email.message import EmailMessage\n\nROTA = {0: "Marta", 1: '
        '"Jonas", 2: "Aisha", 3: "Pieter", 4: "Tom", 5: "Lena"}\n\n'
        "def main() -> None:\n    who = ROTA.get(datetime.date.today().weekday())\n"
        "    if who is None:\n        return\n    msg = EmailMessage()\n"
        '    msg["Subject"] = f"Watering today: {who}"\n    msg["To"] = '
        '"garden@example.org"\n    msg.set_content(f"Today it\'s {who}\'s turn. Thank you!")\n'
        '    with smtplib.SMTP("localhost") as smtp:\n        smtp.send_message(msg)\n\n'
        'if __name__ == "__main__":\n    main()\n```',
    ),
    (
        "Where do I run that?",
        "Any always-on computer works; a Raspberry Pi in the library "
        "office is plenty. Run it daily at 7:00 with `crontab -e`:\n\n"
        "```\n0 7 * * * python3 /home/pi/rota.py\n```",
    ),
    (
        "What should we plant first?",
        "For a first season, easy wins:\n\n- radishes and lettuce "
        "(fast, forgiving)\n- courgettes (one plant feeds a family)\n- runner beans on a trellis\n"
        "- herbs: chives, parsley, mint *in a pot*",
    ),
    ("Why mint in a pot?", "Mint spreads by runners and takes over a bed within a season."),
    (
        "Compost: where?",
        "In the corner furthest from the library windows, in three bays: "
        "one filling, one resting, one ready.",
    ),
    (
        "Can kids help with compost?",
        "Yes — sorting greens and browns is a good job for them. "
        "Keep a laminated card by the bays: *greens = kitchen scraps, browns = leaves and card*.",
    ),
    (
        "We got the licence! Three years.",
        "Congratulations! 🎉 Three years is long enough to "
        "build properly. Put the signing date in your shared calendar with a renewal reminder "
        "six months before it ends.",
    ),
    (
        "The timber yard offered offcuts at 40% off.",
        "Then 420 m of larch costs about €1,260 "
        "instead of €2,100 — that brings back all 24 beds within your €2,500 if you buy the soil "
        "in two loads.",
    ),
    (
        "Let's do all 24 then!",
        "Great. Order the soil for 12 beds now and 12 in four weeks, "
        "so it doesn't sit on the pavement.",
    ),
    (
        "Build day plan?",
        "1. 9:00 coffee and safety talk\n2. 9:30 mark beds with string\n"
        "3. 10:00 two teams build frames\n4. 13:00 lunch\n5. 14:00 fill beds\n6. 17:00 photos",
    ),
    (
        "How many people do we need on build day?",
        "Twelve is comfortable: two teams of four building, four people barrowing soil.",
    ),
    (
        "Should we insure the build day?",
        "Check whether the city's licence covers volunteers; "
        "if not, a one-day event policy usually costs €50–100.",
    ),
    (
        "Marta asks if we can have a bench.",
        "Yes — reuse two offcut boards on two stacked-brick "
        "legs. It costs almost nothing and everyone will use it.",
    ),
    (
        "Can you summarise where we are? Marta wants to send an update to the group.",
        "**Garden update**\n\n- Licence signed: three years.\n"
        "- 24 larch beds, offcuts at 40% off.\n"
        "- Soil in two loads, four weeks apart.\n- Water from the library tap, own meter.\n"
        "- Watering rota with e-mail reminders.\n- Build day: 12 volunteers.",
    ),
    (
        "Thanks. What about slugs?",
        "Beer traps, a copper strip on bed edges, and watering in the "
        "morning rather than the evening, so the soil is dry when slugs come out.",
    ),
    (
        "Are beer traps cruel?",
        "They drown the slugs. If that bothers people, hand-picking at "
        "dusk and moving them to the compost corner works too — it's just slower.",
    ),
    (
        "Let's go with copper and hand-picking.",
        "Good choice. Copper tape is about €1 per metre; "
        "24 beds need roughly 400 m, so buy it for the most affected beds first.",
    ),
    (
        "Which beds are usually worst?",
        "The ones near long grass or walls, where slugs hide by "
        "day. Mow a 1 m strip around the garden edge.",
    ),
    (
        "What should the children's club grow?",
        "Things that are quick and surprising: "
        "sunflowers, radishes, cherry tomatoes and a pumpkin to race.",
    ),
    (
        "A pumpkin race?",
        "Each child gets a seedling in May and the heaviest pumpkin on 31 October "
        "wins. Weigh them on the library's parcel scale.",
    ),
    ("Haha, the librarian will love that.", "Invite her to be the judge."),
    (
        "Can you draft the build day invitation?",
        "**Build our garden — Saturday 14 May**\n\n"
        "Bring gloves and good shoes; we bring coffee, tools and lunch. "
        "9:00 behind the library. Reply to Marta so we know how many sandwiches to make.",
    ),
    (
        "Should I add a sign-up form?",
        "A simple shared sheet with name, phone and *can lift heavy things: yes/no* is enough.",
    ),
    (
        "Last thing: what do we do in winter?",
        "Sow green manure (phacelia or winter rye) in "
        "empty beds in September, cover the compost, and hold one planning meeting in January.",
    ),
)

_DEMO_FIRST_KEPT_TURN = 30  # the demo's model remembers word for word from this turn on


def demo_chat() -> DemoChat:
    """A 40-turn demo chat (lists, tables, code) with a fold before turn 31."""
    messages: list[tuple[Role, str]] = []
    for question, answer in _DEMO:
        messages.append(("user", question))
        messages.append(("assistant", answer))
    first_kept = 2 * _DEMO_FIRST_KEPT_TURN
    asked = [_first_line(q) for q, _ in _DEMO[:_DEMO_FIRST_KEPT_TURN]]
    summary = "\n".join(
        [
            "The person is starting a community garden on a city-owned lot behind the library, "
            "with a core group of six (Marta coordinates).",
            "Decided: 24 raised beds of untreated larch (offcuts at 40% off), soil in two loads, "
            "water from the library tap with its own meter, a watering rota with e-mail "
            "reminders (a Python cron script), compost in three bays, a bench from offcuts.",
            "Facts: budget €2,500; licence signed for three years; build day needs about 12 "
            "volunteers.",
            "Still open: slugs, what the children's club grows, the build day invitation.",
            "",
            "What the person asked:",
            *(f"- {q}" for q in asked),
        ]
    )
    seeds = tuple((i, text) for i, (role, text) in enumerate(messages) if role == "user")
    return DemoChat(
        messages=tuple(messages),
        first_kept=first_kept,
        summary=summary,
        seeds=tuple(s for s in seeds if s[0] >= first_kept),
    )


def demo_engine(*, fold_every: int = 6, keep_turns: int = 3, delay: float = 0.02) -> MockEngine:
    """A ``MockEngine`` that already holds the demo chat's kept turns and summary.

    It assumes the chat log gives each demo message its index in ``demo_chat().messages`` as
    its ``seq``; the first new turn should then use ``len(messages)``.
    """
    demo = demo_chat()
    return MockEngine(
        fold_every=fold_every,
        keep_turns=keep_turns,
        delay=delay,
        seed=demo.seeds,
        summary=demo.summary,
    )
