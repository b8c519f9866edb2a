"""A program's question outlives its turn: the turn ends while the card still asks.

A program asks permission from its own task, not the turn's, so its turn can end (it finished,
failed or gave up) with the question still open. The card must then go, the program hears
"no", and the next question of the next turn shows and can be answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.store import ChatStore
from engines.base import Approval, Done, Event, PermissionAsk, TextDelta, TurnInput
from tests.ui.conftest import MOCK_MODEL
from ui.chat.bridge import ConversationBridge


class AsksFromItsOwnTask:
    """Each turn asks permission from a task of its own, as an ACP program does. The first
    turn ends without waiting for the answer; later turns wait for it."""

    def __init__(self) -> None:
        self.bridge: ConversationBridge | None = None
        self.card_up = asyncio.Event()
        self.asks: list[asyncio.Task[Approval]] = []

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        assert self.bridge is not None
        self.card_up.clear()
        ask = PermissionAsk(program="Gemini CLI", title=f"Run step {len(self.asks) + 1}")
        asking = asyncio.get_running_loop().create_task(self.bridge.approve(ask))
        self.asks.append(asking)
        await self.card_up.wait()
        if len(self.asks) == 1:
            yield TextDelta(text="I stopped before step 1.")
        else:
            answer = await asking
            declined = answer is Approval.DENY
            yield TextDelta(text="Step 2 was declined." if declined else "Step 2 ran.")
        yield Done()

    async def aclose(self) -> None:
        return None


def test_a_turn_that_ends_with_a_question_open_takes_the_card_away(
    qtbot: QtBot, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(model_key=MOCK_MODEL.key)
    engine = AsksFromItsOwnTask()
    conversation = Conversation(chat.id, store=store, engine=engine, model=MOCK_MODEL)
    bridge = ConversationBridge(conversation)
    engine.bridge = bridge
    cards: list[object] = []

    def on_card(ask: object) -> None:
        cards.append(ask)
        if ask is not None:
            engine.card_up.set()

    bridge.approval_changed.connect(on_card)
    try:
        with qtbot.waitSignal(bridge.done):
            assert bridge.send("Build it")
        # The turn ended with its question open: the program hears no, and no card is left up.
        qtbot.waitUntil(engine.asks[0].done)
        assert engine.asks[0].result() is Approval.DENY
        assert bridge.pending_approval is None
        assert cards[-1] is None

        # The next turn's question shows, and the person's answer reaches the program.
        with qtbot.waitSignal(bridge.done):
            assert bridge.send("Go on")
            qtbot.waitUntil(lambda: bridge.pending_approval is not None)
            pending = bridge.pending_approval
            assert isinstance(pending, PermissionAsk) and pending.title == "Run step 2"
            bridge.answer_approval("once")
        assert [m.text for m in store.messages(chat.id)] == [
            "Build it",
            "I stopped before step 1.",
            "Go on",
            "Step 2 ran.",
        ]
        assert bridge.pending_approval is None
    finally:
        store.close()
