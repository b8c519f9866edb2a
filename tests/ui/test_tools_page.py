"""Settings → Tools: servers added by hand or imported, their live state in words, secrets in the
keyring only, turned off, started again and removed — against a real MCP server
(tests/fakes/mcp_server.py) run over stdio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.secrets import SERVICE, KeyringSecrets
from app.settings import SettingsStore
from app.tools import ToolSettings
from engines.tools.config import SecretRef, StdioServer
from tests.fakes.memory_keyring import MemoryKeyring
from ui.settings.tools_page import SECRET_SHOWN, ToolsPage

pytestmark = [
    pytest.mark.qt_log_ignore("This plugin does not support"),
    # A stopped server is sometimes reaped after its test's loop closed (see the engine tests).
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghp_3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d"
FAKE_TOOLS = 9


@pytest.fixture
def keyring_backend() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def tools(data_dir: Path, keyring_backend: MemoryKeyring, qtbot: QtBot) -> Iterator[ToolSettings]:
    made = ToolSettings(SettingsStore.in_dir(data_dir), KeyringSecrets(keyring_backend))
    yield made
    stop = asyncio.get_running_loop().create_task(made.stop())
    qtbot.waitUntil(stop.done)


@pytest.fixture
def page(qtbot: QtBot, tools: ToolSettings) -> ToolsPage:
    made = ToolsPage(tools)
    qtbot.addWidget(made)
    made.resize(760, 900)
    made.show()
    return made


def run(qtbot: QtBot, coroutine: Any) -> Any:
    task = asyncio.get_running_loop().create_task(coroutine)
    qtbot.waitUntil(task.done)
    return task.result()


def fake_json(control: Path) -> str:
    return json.dumps(
        {
            "mcpServers": {
                "Fake files": {
                    "command": sys.executable,
                    "args": ["-m", "tests.fakes.mcp_server", "--control", str(control)],
                    "env": {"PYTHONPATH": str(ROOT), "FAKE_TOKEN": TOKEN},
                },
                "Old SSE": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
            }
        }
    )


def test_a_program_added_by_hand_keeps_its_token_in_the_keyring_only(
    page: ToolsPage, tools: ToolSettings, keyring_backend: MemoryKeyring, data_dir: Path
) -> None:
    page.name_field.setText("GitHub")
    page.command_field.setText("npx")
    page.args_field.setText('-y "@modelcontextprotocol/server-github"')
    page.env_field.setPlainText(f"GITHUB_PERSONAL_ACCESS_TOKEN={TOKEN}\nLOG_LEVEL=info")
    page.add_button.click()

    row = page.rows["github"]
    assert row.title.text() == "GitHub"
    assert row.state_label.text() == "Starts when a chat needs it"
    assert TOKEN not in row.detail.text()
    assert "npx -y @modelcontextprotocol/server-github" in row.detail.text()
    assert page.add_result.text().startswith("Added “GitHub”")
    assert page.command_field.text() == ""  # the form is ready for the next one

    saved = (data_dir / "settings.json").read_text()
    assert TOKEN not in saved
    server = tools.configs[0]
    assert isinstance(server, StdioServer)
    assert server.env["LOG_LEVEL"] == "info"
    ref = server.env["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert isinstance(ref, SecretRef)
    assert keyring_backend.entries[(SERVICE, ref.secret)] == TOKEN


def test_a_web_server_keeps_its_authorization_header_in_the_keyring(
    page: ToolsPage, tools: ToolSettings, keyring_backend: MemoryKeyring, data_dir: Path
) -> None:
    page.kind.setCurrentIndex(1)
    assert page.url_field.isVisible() and not page.command_field.isVisible()
    page.url_field.setText("https://tools.example.com/mcp")
    page.headers_field.setPlainText(f"Authorization: Bearer {TOKEN}")
    page.add_button.click()

    row = page.rows["tools-example-com"]
    assert row.detail.text() == "https://tools.example.com/mcp"
    assert TOKEN not in (data_dir / "settings.json").read_text()
    assert list(keyring_backend.entries.values()) == [f"Bearer {TOKEN}"]


def test_bad_input_says_what_to_change_and_keeps_what_was_typed(
    page: ToolsPage, tools: ToolSettings
) -> None:
    page.name_field.setText("Files")
    page.args_field.setText("-y server")
    page.add_button.click()
    assert page.add_result.isVisible()
    assert page.add_result.text() == "Give the command that starts the server, for example npx."
    assert page.name_field.text() == "Files" and page.args_field.text() == "-y server"

    page.command_field.setText("npx")
    page.env_field.setPlainText("just words")
    page.add_button.click()
    assert page.add_result.text() == "Line 1 needs the form name=value."

    page.kind.setCurrentIndex(1)
    page.url_field.setText("ftp://example.com")
    page.add_button.click()
    assert page.add_result.text() == "The address must start with http:// or https://."
    assert tools.configs == ()
    assert page.empty.isVisible()


def test_pasted_json_adds_its_servers_and_says_what_it_skipped(
    page: ToolsPage, tools: ToolSettings, tmp_path: Path, keyring_backend: MemoryKeyring
) -> None:
    page.import_field.setPlainText(fake_json(tmp_path))
    page.import_button.click()

    assert list(page.rows) == ["fake-files"]
    words = page.import_result.text()
    assert words.startswith("Added “Fake files”.")
    assert "Skipped “Old SSE”" in words
    assert page.import_field.toPlainText() == ""
    assert TOKEN in keyring_backend.entries.values()
    assert SECRET_SHOWN not in page.rows["fake-files"].detail.text()  # env names, not values
    assert "FAKE_TOKEN" in page.rows["fake-files"].detail.text()


def test_json_that_is_not_json_is_kept_for_mending(page: ToolsPage, tools: ToolSettings) -> None:
    page.import_field.setPlainText('{"mcpServers": {"a": {"command": "x",}}')
    page.import_button.click()
    assert page.import_result.text().startswith("This is not valid JSON")
    assert page.import_field.toPlainText().startswith('{"mcpServers"')
    assert tools.configs == ()


def test_a_file_is_imported_and_an_unreadable_one_is_said_in_words(
    page: ToolsPage, tools: ToolSettings, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.json"
    assert page.import_file(str(missing)) == 0
    said = page.import_result.text()
    assert said == "“nowhere.json” could not be read (No such file or directory)."

    config = tmp_path / "mcp.json"
    config.write_text(fake_json(tmp_path), "utf-8")
    picked: list[str] = []

    def pick(_parent: object, chosen: Any) -> None:
        picked.append("asked")
        chosen(str(config))

    page._pick_file = pick
    page.file_button.click()
    assert picked == ["asked"]
    assert list(page.rows) == ["fake-files"]


def test_a_row_follows_its_server_from_waiting_to_ready_and_off(
    qtbot: QtBot, page: ToolsPage, tools: ToolSettings, tmp_path: Path
) -> None:
    page.import_text(fake_json(tmp_path))
    row = page.rows["fake-files"]
    assert row.state_label.text() == "Starts when a chat needs it"

    catalogue = run(qtbot, tools.catalogue(None))  # a chat needs its tools
    assert len(catalogue) == FAKE_TOOLS
    assert row.state_label.text() == f"Ready, {FAKE_TOOLS} tools"
    assert row.state_label.property("state") == "ok"
    pid = tools.servers["fake-files"].pid
    assert pid is not None

    row.switch.click()  # off for every chat
    qtbot.waitUntil(lambda: page.rows["fake-files"].state_label.text() == "Off")
    run(qtbot, tools.settled())
    assert tools.servers["fake-files"].pid is None
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert len(run(qtbot, tools.catalogue(None))) == 0


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_a_server_that_cannot_start_says_why_and_can_be_started_again(
    qtbot: QtBot, page: ToolsPage, tools: ToolSettings, tmp_path: Path
) -> None:
    page.command_field.setText(str(tmp_path / "no-such-server"))
    page.name_field.setText("Broken")
    page.add_button.click()
    row = page.rows["broken"]
    assert not row.again_button.isVisible()

    assert len(run(qtbot, tools.catalogue(None))) == 0
    assert row.state_label.text().startswith("Failed: could not run “")
    assert row.state_label.property("state") == "error"
    assert row.again_button.isVisible()

    task = page.start_again("broken")
    assert task is not None
    qtbot.waitUntil(task.done)
    assert task.result().phase == "failed"
    assert page.rows["broken"].state_label.text().startswith("Failed: could not run")


def test_removing_a_server_forgets_its_secrets_too(
    page: ToolsPage, tools: ToolSettings, keyring_backend: MemoryKeyring
) -> None:
    page.command_field.setText("npx")
    page.env_field.setPlainText(f"API_KEY={TOKEN}")
    page.add_button.click()
    assert keyring_backend.entries
    page.rows["npx"].remove_button.click()
    assert page.rows == {}
    assert page.empty.isVisible()
    assert keyring_backend.entries == {}
    assert tools.configs == ()


@pytest.fixture
def http_fake(tmp_path: Path) -> Iterator[str]:
    """The fake MCP server over Streamable HTTP; its address."""
    control = tmp_path / "http-control"
    with subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server", "--control", str(control), "--http"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the socket is listening once this is printed
            assert line.startswith("port "), f"the fake did not start: {line!r}"
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
        finally:
            proc.kill()
            proc.wait()


def test_a_web_server_added_here_gets_its_header_from_the_keyring(
    http_fake: str,  # first, so it stops last: the client ends its session before the server goes
    qtbot: QtBot,
    page: ToolsPage,
    tools: ToolSettings,
    keyring_backend: MemoryKeyring,
    data_dir: Path,
) -> None:
    page.kind.setCurrentIndex(1)
    page.name_field.setText("Helpers over HTTP")
    page.url_field.setText(http_fake)
    page.headers_field.setPlainText(f"Authorization: Bearer {TOKEN}")
    page.add_button.click()
    row = page.rows["helpers-over-http"]
    assert TOKEN not in (data_dir / "settings.json").read_text()

    catalogue = run(qtbot, tools.catalogue(None))
    assert row.state_label.text() == f"Ready, {FAKE_TOOLS} tools"
    said = run(qtbot, tools.call(catalogue, "whoami"))
    assert json.loads(said.text)["authorization"] == f"Bearer {TOKEN}"


def test_a_secret_the_keyring_lost_is_typed_again_and_the_server_starts(
    qtbot: QtBot,
    page: ToolsPage,
    tools: ToolSettings,
    tmp_path: Path,
    keyring_backend: MemoryKeyring,
) -> None:
    page.import_text(fake_json(tmp_path))
    row = page.rows["fake-files"]
    assert not row.secrets_button.isHidden()
    keyring_backend.entries.clear()  # a keyring that kept it only until Conch quit

    run(qtbot, tools.catalogue(None))
    assert row.state_label.text() == (
        "Failed: the value of FAKE_TOKEN is not in the keyring any more; enter it again in "
        "Settings → Tools"
    )
    row.secrets_button.click()
    (field,) = row.secrets.fields.values()
    assert row.secrets.isVisible() and field.placeholderText() == "Missing — type it again"
    field.setText(TOKEN)
    row.secrets.save_button.click()
    assert not row.secrets.isVisible() and field.text() == ""
    assert TOKEN in keyring_backend.entries.values()
    qtbot.waitUntil(
        lambda: page.rows["fake-files"].state_label.text() == f"Ready, {FAKE_TOOLS} tools"
    )
    catalogue = run(qtbot, tools.catalogue(None))
    said = run(qtbot, tools.call(catalogue, "whoami"))
    assert json.loads(said.text)["token"] == TOKEN
