"""The mock demo can show every state: a message saying "too long" shows the too-long card."""

from __future__ import annotations

from pathlib import Path

from app.services import MOCK_MODELS, build_services
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
