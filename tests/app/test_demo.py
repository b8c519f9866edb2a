"""The mock demo can show every state: a message saying "too long" shows the too-long card."""

from __future__ import annotations

import json
from pathlib import Path

from app.services import MOCK_MODELS, build_services, mock_ask_model
from engines.base import Problem, ProblemKind


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
