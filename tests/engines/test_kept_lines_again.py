"""At a small window the summary's kept lines are sent again, just before the newest message.

A 135M model does not find the person's facts in a summary a few thousand tokens back
(``bench.recall --person --reask``), so at a window of 8,192 or less the lines Conch kept word
for word are repeated in front of the newest person message. The stored transcript keeps the
person's own words, every request still fits the window, the request before keeps its prefix up
to its own newest message, and a larger window's requests carry the summary once, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from bench._scripted import Answer, ScriptedAdapter
from engines.base import Done, Message, ModelInfo
from engines.context.protocols import SummaryResult
from engines.context.sending import arrange
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.transcript import load_transcript
from engines.providers.base import ChatRequest
from engines.window import answer_reserve, budget, estimate_message, estimate_tokens
from tests.engines.test_session import CHAT, SYSTEM, ending, run

NAME = "My name is Alina Kowalczyk and I live in Gdańsk"
SUMMARY = (
    "What the person wants: help with the garden.\n"
    "Facts to keep:\n"
    f"- {NAME}\n"
    "Still open: (nothing noted)"
)
TURN = "w" * 1_200  # with a 1,600-character answer: about 700 tokens a turn
SHORT = "w" * 400  # with a 400-character answer: about 200 tokens a turn


LONG = SUMMARY.replace(
    "Still open:",
    "".join(f"- On day {n} the pump ran for {n + 3} minutes\n" for n in range(60)) + "Still open:",
)


class KeepingSummariser:
    """Writes a summary with lines Conch kept word for word (``text``)."""

    def __init__(self, text: str = SUMMARY) -> None:
        self.text = text

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        return SummaryResult(text=self.text, tokens=40, model=model.id)


def _model(window: int) -> ModelInfo:
    return ModelInfo(provider="openai", id="m", label="M", context=window)


async def _chat(
    data_dir: Path, window: int, turns: int, text: str = TURN, summary: str = SUMMARY
) -> tuple[ApiSession, ScriptedAdapter]:
    adapter = ScriptedAdapter(default=Answer("a" * (1_600 if text == TURN else 400)))
    session = ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        summariser=KeepingSummariser(summary),
    )
    for i in range(turns):
        events = await run(session, 2 * i, f"Question {i}: {text}", _model(window))
        assert isinstance(ending(events), Done)
        await session.wait_prepared()  # the summary written after a fold, as a person reads
    return session, adapter


def _turns(adapter: ScriptedAdapter) -> list[ChatRequest]:
    """The requests that answered a turn (not a summary's)."""
    return [r for r in adapter.requests if r.system == SYSTEM]


def _newest(request: ChatRequest) -> Message:
    return [m for m in request.messages if m.role == "user"][-1]


async def test_a_small_window_sends_the_kept_lines_again_before_the_newest_message(
    data_dir: Path,
) -> None:
    session, adapter = await _chat(data_dir, 4_096, 8)
    with_summary = [r for r in _turns(adapter) if r.messages[0].text.startswith(SUMMARY_OPEN)]
    assert len(with_summary) >= 2, "the chat folded and its summary was sent"
    last = with_summary[-1]
    assert NAME in last.messages[0].text  # the summary, in front as ever
    newest = _newest(last)
    assert newest.text.startswith(f"{SUMMARY_OPEN}- {NAME}\n</earlier-in-this-chat>\n\n")
    assert newest.text.endswith(f"Question 7: {TURN}")
    # Sent only: the transcript keeps the person's own words.
    stored = load_transcript(data_dir, CHAT).transcript
    assert stored.summary == SUMMARY
    assert not any(NAME in m.text for m in stored.messages)
    assert all(m.text.startswith("Question ") for m in stored.messages if m.role == "user")
    # It is counted: every request still fits the window with room for the answer, and the
    # context meter counts what the next request sends.
    for r in _turns(adapter):
        sent = estimate_tokens(r.system) + sum(estimate_message(m) for m in r.messages)
        assert sent <= 9 * 4_096 // 10 - answer_reserve(4_096)
    used, _room = session.context_usage(_model(4_096), SYSTEM)
    next_one = arrange([*session.messages, Message(role="user", text="")], session.summary, 4_096)
    assert used >= sum(estimate_message(m) for m in next_one) - 3
    await session.aclose()


async def test_only_the_newest_message_carries_them_so_the_turns_before_stay_as_sent(
    data_dir: Path,
) -> None:
    session, adapter = await _chat(data_dir, 4_096, 16, SHORT)
    turns = _turns(adapter)
    # Two turns in a row with no fold between them (the second only adds to the first).
    pairs = [
        (a, b)
        for a, b in pairwise(turns)
        if a.messages[0].text.startswith(SUMMARY_OPEN) and len(b.messages) == len(a.messages) + 2
    ]
    assert pairs, "the chat folded, then went on for two turns without folding"
    for before, after in pairs:
        k = len(before.messages) - 1  # the newest message of the turn before
        assert after.messages[:k] == before.messages[:k]
        assert before.messages[k].text.endswith(after.messages[k].text)
        assert NAME not in after.messages[k].text
        assert sum(NAME in m.text for m in after.messages) == 2  # the summary, and once again
    await session.aclose()


async def test_a_larger_window_sends_the_summary_once(data_dir: Path) -> None:
    session, adapter = await _chat(data_dir, 16_384, 24)
    with_summary = [r for r in _turns(adapter) if r.messages[0].text.startswith(SUMMARY_OPEN)]
    assert with_summary, "the chat folded and its summary was sent"
    for r in with_summary:
        assert sum(NAME in m.text for m in r.messages) == 1
    await session.aclose()


async def test_only_the_first_kept_lines_are_sent_again_when_there_are_many(
    data_dir: Path,
) -> None:
    session, adapter = await _chat(data_dir, 4_096, 8, summary=LONG)
    last = _turns(adapter)[-1]
    front = [x for x in last.messages[0].text.splitlines() if x.startswith("- ")]
    again = _newest(last).text.split("</earlier-in-this-chat>")[0]
    repeated = [x for x in again.splitlines() if x.startswith("- ")]
    assert repeated[0] == f"- {NAME}"  # the person's line, first
    assert repeated == front[: len(repeated)]
    assert len(repeated) < len(front)
    assert estimate_tokens(again) <= budget(4_096) // 10
    await session.aclose()
