"""The published MCP filesystem server in the real window: imported into Settings → Tools as a
person pastes it, a chat on the loopback LM Studio asks to read a file, the person allows it on
the card, the call shows as a line in the answer and the answer uses what was read.

Skipped only when npx is missing (CI installs Node); the dev set-up caches the package.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script, ScriptedCall
from tests.integration.test_mcp_filesystem import filesystem_server
from tests.ui.windows import route_to
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.chat.tool_rows import ToolRows
from ui.main_window import MainWindow

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed"),
    pytest.mark.qt_log_ignore("This plugin does not support"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MODEL = "reader-7b"
NOTES = "eggs, flour, 2 lemons\n"


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    path = folder / "shopping.txt"
    path.write_text(NOTES, "utf-8")
    return path


@pytest.fixture
def lmstudio(notes: Path) -> Iterator[OpenAIStyleServer]:
    with OpenAIStyleServer("lmstudio", models=[FakeModel(MODEL, window=32_768)]) as server:
        call = ScriptedCall("call_1", "read_text_file", {"path": str(notes)})
        server.scripts = [
            Script(text=[], calls=[call], finish_reason="tool_calls"),
            Script(text=["You need eggs, flour and 2 lemons."]),
        ]
        yield server


@pytest.fixture
def services(
    data_dir: Path, notes: Path, lmstudio: OpenAIStyleServer, qtbot: QtBot
) -> Iterator[AppServices]:
    route_to(data_dir, lmstudio_url=lmstudio.url)
    built = build_services(data_dir, mock=False, secrets=SessionSecrets())
    entry = filesystem_server(notes.parent)
    pasted = json.dumps(
        {"mcpServers": {"Filesystem": {"command": entry["command"], "args": entry["args"]}}}
    )
    assert not built.tools.import_text(pasted).problems
    yield built
    task = asyncio.ensure_future(built.aclose())
    qtbot.waitUntil(task.done, timeout=HANG_MS)


def test_the_published_filesystem_server_reads_a_file_in_the_window(
    qtbot: QtBot, services: AppServices, lmstudio: OpenAIStyleServer
) -> None:
    window = MainWindow(services)
    qtbot.addWidget(window)
    window.show()
    task = asyncio.ensure_future(window.start())
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    try:
        chat_id = window.new_chat()
        window.composer.edit.setFocus()
        qtbot.keyClicks(window.composer.edit, "What do I need to buy?")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        card = window.approval_card
        qtbot.waitUntil(card.isVisible, timeout=HANG_MS)
        assert card.label.text() == "The model asks to use read_text_file (Filesystem)"
        qtbot.mouseClick(card.buttons["once"], Qt.MouseButton.LeftButton)
        bridge = window.bridge(chat_id)
        assert bridge is not None
        qtbot.waitUntil(lambda: not bridge.busy, timeout=HANG_MS)

        messages = services.store.messages(chat_id)
        assert [m.role for m in messages] == ["user", "tool", "assistant"]
        assert messages[1].text.strip() == NOTES.strip()
        assert messages[2].text == "You need eggs, flour and 2 lemons."
        rows = [w for w in window.chat_view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
        (line,) = rows[0].lines.values()
        assert line.entry.status == "done" and line.entry.server == "Filesystem"
    finally:
        window.close()
        task = asyncio.ensure_future(window.aclose())
        qtbot.waitUntil(task.done, timeout=HANG_MS)
