"""Programs in the window: the picker's section, a chat on a real ACP agent, its approval card,
Claude Code and Codex chats, and the divider where a program's memory of a chat starts.

The ACP program is ``tests/fakes/acp_agent.py``, a real ACP agent process, behind a small script
set as Gemini CLI's path in Settings → Programs; it writes down every prompt it is handed and
every permission answer it gets, so the tests assert on what reached the agent. Claude Code is
the real CLI the Claude Agent SDK carries, against the Anthropic fake; Codex the real ``codex``
CLI against the Responses fake; a model API is the LM Studio flavour of the OpenAI-style fake.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.base import ModelInfo, ProblemKind
from engines.programs.handoff import HANDOFF_CHARS
from tests.engines.programs.test_codex import CODEX
from tests.fakes.anthropic_server import ClaudeCodeServer
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, ResponsesServer
from tests.ui.windows import closed_after, route_to, shown
from ui.cards.handoff_divider import HandoffDivider
from ui.cards.problem_card import ProblemCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.chat_model import RowKind
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ROOT = Path(__file__).resolve().parents[2]
PATH = os.environ.get("PATH", os.defpath)  # before a fixture empties it
AGENT = "programs/gemini"
MISSING = "programs/copilot"
WAIT_MS = 30_000  # a hang guard: starting a Python agent process on a loaded machine
CLI_WAIT_MS = 120_000  # a hang guard: a real program CLI answering the loopback fake
API_WINDOW = 262_144  # roomy: a chat moved back to the model API needs no fold of its own
SUMMARY = "The person plans a community garden: 24 raised beds of larch, budget €2,500."


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
    yield from closed_after(built)


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    # Not started: listing models could start the bundled one; programs need no listing.
    with shown(qtbot, services, timeout=WAIT_MS) as win:
        yield win


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


def wait_idle(qtbot: QtBot, win: MainWindow, timeout: int = WAIT_MS) -> None:
    bridge = win.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: not bridge.busy, timeout=timeout)


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


def ask_permission(
    qtbot: QtBot, win: MainWindow, services: AppServices, marker: str = "[[permission]]"
) -> str:
    chat_id = open_chat_on(win, services, AGENT)
    send(qtbot, win, f"clean up {marker}")
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

    assert {"permission": "allowed", "option": "allow_once"} in received(record)
    assert not window.approval_card.isVisible()
    answer = services.store.messages(chat_id)[-1]
    assert answer.role == "assistant" and answer.text.startswith("Removed build. Heard")


@pytest.mark.parametrize(
    ("button", "sent"),
    [("once", "allow_once"), ("always", "allow_always"), ("deny", "reject_once")],
)
def test_the_button_clicked_is_the_option_sent_whatever_the_program_lists_first(
    qtbot: QtBot,
    window: MainWindow,
    services: AppServices,
    record: Path,
    button: str,
    sent: str,
) -> None:
    # claude-code-acp lists "Always Allow" first: a click on "Allow once" must not grant it.
    marker = "[[permission:allow_always,reject_always,allow_once,reject_once]]"
    ask_permission(qtbot, window, services, marker)
    qtbot.mouseClick(window.approval_card.buttons[button], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert [r["option"] for r in received(record) if "permission" in r] == [sent]


def test_deny_on_the_card_reaches_the_program_and_the_chat_says_so(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.approval_card.buttons["deny"], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    assert {"permission": "denied", "option": "reject_once"} in received(record)
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

    # This agent offers no "always" option, so each time it gets the "once" it offers.
    answers = [r for r in received(record) if "permission" in r]
    assert answers == [{"permission": "allowed", "option": "allow_once"}] * 2
    assert not window.approval_card.isVisible()


def test_stop_while_the_card_waits_withdraws_it(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    ask_permission(qtbot, window, services)
    qtbot.mouseClick(window.composer.stop_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert not window.approval_card.isVisible()
    assert not [r for r in received(record) if r.get("permission") == "allowed"]


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


# --- the divider where a program's memory starts ------------------------------------------------


def divider_and_below(win: MainWindow) -> tuple[object, int | None]:
    """The divider's widget and the seq of the message right under it (None: at the end)."""
    model = win.chat_view.chat_model
    rows = model.rows()
    assert [r.kind for r in rows].count(RowKind.DIVIDER) == 1  # only ever one line
    i = model.find(RowKind.DIVIDER)
    below = next((r.message.seq for r in rows[i + 1 :] if r.message is not None), None)
    return win.chat_view.widget_at(RowKind.DIVIDER), below


def seed(services: AppServices, chat_id: str, turns: int, size: int, model_key: str) -> None:
    for i in range(turns):
        services.store.append_message(
            chat_id, "user", f"question {i}: " + "q" * size, model_key=model_key
        )
        services.store.append_message(
            chat_id, "assistant", f"answer {i}: " + "a" * size, model_key=model_key
        )


@pytest.fixture
def lmstudio() -> Iterator[OpenAIStyleServer]:
    """A model API on loopback (LM Studio's flavour) as the chat's other engine."""
    with OpenAIStyleServer("lmstudio", models=[FakeModel("qwen3-8b", API_WINDOW)]) as server:
        yield server


@pytest.fixture
def api_services(
    qtbot: QtBot,
    tmp_path: Path,
    agent: Path,
    lmstudio: OpenAIStyleServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[AppServices]:
    """The ACP agent as Gemini CLI and the LM Studio fake as the model API."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    route_to(tmp_path / "data", lmstudio_url=lmstudio.url, program_paths={"gemini": str(agent)})
    built = build_services(
        tmp_path / "data", mock=False, secrets=SessionSecrets(), seed_demo_chat=False
    )
    yield built
    # The model API's connections too, not only the files.
    close = asyncio.get_running_loop().create_task(built.aclose())
    qtbot.waitUntil(close.done, timeout=WAIT_MS)


def test_a_chat_moved_to_an_acp_program_and_back_keeps_every_message_and_its_divider(
    qtbot: QtBot, api_services: AppServices, lmstudio: OpenAIStyleServer, record: Path
) -> None:
    services, server = api_services, lmstudio
    api = ModelInfo(provider="lmstudio", id="qwen3-8b", context=API_WINDOW, local=True)
    chat = services.store.create_chat(model_key=api.key)
    seed(services, chat.id, 40, 2_000, api.key)  # about 160,000 characters
    services.store.add_compaction(chat.id, 50, SUMMARY, api.name)
    win = MainWindow(services)
    qtbot.addWidget(win)
    win.show()
    try:
        win.sidebar.refresh()
        assert win.open_chat(chat.id)
        _, below = divider_and_below(win)
        assert below == 50  # the model API's summary line

        gemini = next(m for m in services.programs() if m.key == AGENT)
        win.switch_model(gemini)
        send(qtbot, win, "What did we plan?")
        wait_idle(qtbot, win)
        handed = "\n".join(received(record)[-1]["texts"])  # type: ignore[arg-type]
        assert handed.startswith(f"<earlier-in-this-chat>\n{SUMMARY}")
        assert len(handed) - handed.index("</earlier-in-this-chat>") <= HANDOFF_CHARS + 30

        # The summary, then every message after its fold point (the oldest shortened head
        # and tail to fit): none falls between the two.
        for m in services.store.messages(chat.id)[50:-2]:
            assert m.text[:200] in handed and m.text[-100:] in handed
        before = services.store.message(chat.id, 49)
        assert before is not None and before.text.split(":")[0] + ":" not in handed
        # The line sits at the fold point and says what the program was given.
        widget, below = divider_and_below(win)
        assert isinstance(widget, HandoffDivider) and below == 50
        title = widget.button.text()
        assert title.startswith("▸ Gemini CLI starts from here, with a handoff of ")
        assert title.endswith("characters: a summary and the 30 messages after it, 1 shortened")
        qtbot.mouseClick(widget.button, Qt.MouseButton.LeftButton)
        assert widget.summary.isVisible() and widget.summary.text() == SUMMARY

        # Back on the model API: its transcript is rebuilt from the chat log.
        win.switch_model(api)
        moved = services.store.get_chat(chat.id)
        assert moved is not None and moved.model_key == api.key
        widget, below = divider_and_below(win)
        assert isinstance(widget, SummaryDivider) and not isinstance(widget, HandoffDivider)
        assert below == 50
        send(qtbot, win, "And now?")
        wait_idle(qtbot, win)
        sent = json.dumps(server.chat_requests[-1].json["messages"])
        log = services.store.messages(chat.id)
        assert len(log) == 84  # every message stays in the chat log
        answer = log[-3]
        assert answer.role == "assistant" and answer.text.startswith("Heard ")
        assert log[-1].text == "Hello, world!"
        # Read from the log: its summary and every message since, the program's answer too
        # (the model API folds the start itself when its budget says so).
        fold = services.store.latest_compaction(chat.id)
        assert fold is not None and fold.first_kept_seq <= answer.seq
        assert json.dumps(fold.summary)[1:-1] in sent
        for m in services.store.messages(chat.id, start=fold.first_kept_seq)[:-1]:
            assert json.dumps(m.text)[1:-1] in sent
        widget, below = divider_and_below(win)
        assert isinstance(widget, SummaryDivider) and not isinstance(widget, HandoffDivider)
        assert below == fold.first_kept_seq
    finally:
        close = asyncio.get_running_loop().create_task(win.aclose())
        qtbot.waitUntil(close.done, timeout=WAIT_MS)


@pytest.fixture
def claude_code(
    services: AppServices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ClaudeCodeServer]:
    """The real Claude Code CLI (found through the Claude Agent SDK) against the fake."""
    pytest.importorskip("claude_agent_sdk")
    monkeypatch.setenv("PATH", PATH)
    home = tmp_path / "home"
    home.mkdir()
    with ClaudeCodeServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        yield server


def test_a_claude_code_chat_streams_and_hands_compact_over_with_the_divider_in_place(
    qtbot: QtBot, window: MainWindow, services: AppServices, claude_code: ClaudeCodeServer
) -> None:
    chat_id = open_chat_on(window, services, "programs/claude-code")
    seed(services, chat_id, 1, 20, MOCK_MODELS[0].key)  # moved here from another model
    window.chat_view.chat_model.sync()
    bridge = window.bridge()
    assert bridge is not None
    pieces: list[str] = []
    bridge.text_delta.connect(pieces.append)

    send(qtbot, window, "The plan: 24 beds of larch.")
    wait_idle(qtbot, window)
    assert pieces[-2:] != ["".join(pieces)] and len(pieces) >= 2  # streamed, not in one piece
    answer = services.store.messages(chat_id)[-1]
    assert answer.role == "assistant" and answer.problem is None
    assert answer.text == "".join(pieces) and answer.text.startswith("You said: ")
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown[-1] == answer.text
    # Claude Code started its session with the chat so far: its memory starts at the top.
    widget, below = divider_and_below(window)
    assert isinstance(widget, HandoffDivider) and below == 0
    assert widget.button.text().startswith("▸ Claude Code starts from here, with a handoff of")

    send(qtbot, window, "/compact keep the plan")
    wait_idle(qtbot, window)
    assert claude_code.focuses == ["keep the plan"]  # Claude Code's own /compact
    widget, below = divider_and_below(window)
    assert isinstance(widget, SummaryDivider) and not isinstance(widget, HandoffDivider)
    assert below is None  # after the last message: the next one is the first it keeps
    assert widget.button.text() == "▸ Earlier messages are summarised for Claude Code"
    assert "The plan: 24 beds of larch." in widget.summary.text()

    send(qtbot, window, "Next step?")
    wait_idle(qtbot, window)
    _, below = divider_and_below(window)
    asked = services.store.messages(chat_id)[-2]
    assert asked.text == "Next step?" and below == asked.seq


@pytest.fixture
def codex(
    services: AppServices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ResponsesServer]:
    """The real Codex CLI, its config pointing it at the Responses fake."""
    if CODEX is None:
        pytest.skip("the codex CLI is not installed here")
    monkeypatch.setenv("PATH", PATH)  # codex is a Node script: ``node`` must be found
    home = tmp_path / "codex-home"
    home.mkdir()
    with ResponsesServer() as server:
        (home / "config.toml").write_text(
            'model = "gpt-fake"\n'
            'model_provider = "fake"\n'
            "[model_providers.fake]\n"
            'name = "Fake"\n'
            f'base_url = "{server.url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_OPENAI_KEY"\n',
            "utf-8",
        )
        monkeypatch.setenv("CODEX_HOME", str(home))
        monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-test-dummy")
        paths = dict(services.settings.settings.program_paths)
        services.settings.update(program_paths={**paths, "codex": CODEX})
        yield server


def test_a_codex_chat_answers_and_its_compact_says_codex_keeps_its_own_memory(
    qtbot: QtBot, window: MainWindow, services: AppServices, codex: ResponsesServer
) -> None:
    chat_id = open_chat_on(window, services, "programs/codex")
    seed(services, chat_id, 1, 20, MOCK_MODELS[0].key)  # moved here from another model
    window.chat_view.chat_model.sync()

    send(qtbot, window, "The plan: 24 beds of larch.")
    qtbot.waitUntil(lambda: window.composer.busy, timeout=WAIT_MS)
    wait_idle(qtbot, window, CLI_WAIT_MS)
    answer = services.store.messages(chat_id)[-1]
    assert answer.role == "assistant" and answer.problem is None
    assert answer.text.startswith("You said:")  # the Responses fake's answer
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown[-1] == answer.text
    asked = json.dumps(codex.responses_requests[-1].json)
    assert "Person: question 0: " in asked and "The plan: 24 beds of larch." in asked
    widget, below = divider_and_below(window)
    assert isinstance(widget, HandoffDivider) and below == 0
    assert widget.button.text().startswith("▸ Codex starts from here, with a handoff of")
    assert widget.summary.text().startswith("No summary went with it")

    # codex exec offers no /compact: Conch says so and folds nothing of its own.
    send(qtbot, window, "/compact keep the plan")
    wait_idle(qtbot, window)
    assert window.statusBar().currentMessage() == (
        "This model keeps its own memory; nothing to fold."
    )
    assert services.store.latest_compaction(chat_id) is None
    widget, below = divider_and_below(window)
    assert isinstance(widget, HandoffDivider) and below == 0


def test_the_program_s_divider_is_there_again_when_the_chat_is_opened_again(
    qtbot: QtBot, window: MainWindow, services: AppServices, record: Path
) -> None:
    chat_id = open_chat_on(window, services, AGENT)
    seed(services, chat_id, 1, 20, MOCK_MODELS[0].key)
    window.chat_view.chat_model.sync()
    send(qtbot, window, "Hello there")
    wait_idle(qtbot, window)
    widget, below = divider_and_below(window)
    assert isinstance(widget, HandoffDivider) and below == 0

    other = services.store.create_chat(model_key=AGENT)
    window.sidebar.refresh()
    assert window.open_chat(other.id)
    assert window.chat_view.chat_model.find(RowKind.DIVIDER) == -1  # nothing handed there
    assert window.open_chat(chat_id)
    widget, below = divider_and_below(window)
    assert isinstance(widget, HandoffDivider) and below == 0
