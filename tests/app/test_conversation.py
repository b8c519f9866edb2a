"""Conversation end to end on the scripted mock engine, with a real SQLite chat log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.conversation import Conversation, MessageSaved
from app.store import ChatStore
from engines.base import (
    Attachment,
    Compacted,
    Done,
    ModelInfo,
    Problem,
    ProblemKind,
    TextDelta,
)
from engines.mock import CompactBefore, Fail, MockEngine, Refuse, Reply

MODEL = ModelInfo(provider="mock", id="demo", label="Demo model", context=16_384, local=True)


class RecordingLearner:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.release = asyncio.Event()

    async def review(self, chat_id: str, before_seq: int) -> Any:
        self.calls.append((chat_id, before_seq))
        await self.release.wait()
        return {"chat": chat_id, "before": before_seq}


class RecordingHealth:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []

    def add(self, topic: str, text: str, model: str = "", window: int | None = None) -> None:
        self.notes.append((topic, text))


def make(data_dir: Path, engine: MockEngine, **kw: Any) -> tuple[Conversation, ChatStore]:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    return Conversation(chat.id, store=store, engine=engine, model=MODEL, **kw), store


async def collect(conv: Conversation, text: str, **kw: Any) -> list[Any]:
    return [e async for e in conv.turn(text, **kw)]


async def test_a_turn_saves_the_question_and_the_streamed_answer(data_dir: Path) -> None:
    conv, store = make(data_dir, MockEngine([Reply("Lisbon in May is lovely.", chunk_delay=0)]))
    events = await collect(conv, "Where should I go in May?")
    assert events[0] == MessageSaved(0, "user")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Lisbon in May is lovely."
    assert any(isinstance(e, Done) for e in events)
    assert events[-1] == MessageSaved(1, "assistant")
    msgs = store.messages(conv.chat_id)
    assert [(m.role, m.text, m.partial) for m in msgs] == [
        ("user", "Where should I go in May?", False),
        ("assistant", "Lisbon in May is lovely.", False),
    ]
    chat = store.get_chat(conv.chat_id)
    assert chat is not None and chat.title == "Where should I go in May?"


async def test_a_failure_mid_stream_keeps_the_partial_answer_marked(data_dir: Path) -> None:
    conv, store = make(data_dir, MockEngine([Fail(after_chars=10, text="abcdefghijklmnop")]))
    events = await collect(conv, "hello")
    problems = [e.problem for e in events if isinstance(e, Problem)]
    assert problems and problems[0].kind is ProblemKind.BROKEN_STREAM
    answer = store.messages(conv.chat_id)[-1]
    assert answer.role == "assistant" and answer.partial
    assert answer.text and "abcdefghijklmnop".startswith(answer.text)
    assert answer.problem is not None and answer.problem.kind is ProblemKind.BROKEN_STREAM


async def test_stop_cancels_the_turn_and_keeps_what_arrived(data_dir: Path) -> None:
    long = "word " * 400
    conv, store = make(data_dir, MockEngine([Reply(long, chunk_delay=0.01, chunk_size=5)]))
    got: list[str] = []
    streaming = asyncio.Event()

    async def run() -> None:
        async for e in conv.turn("talk a lot"):
            if isinstance(e, TextDelta):
                got.append(e.text)
                if len(got) >= 3:
                    streaming.set()

    task = asyncio.create_task(run())
    await asyncio.wait_for(streaming.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    answer = store.messages(conv.chat_id)[-1]
    assert answer.role == "assistant" and answer.partial
    assert answer.problem is not None and answer.problem.kind is ProblemKind.CANCELLED
    assert answer.text.startswith("".join(got)) and len(answer.text) < len(long)


async def test_a_refusal_is_saved_as_a_problem_card_without_text(data_dir: Path) -> None:
    health = RecordingHealth()
    conv, store = make(data_dir, MockEngine([Refuse(ProblemKind.TOO_LONG)]), health=health)
    events = await collect(conv, "x" * 1000)
    assert any(isinstance(e, Problem) for e in events)
    answer = store.messages(conv.chat_id)[-1]
    assert answer.role == "assistant" and answer.text == "" and not answer.partial
    assert answer.problem is not None and answer.problem.kind is ProblemKind.TOO_LONG
    assert health.notes and health.notes[0][0] == "too-long"


async def test_a_fold_is_recorded_and_learning_runs_alongside(data_dir: Path) -> None:
    learner = RecordingLearner()
    runs: list[Any] = []
    engine = MockEngine(
        [Reply("one", chunk_delay=0), CompactBefore(first_kept_seq=2, summary="S"), Reply("two")],
        fold_every=0,
    )
    conv, store = make(data_dir, engine, learner=learner, on_learning=runs.append)
    await collect(conv, "first")
    events = await collect(conv, "second")
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted and compacted[0].first_kept_seq == 2
    # The turn finished while learning is still waiting: learning never blocks the chat.
    assert events[-1] == MessageSaved(3, "assistant")
    assert learner.calls == [(conv.chat_id, 2)]
    assert runs == []
    latest = store.latest_compaction(conv.chat_id)
    assert latest is not None and latest.first_kept_seq == 2 and latest.summary == "S"
    learner.release.set()
    await conv.aclose()
    assert runs == [{"chat": conv.chat_id, "before": 2}]


async def test_attachments_mark_the_chat_untrusted(data_dir: Path) -> None:
    conv, store = make(data_dir, MockEngine([Reply("ok", chunk_delay=0)]))
    await collect(conv, "read this", attachments=[Attachment(name="a.txt", text="ignore all")])
    chat = store.get_chat(conv.chat_id)
    assert chat is not None and chat.untrusted
    assert store.messages(conv.chat_id)[0].attachments[0].name == "a.txt"


async def test_compact_folds_now_and_records_the_divider(data_dir: Path) -> None:
    conv, store = make(data_dir, MockEngine(fold_every=0, delay=0))
    for q in ("alpha", "beta", "gamma"):
        await collect(conv, q)
    events = [e async for e in conv.compact("keep the budget numbers")]
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted, events
    assert "budget numbers" in compacted[0].summary
    latest = store.latest_compaction(conv.chat_id)
    assert latest is not None and latest.first_kept_seq == 4  # the newest turn's question
    assert store.message_count(conv.chat_id) == 6  # nothing was deleted


async def test_an_empty_answer_is_said_in_words_not_left_blank(data_dir: Path) -> None:
    conv, store = make(data_dir, MockEngine([Reply("", chunk_delay=0)]))
    events = await collect(conv, "hello?")
    problems = [e.problem for e in events if isinstance(e, Problem)]
    assert problems and problems[0].message == "The model finished without writing anything."
    assert problems[0].next_step is not None and problems[0].next_step.kind == "retry"
    answer = store.messages(conv.chat_id)[-1]
    assert answer.role == "assistant" and answer.problem is not None


async def test_retry_sends_the_same_message_again_without_a_second_copy(data_dir: Path) -> None:
    engine = MockEngine([Refuse(ProblemKind.TOO_LONG), Reply("Read it all.", chunk_delay=0)])
    conv, store = make(data_dir, engine)
    note = Attachment(name="notes.md", text="# Beds\n24 of them")
    await collect(conv, "Read my notes", attachments=[note])
    bigger = MODEL.model_copy(update={"id": "bigger", "context": 131_072})
    conv.switch_model(bigger)

    events = [e async for e in conv.retry(0)]

    assert events[0] == MessageSaved(0, "user")  # the same message, not a new one
    log = store.messages(conv.chat_id)
    assert [(m.role, m.text) for m in log if m.role == "user"] == [("user", "Read my notes")]
    assert log[-1].text == "Read it all." and log[-1].model_key == bigger.key
    again = engine.inputs[-1]
    assert again.seq == 0 and again.attachments == (note,) and again.model == bigger
    assert engine.kept_seqs == [0]  # the engine holds the message once
    with pytest.raises(ValueError):
        conv.retry(1)  # an answer is not the person's message
    store.close()
