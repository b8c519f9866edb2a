"""Export from the chat's menu and import of other apps' exports, in the real window."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu
from pytestqt.qtbot import QtBot

from app.export import suggested_name
from app.services import AppServices
from tests.ui.windows import shown
from tests.waits import HANG_MS
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

IMPORTS = Path(__file__).parent.parent / "data" / "imports"


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    with shown(qtbot, services) as win:
        yield win
        if win._file_dialog is not None:
            win._file_dialog.close()


@pytest.fixture
def garden(services: AppServices) -> str:
    chat = services.store.create_chat("Garden: slugs/snails?")
    services.store.append_message(chat.id, "user", "What stops slugs?")
    services.store.append_message(chat.id, "assistant", "Copper tape.", model_key="mock/mock")
    return chat.id


def _chat_menu(qtbot: QtBot, window: MainWindow, chat_id: str) -> QMenu:
    """Open the chat's menu (right click on it in the sidebar)."""
    window.sidebar.refresh()
    list_ = window.sidebar.list
    row = window.sidebar.chat_ids().index(chat_id)
    point: QPoint = list_.visualItemRect(list_.item(row)).center()
    list_.customContextMenuRequested.emit(point)
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu), timeout=HANG_MS)
    menu = QApplication.activePopupWidget()
    assert isinstance(menu, QMenu)
    return menu


def _choose(menu: QMenu, text: str) -> None:
    [action] = [a for a in menu.actions() if a.text() == text]
    menu.close()
    action.trigger()


def _save_as(qtbot: QtBot, window: MainWindow, path: Path) -> None:
    dialog = window._file_dialog
    assert isinstance(dialog, QFileDialog)
    with qtbot.waitSignal(dialog.fileSelected, timeout=HANG_MS):
        dialog.selectFile(str(path))
        dialog.accept()


@pytest.mark.parametrize(
    ("choice", "kind"), [("Export as Markdown…", "markdown"), ("Export as JSON…", "json")]
)
def test_the_chats_menu_exports_it_under_a_suggested_name(
    qtbot: QtBot,
    window: MainWindow,
    garden: str,
    tmp_path: Path,
    choice: str,
    kind: str,
) -> None:
    _choose(_chat_menu(qtbot, window, garden), choice)

    dialog = window._file_dialog
    assert isinstance(dialog, QFileDialog) and dialog.isVisible()
    name = suggested_name("Garden: slugs/snails?", kind=kind)  # type: ignore[arg-type]
    assert name.startswith("Garden slugs snails 20")
    assert Path(dialog.selectedFiles()[0]).name == name

    _save_as(qtbot, window, tmp_path / name)

    text = (tmp_path / name).read_text(encoding="utf-8")
    if kind == "json":
        assert [m["text"] for m in json.loads(text)["messages"]] == [
            "What stops slugs?",
            "Copper tape.",
        ]
    else:
        assert text.startswith("# Garden: slugs/snails?") and "Copper tape." in text
    assert window.statusBar().currentMessage() == f"Saved to {name}"


def test_an_export_that_cannot_be_written_says_so(
    qtbot: QtBot, window: MainWindow, garden: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")

    assert window.export_chat(garden, blocker / "chat.md") is None

    assert window.statusBar().currentMessage().startswith("The chat could not be saved to")


def _import(qtbot: QtBot, window: MainWindow, path: Path) -> list[str]:
    task = asyncio.get_running_loop().create_task(window.import_file(path))
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    return task.result()


def test_import_button_opens_a_file_dialog_and_a_chatgpt_export_becomes_chats(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    qtbot.mouseClick(window.sidebar.import_button, Qt.MouseButton.LeftButton)
    dialog = window._file_dialog
    assert isinstance(dialog, QFileDialog) and dialog.isVisible()
    assert dialog.acceptMode() == QFileDialog.AcceptMode.AcceptOpen
    dialog.selectFile(str(IMPORTS / "chatgpt-conversations.json"))
    dialog.accept()

    qtbot.waitUntil(lambda: len(window.sidebar.chat_ids()) == 2, timeout=HANG_MS)
    # The file lists the newest first; so does the sidebar.
    assert window.sidebar.titles() == ["Sourdough starter", "Bike chain"]
    assert window.statusBar().currentMessage() == "Imported 2 chats from ChatGPT."
    assert window.title_label.text() == "Sourdough starter"
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown[0].startswith("My sourdough starter smells like nail polish")
    assert shown[-1].startswith("Feed it 1:1:1")


def test_an_open_webui_export_opens_with_its_reasoning_and_versions(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    [chat_id] = _import(qtbot, window, IMPORTS / "open-webui-chat-export.json")

    assert window.current_chat_id == chat_id
    assert window.statusBar().currentMessage() == "Imported 1 chat from Open WebUI."
    rows = [r for r in window.chat_view.chat_model.rows() if r.message]
    answer = rows[1]
    assert answer.message is not None and answer.message.thinking
    # The regenerated answer came first in Open WebUI, the one shown second: "‹ 2/2 ›".
    assert answer.versions is not None and answer.versions.label == "2/2"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"mapping": {', "is damaged or not JSON"),
        (b'{"some": "thing"}', "is not a chat export Conch knows"),
    ],
)
def test_a_bad_file_says_so_in_one_sentence_and_creates_no_chat(
    qtbot: QtBot,
    window: MainWindow,
    services: AppServices,
    tmp_path: Path,
    content: bytes,
    words: str,
) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(content)

    assert _import(qtbot, window, path) == []

    message = window.statusBar().currentMessage()
    assert message.startswith(f"export.json {words}") and message.endswith(".")
    assert services.store.list_chats() == [] and services.store.deleted_chats() == []
    assert window.sidebar.chat_ids() == []


def test_conchs_own_json_export_comes_back_as_a_new_chat(
    qtbot: QtBot, window: MainWindow, services: AppServices, garden: str, tmp_path: Path
) -> None:
    out = window.export_chat(garden, tmp_path / "garden.json")
    assert out is not None

    [chat_id] = _import(qtbot, window, out)

    assert chat_id != garden
    assert [m.text for m in services.store.messages(chat_id)] == [
        "What stops slugs?",
        "Copper tape.",
    ]
    assert window.sidebar.titles()[0] == "Garden: slugs/snails?"
    assert window.statusBar().currentMessage() == "Imported 1 chat from Conch."


def test_an_import_shows_its_count_in_the_status_line_as_it_goes(
    qtbot: QtBot, window: MainWindow
) -> None:
    said: list[str] = []
    window.statusBar().messageChanged.connect(said.append)

    _import(qtbot, window, IMPORTS / "chatgpt-conversations.json")

    counts = [s for s in said if s.startswith("Importing chatgpt-conversations.json: ")]
    assert counts and counts[-1].endswith("6 of 6 messages…")
    assert said[-1] == "Imported 2 chats from ChatGPT."
