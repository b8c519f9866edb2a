"""In the window: a long chat imported from a file is folded at once, its divider says the
summary is being written while the model API is asked for it (no person turn), a message sent
meanwhile is answered first, and the divider fills in when the summary is done. A short one
sends nothing. The real window, services and engine on a loopback OpenAI-style server that
holds summary requests until the test lets them go."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.export import FORMAT
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script
from tests.ui.windows import close_window, open_window, route_to
from tests.waits import HANG_MS
from ui.cards.summary_divider import WRITING, SummaryDivider
from ui.chat.chat_model import RowKind
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

KEY = "gsk_" + "Qm7Rt2Lp9Vx4" * 4
LEARNING = "You help Conch, a chat app, remember"
SUMMARY = "The person planned Marta's garden rota and the tomato beds."


def export_file(path: Path, turns: int) -> Path:
    messages = []
    for i in range(turns):
        said = f"Turn {i}: Marta keeps the garden rota. " + "We watered the beans. " * 30
        messages += [
            {"role": "user", "text": said},
            {"role": "assistant", "text": f"Answer {i}: water them at dawn."},
        ]
    path.write_text(
        json.dumps({"format": FORMAT, "title": "Garden rota", "messages": messages}),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def cloud() -> Iterator[OpenAIStyleServer]:
    server = OpenAIStyleServer("groq", models=[FakeModel("small-cloud", 4_096)], api_key=KEY)
    server.summary_gate = threading.Event()
    server.summary_script = Script(text=[SUMMARY])
    with server:
        yield server
        server.summary_gate.set()


@pytest.fixture
def app(data_dir: Path, cloud: OpenAIStyleServer) -> Iterator[AppServices]:
    route_to(data_dir, companies=("groq",), base_urls={"groq": cloud.base_url})
    keys = SessionSecrets()
    keys.set("groq", KEY)
    services = build_services(data_dir, mock=False, secrets=keys)
    yield services
    services.store.close()
    services.memories.close()
    services.health.close()


def answers(server: OpenAIStyleServer) -> list[dict[str, Any]]:
    """The requests for an answer to the person: not a summary, not a learning run (a fold
    starts one; an imported chat's memories wait for the person's OK)."""
    out = []
    for r in server.chat_requests:
        system = next((m["content"] for m in r.json["messages"] if m["role"] == "system"), "")
        if "<summary-so-far>" not in r.body.decode() and not system.startswith(LEARNING):
            out.append(r.json)
    return out


def imported(qtbot: QtBot, win: MainWindow, path: Path) -> list[str]:
    task = asyncio.get_running_loop().create_task(win.import_file(path))
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    return task.result()


def test_a_long_imported_chat_is_folded_at_once_and_answers_before_its_summary(
    qtbot: QtBot, app: AppServices, cloud: OpenAIStyleServer, tmp_path: Path
) -> None:
    win = open_window(qtbot, app)
    try:
        qtbot.waitUntil(lambda: bool(app.catalogue.ready_models()), timeout=HANG_MS)
        (chat_id,) = imported(qtbot, win, export_file(tmp_path / "garden.json", 20))
        assert win.current_chat_id == chat_id

        # Nobody has written anything, and the summary is asked for.
        qtbot.waitUntil(cloud.summary_arrived.is_set, timeout=HANG_MS)
        assert answers(cloud) == []
        bridge = win.bridge(chat_id)
        assert bridge is not None and bridge.summary_writing
        qtbot.waitUntil(lambda: win.chat_view.widget_at(RowKind.DIVIDER) is not None)
        divider = win.chat_view.widget_at(RowKind.DIVIDER)
        assert isinstance(divider, SummaryDivider)
        assert divider.writing_label.isVisible() and divider.writing_label.text() == WRITING
        logged = app.store.latest_compaction(chat_id)
        assert logged is not None and divider.compaction.first_kept_seq == logged.first_kept_seq

        # A message sent now is answered while the summary is still held.
        qtbot.keyClicks(win.composer.edit, "And the beans?")
        with qtbot.waitSignal(bridge.done, timeout=HANG_MS):
            qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
        (answer,) = answers(cloud)
        assert answer["messages"][-1]["content"] == "And the beans?"
        assert "summary-end" not in cloud.timeline
        assert app.store.messages(chat_id)[-1].text == "Hello, world!"

        # Let the summary go: the divider fills in.
        assert cloud.summary_gate is not None
        with qtbot.waitSignal(bridge.summary_written, timeout=HANG_MS):
            cloud.summary_gate.set()
        filled = win.chat_view.widget_at(RowKind.DIVIDER)
        assert isinstance(filled, SummaryDivider) and not filled.writing_label.isVisible()
        assert SUMMARY in filled.compaction.summary
    finally:
        close_window(qtbot, win, app)


def test_a_short_imported_chat_sends_nothing(
    qtbot: QtBot, app: AppServices, cloud: OpenAIStyleServer, tmp_path: Path
) -> None:
    win = open_window(qtbot, app)
    try:
        qtbot.waitUntil(lambda: bool(app.catalogue.ready_models()), timeout=HANG_MS)
        (chat_id,) = imported(qtbot, win, export_file(tmp_path / "short.json", 2))
        assert win.current_chat_id == chat_id
        assert cloud.chat_requests == []
        assert app.store.latest_compaction(chat_id) is None
        assert win.chat_view.widget_at(RowKind.DIVIDER) is None
    finally:
        close_window(qtbot, win, app)
