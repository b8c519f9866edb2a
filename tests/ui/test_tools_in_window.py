"""Tools in the real window, end to end: a file server connected in Settings → Tools, a chat on a
model served by the loopback LM Studio that asks to read a file, the approval card, the person's
OK, the tool's line in the answer, the answer that uses what was read, and the context meter
counting the tool list.

The file server is a real MCP server (tests/fakes/mcp_files.py) started by the app's own
``ToolSettings`` as a child process; the model is tests/fakes/openai_server.py, scripted to call
``read_text_file`` and then answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.tools.rules import tool_list_tokens
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script, ScriptedCall
from tests.ui.windows import route_to, shown
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.chat.tool_rows import ToolRows
from ui.main_window import MainWindow

pytestmark = [
    pytest.mark.qt_log_ignore("This plugin does not support"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "reader-7b"
NOTES = "Shopping: eggs, flour, 2 lemons.\nCall Marta about the beds.\n"
ANSWER = "Your notes say: eggs, flour and 2 lemons, and to call Marta about the beds."


@pytest.fixture
def lmstudio() -> Iterator[OpenAIStyleServer]:
    with OpenAIStyleServer("lmstudio", models=[FakeModel(MODEL, window=32_768)]) as server:
        call = ScriptedCall("call_1", "read_text_file", {"path": "notes.txt"})
        server.scripts = [
            Script(text=[], calls=[call], finish_reason="tool_calls"),
            Script(
                text=[
                    "Your notes say: eggs, flour and 2 lemons, ",
                    "and to call Marta about the beds.",
                ]
            ),
        ]
        yield server


@pytest.fixture
def services(
    data_dir: Path, tmp_path: Path, lmstudio: OpenAIStyleServer, qtbot: QtBot
) -> Iterator[AppServices]:
    route_to(data_dir, lmstudio_url=lmstudio.url)
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text(NOTES, "utf-8")
    built = build_services(data_dir, mock=False, secrets=SessionSecrets())
    built.tools.add_stdio(
        "Files",
        sys.executable,
        ["-m", "tests.fakes.mcp_files", str(folder)],
        {"PYTHONPATH": str(ROOT)},
    )
    yield built
    task = asyncio.ensure_future(built.aclose())
    qtbot.waitUntil(task.done, timeout=HANG_MS)


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    with shown(qtbot, services, start=True, size=(1100, 800)) as win:
        yield win
        win.close()


def run(qtbot: QtBot, coroutine: Any) -> Any:
    task = asyncio.ensure_future(coroutine)
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    return task.result()


def on_screen(win: MainWindow, widget: Any) -> bool:
    """Drawn inside the window (and, for a row of the chat, inside the chat's visible part)."""
    if not widget.isVisible():
        return False
    view = win.chat_view.viewport()
    if view.isAncestorOf(widget):
        at = widget.mapTo(view, QPoint(0, 0))
        return view.rect().intersects(widget.rect().translated(at))
    at = widget.mapTo(win, QPoint(0, 0))
    return win.rect().contains(widget.rect().translated(at))


def test_a_chat_reads_a_file_through_a_tool_once_the_person_allows_it(
    qtbot: QtBot, window: MainWindow, services: AppServices, lmstudio: OpenAIStyleServer
) -> None:
    chat_id = window.new_chat()
    bridge = window.bridge(chat_id)
    assert bridge is not None and bridge.conversation.model.key == f"lmstudio/{MODEL}"
    assert window.tools_button.accessibleName() == "Tools: on"
    before = window.composer.meter.budget
    assert before > 0

    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "What is on my shopping list in notes.txt?")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)

    card = window.approval_card
    qtbot.waitUntil(card.isVisible, timeout=HANG_MS)
    assert on_screen(window, card) and on_screen(window, card.buttons["once"])
    assert card.label.text() == "The model asks to use read_text_file (Files)"
    assert card.arguments.text() == "path: notes.txt"
    assert services.tools.state("files").text == "Ready, 2 tools"
    rows = [w for w in window.chat_view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
    assert len(rows) == 1 and on_screen(window, rows[0])

    qtbot.mouseClick(card.buttons["once"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not bridge.busy, timeout=HANG_MS)
    assert not card.isVisible()

    # The answer used the file; the model was sent the tool list, then what the tool read.
    messages = services.store.messages(chat_id)
    assert [m.role for m in messages] == ["user", "tool", "assistant"]
    assert messages[1].text == NOTES
    assert messages[2].text == ANSWER
    first, second = (json.loads(r.body) for r in lmstudio.requests_to("/chat/completions"))
    assert [t["function"]["name"] for t in first["tools"]] == ["read_text_file", "list_directory"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": NOTES}
    # In the chat: the question, the tool's line, the answer; the line is on screen.
    kinds = [r.kind for r in window.chat_view.chat_model.rows()]
    assert kinds == [RowKind.MESSAGE, RowKind.TOOLS, RowKind.MESSAGE]
    (kept,) = [w for w in window.chat_view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
    (line,) = kept.lines.values()
    assert line.button.text().startswith('▸ read_text_file (Files)  path="notes.txt" · ')
    assert on_screen(window, line)

    # The meter counts the tool list as sent: the budget the chat fits into shrank by it.
    catalogue = run(qtbot, services.tools.catalogue(None))
    assert window.composer.meter.budget == before - tool_list_tokens(catalogue.specs())

    # Quitting stops the server: no process is left behind.
    pid = services.tools.servers["files"].pid
    assert pid is not None and alive(pid)
    window.close()
    run(qtbot, window.aclose())
    run(qtbot, services.aclose())
    assert not alive(pid)


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][:1] not in ("Z", "X")
