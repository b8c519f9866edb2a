"""An answer's first-token figure leaves out the time its tool call's card waited for a click."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from pytestqt.qtbot import QtBot

from app.answer_stats import stats_book
from app.conversation import Conversation
from app.store import ChatStore
from engines.base import Approval, Done, Event, TextDelta, ToolAsk, TurnInput, Usage
from tests.ui.conftest import MOCK_MODEL
from ui.bridge import ConversationBridge

CLICK_WAIT_S = 45.0  # how long the person took to answer the card


class Ticks:
    """A clock the test and the engine move by hand."""

    def __init__(self) -> None:
        self.at = 100.0

    def __call__(self) -> float:
        return self.at


class AsksBeforeAnswering:
    """Asks for a tool before its first word, as a model calling a tool first does; the model
    itself takes 0.4 s to its first token once it may go on."""

    def __init__(self, ticks: Ticks) -> None:
        self.ticks = ticks
        self.bridge: ConversationBridge | None = None
        self.answers: list[Approval] = []

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        assert self.bridge is not None
        ask = ToolAsk(call_id="c1", tool="read_file", server="files")
        self.answers.append(await self.bridge.approve_tool(ask))
        self.ticks.at += 0.4
        yield TextDelta(text="The file says hello.")
        self.ticks.at += 1.0
        yield TextDelta(text=" That is all.")
        yield Usage(input_tokens=300, output_tokens=20)
        yield Done()

    async def aclose(self) -> None:
        return None


def test_the_first_token_figure_leaves_out_the_wait_for_the_approval_click(
    qtbot: QtBot, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(model_key=MOCK_MODEL.key)
    ticks = Ticks()
    engine = AsksBeforeAnswering(ticks)
    conversation = Conversation(chat.id, store=store, engine=engine, model=MOCK_MODEL)
    bridge = ConversationBridge(conversation, now=ticks)
    engine.bridge = bridge
    try:
        with qtbot.waitSignal(bridge.done):
            assert bridge.send("What does the file say?")
            qtbot.waitUntil(lambda: bridge.pending_approval is not None)
            ticks.at += CLICK_WAIT_S  # the card stays up while the person reads it
            bridge.answer_approval("once")
        assert engine.answers == [Approval.ONCE]
        answer = store.messages(chat.id)[-1]
        book = stats_book(store)
        assert book is not None
        stats = book.between(chat.id, answer.seq, answer.seq)[answer.seq]
        assert stats.first_token_s is not None
        assert abs(stats.first_token_s - 0.4) < 1e-6  # the model's time, not the person's
        assert stats.tokens_per_s == 20.0
        assert "first token 0.40 s" in stats.line()
    finally:
        store.close()
