"""Settings → Programs: ACP agents added by command, arguments and environment (secrets in the
keyring only), imported from Zed's agent_servers, given Conch's tools only when ticked, and
removed with their secrets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint
from pytestqt.qtbot import QtBot

from app.secrets import SERVICE, KeyringSecrets
from app.settings import SettingsStore
from engines.tools.config import SecretRef
from tests.fakes.memory_keyring import MemoryKeyring
from ui.settings.programs_page import NO_AGENTS, SECRET_SHOWN, ProgramsPage
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

KEY = "sk-ant-api03-0123456789abcdefghijklmnop"


@pytest.fixture
def keyring_backend() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def settings(data_dir: Path) -> SettingsStore:
    return SettingsStore.in_dir(data_dir)


@pytest.fixture
def page(qtbot: QtBot, settings: SettingsStore, keyring_backend: MemoryKeyring) -> ProgramsPage:
    made = ProgramsPage(settings, KeyringSecrets(keyring_backend))
    qtbot.addWidget(made)
    made.resize(760, 1200)
    made.show()
    return made


def test_an_agent_added_by_command_keeps_its_key_in_the_keyring_only(
    qtbot: QtBot,
    page: ProgramsPage,
    settings: SettingsStore,
    keyring_backend: MemoryKeyring,
    data_dir: Path,
) -> None:
    assert page.empty.isVisible() and page.empty.text() == NO_AGENTS
    page.name_field.setText("My Agent")
    page.command_field.setText(sys.executable)
    page.args_field.setText('-m my_agent --title "two words"')
    page.env_field.setPlainText(f"ANTHROPIC_API_KEY={KEY}\nLOG_LEVEL=debug")
    with qtbot.waitSignal(page.programs_changed, timeout=1000):
        assert page.add_agent()
    (agent,) = settings.settings.acp_agents
    assert agent.name == "My Agent" and agent.command == sys.executable
    assert agent.args == ("-m", "my_agent", "--title", "two words")  # nothing appended
    ref = agent.env["ANTHROPIC_API_KEY"]
    assert isinstance(ref, SecretRef) and agent.env["LOG_LEVEL"] == "debug"
    assert keyring_backend.get_password(SERVICE, ref.secret) == KEY
    assert KEY not in (data_dir / "settings.json").read_text("utf-8")
    row = page.agent_rows[agent.id]
    assert row.title.text() == "My Agent"
    assert KEY not in row.detail.text() and "ANTHROPIC_API_KEY" in row.detail.text()
    assert not page.empty.isVisible()
    assert page.command_field.text() == ""  # the form is ready for the next one
    assert "Added “My Agent”" in page.add_result.text()


def test_bad_input_says_what_to_change_and_keeps_what_was_typed(
    page: ProgramsPage, settings: SettingsStore
) -> None:
    page.name_field.setText("Nameless")
    page.args_field.setText("--acp")
    assert not page.add_agent()
    assert page.add_result.text() == (
        "Give the command that starts the agent, for example codex-acp."
    )
    page.command_field.setText("agent")
    page.args_field.setText('--title "never closed')
    assert not page.add_agent()
    assert "quote that is never closed" in page.add_result.text()
    page.args_field.setText("")
    page.env_field.setPlainText("JUST_A_NAME")
    assert not page.add_agent()
    assert page.add_result.text() == "Line 1 needs the form name=value."
    assert page.name_field.text() == "Nameless" and page.command_field.text() == "agent"
    assert settings.settings.acp_agents == ()


def test_zed_settings_are_imported_and_what_was_skipped_is_said(
    page: ProgramsPage, settings: SettingsStore, tmp_path: Path
) -> None:
    zed = tmp_path / "settings.json"
    zed.write_text(
        '{\n  // mine\n  "agent_servers": {\n'
        '    "gemini": {"ignore_system_version": false},\n'
        '    "Codex ACP": {"type": "custom", "command": "codex-acp", "args": [], "env": {}},\n'
        "  },\n}\n",
        "utf-8",
    )
    assert page.import_file(str(zed)) == 1
    assert [a.name for a in settings.settings.acp_agents] == ["Codex ACP"]
    said = page.import_result.text()
    assert said.startswith("Added “Codex ACP”.") and "“gemini”" in said
    assert page.import_field.toPlainText() == ""
    # Text that is not JSON stays in the box to be mended.
    page.import_field.setPlainText('{"agent_servers": {')
    page.import_button.click()
    assert page.import_result.text().startswith("This is not valid JSON")
    assert page.import_field.toPlainText() == '{"agent_servers": {'


def test_tools_are_given_only_when_ticked(page: ProgramsPage, settings: SettingsStore) -> None:
    assert with_tools(settings) == ()
    gemini = page.rows["gemini"]
    assert gemini.tools.isVisible() and not gemini.tools.isChecked()
    # Claude Code and Codex take them too, in their own forms; Codex's one box is all three
    # of its entries (on OpenAI, Ollama, LM Studio).
    assert page.rows["claude"].tools.isVisible()
    page.rows["codex"].tools.setChecked(True)
    assert with_tools(settings) == ("codex", "codex-ollama", "codex-lmstudio")
    page.rows["codex"].tools.setChecked(False)
    gemini.tools.setChecked(True)
    assert with_tools(settings) == ("gemini",)
    page.command_field.setText("agent-cmd")
    assert page.add_agent()
    (agent,) = settings.settings.acp_agents
    row = page.agent_rows[agent.id]
    assert not row.tools.isChecked()
    row.tools.setChecked(True)
    assert with_tools(settings) == ("gemini", agent.key)
    gemini.tools.setChecked(False)
    assert with_tools(settings) == (agent.key,)


def test_removing_an_agent_forgets_its_secrets_and_its_tools(
    page: ProgramsPage, settings: SettingsStore, keyring_backend: MemoryKeyring
) -> None:
    page.command_field.setText("agent-cmd")
    page.args_field.setText(f"--api-key {KEY}")
    assert page.add_agent()
    (agent,) = settings.settings.acp_agents
    ref = agent.args[1]
    assert isinstance(ref, SecretRef)
    assert SECRET_SHOWN in page.agent_rows[agent.id].detail.text()
    page.agent_rows[agent.id].tools.setChecked(True)
    page.agent_rows[agent.id].remove_button.click()
    assert settings.settings.acp_agents == ()
    assert with_tools(settings) == ()
    assert keyring_backend.get_password(SERVICE, ref.secret) is None
    assert page.agent_rows == {} and page.empty.isVisible()


def with_tools(settings: SettingsStore) -> tuple[str, ...]:
    """The programs that may have Conch's servers, as saved (read afresh each time)."""
    return settings.settings.programs_with_tools


def test_every_programs_path_field_starts_at_one_x_and_every_name_is_whole(
    qtbot: QtBot, theme: ThemeManager, page: ProgramsPage
) -> None:
    rows = list(page.rows.values())
    assert "GitHub Copilot CLI" in [row.title.text() for row in rows]
    qtbot.waitUntil(lambda: all(row.field.width() > 0 for row in rows))
    lefts = {row.field.mapTo(page, QPoint(0, 0)).x() for row in rows}
    assert len(lefts) == 1, lefts
    for row in rows:
        # The name is drawn whole, left of its field.
        needed = row.title.fontMetrics().horizontalAdvance(row.title.text())
        assert row.title.width() >= needed
        assert row.title.geometry().right() < row.field.geometry().left()
