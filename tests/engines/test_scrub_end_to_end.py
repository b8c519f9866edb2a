"""A secret said in a chat reaches no kept memory, no stored summary and no exported summary.

The chat runs through the real Conversation and chat log; learning is the real QuietLearning
with a careless model that hands back as memories every line it was given; the fold's summary
comes from the real ModelSummariser over a model that repeats what it read, and from a script
that copies the person's words (a summariser with no scrubbing of its own). Every secret of the
corpus kinds the trust review found is said, one per turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from app.conversation import Conversation
from app.export import to_data, to_markdown
from app.learning import QuietLearning
from app.memories import MemoryBook
from app.settings import SettingsStore
from app.store import ChatStore
from bench.scrub import survivors
from engines.base import Done, Event, Message, ModelInfo, TextDelta
from engines.context.summarise import ModelSummariser
from engines.mock import CompactBefore, MockEngine, Reply
from engines.providers.base import ChatRequest
from engines.scrub import MARKER
from tests.engines.test_scrub_corpus import REVIEWED, corpus

MODEL = ModelInfo(provider="mock", id="demo", label="Demo model", context=16_384, local=True)
PLAIN = "I'm Sam and I coordinate a community garden in Leeds."


def said() -> list[tuple[str, str]]:
    """(what the person says, the secret in it): the review's shapes and one of each corpus kind."""
    out = list(REVIEWED)
    seen = set()
    for entry in corpus()["secrets"]:
        if entry["kind"] not in seen and "\n" not in entry["text"]:
            seen.add(entry["kind"])
            out.append((entry["text"], entry["secret"]))
    return out


def leaks(text: str) -> list[str]:
    """The secrets (in pieces) of ``said()`` that ``text`` still holds."""
    found = []
    for sentence, secret in said():
        pieces = survivors(sentence, secret, text)
        if pieces:
            found.append(f"{secret!r}: {pieces[:3]}")
    return found


class ParrotLearner:
    """The learning model: every line it is given comes back as a memory, secrets and all."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def __call__(self, prompt: str, text: str, *, model_key: str = "") -> str | None:
        self.read.append(text)
        lines = [line.removeprefix("Person: ").strip() for line in text.splitlines()]
        return json.dumps([line for line in lines if line])


class ParrotAdapter:
    """A provider whose model answers a summary request with the chat it was sent."""

    name = "openai"
    label = "Parrot"
    local = False

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def list_models(self) -> list[ModelInfo]:
        return []

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        text = "\n".join(m.text for m in request.messages)
        self.sent.append(request.system + text)
        piece = re.search(r"<next-part-of-the-chat>\n(.*?)\n</next-part", text, re.DOTALL)
        lines = (piece.group(1) if piece else text).splitlines()
        told = [f"- Said {line.split(':', 1)[-1].strip()}" for line in lines if "Noted" not in line]
        yield TextDelta(text="Decided or done:\n" + "\n".join(told))
        yield Done()


async def _chat_with_secrets(data_dir: Path) -> tuple[ChatStore, MemoryBook, str, Conversation]:
    store = ChatStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    settings = SettingsStore.in_dir(data_dir)
    turns = [PLAIN, *(sentence for sentence, _ in said())]
    careless_summary = "\n".join(turns)  # a summariser that copies the person's words
    script: list[Any] = [Reply("Noted.", chunk_delay=0) for _ in turns]
    script += [CompactBefore(first_kept_seq=2 * len(turns), summary=careless_summary)]
    script += [Reply("You're welcome.", chunk_delay=0)]
    learner = QuietLearning(store, book, settings, ParrotLearner())
    chat = store.create_chat(title="Garden", model_key="mock/demo")
    conv = Conversation(
        chat.id,
        store=store,
        engine=MockEngine(script, fold_every=0, delay=0),
        model=MODEL,
        learner=learner,
    )
    for text in [*turns, "Thanks!"]:
        [e async for e in conv.turn(text)]
    await conv.aclose()  # waits for the learning the fold started
    return store, book, chat.id, conv


async def test_a_secret_said_in_a_chat_reaches_no_memory_summary_or_export(
    data_dir: Path,
) -> None:
    store, book, chat_id, _conv = await _chat_with_secrets(data_dir)
    said_texts = [m.text for m in store.messages(chat_id) if m.role == "user"]
    assert said_texts[1] == REVIEWED[0][0]  # the chat log keeps the person's own words

    memories = [m.text for m in book.list()]
    assert any("Leeds" in m for m in memories)  # learning ran and kept the plain fact
    assert leaks("\n".join(memories)) == []
    assert leaks(book.path.read_bytes().decode("utf-8", "replace")) == []

    fold = store.latest_compaction(chat_id)
    assert fold is not None and "Leeds" in fold.summary and MARKER in fold.summary
    assert leaks(fold.summary) == []

    data = to_data(store, chat_id)
    assert data["summaries"] and leaks(json.dumps(data["summaries"], ensure_ascii=False)) == []
    markdown = to_markdown(store, chat_id)
    summary_part = markdown.split("*Earlier messages are summarised")[1].split("\n---\n")[0]
    assert "Leeds" in summary_part and leaks(summary_part) == []


async def test_the_model_summariser_sends_and_keeps_no_secret() -> None:
    pairs = said()
    folded = [Message(role="user", text=PLAIN)]
    for sentence, _ in pairs:
        folded += [Message(role="user", text=sentence), Message(role="assistant", text="Noted.")]
    adapter = ParrotAdapter()
    result = await ModelSummariser({"openai": adapter}).summarise(
        folded, "", model=ModelInfo(provider="openai", id="gpt-4.1", context=128_000)
    )
    assert adapter.sent and leaks("\n".join(adapter.sent)) == []
    assert result.text is not None and "Leeds" in result.text
    assert leaks(result.text) == []


def test_a_summary_stored_before_a_rule_existed_is_scrubbed_on_export(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(title="Garden", model_key="mock/demo")
    for text, _ in REVIEWED:
        store.append_message(chat.id, "user", text)
        store.append_message(chat.id, "assistant", "Noted.")
    store.append_message(chat.id, "user", "And the beds?")
    old = "The person said:\n" + "\n".join(text for text, _ in REVIEWED)
    store.add_compaction(chat.id, 2 * len(REVIEWED), old, "demo")

    data = json.loads(json.dumps(to_data(store, chat.id)))
    summaries = json.dumps(data["summaries"], ensure_ascii=False)
    markdown = to_markdown(store, chat.id).split("*Earlier messages are summarised")[1]
    for text, secret in REVIEWED:
        assert survivors(text, secret, summaries) == [], secret
        assert survivors(text, secret, markdown.split("\n---\n")[0]) == [], secret
    assert "The person said:" in summaries
    # The messages are the person's own words and go out as they are.
    assert data["messages"][0]["text"] == REVIEWED[0][0]
