"""The divider of a fold that did not wait for its summary says it is being written, and fills
in when it is done: the real chat view, bridge, Conversation and ``ApiSession``, on a scripted
server and a summariser that holds every summary until the test lets it go."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.memories import MemoryBook
from app.services import history_messages, latest_fold
from app.store import ChatStore
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Compacted, Message, ModelInfo
from engines.context.protocols import SummaryResult
from engines.context.session import ApiSession
from tests.waits import HANG_MS
from ui.cards.summary_divider import WRITING, SummaryDivider
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

MODEL = ModelInfo(provider="openai", id="gpt-small", label="GPT Small", context=8_192)
TURN = "Marta keeps the garden rota. " + "q" * 1_200


class HeldSummariser:
    """Writes "The summary of N turns." once ``release`` is set; not before."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        await self.release.wait()
        turns = sum(1 for m in folded if m.role == "user")
        return SummaryResult(text=f"The summary of {turns} turns.", tokens=40, model=model.id)


def test_the_divider_says_the_summary_is_being_written_and_fills_in(
    qtbot: QtBot, store: ChatStore, book: MemoryBook, data_dir: Path
) -> None:
    chat = store.create_chat(model_key=MODEL.key)
    adapter = ScriptedAdapter(default=Answer("a" * 1_600))
    summariser = HeldSummariser()
    session = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        summariser=summariser,
        history=lambda: history_messages(store.messages(chat.id)),
        latest_fold=lambda: latest_fold(store, chat.id),
    )
    conversation = Conversation(chat.id, store=store, engine=session, model=MODEL)
    bridge = ConversationBridge(conversation)
    view = ChatView(store, book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.id, bridge)
    folds: list[Compacted] = []
    bridge.compacted.connect(folds.append)

    for i in range(20):
        with qtbot.waitSignal(bridge.done, timeout=HANG_MS):
            assert bridge.send(f"Question {i}: {TURN}")
        if folds:
            break
    assert folds and folds[0].writing  # nothing written ahead got through: the turn went on

    divider = view.widget_at(RowKind.DIVIDER)
    assert isinstance(divider, SummaryDivider)
    assert divider.writing_label.isVisible() and divider.writing_label.text() == WRITING
    assert bridge.summary_writing

    with qtbot.waitSignal(bridge.summary_written, timeout=HANG_MS):
        summariser.release.set()
    filled = view.widget_at(RowKind.DIVIDER)
    assert isinstance(filled, SummaryDivider) and filled is not divider
    assert not filled.writing and not filled.writing_label.isVisible()
    assert filled.compaction.summary.startswith("The summary of ")
    assert not bridge.summary_writing
    # The chat opened again shows the written summary, with nothing being written.
    view.set_chat(chat.id, bridge)
    again = view.widget_at(RowKind.DIVIDER)
    assert isinstance(again, SummaryDivider) and not again.writing
    assert again.compaction.summary == filled.compaction.summary

    with qtbot.waitSignal(bridge.done, timeout=HANG_MS):
        bridge.send("And the beans?")
    assert adapter.requests[-1].messages[0].text.count(filled.compaction.summary) == 1
