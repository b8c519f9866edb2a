"""A message cut to fit the model is never cut silently, and switching sends it whole.

The chat log keeps what the person wrote; the model's transcript keeps the cut copy it was
sent. The turn says how much went ("Conch sent the first and last N characters …") and offers
the ready model that reads all of it; switching to it sends the message from the chat log.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.conversation import Conversation, ConvEvent
from app.health import HealthLog
from app.services import history_messages
from app.store import ChatStore
from bench._scripted import Answer, Raise, ScriptedAdapter
from engines.base import Done, ModelInfo, Problem, ProblemKind, Shortened
from engines.context.session import ApiSession
from engines.context.transcript import load_transcript
from engines.providers.base import ProviderError

SMALL = ModelInfo(provider="openai", id="gpt-small", label="GPT Small", context=8_192)
WIDE = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=32_768)
# About 17,600 tokens: far more than an 8K model reads, well within a 32K one.
PASTE = (
    "HEAD OF THE REPORT\n"
    + "The committee met to discuss the garden. " * 1_000
    + "\nMIDDLE OF THE REPORT\n"
    + "Everyone agreed the rota must change. " * 1_000
    + "\nTAIL OF THE REPORT"
)


class Directory:
    def __init__(self, models: Sequence[ModelInfo]) -> None:
        self.models = list(models)

    def ready_models(self) -> Sequence[ModelInfo]:
        return self.models


@pytest.fixture
def health(data_dir: Path) -> Iterator[HealthLog]:
    h = HealthLog.in_dir(data_dir)
    yield h
    h.close()


def chat_on(
    data_dir: Path, store: ChatStore, health: HealthLog, adapter: ScriptedAdapter
) -> Conversation:
    chat = store.create_chat(model_key=SMALL.key)
    session = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        directory=Directory([SMALL, WIDE]),
        history=lambda: history_messages(store.messages(chat.id)),
    )
    return Conversation(chat.id, store=store, engine=session, model=SMALL, health=health)


def cut_of(events: list[ConvEvent]) -> Shortened:
    (cut,) = [e for e in events if isinstance(e, Shortened)]
    return cut


async def test_a_cut_message_is_said_and_switching_sends_it_whole(
    data_dir: Path, store: ChatStore, health: HealthLog
) -> None:
    adapter = ScriptedAdapter(default=Answer("I read the start and the end."))
    conv = chat_on(data_dir, store, health, adapter)
    events = [e async for e in conv.turn(PASTE)]

    assert isinstance(events[-2], Done)
    cut = cut_of(events)
    assert cut.total_chars == len(PASTE) and cut.sent_chars < len(PASTE) / 2
    assert cut.text.startswith(f"Conch sent the first and last {cut.sent_chars:,} characters")
    assert "GPT Wide can read all of it" in cut.text
    assert cut.next_step is not None and cut.next_step.kind == "switch-model"
    assert cut.next_step.model == WIDE
    # What went: the head and the tail; the chat log keeps every word, the transcript the cut.
    sent = adapter.requests[-1].messages[-1].text
    assert sent.startswith("HEAD OF THE REPORT") and sent.endswith("TAIL OF THE REPORT")
    assert "MIDDLE OF THE REPORT" not in sent
    assert store.message(conv.chat_id, cut.seq).text == PASTE  # type: ignore[union-attr]
    kept = load_transcript(data_dir, conv.chat_id).transcript.messages[0].text
    assert "characters left out" in kept and len(kept) < len(PASTE) / 2
    # Health hears of it too.
    assert any("first and last" in n.text for n in health.notes())

    # The person takes the offer: the message goes again, whole, from the chat log.
    conv.switch_model(cut.next_step.model)
    again = [e async for e in conv.retry(cut.seq)]
    assert isinstance(again[-2], Done)
    assert not [e for e in again if isinstance(e, Shortened)]
    request = adapter.requests[-1]
    assert request.model == WIDE.id
    assert request.messages[-1].text == PASTE


async def test_a_cut_message_that_failed_is_sent_whole_after_switching(
    data_dir: Path, store: ChatStore, health: HealthLog
) -> None:
    adapter = ScriptedAdapter(
        steps=[Raise(ProviderError(ProblemKind.SERVER_ERROR, "the server had a bad moment"))]
    )
    conv = chat_on(data_dir, store, health, adapter)
    events = [e async for e in conv.turn(PASTE)]
    cut = cut_of(events)
    assert [e for e in events if isinstance(e, Problem)]
    assert "MIDDLE OF THE REPORT" not in adapter.requests[-1].messages[-1].text

    # "Try again" after switching: the unanswered message is sent whole, not the cut copy.
    conv.switch_model(WIDE)
    again = [e async for e in conv.retry(cut.seq)]
    assert isinstance(again[-2], Done)
    assert adapter.requests[-1].model == WIDE.id
    assert adapter.requests[-1].messages[-1].text == PASTE


async def test_a_message_cut_by_less_than_half_is_sent_without_a_word(
    data_dir: Path, store: ChatStore, health: HealthLog
) -> None:
    adapter = ScriptedAdapter()
    conv = chat_on(data_dir, store, health, adapter)
    text = "A long note. " * 1_900  # about 6,200 tokens: a little over the 8K budget
    events = [e async for e in conv.turn(text)]
    sent = adapter.requests[-1].messages[-1].text
    assert "characters left out" in sent and len(sent) > len(text) / 2
    assert not [e for e in events if isinstance(e, Shortened)]
