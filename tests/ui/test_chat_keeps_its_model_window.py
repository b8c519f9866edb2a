"""In the window: opening a chat whose model is not ready changes nothing and sends nothing;
sending in it says so on a card, and still sends nothing anywhere else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import build_services
from app.store import ChatStore
from engines.local.bundled import MODEL_ID
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer
from tests.ui.windows import close_window, open_window, route_to
from ui.cards.problem_card import ProblemCard
from ui.chat.chat_model import RowKind

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

CLOUD_KEY = "gsk_" + "Qm7Rt2Lp9Vx4" * 4
BUNDLED_KEY = f"local/{MODEL_ID}"


@pytest.fixture
def cloud() -> Iterator[OpenAIStyleServer]:
    with OpenAIStyleServer(
        "groq", models=[FakeModel("cloud-model", 131_072)], api_key=CLOUD_KEY
    ) as server:
        yield server


def test_opening_a_bundled_chat_with_a_cloud_model_ready_repoints_nothing(
    qtbot: QtBot, data_dir: Path, cloud: OpenAIStyleServer
) -> None:
    store = ChatStore.in_dir(data_dir)
    other = store.create_chat(title="Recipes", model_key="groq/cloud-model")
    chat = store.create_chat(title="Allotment", model_key=BUNDLED_KEY)
    store.append_message(chat.id, "user", "I use hunter2-Xy! as my password.")
    store.close()
    route_to(
        data_dir,
        companies=("groq",),
        base_urls={"groq": cloud.base_url},
        last_chat_id=chat.id,
    )
    keys = SessionSecrets()
    keys.set("groq", CLOUD_KEY)
    services = build_services(data_dir, mock=False, secrets=keys)

    win = open_window(qtbot, services)  # opens the last chat, lists the models
    try:
        assert win.current_chat_id == chat.id
        assert [m.key for m in services.catalogue.ready_models()] == ["groq/cloud-model"]
        win.open_chat(other.id)
        win.open_chat(chat.id)  # and once more, after the list arrived
        after = services.store.get_chat(chat.id)
        assert after is not None and after.model_key == BUNDLED_KEY
        bridge = win.bridge(chat.id)
        assert bridge is not None and bridge.conversation.model.key == BUNDLED_KEY
        assert cloud.chat_requests == []

        # Sending says so on a card (the bundled model is off here) and sends nothing.
        qtbot.keyClicks(win.composer.edit, "Which vegetables grow well in clay?")
        qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: win.chat_view.widget_at(RowKind.PROBLEM) is not None)
        card = win.chat_view.widget_at(RowKind.PROBLEM)
        assert isinstance(card, ProblemCard)
        assert card.sentence.text() == (
            "SmolLM2 135M is not running, so this chat sent nothing; start it, or pick another "
            "model for this chat."
        )
        assert card.button is not None and card.button.text() == "Set up a model in Settings"
        after = services.store.get_chat(chat.id)
        assert after is not None and after.model_key == BUNDLED_KEY
    finally:
        close_window(qtbot, win, services)
        services.store.close()
        services.memories.close()
        services.health.close()
    assert cloud.chat_requests == []
