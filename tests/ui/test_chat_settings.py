"""Chat settings in the window: the panel opens from the chat's header without blocking the chat,
saves what the person set (kept after a restart), the next message carries it, the meter shows
the room it takes, and Settings → Chat holds the system prompt every chat starts with."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox
from pytestqt.qtbot import QtBot

from app.services import OWN_PROMPT_HEADING, AppServices, build_services
from app.settings import SettingsStore
from app.sqlite import open_database
from app.store import _STEPS, ChatSettings, ChatStore
from bench._scripted import ScriptedAdapter
from engines.base import ModelInfo, TurnInput
from engines.mock import MockEngine, Reply
from tests.ui.windows import open_window
from tests.waits import HANG_MS
from ui.chat.chat_settings import (
    AUTOMATIC,
    MODE_WORDS,
    SERVER_DEFAULT,
    ChatSettingsPanel,
    DefaultPromptPage,
)
from ui.chat.model_picker import KEY_ROLE
from ui.main_window import MainWindow

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

OWN = "Answer like a ship's captain."
DEFAULT = "Answer in plain English."


def close_window(qtbot: QtBot, win: MainWindow) -> None:
    close = asyncio.get_running_loop().create_task(win.aclose())
    qtbot.waitUntil(close.done, timeout=HANG_MS)


def untick(qtbot: QtBot, panel: ChatSettingsPanel) -> None:
    """Turn "Use my system prompt from Settings" off, as from the keyboard."""
    panel.use_default.setFocus()
    qtbot.keyClick(panel.use_default, Qt.Key.Key_Space)
    assert not panel.use_default.isChecked()


def panel_of(win: MainWindow) -> ChatSettingsPanel:
    panel = win._chat_settings
    assert panel is not None
    return panel


def test_the_panel_saves_what_the_person_set_and_the_next_message_carries_it(
    qtbot: QtBot, services: AppServices
) -> None:
    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    before = win.composer.meter.budget

    qtbot.mouseClick(win.chat_settings_button, Qt.MouseButton.LeftButton)
    panel = panel_of(win)
    assert panel.isVisible() and not panel.isModal()
    assert panel.temperature.text() == SERVER_DEFAULT and panel.answer.text() == AUTOMATIC
    assert panel.use_default.isChecked() and panel.prompt.isReadOnly()

    untick(qtbot, panel)
    assert not panel.prompt.isReadOnly()
    panel.prompt.setFocus()
    qtbot.keyClicks(panel.prompt, OWN * 40)
    assert panel.prompt_cost.text().startswith("About ")
    panel.temperature.setValue(0.7)
    panel.answer.setValue(10_000)
    qtbot.mouseClick(
        panel.buttons.button(QDialogButtonBox.StandardButton.Save), Qt.MouseButton.LeftButton
    )

    assert not panel.isVisible()
    assert services.store.chat_settings(chat_id) == ChatSettings(
        system_prompt=OWN * 40, temperature=0.7, max_answer_tokens=10_000
    )
    # The meter has less room: the prompt and the answer's reserve are counted.
    # 32K window: 4,915 tokens kept for an answer by default, 10,000 now, plus the prompt.
    assert win.composer.meter.budget < before - 5_000

    # The next message carries them to the engine.
    bridge = win.bridge()
    assert bridge is not None
    engine = MockEngine([Reply("Aye.")], fold_every=0, delay=0.002)
    bridge.conversation.engine = engine
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Where to?")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(engine.inputs) and not bridge.busy, timeout=HANG_MS)
    turn: TurnInput = engine.inputs[0]
    assert (turn.temperature, turn.max_answer_tokens) == (0.7, 10_000)
    assert f"{OWN_PROMPT_HEADING}\n{OWN}" in turn.system
    close_window(qtbot, win)


def test_a_restart_shows_the_same_settings(
    qtbot: QtBot, data_dir: Path, services: AppServices
) -> None:
    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    win.show_chat_settings()
    panel = panel_of(win)
    untick(qtbot, panel)
    panel.prompt.setFocus()
    qtbot.keyClicks(panel.prompt, OWN)
    panel.temperature.setValue(1.2)
    panel.answer.setValue(512)
    assert panel.save()
    close_window(qtbot, win)
    services.store.close()

    again = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        win = open_window(qtbot, again)
        assert win.open_chat(chat_id)
        win.show_chat_settings()
        panel = panel_of(win)
        assert not panel.use_default.isChecked()
        assert panel.prompt.toPlainText() == OWN
        assert panel.temperature.value() == pytest.approx(1.2)
        assert panel.answer.value() == 512
        close_window(qtbot, win)
    finally:
        again.store.close()
        again.memories.close()
        again.health.close()


def test_the_default_prompt_is_written_in_settings_and_shown_in_a_chat_that_uses_it(
    qtbot: QtBot, data_dir: Path, services: AppServices
) -> None:
    page = DefaultPromptPage(services.settings)
    qtbot.addWidget(page)
    page.show()
    assert not page.save_button.isEnabled()  # nothing to save yet
    page.prompt.setFocus()
    qtbot.keyClicks(page.prompt, DEFAULT)
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    assert services.settings.settings.system_prompt == DEFAULT
    assert SettingsStore.in_dir(data_dir).settings.system_prompt == DEFAULT  # on disk
    assert page.state.text().startswith("Saved")

    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    win.show_chat_settings()
    panel = panel_of(win)
    assert panel.use_default.isChecked() and panel.prompt.toPlainText() == DEFAULT
    bridge = win.bridge(chat_id)
    assert bridge is not None
    model = bridge.conversation.model
    assert DEFAULT in services.system_prompt(model, chat_id)
    # Turning the default off for this chat and leaving the box empty: no prompt at all.
    untick(qtbot, panel)
    assert panel.prompt.toPlainText() == ""
    assert panel.save()
    assert services.store.chat_settings(chat_id).system_prompt == ""
    assert DEFAULT not in services.system_prompt(model, chat_id)
    close_window(qtbot, win)


def test_the_settings_window_has_a_chat_page(qtbot: QtBot, services: AppServices) -> None:
    from ui.settings.settings_dialog import SettingsDialog

    dialog = SettingsDialog.for_services(services)
    qtbot.addWidget(dialog)
    dialog.show_page("chat")
    assert dialog.current_page() == "chat"
    assert dialog.chat_page.isVisibleTo(dialog)


@pytest.mark.allow_log("conch.sqlite")  # a newer file is logged
def test_a_save_that_fails_says_why_and_keeps_what_was_typed(qtbot: QtBot, data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Newer")
    store.close()
    # A newer Conch wrote the file since: this one opens it read-only.
    newer = open_database(
        data_dir / ChatStore.FILE_NAME, (*_STEPS, "CREATE TABLE later (x);"), what="test"
    )
    newer.db.close()
    store = ChatStore.in_dir(data_dir)
    try:
        panel = ChatSettingsPanel(store, lambda: "")
        qtbot.addWidget(panel)
        panel.show_chat(chat.id, [], "")
        panel.use_default.setChecked(False)
        panel.prompt.setPlainText(OWN)
        assert not panel.save()
        assert panel.isVisible() and panel.prompt.toPlainText() == OWN
        assert panel.error.isVisibleTo(panel)
        assert "newer Conch" in panel.error.text()
    finally:
        store.close()


def test_the_panels_model_list_follows_the_model_picker(
    qtbot: QtBot, services: AppServices
) -> None:
    win = open_window(qtbot, services)
    win.new_chat()
    win.show_chat_settings()
    panel = panel_of(win)
    assert panel.model.currentData() == "mock/mock-model"

    # Another model picked in the window's picker: the open panel shows it too.
    picker = win.picker
    combo = picker.combo
    (row,) = [r for r in range(combo.count()) if combo.itemData(r, KEY_ROLE) == "mock/mock-small"]
    picker.combo.activated.emit(row)
    bridge = win.bridge()
    assert bridge is not None and bridge.conversation.model.key == "mock/mock-small"
    assert panel.model.currentData() == "mock/mock-small"

    # Models that come and go in the picker come and go in the panel.
    wide = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=128_000)
    added = asyncio.ensure_future(
        services.catalogue.add_provider(ScriptedAdapter(name="openai", models=[wide]))
    )
    qtbot.waitUntil(added.done, timeout=HANG_MS)
    keys = [panel.model.itemData(i) for i in range(panel.model.count())]
    assert "openai/gpt-wide" in keys
    services.catalogue.remove_provider("openai")
    keys = [panel.model.itemData(i) for i in range(panel.model.count())]
    assert "openai/gpt-wide" not in keys and "mock/mock-model" in keys
    assert panel.model.currentData() == "mock/mock-small"
    close_window(qtbot, win)


def test_a_claude_code_chat_chooses_how_it_may_act_and_its_model(
    qtbot: QtBot, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    claude = ModelInfo(provider="programs", id="claude-code", label="Claude Code", context=1)
    local = ModelInfo(provider="mock", id="mock-model", label="Mock model", context=32_768)
    try:
        on_local = store.create_chat(model_key=local.key)
        on_claude = store.create_chat(model_key=claude.key)
        panel = ChatSettingsPanel(store, lambda: "")
        qtbot.addWidget(panel)
        # A chat on a model that only answers has no such choices.
        panel.show_chat(on_local.id, [local, claude], local.key)
        assert not panel.program_mode.isVisibleTo(panel)
        assert not panel.program_model.isVisibleTo(panel)

        panel.show_chat(on_claude.id, [local, claude], claude.key)
        assert panel.program_mode.isVisibleTo(panel) and panel.program_model.isVisibleTo(panel)
        assert panel.program_mode.currentText() == MODE_WORDS[None]  # it asks, by default
        panel.program_mode.setFocus()
        qtbot.keyClick(panel.program_mode, Qt.Key.Key_Down)  # the next: edit without asking
        assert panel.program_mode.currentText() == MODE_WORDS["accept-edits"]
        panel.program_model.setFocus()
        qtbot.keyClicks(panel.program_model, "opus")
        assert panel.save()
        got = store.chat_settings(on_claude.id)
        assert (got.program_mode, got.program_model) == ("accept-edits", "opus")

        # Opened again, it shows what was saved; back to asking keeps no mode at all.
        panel.show_chat(on_claude.id, [local, claude], claude.key)
        assert panel.program_mode.currentText() == MODE_WORDS["accept-edits"]
        assert panel.program_model.currentText() == "opus"
        panel.program_mode.setCurrentIndex(0)
        panel.program_model.setCurrentText("")
        assert panel.save()
        got = store.chat_settings(on_claude.id)
        assert (got.program_mode, got.program_model) == (None, None)
    finally:
        store.close()


def test_a_typed_prompt_left_unsaved_says_so_when_settings_opens_again(
    qtbot: QtBot, services: AppServices
) -> None:
    from ui.settings.settings_dialog import SettingsDialog

    dialog = SettingsDialog.for_services(services)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_page("chat")
    page = dialog.chat_page
    page.prompt.setFocus()
    qtbot.keyClicks(page.prompt, DEFAULT)
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)  # closed without pressing Save
    qtbot.waitUntil(lambda: not dialog.isVisible())
    dialog.show()
    dialog.show_page("chat")
    # The words are still there, and the page says that no chat follows them yet.
    assert page.prompt.toPlainText() == DEFAULT
    assert services.settings.settings.system_prompt == ""
    assert page.state.isVisibleTo(dialog) and "Not saved" in page.state.text()
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    assert services.settings.settings.system_prompt == DEFAULT
    assert page.state.text().startswith("Saved")
