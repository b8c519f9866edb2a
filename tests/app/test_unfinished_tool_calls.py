"""A program's tool call that never got its result, because the turn was stopped or failed,
is kept in the chat log as "stopped" (its row neither stays "Running…" nor vanishes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from app.conversation import ENDED_FIRST, Conversation
from app.secrets import SessionSecrets
from app.services import build_services
from app.store import ChatStore
from app.tool_calls import tool_call_book
from engines.base import (
    Event,
    ModelInfo,
    Problem,
    ProblemKind,
    TextDelta,
    ToolCall,
    ToolCallData,
    ToolStarted,
    TurnInput,
    TurnProblem,
)
from engines.context.tool_loop import STOPPED
from tests.app.test_added_agents import add_agent
from tests.waits import HANG_SECONDS


async def test_a_call_running_when_the_person_stops_an_agent_is_kept_stopped(
    tmp_path: Path,
) -> None:
    services = build_services(tmp_path / "data", mock=False, secrets=SessionSecrets())
    try:
        key = add_agent(services, tmp_path / "received.jsonl")
        chat = services.store.create_chat(model_key=f"programs/{key}")
        conv = services.conversation(chat.id)
        running = asyncio.Event()

        async def go() -> None:
            # The fake agent starts "Run sleep 100" and waits until it is cancelled.
            async for event in conv.turn("Run it [[unfinished]] [[slow]]"):
                if isinstance(event, ToolStarted):
                    running.set()

        task = asyncio.get_running_loop().create_task(go())
        try:
            await asyncio.wait_for(running.wait(), HANG_SECONDS)
            task.cancel()  # what Stop does
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await conv.aclose()
        saved = services.store.messages(chat.id)
        book = tool_call_book(services.store)
        assert book is not None
        calls = book.between(chat.id, 0, saved[-1].seq)
    finally:
        await services.aclose()
    [tool] = [m for m in saved if m.role == "tool"]
    call = calls[tool.seq]
    assert (call.tool, call.status, call.server) == ("Run sleep 100", "stopped", "My Agent")
    assert tool.text == STOPPED
    assert saved[-1].role == "assistant"  # the answer so far is kept after it


class DiesMidCall:
    """A program that starts a tool and then fails, as a CLI that crashes mid-call does."""

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        args = {"command": "make test"}
        yield TextDelta(text="Running the tests.")
        yield ToolCall(call=ToolCallData(id="c1", name="shell", arguments=args))
        yield ToolStarted(call_id="c1", tool="shell", server="Codex", arguments=args)
        yield Problem(problem=TurnProblem.of(ProblemKind.BROKEN_STREAM, partial=True))

    async def aclose(self) -> None:
        return None


async def test_a_call_whose_turn_failed_is_kept_stopped(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "chats.db")
    model = ModelInfo(provider="programs", id="codex", label="Codex", context=200_000)
    chat = store.create_chat(model_key=model.key)
    conv = Conversation(chat.id, store=store, engine=DiesMidCall(), model=model)
    events = await asyncio.wait_for(_drain(conv.turn("Run the tests")), HANG_SECONDS)
    assert any(isinstance(e, Problem) for e in events)
    saved = store.messages(chat.id)
    book = tool_call_book(store)
    assert book is not None
    calls = book.between(chat.id, 0, saved[-1].seq)
    [tool] = [m for m in saved if m.role == "tool"]
    call = calls[tool.seq]
    assert (call.tool, call.status, call.arguments) == (
        "shell",
        "stopped",
        {"command": "make test"},
    )
    assert tool.text == ENDED_FIRST
    marked = store.get_chat(chat.id)
    assert marked is not None and not marked.untrusted  # Conch's own words, nothing outside


async def _drain(events: AsyncIterator[object]) -> list[object]:
    return [e async for e in events]
