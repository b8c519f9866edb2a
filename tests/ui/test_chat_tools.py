"""Per-chat tool servers: the button by the model picker ticks which servers a chat may use, the
choice is kept in the chat's settings, and the chat's next turn gets only those servers' tools
(real MCP servers, tests/fakes/mcp_files.py and tests/fakes/mcp_server.py)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.settings import SettingsStore
from app.store import ChatStore
from app.tools import ChatToolHost, ToolSettings
from ui.chat.chat_tools import SETTINGS_ENTRY, ChatToolsButton

pytestmark = [
    pytest.mark.qt_log_ignore("This plugin does not support"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tools(data_dir: Path, qtbot: QtBot) -> Iterator[ToolSettings]:
    made = ToolSettings(SettingsStore.in_dir(data_dir), SessionSecrets())
    yield made
    stop = asyncio.get_running_loop().create_task(made.stop())
    qtbot.waitUntil(stop.done)


def add_servers(tools: ToolSettings, tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT)}
    tools.add_stdio("Files", sys.executable, ["-m", "tests.fakes.mcp_files", str(tmp_path)], env)
    control = tmp_path / "control"
    args = ["-m", "tests.fakes.mcp_server", "--control", str(control)]
    tools.add_stdio("Helpers", sys.executable, args, env)


def run(qtbot: QtBot, coroutine: Any) -> Any:
    task = asyncio.get_running_loop().create_task(coroutine)
    qtbot.waitUntil(task.done)
    return task.result()


def test_the_button_hides_until_there_is_a_server(
    qtbot: QtBot, tools: ToolSettings, store: ChatStore, tmp_path: Path
) -> None:
    chat = store.create_chat()
    button = ChatToolsButton(tools, store)
    qtbot.addWidget(button)
    button.show_chat(chat.id)
    assert button.isHidden()

    add_servers(tools, tmp_path)  # Settings changed: the button follows
    assert not button.isHidden()
    assert button.text() == "Tools: all 2 ▾"
    names = [a.text() for a in button.menu_.actions() if a.text()]
    assert names == ["Files", "Helpers", SETTINGS_ENTRY]


def test_a_chat_uses_only_the_servers_it_keeps_ticked(
    qtbot: QtBot, tools: ToolSettings, store: ChatStore, tmp_path: Path
) -> None:
    add_servers(tools, tmp_path)
    chat, other = store.create_chat(), store.create_chat()
    button = ChatToolsButton(tools, store)
    qtbot.addWidget(button)
    button.show_chat(chat.id)

    button.actions_["helpers"].trigger()  # untick Helpers for this chat
    assert button.text() == "Tools: 1 of 2 ▾"
    assert store.chat_settings(chat.id).tool_servers == ("files",)
    assert store.chat_settings(other.id).tool_servers is None  # other chats keep them all

    host = ChatToolHost(tools, chosen=lambda: store.chat_settings(chat.id).tool_servers)
    names = set(run(qtbot, host.catalogue()).names())
    assert names == {"read_text_file", "list_directory"}
    assert tools.state("helpers").phase == "idle"  # never started for this chat
    everything = ChatToolHost(tools, chosen=lambda: store.chat_settings(other.id).tool_servers)
    assert "echo" in run(qtbot, everything.catalogue()).names()

    button.actions_["helpers"].trigger()  # ticked again: the chat follows Settings again
    assert store.chat_settings(chat.id).tool_servers is None
    assert button.text() == "Tools: all 2 ▾"

    button.show_chat(other.id)
    assert button.actions_["helpers"].isChecked()


def test_a_server_off_in_settings_cannot_be_ticked_here(
    qtbot: QtBot, tools: ToolSettings, store: ChatStore, tmp_path: Path
) -> None:
    add_servers(tools, tmp_path)
    chat = store.create_chat()
    button = ChatToolsButton(tools, store)
    qtbot.addWidget(button)
    button.show_chat(chat.id)
    asked: list[str] = []
    button.settings_requested.connect(lambda: asked.append("settings"))

    tools.set_enabled("helpers", False)
    helpers = button.actions_["helpers"]
    assert helpers.text() == "Helpers (off in Settings)"
    assert not helpers.isEnabled() and not helpers.isChecked()
    assert button.text() == "Tools: on ▾"
    next(a for a in button.menu_.actions() if a.text() == SETTINGS_ENTRY).trigger()
    assert asked == ["settings"]


def test_a_server_that_failed_says_so_by_the_picker(
    qtbot: QtBot, tools: ToolSettings, store: ChatStore, tmp_path: Path
) -> None:
    tools.add_stdio("Broken", str(tmp_path / "no-such-server"))
    chat = store.create_chat()
    button = ChatToolsButton(tools, store)
    qtbot.addWidget(button)
    button.show_chat(chat.id)
    assert button.actions_["broken"].text() == "Broken"

    host = ChatToolHost(tools, chosen=lambda: store.chat_settings(chat.id).tool_servers)
    assert len(run(qtbot, host.catalogue())) == 0  # the chat's turn found no tools
    assert button.actions_["broken"].text() == "Broken (failed)"
    assert button.actions_["broken"].toolTip().startswith("Failed: could not run “")
    assert "Broken: Failed: could not run" in button.toolTip()
