"""Programs in the window: the picker's section, a chat on a real ACP agent, its approval card.

The program is ``tests/fakes/acp_agent.py``, a real ACP agent process, behind a small script
set as Gemini CLI's path in Settings → Programs; it writes down every prompt it is handed and
every permission answer it gets, so the tests assert on what reached the agent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.base import ProblemKind
from ui.chat_model import RowKind
from ui.main_window import MainWindow
from ui.too_long_card import ProblemCard

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ROOT = Path(__file__).resolve().parents[2]
AGENT = "programs/gemini"
MISSING = "programs/copilot"
WAIT_MS = 30_000  # a hang guard: starting a Python agent process on a loaded machine


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "agent.jsonl"


@pytest.fixture
def agent(tmp_path: Path, record: Path) -> Path:
    """An executable that runs the fake ACP agent (whatever arguments it is given)."""
    script = tmp_path / "fake-agent"
    script.write_text(
        f"#!{sys.executable}\n"
        "import runpy, sys\n"
        f"sys.argv = ['acp_agent', '--record', {str(record)!r}]\n"
        "runpy.run_module('tests.fakes.acp_agent', run_name='__main__')\n",
        "utf-8",
    )
    script.chmod(0o755)
    return script


@pytest.fixture
def services(tmp_path: Path, agent: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppServices]:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the agent runs as ``-m tests.fakes.acp_agent``
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))  # no real program is found
    built = build_services(
        tmp_path / "data", mock=False, secrets=SessionSecrets(), seed_demo_chat=False
    )
    built.settings.update(program_paths={"gemini": str(agent)})
    yield built
    built.store.close()
    built.memories.close()
    built.health.close()


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    # Not started: listing models could start the bundled one; programs need no listing.
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    yield win
    close = asyncio.get_running_loop().create_task(win.aclose())
    qtbot.waitUntil(close.done, timeout=WAIT_MS)


def received(record: Path) -> list[dict[str, object]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text("utf-8").splitlines()]


def open_chat_on(win: MainWindow, services: AppServices, key: str) -> str:
    chat = services.store.create_chat(model_key=key)
    win.sidebar.refresh()
    assert win.open_chat(chat.id)
    return chat.id


def send(qtbot: QtBot, win: MainWindow, text: str) -> None:
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, text)
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)


def wait_idle(qtbot: QtBot, win: MainWindow) -> None:
    bridge = win.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: not bridge.busy, timeout=WAIT_MS)


def test_the_picker_lists_programs_in_their_own_section(window: MainWindow) -> None:
    entries = window.picker.entries()
    assert "Programs" in entries
    below = entries[entries.index("Programs") + 1 :]
    gemini = next(e for e in below if e.startswith("Gemini CLI"))
    assert "Google's agent over ACP" in gemini
    copilot = next(e for e in below if e.startswith("GitHub Copilot CLI"))
    assert "not installed: npm install -g @github/copilot" in copilot

    keys = {m.key for m in window.picker.models()}
    assert AGENT in keys  # found: it can be picked
    assert MISSING not in keys  # missing: seen, not chosen
    items = window.picker._items
    row = next(r for r in range(items.rowCount()) if items.item(r).text() == copilot)
    assert not items.item(row).isEnabled()


def test_a_chat_on_an_acp_program_streams_its_answer_in_the_window(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = open_chat_on(window, services, AGENT)
    assert window.picker.current_key() == AGENT
    send(qtbot, window, "Hello there")
    qtbot.waitUntil(lambda: window.composer.busy, timeout=WAIT_MS)
    wait_idle(qtbot, window)

    assert [r["texts"] for r in received(record)] == [["Hello there"]]
    log = [(m.role, m.text) for m in services.store.messages(chat_id)]
    assert log == [("user", "Hello there"), ("assistant", "Heard 11 characters.")]
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown == ["Hello there", "Heard 11 characters."]


def ask_permission(qtbot: QtBot, win: MainWindow, services: AppServices) -> str:
    chat_id = open_chat_on(win, services, AGENT)
    send(qtbot, win, "clean up [[permission]]")
    qtbot.waitUntil(win.approval_card.isVisible, timeout=WAIT_MS)
    assert win.approval_card.label.text() == "Gemini CLI asks to: Run rm -rf build"
    assert win.approval_card.buttons["always"].toolTip().endswith("for: Run rm -rf build")
    return chat_id


def test_allow_once_on_the_card_lets_the_program_carry_on(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.approval_card.buttons["once"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    assert {"permission": "allowed"} in received(record)
    assert not window.approval_card.isVisible()
    answer = services.store.messages(chat_id)[-1]
    assert answer.role == "assistant" and answer.text.startswith("Removed build. Heard")


def test_deny_on_the_card_reaches_the_program_and_the_chat_says_so(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.approval_card.buttons["deny"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    assert {"permission": "denied"} in received(record)
    assert not window.approval_card.isVisible()
    answer = services.store.messages(chat_id)[-1]
    assert answer.problem is not None and answer.problem.kind is ProblemKind.REFUSED
    assert "You did not allow it" in answer.problem.message


def test_always_for_this_tool_is_not_asked_again_in_the_chat(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.approval_card.buttons["always"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    send(qtbot, window, "again [[permission]]")
    wait_idle(qtbot, window)

    answers = [r for r in received(record) if "permission" in r]
    assert answers == [{"permission": "allowed"}] * 2
    assert not window.approval_card.isVisible()


def test_stop_while_the_card_waits_withdraws_it(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.composer.stop_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert not window.approval_card.isVisible()
    assert {"permission": "allowed"} not in received(record)


def test_picking_a_program_then_a_model_changes_the_engine(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    model = MOCK_MODELS[0]
    chat_id = open_chat_on(window, services, AGENT)
    send(qtbot, window, "First words")
    wait_idle(qtbot, window)
    first = window.bridge()

    window.switch_model(model)  # back to a model: a new conversation on the API engine
    bridge = window.bridge()
    assert bridge is not None and bridge is not first
    assert bridge.conversation.model.key == model.key
    assert type(bridge.conversation.engine).__name__ == "ApiSession"
    chat = services.store.get_chat(chat_id)
    assert chat is not None and chat.model_key == model.key

    gemini = next(m for m in services.programs() if m.key == AGENT)
    window.switch_model(gemini)  # and to the program again, which is handed the chat
    send(qtbot, window, "Second words")
    wait_idle(qtbot, window)
    handed = "\n".join(received(record)[-1]["texts"])  # type: ignore[arg-type]
    assert "Person: First words" in handed and "Assistant: Heard 11 characters." in handed
    assert handed.endswith("Second words")


def test_a_path_set_in_settings_makes_a_program_choosable(
    qtbot: QtBot, window: MainWindow, services: AppServices, agent: Path
) -> None:
    window.show_settings("programs")
    dialog = window._settings_dialog
    assert dialog.current_page() == "programs"
    page = dialog.programs_page
    assert page.rows["gemini"].result.text() == f"Found: {agent}"
    copilot = page.rows["copilot"]
    assert "Install it with “npm install -g @github/copilot”" in copilot.result.text()

    copilot.field.setText("/nowhere/copilot")
    assert not page.save("copilot")
    assert "is not a program Conch can run" in copilot.result.text()
    assert copilot.field.text() == "/nowhere/copilot"  # what was typed stays
    assert "copilot" not in services.settings.settings.program_paths
    assert MISSING not in {m.key for m in window.picker.models()}

    copilot.field.setText(str(agent))
    assert page.save("copilot")
    assert services.settings.settings.program_paths["copilot"] == str(agent)
    assert MISSING in {m.key for m in window.picker.models()}
    entry = next(e for e in window.picker.entries() if e.startswith("GitHub Copilot CLI"))
    assert "not installed" not in entry


def test_a_chat_on_a_missing_program_says_so_and_opens_settings_on_programs(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    chat_id = open_chat_on(window, services, MISSING)  # e.g. a chat made on another computer
    send(qtbot, window, "Hello")
    wait_idle(qtbot, window)

    answer = services.store.messages(chat_id)[-1]
    assert answer.problem is not None
    assert "“copilot” was not found" in answer.problem.message
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None
    qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)
    assert window._settings_dialog.current_page() == "programs"


def test_the_engine_does_not_change_under_a_running_answer(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = open_chat_on(window, services, AGENT)
    send(qtbot, window, "think [[slow]]")
    qtbot.waitUntil(lambda: len(received(record)) == 1, timeout=WAIT_MS)
    running = window.bridge()

    window.switch_model(MOCK_MODELS[0])
    assert window.bridge() is running and window.picker.current_key() == AGENT
    assert window.statusBar().currentMessage() == "Wait for the answer to finish, or stop it first."
    chat = services.store.get_chat(chat_id)
    assert chat is not None and chat.model_key == AGENT
    window.stop()
    wait_idle(qtbot, window)
