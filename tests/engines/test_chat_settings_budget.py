"""A chat's settings in the engine: the person's system prompt and the answer length they asked
for take room from the transcript (a chat folds sooner), and both reach the request as sent."""

from __future__ import annotations

from pathlib import Path

from bench._scripted import ScriptedAdapter
from engines.base import Compacted, ModelInfo, TurnInput
from engines.context.session import ApiSession
from engines.window import answer_reserve, budget
from tests.engines.test_session import FakeSummariser

MODEL = ModelInfo(provider="openai", id="gpt-small", label="GPT Small", context=8_192)
MESSAGE = "Tell me more about the garden, please. " * 40  # about 400 tokens a turn


async def first_fold(
    data_dir: Path, *, system: str = "", answer: int | None = None, temperature: float | None = None
) -> tuple[int | None, ScriptedAdapter]:
    """The turn at which the chat first folds (None: within 30 turns it never did)."""
    adapter = ScriptedAdapter()
    session = ApiSession(
        chat_id="c", data_dir=data_dir, adapters={"openai": adapter}, summariser=FakeSummariser()
    )
    try:
        for n in range(30):
            turn = TurnInput(
                chat_id="c",
                seq=2 * n,
                text=MESSAGE,
                model=MODEL,
                system=system,
                max_answer_tokens=answer,
                temperature=temperature,
            )
            events = [e async for e in session.turn(turn)]
            if any(isinstance(e, Compacted) for e in events):
                return n, adapter
        return None, adapter
    finally:
        await session.aclose()


def test_an_answer_length_is_the_reserve_within_half_of_what_a_request_may_fill() -> None:
    assert answer_reserve(8_192, 300) == 300
    assert budget(8_192, answer_tokens=300) > budget(8_192)
    assert budget(8_192, answer_tokens=4_000) < budget(8_192)
    # Asking for more than the window can give still leaves the chat half of it.
    assert answer_reserve(8_192, 60_000) == 9 * 8_192 // 20
    assert budget(8_192, answer_tokens=60_000) > 3_000


async def test_a_long_system_prompt_makes_the_chat_fold_sooner(tmp_path: Path) -> None:
    plain, _ = await first_fold(tmp_path / "plain")
    long_prompt = "Always answer as a careful gardener would, with Latin plant names. " * 60
    with_prompt, adapter = await first_fold(tmp_path / "prompt", system=long_prompt)

    assert plain is not None and with_prompt is not None
    assert with_prompt < plain
    assert all(r.system == long_prompt for r in adapter.requests if r.model == MODEL.id)


async def test_the_answer_length_and_temperature_are_sent_and_a_long_answer_folds_sooner(
    tmp_path: Path,
) -> None:
    plain, plain_adapter = await first_fold(tmp_path / "plain")
    longer, adapter = await first_fold(tmp_path / "long", answer=3_000, temperature=0.2)

    assert plain is not None and longer is not None
    assert longer < plain
    turns = [r for r in adapter.requests if r.model == MODEL.id]
    assert {(r.max_output_tokens, r.temperature) for r in turns} == {(3_000, 0.2)}
    # Nothing set: Conch's own share of the window, and the server's own temperature.
    defaults = {(r.max_output_tokens, r.temperature) for r in plain_adapter.requests}
    assert defaults == {(answer_reserve(MODEL.context), None)}
