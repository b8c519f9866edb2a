"""An ACP agent added by command, in the window: its slash commands (once it lists them, typing
"/" offers them, Tab or a click puts one in the box, and it goes to the agent as the message;
the Ctrl+K palette lists them) and its tool calls as tool rows that stay after the turn.
Against the real fake ACP agent, added by command in settings."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.programs.agents import make_agent
from engines.programs.slash import SlashCommand
from tests.ui.windows import closed_after, shown
from ui.chat_model import RowKind
from ui.composer import COMPACT_HINT, NOT_THE_PROGRAMS, Composer, Submission
from ui.main_window import MainWindow
from ui.tool_rows import ToolRows

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 30_000  # a hang guard: starting a Python agent process on a loaded machine


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "agent.jsonl"


@pytest.fixture
def services(tmp_path: Path, record: Path) -> Iterator[AppServices]:
    built = build_services(
        tmp_path / "data", mock=False, secrets=SessionSecrets(), seed_demo_chat=False
    )
    agent, _ = make_agent(
        "Fake agent",
        sys.executable,
        ["-m", "tests.fakes.acp_agent", "--record", str(record)],
        {"PYTHONPATH": str(ROOT)},
    )
    built.settings.update(acp_agents=(agent,))
    yield from closed_after(built)


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    with shown(qtbot, services, timeout=WAIT_MS) as win:
        yield win


def typed(qtbot: QtBot, win: MainWindow, text: str) -> None:
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, text)


def offered(win: MainWindow) -> list[str]:
    box = win.composer.commands
    return [box.item(i).text() for i in range(box.count())] if box.isVisible() else []


def test_the_agents_commands_are_offered_after_it_lists_them(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    key = services.settings.settings.acp_agents[0].key
    chat = services.store.create_chat(model_key=f"programs/{key}")
    window.sidebar.refresh()
    assert window.open_chat(chat.id)
    typed(qtbot, window, "/")
    assert offered(window) == []  # the agent has not said yet
    assert window.composer.hint.text() == COMPACT_HINT  # Conch's own, as before
    window.composer.clear()

    typed(qtbot, window, "Hello")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    bridge = window.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: not bridge.busy and bool(window.slash_commands()), timeout=WAIT_MS)

    typed(qtbot, window, "/")
    assert offered(window) == [
        "/init — Write an AGENTS.md for this folder",
        "/review — Review the changes in this folder",
    ]
    typed(qtbot, window, "r")
    assert offered(window) == ["/review — Review the changes in this folder"]
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Tab)  # completes, not moves on
    assert window.composer.text() == "/review "
    assert window.composer.edit.hasFocus()
    assert window.composer.hint.text() == (
        "/review [what to review] — Review the changes in this folder"
    )
    assert offered(window) == []  # typing its input now
    typed(qtbot, window, "the garden notes")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not bridge.busy and len(prompts(record)) == 2, timeout=WAIT_MS)
    assert prompts(record)[-1] == ["/review the garden notes"]  # to the agent, as typed

    window.composer.clear()
    typed(qtbot, window, "/nope")
    assert offered(window) == [] and window.composer.hint.text() == NOT_THE_PROGRAMS

    # The palette lists them too; choosing one puts it in the box.
    titles = [c.title for c in window.palette_commands()]
    assert "/init — Write an AGENTS.md for this folder" in titles
    init = next(c for c in window.palette_commands() if c.title.startswith("/init"))
    init.callback()
    assert window.composer.text() == "/init "


def test_the_agents_tool_calls_are_tool_rows_that_stay(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    key = services.settings.settings.acp_agents[0].key
    chat = services.store.create_chat(model_key=f"programs/{key}")
    window.sidebar.refresh()
    assert window.open_chat(chat.id)
    typed(qtbot, window, "Make the file [[tools]]")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    bridge = window.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: bridge.busy, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not bridge.busy, timeout=WAIT_MS)

    roles = [m.role for m in services.store.messages(chat.id)]
    assert roles == ["user", "tool", "tool", "tool", "assistant"]
    kinds = [r.kind for r in window.chat_view.chat_model.rows()]
    assert kinds == [RowKind.MESSAGE, RowKind.TOOLS, RowKind.MESSAGE]
    (rows,) = [w for w in window.chat_view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
    words = [line.button.text() for line in rows.lines.values()]
    assert len(words) == 3
    assert words[0].startswith('▸ Run touch ran.txt (Fake agent)  command="touch ran.txt"')
    assert "Failed" in words[1] and words[1].startswith("▸ Read missing.txt (Fake agent)")


def test_an_agent_added_in_settings_can_be_picked_at_once(
    window: MainWindow, services: AppServices
) -> None:
    (first,) = services.settings.settings.acp_agents
    assert f"programs/{first.key}" in {m.key for m in window.picker.models()}
    second, _ = make_agent("Second agent", sys.executable, [], {}, taken={first.id})
    services.settings.update(acp_agents=(first, second))
    assert f"programs/{second.key}" in {m.key for m in window.picker.models()}
    assert any(e.startswith("Second agent") for e in window.picker.entries())


def prompts(record: Path) -> list[list[str]]:
    lines = record.read_text("utf-8").splitlines() if record.exists() else []
    return [r["texts"] for r in map(json.loads, lines) if "texts" in r]


def test_a_programs_own_compact_goes_to_the_program(qtbot: QtBot) -> None:
    composer = Composer()
    qtbot.addWidget(composer)
    sent: list[Submission] = []
    composer.submitted.connect(sent.append)
    composer.set_text("/compact keep the plan")
    composer.submit()
    assert sent[-1].compact_focus == "keep the plan"  # Conch's own fold
    composer.slash_source = lambda: (SlashCommand("compact", "Compact the conversation"),)
    composer.set_text("/compact keep the plan")
    composer.submit()
    assert sent[-1].compact_focus is None and sent[-1].text == "/compact keep the plan"
