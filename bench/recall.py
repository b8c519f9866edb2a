"""Recall after folding: do the facts a person planted early in a long chat still reach the model?

A scripted chat of ``--turns`` turns (56 by default) about a community garden: the first ten
turns plant 24 facts (names, amounts, dates, files, paths, links, an e-mail address, order and
version numbers, code names, a phone number, decisions), the rest is ordinary talk of about
230 tokens a message. It runs through the real ``ApiSession`` and ``ModelSummariser`` on an
8K window, so the transcript folds several times; each fold's summary is folded into the next.

At the end, a fact counts as reachable when its words are still, verbatim (ignoring case and
spacing), in the final request the model got: the summary block plus the kept turns. Beside
it, in the same run, plain "drop the oldest": the newest whole turns of the same chat (the
person's words and the model's real answers) that fit the same budget, with no summary.

    python -m bench.recall [--mock] [--person] [--turns N] [--window TOKENS]
                           [--answer-tokens N] [--paste-every N] [--no-ask] [--keep FILE]
    python -m bench.recall [--person] --reask FILE

By default the chat model is the bundled SmolLM2-135M (llama.cpp's server, started in a temp
dir and stopped at the end); its answers are capped at 48 tokens to keep the run short, its
summaries are not. ``--mock`` uses a scripted model instead, still through the real session
and summariser: it answers in one line and writes a vague summary that names no fact, so
whatever survives is the fact keeper's work. Goal: at least 95% reachable.

``--person`` runs it the way a person chats: learning on (the app's ``QuietLearning`` and
``Conversation``, memories in the system prompt as the app puts them there), a pasted text of
a few kilobytes (notes, a table, a log) every ``--paste-every`` turns, and full-length answers
(``--answer-tokens`` caps them; 0, the default with ``--person``, leaves them whole). Between
turns the bench waits for the summary being written ahead, as a person reading gives it time.

With ``--person`` the person also says who they are in the first turns (``PERSON_PLANTED``:
a name, a town, a wife, the rent, a job, two decisions), and the run prints one JSON line each
for drop-the-oldest, "the model's summary only" (the summary's own lines, without what Conch
kept) and Conch (last, with every figure above): the person's facts in the summary the divider
shows, learned as memories, answered; junk memories (from a paste, or holding no planted fact);
memories learned per fold.

With the bundled model, after the chat the model is asked about each planted fact, once with
what Conch would send next (summary, kept turns, memories) and once with drop-the-oldest's
turns, and a fact counts as answered when the answer contains it. A 135M model answers few
such questions even with the fact in front of it: the share is what it is, beside the share
reachable and beside drop-the-oldest.

``--control`` runs no chat: it asks the bundled model each question with the answer in front of
it three ways (the fact's own sentence; all 24 sentences framed as an earlier summary; the bare
"Kept word for word" list of the 24 facts) and prints the share answered each way. It tells the
model's limit apart from what Conch sends: SmolLM2-135M answered 11/24, 12/24 and 2/24 at a
4,096 window (a bare name does not say who the person is), which is why the fact keeper keeps
sentences. With ``--person`` it asks about the person's own facts (``PERSON_PLANTED``) instead:
the control ``--person``'s "answered" is held to.

``--keep FILE`` saves what those questions need (the last request, the transcript and summary
the session ended with, the system prompt); ``--reask FILE`` then runs no chat: it asks the
bundled model again after that chat, in several forms side by side (``request_forms``: what
Conch sends, the summary in front only, the summary alone, half the kept turns, the kept lines
again before the question, ...), so ways of arranging a request are compared on one chat in a
few minutes rather than one 40-minute chat each.

Prints a table, then one JSON object on its last line: folds, the share reachable, the share
"drop the oldest" keeps, the shares answered, the seconds spent summarising per fold (mean
and max), what was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.conversation import Conversation  # noqa: E402
from app.health import HealthLog  # noqa: E402
from app.learning import QuietLearning, parse_memories  # noqa: E402
from app.memories import MemoryBook  # noqa: E402
from app.services import build_system_prompt, history_messages  # noqa: E402
from app.settings import SettingsStore  # noqa: E402
from app.store import ChatStore  # noqa: E402
from bench._bundled import UnavailableError, running  # noqa: E402
from bench._common import StandIn  # noqa: E402
from bench._garden import CLAUSES as _CLAUSES  # noqa: E402
from bench._garden import OPENERS as _OPENERS  # noqa: E402
from bench._garden import QUESTIONS as _QUESTIONS  # noqa: E402
from bench._garden import SUBJECTS as _SUBJECTS  # noqa: E402
from bench._garden import VERBS as _VERBS  # noqa: E402
from bench._person import PASTES, asker  # noqa: E402
from engines.base import (  # noqa: E402
    Compacted,
    Done,
    Event,
    Healed,
    Message,
    ModelInfo,
    Problem,
    TextDelta,
    TurnInput,
)
from engines.context.calibrate import count_request  # noqa: E402
from engines.context.facts import split_kept  # noqa: E402
from engines.context.protocols import Summariser, SummaryResult  # noqa: E402
from engines.context.sending import arrange  # noqa: E402
from engines.context.session import SUMMARY_CLOSE, SUMMARY_OPEN, ApiSession  # noqa: E402
from engines.context.state import summary_block  # noqa: E402
from engines.context.summarise import ModelSummariser  # noqa: E402
from engines.local import bundled  # noqa: E402
from engines.local.gate import gated, in_background  # noqa: E402
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError  # noqa: E402
from engines.resources import read_prompt  # noqa: E402
from engines.window import (  # noqa: E402
    LEAN_WINDOW,
    budget,
    estimate_message,
    estimate_tokens,
)

TURNS = 56
WINDOW = 8_192
SEED = 20_261_004
CHAT_ID = "recall-bench"
MESSAGE_TOKENS = 230  # estimated tokens of each person message
ANSWER_TOKENS = 48  # the bundled model's answers are capped here (its summaries are not)
LEARN_TOKENS = 256  # a learning answer (a short JSON list), capped to keep the run bounded
ASK_TOKENS = 48  # an answer to one question about a planted fact
PASTE_EVERY = 4
GOAL = 0.95


@dataclass(frozen=True)
class Fact:
    kind: str
    key: str  # the words that must still reach the model, verbatim
    sentence: str  # how the person said it


# Planted over the first ten turns; nothing later repeats them.
PLANTED: tuple[tuple[Fact, ...], ...] = (
    (
        Fact(
            "name",
            "Priya Raman",
            "Priya Raman chairs the garden committee and signs off on every spend.",
        ),
        Fact(
            "name",
            "Tomasz Wójcik",
            "Our treasurer is Tomasz Wójcik; he keeps the accounts in a shared sheet.",
        ),
    ),
    (
        Fact("money", "€1,250", "The grant gives us €1,250 for the whole season."),
        Fact(
            "number",
            "GR-2026-0417",
            "The grant reference is GR-2026-0417, and it has to go on every receipt.",
        ),
    ),
    (
        Fact("date", "2026-04-18", "The first planting day is 2026-04-18."),
        Fact("date", "09:30", "Volunteers meet at 09:30 by the north gate."),
    ),
    (
        Fact("file", "garden_layout_v3.xlsx", "The bed layout is in garden_layout_v3.xlsx."),
        Fact(
            "file",
            "~/garden/rota/spring.csv",
            "The watering rota lives at ~/garden/rota/spring.csv on the club laptop.",
        ),
    ),
    (
        Fact(
            "link",
            "https://forms.example.org/larch-garden/2026",
            "Sign-ups go through https://forms.example.org/larch-garden/2026 this year.",
        ),
        Fact(
            "link",
            "volunteers@larch-garden.example",
            "Questions go to volunteers@larch-garden.example.",
        ),
    ),
    (
        Fact(
            "decision",
            "Hillside Supplies",
            "We decided to buy the topsoil from Hillside Supplies, not the garden centre.",
        ),
        Fact("money", "£480", "The topsoil order comes to £480 including delivery."),
    ),
    (
        Fact("number", "#58213", "The delivery is order #58213."),
        Fact("number", "12 kg", "We also ordered 12 kg of seed potatoes."),
        Fact("number", "17.5%", "Tools may take at most 17.5% of the budget."),
    ),
    (
        Fact(
            "number",
            "v2.4.1",
            "The watering controller runs firmware v2.4.1; we agreed not to update it mid-season.",
        ),
        Fact(
            "code",
            "LARCH_SENSOR_TOKEN",
            "The soil sensors read their key from LARCH_SENSOR_TOKEN on the computer in the shed.",
        ),
    ),
    (
        Fact("number", "192.168.1.44", "That computer is at 192.168.1.44 on the shed network."),
        Fact(
            "decision",
            "Bank of Scotland",
            "We decided the garden account stays with the Bank of Scotland.",
        ),
    ),
    (
        Fact("date", "4 December", "The end-of-season party is on 4 December."),
        Fact("name", "Marta Lindqvist", "Marta Lindqvist looks after the gate."),
        Fact("number", "07700 900123", "Call her on 07700 900123 if the gate code changes."),
        Fact(
            "decision",
            "no pesticides",
            "And we decided: no pesticides anywhere in the garden, not even on the roses.",
        ),
        Fact(
            "code",
            "water_schedule.next_run()",
            "If the pumps stop, check water_schedule.next_run() in the controller script.",
        ),
    ),
)
FACTS: tuple[Fact, ...] = tuple(f for turn in PLANTED for f in turn)

# With --person, the person also says who they are, over the first turns: facts about
# themselves that a summary and the Memory page should keep.
PERSON_PLANTED: tuple[tuple[Fact, ...], ...] = (
    (
        Fact("self", "Alina Kowalczyk", "My name is Alina Kowalczyk."),
        Fact("self", "Gdańsk", "I live in Gdańsk, near the old shipyard."),
    ),
    (Fact("self", "Ewa", "My wife Ewa keeps the bees on the allotment."),),
    (Fact("self", "3,100 zloty", "Our rent is 3,100 zloty, due on the 10th of each month."),),
    (Fact("self", "nurse", "I work as a nurse at the children's hospital."),),
    (Fact("decision", "Thursdays", "We decided to move the piano lessons to Thursdays."),),
    (Fact("decision", "repaint the shed", "I will repaint the shed in May."),),
)
PERSON_FACTS: tuple[Fact, ...] = tuple(f for turn in PERSON_PLANTED for f in turn)

# What the model is asked about each fact at the end (keyed by the fact's words).
QUESTIONS: dict[str, str] = {
    "Priya Raman": "Who chairs the garden committee?",
    "Tomasz Wójcik": "Who is our treasurer?",
    "€1,250": "How much money does the grant give us for the season?",
    "GR-2026-0417": "What is the grant reference?",
    "2026-04-18": "What is the date of the first planting day?",
    "09:30": "At what time do the volunteers meet?",
    "garden_layout_v3.xlsx": "Which file has the bed layout?",
    "~/garden/rota/spring.csv": "Where does the watering rota live on the club laptop?",
    "https://forms.example.org/larch-garden/2026": "Where do sign-ups go this year?",
    "volunteers@larch-garden.example": "Which e-mail address do questions go to?",
    "Hillside Supplies": "Where did we decide to buy the topsoil?",
    "£480": "How much does the topsoil order come to?",
    "#58213": "What is the order number of the delivery?",
    "12 kg": "How many kilograms of seed potatoes did we order?",
    "17.5%": "What share of the budget may tools take at most?",
    "v2.4.1": "Which firmware version does the watering controller run?",
    "LARCH_SENSOR_TOKEN": "Which variable do the soil sensors read their key from?",
    "192.168.1.44": "What is the address of the computer in the shed?",
    "Bank of Scotland": "Which bank does the garden account stay with?",
    "4 December": "When is the end-of-season party?",
    "Marta Lindqvist": "Who looks after the gate?",
    "07700 900123": "Which number do I call if the gate code changes?",
    "no pesticides": "What did we decide about pesticides?",
    "water_schedule.next_run()": "What should I check in the controller script if the pumps stop?",
}
QUESTIONS.update(
    {
        "Alina Kowalczyk": "What is my name?",
        "Gdańsk": "Which city do I live in?",
        "Ewa": "What is my wife's name?",
        "3,100 zloty": "How much is our rent?",
        "nurse": "What is my job?",
        "Thursdays": "Which day did we move the piano lessons to?",
        "repaint the shed": "What will I do in May?",
    }
)
assert set(QUESTIONS) == {f.key for f in (*FACTS, *PERSON_FACTS)}


def chat_script(
    turns: int,
    seed: int = SEED,
    tokens: int = MESSAGE_TOKENS,
    paste_every: int = 0,
    person: bool = False,
) -> list[str]:
    """The person's messages: facts in the first ten, ordinary talk of ``tokens`` each, and
    with ``paste_every`` a pasted text (notes, a table, a log) every that many turns after;
    with ``person``, what the person says about themselves first (``PERSON_PLANTED``)."""
    rng = random.Random(seed)
    messages: list[str] = []
    pasted = 0
    for i in range(turns):
        parts = [rng.choice(_OPENERS)]
        after = i - len(PLANTED)
        if paste_every and after >= 0 and after % paste_every == paste_every - 1:
            paste = PASTES[pasted % len(PASTES)]
            pasted += 1
            messages.append(
                f"{parts[0]} I pasted this from our files:\n\n{paste}\n\n{rng.choice(_QUESTIONS)}"
            )
            continue
        if person and i < len(PERSON_PLANTED):
            parts.extend(f.sentence for f in PERSON_PLANTED[i])
        if i < len(PLANTED):
            parts.extend(f.sentence for f in PLANTED[i])
        size = sum(len(p) + 1 for p in parts)
        while size < tokens * 4 - 40:
            sentence = (
                f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} {rng.choice(_CLAUSES)}."
            )
            parts.append(sentence)
            size += len(sentence) + 1
        parts.append(rng.choice(_QUESTIONS))
        messages.append(" ".join(parts))
    return messages


# --- matching -------------------------------------------------------------------------------


def _plain(text: str) -> str:
    return " ".join(text.casefold().split())


def reachable(facts: Sequence[Fact], text: str) -> list[Fact]:
    hay = _plain(text)
    return [f for f in facts if _plain(f.key) in hay]


def _core(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.casefold())


def answers(fact: Fact, answer: str) -> bool:
    """Whether ``answer`` gives the fact: its letters and digits in order ("€1,250" is answered
    by "1,250 euros"; "no pesticides" is not by "avoid pesticides")."""
    return _core(fact.key) in _core(answer)


def drop_oldest(log: Sequence[tuple[Message, Message]], room: int) -> list[Message]:
    """The newest whole turns that fit ``room`` tokens: the old policy, with no summary."""
    kept: list[Message] = []
    used = 0
    for person, answer in reversed(log):
        cost = estimate_message(person) + estimate_message(answer)
        if kept and used + cost > room:
            break
        kept[:0] = [person, answer]
        used += cost
    return kept


def split_request(request: ChatRequest) -> tuple[str, str]:
    """(the summary block's text, the kept turns' text) of one request."""
    summary = ""
    parts: list[str] = []
    for i, m in enumerate(request.messages):
        text = m.text
        if i == 0 and text.startswith(SUMMARY_OPEN):
            end = text.find(SUMMARY_CLOSE)
            if end >= 0:
                summary = text[len(SUMMARY_OPEN) : end]
                text = text[end + len(SUMMARY_CLOSE) :]
        parts.append(text)
    return summary, "\n".join(parts)


# --- the models -----------------------------------------------------------------------------


def _is_summary_request(request: ChatRequest) -> bool:
    return bool(request.messages) and request.messages[0].text.startswith("<summary-so-far>")


class Recording:
    """Passes requests on, keeps the last chat request, and caps the chat model's answers."""

    def __init__(self, inner: ProviderAdapter, answer_tokens: int | None) -> None:
        self.inner = inner
        self.name = inner.name
        self.label = inner.label
        self.local = inner.local
        self.answer_tokens = answer_tokens
        self.last_chat: ChatRequest | None = None
        self.chat_requests = 0
        self.summary_requests = 0
        self.learn_requests = 0
        self._learn_prompt = read_prompt("learn.txt")

    async def count_tokens(self, request: ChatRequest) -> int | None:
        return await count_request(self.inner, request)

    async def list_models(self) -> list[ModelInfo]:
        return await self.inner.list_models()

    def cheap_models(self) -> tuple[str, ...]:
        return self.inner.cheap_models()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if _is_summary_request(request):
            self.summary_requests += 1
        elif request.system == self._learn_prompt:
            self.learn_requests += 1
            cap = min(request.max_output_tokens, LEARN_TOKENS)
            request = request.model_copy(update={"max_output_tokens": cap})
        elif in_background():
            pass  # a prompt evaluated ahead (a fold's, or the chat's own), not a turn
        else:
            self.chat_requests += 1
            self.last_chat = request
            if self.answer_tokens is not None:
                cap = min(request.max_output_tokens, self.answer_tokens)
                request = request.model_copy(update={"max_output_tokens": cap})
        async for event in self.inner.stream(request):
            yield event


class PoorModel(StandIn):
    """A scripted local model: one-line answers and a vague summary that keeps no fact."""

    name = "local"
    label = "Scripted"
    local = True

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        await asyncio.sleep(0)
        if _is_summary_request(request):
            text = (
                "What the person wants: to get their community garden organised for the "
                "season.\nDecided or done: they shared plans, people and dates, and the "
                "assistant acknowledged them.\nStill open: the next steps."
            )
        else:
            text = "Noted, thanks. What would you like to look at next?"
        yield TextDelta(text=text)
        yield Done()


@dataclass
class TimedSummariser:
    """Times each fold's summary (the session calls it once per fold)."""

    inner: Summariser
    seconds: list[float] = field(default_factory=list)
    results: list[SummaryResult] = field(default_factory=list)

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        start = time.perf_counter()
        result = await self.inner.summarise(folded, previous, model=model, focus=focus)
        self.seconds.append(time.perf_counter() - start)
        self.results.append(result)
        return result


# --- the run --------------------------------------------------------------------------------


@dataclass
class Outcome:
    folds: list[Compacted] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    heals: int = 0
    log: list[tuple[Message, Message]] = field(default_factory=list)
    memories: list[str] = field(default_factory=list)  # learned (with --person)
    waiting: list[str] = field(default_factory=list)  # of those, the ones waiting for an OK
    model_memories: list[str] = field(default_factory=list)  # what the model itself wrote
    learned_by_turn: list[int] = field(default_factory=list)  # memories after each turn
    fold_turns: list[int] = field(default_factory=list)  # the turn each fold came in
    system: str = ""  # the system prompt the next turn would get (memories included)
    asked: dict[str, list[str]] = field(default_factory=dict)  # policy -> facts answered
    answers: dict[str, dict[str, str]] = field(default_factory=dict)  # policy -> key -> answer
    transcript: list[Message] | None = None  # the session's messages after the chat
    summary: str = ""  # and its summary


@dataclass(frozen=True)
class Options:
    mock: bool = False
    person: bool = False
    turns: int = TURNS
    window: int = WINDOW
    answer_tokens: int | None = ANSWER_TOKENS
    paste_every: int = 0
    ask: bool = True
    keep: Path | None = None  # where to save what the questions need (``--keep``)


async def run_person_chat(
    adapter: Recording,
    timed: TimedSummariser,
    model: ModelInfo,
    script: Sequence[str],
    data_dir: Path,
) -> Outcome:
    """The chat as the app runs it: chat log, learning, memories in the system prompt."""
    store = ChatStore.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    settings = SettingsStore.in_dir(data_dir)
    chat = store.create_chat(model_key=model.key)
    adapters: dict[str, ProviderAdapter] = {adapter.name: adapter}
    session = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters=adapters,
        summariser=timed,
        history=lambda: history_messages(store.messages(chat.id)),
    )
    out = Outcome()
    plain_ask = asker(adapter, model)

    async def ask(prompt: str, text: str, *, model_key: str = "") -> str | None:
        answer = await plain_ask(prompt, text, model_key=model_key)
        out.model_memories.extend(parse_memories(answer) or [])
        return answer

    learner = QuietLearning(store, book, settings, ask, health=health)
    conversation = Conversation(
        chat.id,
        store=store,
        engine=session,
        model=model,
        learner=learner,
        health=health,
        system_prompt=lambda m: build_system_prompt(m, book),
    )
    try:
        for i, text in enumerate(script):
            answer: list[str] = []
            async for event in conversation.turn(text):
                if isinstance(event, TextDelta):
                    answer.append(event.text)
                elif isinstance(event, Compacted):
                    out.folds.append(event)
                elif isinstance(event, Healed):
                    out.heals += 1
                elif isinstance(event, Problem):
                    kind = event.problem.kind.value
                    out.problems.append(f"turn {i}: {kind} {event.problem.detail}"[:300])
            out.log.append(
                (Message(role="user", text=text), Message(role="assistant", text="".join(answer)))
            )
            print(
                f"turn {i + 1:3d}/{len(script)}  folds {len(out.folds)}  learned "
                f"{len(book.list())}  summarising {sum(timed.seconds):6.1f} s",
                file=sys.stderr,
                flush=True,
            )
            # The person reads the answer and types the next message meanwhile.
            await session.wait_prepared()
            out.learned_by_turn.append(len(book.list()))
            out.fold_turns.extend(i for _ in range(len(out.folds) - len(out.fold_turns)))
    finally:
        await conversation.aclose()  # lets a learning run under way finish
        out.transcript, out.summary = list(session.messages), session.summary
        out.memories = [m.text for m in book.list()]
        out.waiting = [m.text for m in book.list() if m.status == "waiting"]
        out.system = build_system_prompt(model, book)
        store.close()
        health.close()
        book.close()
    return out


async def ask_facts(
    adapter: ProviderAdapter,
    model: ModelInfo,
    system: str,
    form: Callable[[str], list[Message]],
    *,
    only: Sequence[Fact] = FACTS,
) -> dict[str, str]:
    """Each planted fact's question, sent as ``form`` makes it into messages; the model's
    answer to each."""
    out: dict[str, str] = {}
    for fact in only:
        request = ChatRequest(
            model=model.id,
            system=system,
            messages=tuple(form(f"{QUESTIONS[fact.key]} Answer in a few words.")),
            max_output_tokens=ASK_TOKENS,
            window=model.context,
        )
        parts: list[str] = []
        try:
            async for event in adapter.stream(request):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Done):
                    break
        except ProviderError as exc:
            parts = [f"(failed: {exc})"]
        out[fact.key] = "".join(parts).strip()
    return out


async def ask_both(
    adapter: Recording, model: ModelInfo, outcome: Outcome, facts: Sequence[Fact] = FACTS
) -> None:
    """Ask about every fact with Conch's next request, with drop-the-oldest's turns, and (for
    ``--person``) with the model's summary only."""
    final = adapter.last_chat
    if final is None:
        return
    turns, summary = chat_state(final, outcome)
    system = outcome.system or final.system
    base = read_prompt("system_lean.txt" if model.context <= LEAN_WINDOW else "system.txt")
    room = budget(model.context, estimate_tokens(base)) - 64  # room for the question
    oldest = drop_oldest(outcome.log, room)
    policies: dict[str, tuple[str, Callable[[str], list[Message]]]] = {
        "conch": (system, request_forms(turns, summary, model.context)["conch"]),
        "drop_oldest": (base, lambda q: [*oldest, Message(role="user", text=q)]),
    }
    if facts is not FACTS:
        body, _kept = split_kept(summary)
        only = request_forms(turns, body, model.context)["summary_front"]
        policies["model_summary_only"] = (base, only)
    for name, (sys_prompt, form) in policies.items():
        print(f"asking about {len(facts)} facts ({name})", file=sys.stderr, flush=True)
        replies = await ask_facts(adapter.inner, model, sys_prompt, form, only=facts)
        outcome.answers[name] = replies
        outcome.asked[name] = [f.key for f in facts if answers(f, replies[f.key])]


# --- the forms a request may take (``--reask``) -------------------------------------------


def _strip_block(messages: Sequence[Message]) -> tuple[str, list[Message]]:
    """(the summary block at the front of ``messages``, the messages without it)."""
    out = list(messages)
    if out and out[0].text.startswith(SUMMARY_OPEN):
        text = out[0].text
        end = text.find(SUMMARY_CLOSE)
        if end >= 0:
            cut = end + len(SUMMARY_CLOSE)
            out[0] = out[0].model_copy(update={"text": text[cut:]})
            return text[:cut], out
    return "", out


def _newest_within(messages: Sequence[Message], tokens: int) -> list[Message]:
    """The newest whole turns of ``messages`` within ``tokens`` (at least the newest)."""
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    keep = starts[-1] if starts else 0
    for i in reversed(starts):
        if sum(estimate_message(m) for m in messages[i:]) > tokens:
            break
        keep = i
    return list(messages[keep:])


_FIRST_PERSON = re.compile(r"\b(?:I|my|My|we|We|our|Our|me)\b")


def request_forms(
    turns: Sequence[Message], summary: str, window: int
) -> dict[str, Callable[[str], list[Message]]]:
    """Ways to send a question after a chat whose transcript is ``turns`` (the last answer
    included) with ``summary``: each turns the question into the messages sent.
    ``conch``: what Conch sends next (``arrange``); ``summary_front``: the summary in front of
    the kept turns and nothing else (Conch before the kept lines were sent again);
    ``summary_only``: the summary alone; ``kept_half``: the summary with the newest half of
    the kept turns (a fold keeping a quarter of the budget, not half); ``kept_lines_last``:
    the summary in front, and its kept lines again just before the question;
    ``summary_last``: the kept turns, then the summary just before the question;
    ``own_lines_last``: the kept lines in the person's first person again just before the
    question (``own_plain_last``: the same, unframed, as plain sentences). (The kept lines
    just after the question did worse than nothing: 0/7 and 1/7, the model carried on with
    its earlier answers.)"""
    turns = list(turns)
    block = summary_block(summary)
    _body, kept = split_kept(summary)
    lines = summary_block("\n".join(f"- {x}" for x in kept)) if kept else ""
    own = [x for x in kept if _FIRST_PERSON.search(x)]
    own_lines = summary_block("\n".join(f"- {x}" for x in own)) if own else ""
    own_plain = " ".join(x if x.endswith((".", "!", "?")) else x + "." for x in own)
    half = _newest_within(turns, sum(estimate_message(m) for m in turns) // 2)

    def ask(
        before: list[Message], *, front: bool = True, prefix: str = ""
    ) -> Callable[[str], list[Message]]:
        """``before`` with the summary in front of its first person message (``front``; in
        front of the question when it has none), and ``prefix`` just before the question."""

        def form(question: str) -> list[Message]:
            out = list(before)
            first = next((k for k, m in enumerate(out) if m.role == "user"), None)
            lead = prefix
            if front and first is not None:
                out[first] = out[first].model_copy(update={"text": block + out[first].text})
            elif front:
                lead = block + prefix
            return [*out, Message(role="user", text=lead + question)]

        return form

    def conch(question: str) -> list[Message]:
        return arrange([*turns, Message(role="user", text=question)], summary, window)

    return {
        "conch": conch,
        "summary_front": ask(turns),
        "summary_only": ask([]),
        "kept_half": ask(half),
        "kept_lines_last": ask(turns, prefix=lines),
        "summary_last": ask(turns, front=False, prefix=block),
        "own_lines_last": ask(turns, prefix=own_lines),
        "own_plain_last": ask(turns, prefix=own_plain + "\n\n" if own_plain else ""),
    }


def chat_state(final: ChatRequest, outcome: Outcome) -> tuple[list[Message], str]:
    """(the transcript after the chat, the last answer included; its summary): as the session
    left them, or (a chat saved before those were) taken back out of the last request."""
    if outcome.transcript is not None:
        return list(outcome.transcript), outcome.summary
    last = outcome.log[-1][1] if outcome.log else None
    history = list(final.messages)
    if last is not None and last.text and history and history[-1].role == "user":
        history.append(last)  # (a prompt evaluated ahead holds the answer already)
    block, turns = _strip_block(history)
    summary = block[len(SUMMARY_OPEN) : -len(SUMMARY_CLOSE)] if block else ""
    return turns, summary


async def run_chat(
    adapter: Recording, timed: TimedSummariser, model: ModelInfo, script: Sequence[str]
) -> Outcome:
    system = read_prompt("system_lean.txt" if model.context <= LEAN_WINDOW else "system.txt")
    session = ApiSession(
        chat_id=CHAT_ID, data_dir=None, adapters={adapter.name: adapter}, summariser=timed
    )
    out = Outcome()
    for i, text in enumerate(script):
        turn = TurnInput(
            chat_id=CHAT_ID,
            seq=2 * i,
            text=text,
            model=model,
            system=system,
            lean=model.context <= LEAN_WINDOW,
        )
        answer: list[str] = []
        async for event in session.turn(turn):
            if isinstance(event, TextDelta):
                answer.append(event.text)
            elif isinstance(event, Compacted):
                out.folds.append(event)
            elif isinstance(event, Healed):
                out.heals += 1
            elif isinstance(event, Problem):
                out.problems.append(f"turn {i}: {event.problem.kind.value} {event.problem.detail}")
        out.log.append(
            (Message(role="user", text=text), Message(role="assistant", text="".join(answer)))
        )
        print(
            f"turn {i + 1:3d}/{len(script)}  folds {len(out.folds)}  "
            f"summarising {sum(timed.seconds):6.1f} s",
            file=sys.stderr,
            flush=True,
        )
    out.transcript, out.summary = list(session.messages), session.summary
    await session.aclose()
    return out


def save_chat(path: Path, adapter: Recording, outcome: Outcome) -> None:
    """What the questions at the end need (the last chat request, the chat's turns, the
    system prompt the next turn gets), so ``--reask`` can ask again without the chat."""
    final = adapter.last_chat
    data = {
        "request": final.model_dump(mode="json") if final is not None else None,
        "log": [[p.model_dump(mode="json"), a.model_dump(mode="json")] for p, a in outcome.log],
        "system": outcome.system,
        "memories": outcome.memories,
        "transcript": None
        if outcome.transcript is None
        else [m.model_dump(mode="json") for m in outcome.transcript],
        "summary": outcome.summary,
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def load_chat(path: Path) -> tuple[ChatRequest | None, Outcome]:
    """What ``save_chat`` wrote."""
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = data.get("request")
    final = ChatRequest.model_validate(raw) if raw is not None else None
    out = Outcome(
        log=[(Message.model_validate(p), Message.model_validate(a)) for p, a in data["log"]],
        system=str(data.get("system", "")),
        memories=list(data.get("memories", [])),
        transcript=None
        if data.get("transcript") is None
        else [Message.model_validate(m) for m in data["transcript"]],
        summary=str(data.get("summary", "")),
    )
    return final, out


def _share(n: int, total: int) -> float:
    return round(n / total, 4) if total else 0.0


def report(
    outcome: Outcome,
    adapter: Recording,
    timed: TimedSummariser,
    *,
    model_name: str,
    options: Options,
    seconds: float,
) -> dict[str, object]:
    window, turns = options.window, options.turns
    final = adapter.last_chat
    summary, kept = split_request(final) if final is not None else ("", "")
    memories = "\n".join(outcome.memories)
    found = reachable(FACTS, summary + "\n" + kept + "\n" + memories)
    in_kept = reachable(FACTS, kept)
    in_memories = reachable(FACTS, memories)
    system = read_prompt("system_lean.txt" if window <= LEAN_WINDOW else "system.txt")
    room = budget(window, estimate_tokens(system))
    baseline_messages = drop_oldest(outcome.log, room)
    baseline = reachable(FACTS, "\n".join(m.text for m in baseline_messages))
    by_kind: dict[str, str] = {}
    for kind in dict.fromkeys(f.kind for f in FACTS):
        of_kind = [f for f in FACTS if f.kind == kind]
        by_kind[kind] = f"{sum(f in found for f in of_kind)}/{len(of_kind)}"
    times = timed.seconds
    asked: dict[str, object] = {}
    for policy, right in outcome.asked.items():
        asked[f"{policy}_answered"] = len(right)
        asked[f"{policy}_answered_share"] = _share(len(right), len(FACTS))
        asked[f"{policy}_answered_facts"] = right
    figures: dict[str, object] = {
        "bench": "recall",
        "model": model_name,
        "mode": "person" if options.person else "plain",
        "window": window,
        "turns": turns,
        "answer_tokens": options.answer_tokens,
        "paste_every": options.paste_every,
        "planted": len(FACTS),
        "folds": len(outcome.folds),
        "summarised_folds": sum(1 for f in outcome.folds if f.summarised),
        "reachable": len(found),
        "reachable_share": _share(len(found), len(FACTS)),
        "goal": GOAL,
        "goal_met": len(found) >= GOAL * len(FACTS),
        "drop_oldest_share": _share(len(baseline), len(FACTS)),
        "drop_oldest_turns_kept": len(baseline_messages) // 2,
        "kept_turns_only_share": _share(len(in_kept), len(FACTS)),
        "memories_learned": len(outcome.memories),
        "in_memories_share": _share(len(in_memories), len(FACTS)),
        **asked,
        "answers": outcome.answers,
        "summarise_seconds_mean": round(statistics.fmean(times), 3) if times else None,
        "summarise_seconds_max": round(max(times), 3) if times else None,
        "summary_chars": len(summary),
        "final_summary": summary,
        "by_kind": by_kind,
        "lost": [f.key for f in FACTS if f not in found],
        "summary_failures": [r.problem for r in timed.results if r.text is None],
        "problems": outcome.problems,
        "heals": outcome.heals,
        "chat_requests": adapter.chat_requests,
        "summary_requests": adapter.summary_requests,
        "learn_requests": adapter.learn_requests,
        "seconds": round(seconds, 1),
    }
    if options.person:
        base = {
            "bench": "recall",
            "mode": "person",
            "model": model_name,
            "window": window,
            "turns": turns,
            "folds": len(outcome.folds),
        }
        figures["policies"] = person_lines(outcome, adapter, base)
    return figures


# Words only the pasted texts have: a memory holding one came from a paste.
PASTE_WORDS = ("Ines", "Jonas", "irrigation", "moisture", "Adeyemi", "Brandt", "holder")


def junk_memories(memories: Sequence[str]) -> list[str]:
    """The memories that came from a paste, or hold no planted fact (not about the person)."""
    planted = (*FACTS, *PERSON_FACTS)
    out: list[str] = []
    for memory in memories:
        from_paste = any(w.casefold() in memory.casefold() for w in PASTE_WORDS)
        if from_paste or not reachable(planted, memory):
            out.append(memory)
    return out


def per_fold(outcome: Outcome) -> list[int]:
    """Memories learned after each fold, until the next (or the end)."""
    counts, turns = outcome.learned_by_turn, outcome.fold_turns
    out: list[int] = []
    for k, turn in enumerate(turns):
        before = counts[turn - 1] if 0 < turn <= len(counts) else 0
        nxt = turns[k + 1] if k + 1 < len(turns) else None
        after = counts[nxt - 1] if nxt is not None and nxt > 0 else len(outcome.memories)
        out.append(after - before)
    return out


def person_lines(
    outcome: Outcome, adapter: Recording, base: dict[str, object]
) -> list[dict[str, object]]:
    """One line per policy (drop the oldest, the model's summary only, Conch): the person's
    planted facts in the summary the divider shows, learned as memories, answered; junk."""
    final = adapter.last_chat
    summary, _kept = split_request(final) if final is not None else ("", "")
    model_body, _lines = split_kept(summary)
    every = (*FACTS, *PERSON_FACTS)
    person = {f.key for f in PERSON_FACTS}
    learned_by = {
        "drop_oldest": [],
        "model_summary_only": list(dict.fromkeys(outcome.model_memories)),
        "conch": outcome.memories,
    }
    summary_of = {"drop_oldest": "", "model_summary_only": model_body, "conch": summary}
    out: list[dict[str, object]] = []
    for policy in ("drop_oldest", "model_summary_only", "conch"):
        text, memories = summary_of[policy], learned_by[policy]
        held = [f for f in PERSON_FACTS if any(reachable((f,), m) for m in memories)]
        answered = outcome.asked.get(policy)
        line: dict[str, object] = {
            **base,
            "policy": policy,
            "person_planted": len(PERSON_FACTS),
            "person_in_summary": len(reachable(PERSON_FACTS, text)),
            "person_in_summary_share": _share(
                len(reachable(PERSON_FACTS, text)), len(PERSON_FACTS)
            ),
            "person_learned": len(held),
            "person_learned_share": _share(len(held), len(PERSON_FACTS)),
            "memories": len(memories),
            "junk_memories": len(junk_memories(memories)),
            "junk": junk_memories(memories),
            "all_planted": len(every),
            "all_in_summary": len(reachable(every, text)),
        }
        if answered is not None:
            line["person_answered"] = sum(1 for k in answered if k in person)
            line["all_answered"] = len(answered)
        if policy == "conch":
            line["memories_waiting"] = len(outcome.waiting)
            line["memories_per_fold"] = per_fold(outcome)
        out.append(line)
    return out


async def run(options: Options) -> dict[str, object]:
    turns, window = options.turns, options.window
    script = chat_script(turns, paste_every=options.paste_every, person=options.person)
    started = time.monotonic()
    if options.mock:
        adapter = Recording(PoorModel(), answer_tokens=None)
        model = ModelInfo(provider="local", id="scripted", label="Scripted", context=window)
        timed = TimedSummariser(ModelSummariser({adapter.name: adapter}))
        if options.person:
            with tempfile.TemporaryDirectory(prefix="conch-recall-") as tmp:
                outcome = await run_person_chat(adapter, timed, model, script, Path(tmp))
        else:
            outcome = await run_chat(adapter, timed, model, script)
        if options.keep is not None:
            save_chat(options.keep, adapter, outcome)
        return report(
            outcome,
            adapter,
            timed,
            model_name="scripted (poor summaries)",
            options=options,
            seconds=time.monotonic() - started,
        )
    async with running(window) as runtime:
        inner = bundled.bundled_adapter(runtime)
        # The app puts a local server behind its gate (one request at a time, the
        # person's turn first); the plain run keeps the earlier wiring.
        adapter = Recording(
            gated(inner) if options.person else inner, answer_tokens=options.answer_tokens
        )
        model = ModelInfo(
            provider=adapter.name,
            id=bundled.MODEL_ID,
            label=bundled.MODEL_LABEL,
            context=window,
            local=True,
        )
        timed = TimedSummariser(ModelSummariser({adapter.name: adapter}))
        try:
            if options.person:
                with tempfile.TemporaryDirectory(prefix="conch-recall-") as tmp:
                    outcome = await run_person_chat(adapter, timed, model, script, Path(tmp))
            else:
                outcome = await run_chat(adapter, timed, model, script)
            if options.keep is not None:
                save_chat(options.keep, adapter, outcome)
            if options.ask:
                asked = (*FACTS, *PERSON_FACTS) if options.person else FACTS
                await ask_both(adapter, model, outcome, asked)
        finally:
            await adapter.aclose()
    return report(
        outcome,
        adapter,
        timed,
        model_name=f"bundled {bundled.MODEL_ID}",
        options=options,
        seconds=time.monotonic() - started,
    )


async def control(window: int, facts: Sequence[Fact] = FACTS) -> dict[str, object]:
    """The bundled model's answers with each of ``facts`` in front of it (see ``--control``)."""
    system = read_prompt("system_lean.txt" if window <= LEAN_WINDOW else "system.txt")
    sentences = " ".join(f.sentence for f in facts)
    listing = "Kept word for word:\n" + "\n".join(f"- {f.key}" for f in facts)
    ways: dict[str, list[str]] = {"own_sentence": [], "all_sentences": [], "bare_list": []}
    model = ModelInfo(provider="local", id=bundled.MODEL_ID, label="", context=window)
    async with running(window) as runtime:
        adapter = bundled.bundled_adapter(runtime)
        try:
            for fact in facts:
                before = {
                    "own_sentence": fact.sentence,
                    "all_sentences": SUMMARY_OPEN + sentences + SUMMARY_CLOSE,
                    "bare_list": SUMMARY_OPEN + listing + SUMMARY_CLOSE,
                }
                for way, text in before.items():
                    replies = await ask_facts_about(adapter, model, system, text, fact)
                    if answers(fact, replies):
                        ways[way].append(fact.key)
        finally:
            await adapter.aclose()
    return {
        "bench": "recall",
        "mode": "control",
        "model": f"bundled {bundled.MODEL_ID}",
        "facts": "person" if facts is PERSON_FACTS else "chat",
        "planted": len(facts),
        "answered": {way: len(keys) for way, keys in ways.items()},
        "answered_keys": ways,
    }


async def reask(path: Path, facts: Sequence[Fact], only: Sequence[str] = ()) -> dict[str, object]:
    """Ask about ``facts`` again after the chat ``--keep`` saved, in every form of
    ``request_forms``, side by side on one bundled model (see ``--reask``)."""
    final, outcome = load_chat(path)
    if final is None:
        return {"bench": "recall", "mode": "reask", "error": "the saved chat sent nothing"}
    window = final.window
    forms = request_forms(*chat_state(final, outcome), window)
    if only:
        forms = {name: form for name, form in forms.items() if name in only}
    system = outcome.system or final.system
    model = ModelInfo(provider="local", id=bundled.MODEL_ID, label="", context=window)
    right: dict[str, list[str]] = {name: [] for name in forms}
    replies: dict[str, dict[str, str]] = {name: {} for name in forms}
    sent: dict[str, int] = {}
    async with running(window) as runtime:
        adapter = bundled.bundled_adapter(runtime)
        try:
            # Form by form, fact by fact: the server's prompt cache serves each form as the
            # chat's would (the question last).
            for name, form in forms.items():
                print(f"asking about {len(facts)} facts ({name})", file=sys.stderr, flush=True)
                sent[name] = sum(estimate_message(m) for m in form("?"))
                for fact in facts:
                    got = await ask_facts(adapter, model, system, form, only=(fact,))
                    replies[name][fact.key] = got[fact.key]
                    if answers(fact, got[fact.key]):
                        right[name].append(fact.key)
        finally:
            await adapter.aclose()
    return {
        "bench": "recall",
        "mode": "reask",
        "model": f"bundled {bundled.MODEL_ID}",
        "window": window,
        "planted": len(facts),
        "answered": {name: len(keys) for name, keys in right.items()},
        "sent_tokens": sent,
        "answered_keys": right,
        "answers": replies,
    }


async def ask_facts_about(
    adapter: ProviderAdapter, model: ModelInfo, system: str, before: str, fact: Fact
) -> str:
    """The model's answer to ``fact``'s question with ``before`` in front of it."""
    replies = await ask_facts(
        adapter,
        model,
        system,
        lambda q: [Message(role="user", text=f"{before}\n\n{q}")],
        only=(fact,),
    )
    return replies[fact.key]


def print_table(figures: dict[str, object]) -> None:
    print(f"recall after {figures['folds']} folds, {figures['turns']} turns, {figures['model']}")
    print(
        f"  summary + kept turns : {figures['reachable']}/{figures['planted']} "
        f"({figures['reachable_share']:.0%})"
    )
    print(f"  drop the oldest      : {figures['drop_oldest_share']:.0%}")
    print(f"  kept turns alone     : {figures['kept_turns_only_share']:.0%}")
    if figures["mode"] == "person":
        print(
            f"  memories learned     : {figures['memories_learned']} "
            f"(holding {figures['in_memories_share']:.0%} of the facts)"
        )
    for policy in ("conch", "drop_oldest"):
        if f"{policy}_answered" in figures:
            print(
                f"  answered ({policy:<11}): {figures[f'{policy}_answered']}/"
                f"{figures['planted']} ({figures[f'{policy}_answered_share']:.0%})"
            )
    mean, most = figures["summarise_seconds_mean"], figures["summarise_seconds_max"]
    print(f"  summarising per fold : mean {mean} s, max {most} s")
    summary = figures.pop("final_summary", "")
    print("  the summary the model read last:")
    print("    " + (str(summary).replace("\n", "\n    ") or "(none)"))
    lost = figures["lost"]
    names = ", ".join(str(x) for x in lost) if isinstance(lost, list) else ""
    print(f"  lost                 : {names or 'nothing'}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__)
    parser.add_argument("--mock", action="store_true", help="a scripted model, not SmolLM2")
    parser.add_argument("--turns", type=int, default=TURNS, help=f"turns (default {TURNS})")
    parser.add_argument("--window", type=int, default=WINDOW, help="the model's window")
    parser.add_argument(
        "--person",
        action="store_true",
        help="learning on, pasted texts, full-length answers (as a person chats)",
    )
    parser.add_argument(
        "--answer-tokens",
        type=int,
        default=None,
        help=f"cap the chat model's answers (0: whole; default {ANSWER_TOKENS}, whole with "
        "--person)",
    )
    parser.add_argument(
        "--paste-every",
        type=int,
        default=None,
        help=f"a pasted text every N turns (default {PASTE_EVERY} with --person, else none)",
    )
    parser.add_argument(
        "--no-ask", action="store_true", help="do not ask the model about each fact at the end"
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="no chat: ask the bundled model each question with the fact in front of it "
        "(with --person, the person's own facts)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="save the last request and the chat's turns to this file (for --reask)",
    )
    parser.add_argument(
        "--reask",
        type=Path,
        default=None,
        help="no chat: ask again after the chat --keep saved, in several request forms "
        "(with --person, about the person's own facts)",
    )
    parser.add_argument(
        "--forms", default="", help="with --reask: only these forms (names, comma-separated)"
    )
    args = parser.parse_args(argv)
    if args.reask is not None:
        try:
            facts = PERSON_FACTS if args.person else FACTS
            forms = [x for x in args.forms.split(",") if x]
            result = asyncio.run(reask(args.reask, facts, forms))
        except UnavailableError as exc:
            print(json.dumps({"bench": "recall", "error": str(exc)}, ensure_ascii=False))
            raise SystemExit(2) from None
        print(json.dumps(result, ensure_ascii=False))
        return
    if args.control:
        try:
            result = asyncio.run(control(args.window, PERSON_FACTS if args.person else FACTS))
        except UnavailableError as exc:
            print(json.dumps({"bench": "recall", "error": str(exc)}, ensure_ascii=False))
            raise SystemExit(2) from None
        print(json.dumps(result, ensure_ascii=False))
        return
    if args.turns <= len(PLANTED):
        parser.error(f"--turns must be more than {len(PLANTED)} (the turns that plant facts)")
    if args.window < 2_048:
        parser.error("--window must be at least 2048")
    cap = args.answer_tokens
    if cap is None:
        cap = 0 if args.person else ANSWER_TOKENS
    paste_every = args.paste_every
    if paste_every is None:
        paste_every = PASTE_EVERY if args.person else 0
    if cap < 0 or paste_every < 0:
        parser.error("--answer-tokens and --paste-every take 0 or more")
    options = Options(
        mock=args.mock,
        person=args.person,
        turns=args.turns,
        window=args.window,
        answer_tokens=cap or None,
        paste_every=paste_every,
        ask=not args.no_ask and not args.mock,
        keep=args.keep,
    )
    try:
        figures = asyncio.run(run(options))
    except UnavailableError as exc:
        print(f"{exc} (or run with --mock)", file=sys.stderr)
        print(json.dumps({"bench": "recall", "error": str(exc)}, ensure_ascii=False))
        raise SystemExit(2) from None
    lines = figures.pop("policies", None)
    print_table(figures)
    if isinstance(lines, list):
        # Drop the oldest and the model's summary only first; Conch's line, with every figure
        # above, last (bench's one JSON object on its last line).
        for line in lines[:-1]:
            print(json.dumps(line, ensure_ascii=False))
        figures = {**figures, **lines[-1]}
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    main()
