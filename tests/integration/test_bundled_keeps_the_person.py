"""On the real bundled model, what the person says about themselves outlives two folds: their
name, their town and a decision are in the summary the divider opens to, and learning keeps at
least one of them as a memory that waits for their OK (the chat holds a pasted table, so
everything learned from it waits).

Short on purpose: a 2,048-token window, answers capped at a few dozen tokens, and the chat
stops at its second fold.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.conversation import Conversation
from app.health import HealthLog
from app.learning import QuietLearning
from app.memories import MemoryBook
from app.services import history_messages
from app.settings import SettingsStore
from app.store import ChatStore
from bench._garden import prose
from bench._person import asker
from engines.base import Compacted, Problem
from engines.context.facts import SECTIONS
from engines.context.session import ApiSession
from engines.context.summarise import ModelSummariser
from engines.local.bundled import BundledRuntime, bundled_adapter
from engines.local.gate import gated
from engines.providers.base import ProviderAdapter
from engines.resources import read_prompt
from tests.integration.conftest import Recorder, bundled_model, needs_bundled, started_runtime

pytestmark = [pytest.mark.bundled, pytest.mark.slow, needs_bundled]

WINDOW = 2_048
MAX_TURNS = 14  # the chat folds twice well before this; a guard, not a wait
HANG_GUARD = 1_500.0
NAME, TOWN, DECISION = "Alina Kowalczyk", "Gdańsk", "Thursdays"
FIRST = (
    f"My name is {NAME} and I live in {TOWN}. "
    f"We decided to move the piano lessons to {DECISION}. Can you help me plan the week?"
)


# Pasted from a spreadsheet (the composer marks it pasted): the chat read something the person
# did not type, so whatever learning keeps waits for their OK.
READINGS = (
    "Our meter readings:\n\ndate,kwh\n"
    + "\n".join(
        f"2026-{1 + n // 3:02d}-{1 + 9 * (n % 3):02d},{140 + 11 * n % 37}" for n in range(30)
    )
    + "\n\nDo they look high?"
)


@pytest.fixture(scope="module")
def runtime_2k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledRuntime]:
    yield from started_runtime(tmp_path_factory.mktemp("bundled-2k"), WINDOW)


@pytest.mark.timeout(HANG_GUARD)
async def test_the_persons_name_town_and_decision_outlive_two_folds(
    runtime_2k: BundledRuntime, tmp_path: Path
) -> None:
    model = bundled_model(WINDOW)
    recorder = Recorder(gated(bundled_adapter(runtime_2k)))
    adapters: dict[str, ProviderAdapter] = {recorder.name: recorder}
    store = ChatStore.in_dir(tmp_path)
    health = HealthLog.in_dir(tmp_path)
    book = MemoryBook.in_dir(tmp_path)
    settings = SettingsStore.in_dir(tmp_path)
    chat = store.create_chat(model_key=model.key)
    session = ApiSession(
        chat_id=chat.id,
        data_dir=tmp_path,
        adapters=adapters,
        summariser=ModelSummariser(adapters),
        history=lambda: history_messages(store.messages(chat.id)),
    )
    learner = QuietLearning(store, book, settings, asker(recorder, model), health=health)
    conversation = Conversation(
        chat.id,
        store=store,
        engine=session,
        model=model,
        learner=learner,
        health=health,
        system_prompt=lambda _model: read_prompt("system_lean.txt"),
    )
    rng = random.Random(25)
    folds: list[Compacted] = []
    try:
        for i in range(MAX_TURNS):
            text = FIRST if i == 0 else READINGS if i == 1 else prose(rng, 220)
            events = [e async for e in conversation.turn(text, pasted=i == 1)]
            assert not [e for e in events if isinstance(e, Problem)], f"turn {i} failed"
            folds.extend(e for e in events if isinstance(e, Compacted))
            if len(folds) >= 2:
                break
            await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
        # A learning request gives way to the person's turn; words it did not get to stay
        # unread, and the next look (here, as the app's catch-up would) reads them. It waits
        # for a learning run under way (one per chat at a time).
        await learner.review(chat.id, folds[-1].first_kept_seq if folds else 0)
    finally:
        await conversation.aclose()  # lets a learning run under way finish
        memories = book.list()
        notes = [n.text for n in health.notes(topic="learning")]
        store.close()
        health.close()
        book.close()

    assert len(folds) >= 2, f"only {len(folds)} fold(s) in {MAX_TURNS} turns"
    summary = folds[-1].summary
    for part in SECTIONS:
        assert part in summary, summary
    for fact in (NAME, TOWN, DECISION):
        assert fact in summary, summary
    waiting = [m.text for m in memories if m.status == "waiting"]
    assert any(fact in m for m in waiting for fact in (NAME, TOWN, DECISION)), (
        [(m.text, m.status) for m in memories],
        notes,
    )
