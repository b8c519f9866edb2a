"""The mock demo (app/demo.py): its chat comes from resources/demo/, it can show every state (a
message saying "too long" shows the too-long card), and the services build each chat's engine
with the factory they are given."""

from __future__ import annotations

import json
from pathlib import Path

from app.demo import MOCK_MODELS, demo_chat, demo_engine, mock_ask_model
from app.services import AppServices, build_services
from app.store import Chat
from engines.base import (
    Approver,
    Attachment,
    Compacted,
    Done,
    ModelInfo,
    Problem,
    ProblemKind,
    TurnInput,
)
from engines.mock import MockEngine, Reply
from engines.resources import resources_dir


async def test_the_demo_offers_a_bigger_model_when_told_too_long(data_dir: Path) -> None:
    services = build_services(data_dir, mock=True)
    try:
        await services.refresh_models()
        chat = services.store.create_chat(model_key=MOCK_MODELS[0].key)
        conv = services.conversation(chat.id, model=MOCK_MODELS[0])
        events = [e async for e in conv.turn("This message is too long, surely")]
        problems = [e.problem for e in events if isinstance(e, Problem)]
        assert problems and problems[0].kind is ProblemKind.TOO_LONG
        step = problems[0].next_step
        assert step is not None and step.kind == "switch-model"
        assert step.model is not None and step.model.context >= 1.5 * MOCK_MODELS[0].context
        # An ordinary message still gets an answer.
        events = [e async for e in conv.turn("hello there")]
        assert not any(isinstance(e, Problem) for e in events)
        await conv.aclose()
    finally:
        await services.aclose()


async def test_the_demo_learns_nothing_at_first_start(data_dir: Path) -> None:
    services = build_services(data_dir, mock=True)
    try:
        [chat] = services.store.list_chats()
        runs_before = services.memories.runs(chat.id)
        assert await services.tidy_if_due() == []  # the first start's tidy-up
        assert services.memories.runs(chat.id) == runs_before
        texts = [m.text for m in services.memories.list()]
        assert not [t for t in texts if "librarian" in t or "Let's go" in t]
    finally:
        await services.aclose()


async def test_the_mock_learns_what_the_person_says_about_themselves() -> None:
    said = "\n\n".join(
        [
            "Person: Haha, the librarian will love that.",
            "Person: Let's go with copper and hand-picking.",
            "Person: Can you draft the build day invitation?",
            "Person: The city owns the lot. We're six people so far.",
            "Person: I want a little script that e-mails people.",
        ]
    )
    answer = await mock_ask_model("", said)
    assert answer is not None
    assert json.loads(answer) == [
        "The person said: We're six people so far.",
        "The person said: I want a little script that e-mails people.",
    ]


def turn(seq: int, text: str) -> TurnInput:
    return TurnInput(chat_id="c1", seq=seq, text=text, model=MOCK_MODELS[0])


def test_demo_chat_is_long_varied_and_folded() -> None:
    demo = demo_chat()
    roles = [r for r, _ in demo.messages]
    assert 35 <= roles.count("user") <= 45
    assert roles == ["user", "assistant"] * (len(roles) // 2)
    texts = "\n".join(t for _, t in demo.messages)
    assert "```python" in texts  # a code block
    assert "|---|" in texts  # a table
    assert "\n- " in texts and "\n1. " in texts  # lists
    assert demo.messages[demo.first_kept][0] == "user"
    assert 0 < demo.first_kept < len(demo.messages)
    # the summary speaks of folded questions, not kept ones
    first_kept_text = demo.messages[demo.first_kept][1]
    assert demo.messages[0][1][:40] in demo.summary
    assert first_kept_text[:40] not in demo.summary


async def test_demo_engine_continues_after_the_demo() -> None:
    demo = demo_chat()
    engine = demo_engine(delay=0, fold_every=2, keep_turns=1)
    assert engine.summary == demo.summary
    seq = len(demo.messages)
    [e async for e in engine.turn(turn(seq, "next question"))]
    events = [e async for e in engine.turn(turn(seq + 2, "and another"))]
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert len(compacted) == 1
    assert compacted[0].first_kept_seq == seq + 2
    assert "next question" in compacted[0].summary
    assert demo.messages[demo.first_kept][1][:40] in compacted[0].summary


async def test_the_seeded_demo_chat_is_the_resource_files_words(data_dir: Path) -> None:
    raw = json.loads((resources_dir() / "demo" / "community_garden.json").read_text("utf-8"))
    services = build_services(data_dir, mock=True)
    try:
        [chat] = services.store.list_chats()
        assert chat.title == raw["title"]
        said = [m.text for m in services.store.messages(chat.id) if m.role == "user"]
        assert said == [t["person"] for t in raw["turns"]]
        fold = services.store.latest_compaction(chat.id)
        assert fold is not None and raw["summary"][0] in fold.summary
        assert {m.text for m in services.memories.list()} >= set(raw["memories"])
    finally:
        await services.aclose()


async def test_each_chat_gets_the_engine_the_factory_builds(data_dir: Path) -> None:
    asked: list[tuple[str, str]] = []

    def scripted(
        services: AppServices, chat: Chat, model: ModelInfo, approve: Approver | None
    ) -> MockEngine:
        asked.append((chat.id, model.key))
        return MockEngine([Reply("From the script.", chunk_delay=0)], fold_every=0)

    services = build_services(data_dir, mock=True, seed_demo_chat=False, engines=scripted)
    try:
        chat = services.store.create_chat(model_key=MOCK_MODELS[1].key)
        conv = services.conversation(chat.id)
        events = [e async for e in conv.turn("hello")]
        await conv.aclose()
        answers = [m.text for m in services.store.messages(chat.id) if m.role == "assistant"]
    finally:
        await services.aclose()
    assert asked == [(chat.id, MOCK_MODELS[1].key)]
    assert any(isinstance(e, Done) for e in events)
    assert answers == ["From the script."]


async def test_a_chat_s_meter_reads_the_same_after_a_restart(data_dir: Path) -> None:
    # Its turns as the chat log keeps them (the answers, the attached file) are what the model
    # reads next, whether the chat went on live or was opened again from the file.
    first = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        await first.refresh_models()
        chat = first.store.create_chat(model_key=MOCK_MODELS[0].key)
        conv = first.conversation(chat.id, model=MOCK_MODELS[0])
        notes = Attachment(name="notes.txt", text="Beds: 3, larch, 1.2 m by 2.4 m. " * 40)
        for text in ("Which wood for raised beds?", "And how deep should they be?"):
            assert not [
                e async for e in conv.turn(text, attachments=[notes]) if isinstance(e, Problem)
            ]
        live = conv.context_usage()
        await conv.aclose()
    finally:
        await first.aclose()

    again = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        await again.refresh_models()
        conv = again.conversation(chat.id, model=MOCK_MODELS[0])
        assert conv.context_usage() == live
        await conv.aclose()
    finally:
        await again.aclose()
