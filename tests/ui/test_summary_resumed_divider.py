"""The divider of a fold whose summary was cut off (the chat closed while it was being written)
says it is being written when the chat opens again, and fills in when it is: the real chat
view, bridge, Conversation, ``ApiSession`` and ``ModelSummariser``, on a loopback OpenAI-style
server that holds each summary request until the test lets it go."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.memories import MemoryBook
from app.store import ChatStore
from engines.base import Compacted
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer
from tests.loopback_chat import API_MODEL, PASTE, SUMMARY, api_conversation
from tests.waits import HANG_MS
from ui.cards.summary_divider import WRITING, SummaryDivider
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

TURN = "Marta keeps the garden rota. " + "We talked about watering the tomatoes. " * 40


def opened(chat_id: str, store: ChatStore, data_dir: Path, adapter: OpenAIAdapter) -> Conversation:
    return api_conversation(chat_id, store, data_dir, {"openai": adapter})


def test_the_divider_of_a_summary_cut_off_fills_in_when_the_chat_opens_again(
    qtbot: QtBot, api: OpenAIStyleServer, store: ChatStore, book: MemoryBook, data_dir: Path
) -> None:
    loop = asyncio.get_running_loop()
    adapter = OpenAIAdapter(ROWS["openai"], base_url=api.base_url, api_key="sk-test")
    chat = store.create_chat(model_key=API_MODEL.key)
    first = ConversationBridge(opened(chat.id, store, data_dir, adapter))
    folds: list[Compacted] = []
    first.compacted.connect(folds.append)
    for text in [*(f"Turn {i}: {TURN}" for i in range(4)), PASTE]:
        with qtbot.waitSignal(first.done, timeout=HANG_MS):
            assert first.send(text)
    assert len(folds) == 1 and folds[0].writing
    # The chat closes while its summary request is held (the app quits).
    qtbot.waitUntil(api.summary_arrived.is_set, timeout=HANG_MS)
    closing = loop.create_task(first.aclose())
    qtbot.waitUntil(closing.done, timeout=HANG_MS)
    api.summary_arrived.clear()

    bridge = ConversationBridge(opened(chat.id, store, data_dir, adapter))
    bridge.resume_summary()  # as the window does when it opens a chat
    view = ChatView(store, book)
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_chat(chat.id, bridge)
    divider = view.widget_at(RowKind.DIVIDER)
    assert isinstance(divider, SummaryDivider) and divider.writing
    assert divider.writing_label.isVisible() and divider.writing_label.text() == WRITING
    assert SUMMARY not in divider.compaction.summary

    qtbot.waitUntil(api.summary_arrived.is_set, timeout=HANG_MS)  # asked again
    with qtbot.waitSignal(bridge.summary_written, timeout=HANG_MS):
        assert api.summary_gate is not None
        api.summary_gate.set()
    filled = view.widget_at(RowKind.DIVIDER)
    assert isinstance(filled, SummaryDivider) and not filled.writing
    assert not filled.writing_label.isVisible() and SUMMARY in filled.compaction.summary
    assert not bridge.summary_writing

    done = loop.create_task(bridge.aclose())
    qtbot.waitUntil(done.done, timeout=HANG_MS)
    shut = loop.create_task(adapter.aclose())
    qtbot.waitUntil(shut.done, timeout=HANG_MS)
