"""``conch --mock``: the demo's models, its long chat and its scripted answers.

Everything the demo needs lives here and in ``resources/demo/``, so the composition root
(app/services.py) only chooses it: ``prepare`` seeds the demo chat and hands back the demo's
provider, its engine factory and its learning answer. The chat's words are a resource file, not
code: ``resources/demo/community_garden.json`` (its turns, the summary of the folded start,
the memories that fold kept).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from app.memories import MemoryBook
from app.settings import SettingsStore
from app.store import Chat, ChatStore
from engines.base import (
    Approver,
    Attachment,
    Done,
    Event,
    ModelInfo,
    NextStep,
    ProblemKind,
    TextDelta,
    TurnInput,
)
from engines.mock import MockEngine, Refuse, echo_reply, first_line
from engines.providers.base import ChatRequest
from engines.resources import resources_dir
from engines.window import PICTURE_TOKENS, estimate_tokens

if TYPE_CHECKING:
    from app.services import AppServices

DEMO_FILE = "community_garden.json"

MOCK_MODELS = (
    ModelInfo(provider="mock", id="mock-model", label="Mock model", context=32_768, local=True),
    ModelInfo(provider="mock", id="mock-small", label="Mock model (8K)", context=8_192, local=True),
    ModelInfo(provider="mock", id="mock-large", label="Mock model (128K)", context=131_072),
)

TOO_LONG_CUE = "too long"

# --- the demo chat ----------------------------------------------------------------------------

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class DemoChat:
    """The long chat ``conch --mock`` starts with; ``first_kept`` indexes ``messages``."""

    title: str
    messages: tuple[tuple[Role, str], ...]
    first_kept: int
    summary: str
    memories: tuple[str, ...] = ()
    seeds: tuple[tuple[int, str], ...] = field(default=())


@functools.cache
def demo_chat() -> DemoChat:
    """The demo chat from its resource file, with a fold before its first kept turn."""
    raw = json.loads((resources_dir() / "demo" / DEMO_FILE).read_text(encoding="utf-8"))
    turns: list[tuple[str, str]] = [(t["person"], t["assistant"]) for t in raw["turns"]]
    kept_turn = int(raw["first_kept_turn"])
    messages: list[tuple[Role, str]] = []
    for question, answer in turns:
        messages.append(("user", question))
        messages.append(("assistant", answer))
    first_kept = 2 * kept_turn
    # The folded questions are listed the way the mock engine lists what it folds itself.
    asked = [first_line(q) for q, _ in turns[:kept_turn]]
    summary = "\n".join([*raw["summary"], "", "What the person asked:", *(f"- {q}" for q in asked)])
    seeds = tuple(
        (i, text) for i, (role, text) in enumerate(messages) if role == "user" and i >= first_kept
    )
    return DemoChat(
        title=str(raw["title"]),
        messages=tuple(messages),
        first_kept=first_kept,
        summary=summary,
        memories=tuple(raw["memories"]),
        seeds=seeds,
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


def seed_demo(store: ChatStore, memories: MemoryBook) -> Chat:
    """Write the demo chat into the chat log: folded once, with a learning run that kept
    memories."""
    demo = demo_chat()
    model_key = MOCK_MODELS[0].key
    chat = store.create_chat(title=demo.title, model_key=model_key)
    for role, text in demo.messages:
        store.append_message(chat.id, role, text, model_key=model_key)
    store.add_compaction(chat.id, demo.first_kept, demo.summary, MOCK_MODELS[0].name)
    memories.add_run(
        chat.id,
        demo.memories,
        seq_from=0,
        seq_to=demo.first_kept - 1,
        waiting=False,
        source="fold",
    )
    store.set_read_until(chat.id, demo.first_kept - 1)
    # The fold just read the chat: the daily tidy-up is a day away, not at the first start.
    memories.last_tidy = time.time()
    seeded = store.get_chat(chat.id)
    assert seeded is not None
    return seeded


# --- the demo's models and answers ------------------------------------------------------------


def mock_cue(turn: TurnInput) -> Refuse | None:
    """In the demo, a message that says "too long" shows the too-long card.

    Its one next step is the mock model that reads clearly more, as the real engine offers.
    """
    if TOO_LONG_CUE not in turn.text.lower():
        return None
    bigger = sorted(
        (m for m in MOCK_MODELS if m.context >= 1.5 * turn.model.context), key=lambda m: m.context
    )
    if not bigger:
        return Refuse(ProblemKind.TOO_LONG)  # the mock then offers a new chat with the text
    target = bigger[0]
    step = NextStep(
        kind="switch-model", label=f"Switch to {target.name}", model=target, text=turn.text
    )
    return Refuse(ProblemKind.TOO_LONG, next_step=step)


class MockProvider:
    """A provider that lists the mock models and answers with the mock's echo."""

    name = "mock"
    label = "Mock"
    local = True

    def __init__(self) -> None:
        # Like a server on this computer: the model it holds is the one that answered last.
        # A demo model needs no loading, so the one the demo's chats start on is held from the
        # start and the header says "loaded" before a message is sent.
        self.loaded = MOCK_MODELS[0].key

    async def list_models(self) -> list[ModelInfo]:
        return [
            m.model_copy(update={"loaded": True}) if m.local and m.key == self.loaded else m
            for m in MOCK_MODELS
        ]

    def answered(self, model_key: str) -> None:
        """A mock model answered: it is the one loaded now."""
        self.loaded = model_key

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        last = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
        yield TextDelta(text=echo_reply(last, 0))
        yield Done()

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


def mock_engine(
    services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
) -> MockEngine:
    """The demo's engine factory: a ``MockEngine`` that knows the chat's kept turns and its
    latest summary, so it keeps folding where the chat log left off."""
    store = services.store
    fold = store.latest_compaction(chat.id)
    start = fold.first_kept_seq if fold is not None else 0
    # Each kept turn as the engine held it live: the person's words, the files and pictures
    # counted apart, and the answer shown; else the meter reads less after a restart.
    rows = store.query(
        "SELECT seq, role, text, pictures, attachments FROM messages WHERE chat_id = ? "
        "AND seq >= ? AND role IN ('user', 'assistant') AND deleted_at IS NULL AND shelved = 0 "
        "ORDER BY seq",
        (chat.id, start),
    )
    seed: list[tuple[int, str, str, int]] = []
    for seq, role, text, pictures, raw in rows:
        if role == "user":
            attached = sum(estimate_tokens(a.text) for a in _attached(raw))
            seed.append((seq, text, "", attached + PICTURE_TOKENS * _count(pictures)))
        elif seed:  # the turn's answer (the latest, after a retry)
            seed[-1] = (*seed[-1][:2], text, seed[-1][3])
    return MockEngine(seed=seed, summary=fold.summary if fold is not None else "", cue=mock_cue)


def _count(raw: str) -> int:
    """How many pictures a chat log row's JSON list names."""
    try:
        listed = json.loads(raw) if raw else []
    except ValueError:
        return 0
    return len(listed) if isinstance(listed, list) else 0


def _attached(raw: str) -> list[Attachment]:
    """A chat log row's attached files (counted in the mock's meter, as the real engine does)."""
    if not raw or raw == "[]":
        return []
    try:
        return [Attachment.model_validate(a) for a in json.loads(raw)]
    except (ValueError, TypeError):
        return []


_SENTENCE_END = re.compile(r"(?<=[.!])\s+")

# A sentence about the person starts with one of these ("We have €2,500."); "Let's go with
# copper" or "Haha, the librarian will love that" say nothing to remember.
_ABOUT_THEM = frozenset({"I", "I'm", "I've", "I'd", "My", "We", "We're", "We've", "We'd", "Our"})


async def mock_ask_model(prompt: str, text: str, *, model_key: str = "") -> str | None:
    """The mock's learning answer: what the person said about themselves (statements in the
    first person, not questions), as a JSON list."""
    facts: list[str] = []
    for block in text.split("\n\n"):
        line = " ".join(block.removeprefix("Person: ").split())
        for sentence in _SENTENCE_END.split(line):
            s = sentence.strip()
            words = s.split()
            if (
                len(words) >= 4
                and words[0].rstrip(",") in _ABOUT_THEM
                and not s.endswith("?")
                and len(s) <= 200
            ):
                facts.append(f"The person said: {s}")
    await asyncio.sleep(0)
    return json.dumps(facts[-8:])


# --- wiring -----------------------------------------------------------------------------------


def prepare(
    store: ChatStore, memories: MemoryBook, settings: SettingsStore, *, seed: bool
) -> MockProvider:
    """Set a data dir up for the demo: with ``seed``, an empty chat log gets the demo chat
    (opened first). Returns the demo's provider."""
    if seed and not store.list_chats():
        chat = seed_demo(store, memories)
        if not settings.settings.last_chat_id:
            settings.update(last_chat_id=chat.id)
    return MockProvider()
