"""One chat's settings (its model, system prompt, temperature and answer length; on Claude Code
how it may act and which of its models it runs), and the page in Settings where the person
writes the system prompt every chat starts with.

Both are non-modal and save only when the person says so; a failed save says why in one
sentence and keeps what was typed. The cost of a system prompt is shown in tokens, because it
is sent with every message and leaves that much less room for the chat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import SettingsError, SettingsStore
from app.sqlite import StorageError
from app.store import (
    ANSWER_TOKENS_MAX,
    TEMPERATURE_MAX,
    ChatSettings,
    ChatStore,
)
from engines.base import ModelInfo, ProgramMode
from engines.programs.catalogue import CLAUDE_CODE
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.window import estimate_tokens
from ui.chat.model_picker import ModelPicker, entry_text
from ui.plain import PlainLabel, shown_name
from ui.settings.settings_sync import listen_to_settings

TEMPERATURE_STEP = 0.1
ANSWER_STEP = 256
# The spin boxes' lowest value stands for "not set" (shown as these words).
SERVER_DEFAULT = "The model's own"
AUTOMATIC = "Automatic"
# How Claude Code may act in the chat, as the person reads it (None: its own default, asking).
MODE_WORDS: dict[ProgramMode | None, str] = {
    None: "Ask before each action",
    "accept-edits": "Edit files without asking",
    "plan": "Plan only, change nothing",
}
PROGRAM_MODELS = ("sonnet", "opus", "haiku")  # the names Claude Code takes for its models
OWN_CHOICE = "Claude Code's own choice"
NOT_SAVED = "Not saved yet: chats follow it once you press Save."


def prompt_cost(text: str) -> str:
    """ "About 1,200 tokens, sent with every message." (empty text: nothing to say)."""
    tokens = estimate_tokens(text.strip())
    if not tokens:
        return "No system prompt: nothing extra is sent."
    return f"About {tokens:,} tokens, sent with every message."


def _label(text: str, object_name: str = "") -> QLabel:
    label = PlainLabel(text)
    label.setWordWrap(True)
    if object_name:
        label.setObjectName(object_name)
    return label


def _error_label() -> QLabel:
    label = _label("", "TestResult")
    label.setProperty("state", "error")
    label.hide()
    return label


class ChatSettingsPanel(QDialog):
    """The settings of the chat it shows (``show_chat``). Non-modal: the chat stays usable.

    Signals:
        saved(str): the chat's settings were saved (its id); the window updates its meter.
        model_chosen(str, ModelInfo): another model was picked for the chat (its id).
    """

    saved = Signal(str)
    model_chosen = Signal(str, object)

    def __init__(
        self,
        store: ChatStore,
        default_prompt: Callable[[], str],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ChatSettingsPanel")
        self.setWindowTitle("Chat settings")
        self.setModal(False)
        self.resize(560, 520)
        self._store = store
        self._default_prompt = default_prompt
        self.chat_id = ""
        self._models: list[ModelInfo] = []
        self._picker: ModelPicker | None = None

        self.heading = _label("", "SettingsPageTitle")
        self.model = QComboBox()
        self.model.setObjectName("ChatSettingsModel")

        self.use_default = QCheckBox("Use my system prompt from Settings")
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("ChatSettingsPrompt")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setPlaceholderText("No system prompt in this chat")
        self.prompt_cost = _label("", "SettingsHint")

        self.temperature = QDoubleSpinBox()
        self.temperature.setDecimals(1)
        self.temperature.setSingleStep(TEMPERATURE_STEP)
        self.temperature.setRange(-TEMPERATURE_STEP, TEMPERATURE_MAX)
        self.temperature.setSpecialValueText(SERVER_DEFAULT)
        self.temperature.setToolTip("Lower is more predictable, higher more varied.")

        self.answer = QSpinBox()
        self.answer.setRange(0, ANSWER_TOKENS_MAX)
        self.answer.setSingleStep(ANSWER_STEP)
        self.answer.setSuffix(" tokens")
        self.answer.setSpecialValueText(AUTOMATIC)
        self.answer.setToolTip(
            "The longest answer the model may write. Conch keeps that much room free for it, "
            "so a higher limit leaves less room for the chat, which is summarised sooner."
        )

        # Shown for a chat on Claude Code only: it acts by itself, and runs a model of its own.
        self.program_mode = QComboBox()
        self.program_mode.setObjectName("ChatSettingsProgramMode")
        for mode, words in MODE_WORDS.items():
            self.program_mode.addItem(words, mode)
        self.program_mode.setToolTip(
            "Whether Claude Code asks before it edits files or runs commands, edits files "
            "without asking, or only reads and plans."
        )
        self.program_model = QComboBox()
        self.program_model.setObjectName("ChatSettingsProgramModel")
        self.program_model.setEditable(True)
        self.program_model.addItems(["", *PROGRAM_MODELS])
        line = self.program_model.lineEdit()
        if line is not None:
            line.setPlaceholderText(OWN_CHOICE)
        self.program_model.setToolTip(
            "A model name Claude Code knows (sonnet, opus, haiku, or a full model id); empty "
            "leaves its own choice."
        )

        self.form = QFormLayout()
        for words, field in (
            ("Model", self.model),
            ("Temperature", self.temperature),
            ("Longest answer", self.answer),
            ("Permissions", self.program_mode),
            ("Claude Code's model", self.program_model),
        ):
            name = PlainLabel(words)  # as the row's own label would be, but plain text
            name.setBuddy(field)
            self.form.addRow(name, field)

        self.error = _error_label()
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 20, 20, 16)
        layout.setSpacing(10)
        layout.addWidget(self.heading)
        layout.addLayout(self.form)
        layout.addWidget(_label("System prompt", "SettingsSection"))
        layout.addWidget(self.use_default)
        layout.addWidget(self.prompt, 1)
        layout.addWidget(self.prompt_cost)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

        self._own_text = ""  # what the chat's own prompt box held before "use default" was ticked
        self.use_default.toggled.connect(self._use_default_toggled)
        self.prompt.textChanged.connect(self._show_cost)
        self.model.activated.connect(self._model_activated)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.hide)

    # --- showing one chat -------------------------------------------------------------------

    def show_chat(self, chat_id: str, models: Sequence[ModelInfo], current_key: str) -> None:
        """Fill the panel with what the chat has now, and show it."""
        self.chat_id = chat_id
        chat = self._store.get_chat(chat_id)
        self.heading.setText(shown_name(chat.title) if chat is not None else "Chat settings")
        self.set_models(models, current_key)
        values = self._store.chat_settings(chat_id)
        self._own_text = values.system_prompt or ""
        self.use_default.setChecked(values.system_prompt is None)
        self._use_default_toggled(values.system_prompt is None)
        self.temperature.setValue(
            self.temperature.minimum() if values.temperature is None else values.temperature
        )
        self.answer.setValue(values.max_answer_tokens or 0)
        self.program_mode.setCurrentIndex(max(0, self.program_mode.findData(values.program_mode)))
        self.program_model.setCurrentText(values.program_model or "")
        self._show_program_rows(current_key)
        self.error.hide()
        self.show()
        self.raise_()
        self.activateWindow()

    def follow(self, picker: ModelPicker) -> None:
        """Keep the model list as ``picker`` has it: models that come or go, and another model
        picked there for the chat this panel shows."""
        self._picker = picker
        picker.shown_changed.connect(self._picker_changed)

    def _picker_changed(self) -> None:
        picker = self._picker
        if picker is None or not self.chat_id:
            return
        chat = self._store.get_chat(self.chat_id)
        if chat is None:
            return
        # The picker shows the open chat; the panel may show another one, whose model the
        # chat log keeps (a switch is saved there before the picker shows it).
        self.set_models(picker.listed(), chat.model_key)
        self._show_program_rows(chat.model_key)

    def set_models(self, models: Sequence[ModelInfo], current_key: str) -> None:
        self._models = [m for m in models if m.ready or m.key == current_key]
        self.model.clear()
        for m in self._models:
            self.model.addItem(entry_text(m), m.key)
        index = self.model.findData(current_key)
        self.model.setCurrentIndex(index)

    def values(self) -> ChatSettings:
        """The settings as the panel shows them (what Save keeps)."""
        temperature: float | None = round(self.temperature.value(), 1)
        if self.temperature.value() < 0:
            temperature = None
        answer = self.answer.value() or None
        prompt = None if self.use_default.isChecked() else self.prompt.toPlainText()
        kept = self._store.chat_settings(self.chat_id)  # what this panel does not show
        mode = self.program_mode.currentData()
        return ChatSettings(
            system_prompt=prompt,
            temperature=temperature,
            max_answer_tokens=answer,
            tool_servers=kept.tool_servers,
            program_mode=mode if mode in MODE_WORDS else None,
            program_model=self.program_model.currentText().strip() or None,
        )

    def save(self) -> bool:
        """Keep the settings; True when they were saved (the panel then closes)."""
        if not self.chat_id:
            return False
        try:
            self._store.set_chat_settings(self.chat_id, self.values())
        except StorageError as exc:
            # The panel stays open with what was typed, so nothing is lost.
            self.error.setText(str(exc))
            self.error.show()
            return False
        self.error.hide()
        self.saved.emit(self.chat_id)
        self.hide()
        return True

    # --- internals --------------------------------------------------------------------------

    def _use_default_toggled(self, on: bool) -> None:
        if on:
            if not self.prompt.isReadOnly():
                self._own_text = self.prompt.toPlainText()
            self.prompt.setPlainText(self._default_prompt())
            self.prompt.setPlaceholderText("Your system prompt in Settings is empty")
        else:
            self.prompt.setPlainText(self._own_text)
            self.prompt.setPlaceholderText("No system prompt in this chat")
        self.prompt.setReadOnly(on)
        self._show_cost()

    def _show_cost(self) -> None:
        self.prompt_cost.setText(prompt_cost(self.prompt.toPlainText()))

    def _model_activated(self, index: int) -> None:
        if 0 <= index < len(self._models):
            self._show_program_rows(self._models[index].key)
            self.model_chosen.emit(self.chat_id, self._models[index])

    def _show_program_rows(self, model_key: str) -> None:
        on_claude_code = model_key == f"{PROGRAMS}/{CLAUDE_CODE}"
        self.form.setRowVisible(self.program_mode, on_claude_code)
        self.form.setRowVisible(self.program_model, on_claude_code)


class DefaultPromptPage(QWidget):
    """Settings → Chat: the system prompt every chat starts with."""

    def __init__(self, settings: SettingsStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("DefaultSystemPrompt")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setPlaceholderText("For example: Answer briefly, in British English.")
        self.prompt.setPlainText(settings.settings.system_prompt)
        self.cost = _label("", "SettingsHint")
        self.save_button = QPushButton("Save")
        self.save_button.setProperty("variant", "primary")
        self.state = _label("", "SettingsHint")
        self.error = _error_label()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 24, 24, 24)
        layout.setSpacing(12)
        layout.addWidget(_label("Chat", "SettingsPageTitle"))
        layout.addWidget(
            _label(
                "Your system prompt: instructions the model reads before every chat, such as "
                "how to answer or what to call you. A chat can have its own instead (Chat "
                "settings, in the chat's header).",
                "SettingsHint",
            )
        )
        layout.addWidget(self.prompt, 1)
        layout.addWidget(self.cost)
        row = QHBoxLayout()
        row.addWidget(self.save_button)
        row.addWidget(self.state, 1)
        layout.addLayout(row)
        layout.addWidget(self.error)

        self.prompt.textChanged.connect(self._changed)
        self.save_button.clicked.connect(self.save)
        self._changed()
        self._stop_listening = listen_to_settings(settings, self, DefaultPromptPage._on_settings)
        self.destroyed.connect(self._stop_listening)

    def save(self) -> bool:
        try:
            self._settings.update(system_prompt=self.prompt.toPlainText().strip())
        except SettingsError as exc:
            self.error.setText(f"{exc} What you wrote is still here; try again.")
            self.error.show()
            return False
        self.error.hide()
        self.state.setText("Saved. New messages in every chat that uses it follow it.")
        return True

    def _changed(self) -> None:
        self.cost.setText(prompt_cost(self.prompt.toPlainText()))
        unsaved = self.prompt.toPlainText().strip() != self._settings.settings.system_prompt
        # Settings keeps the typed words when it is closed, so they look saved when it opens
        # again while no chat uses them (and a restart drops them): say so beside Save.
        self.state.setText(NOT_SAVED if unsaved else "")
        self.save_button.setEnabled(unsaved)

    def _on_settings(self, settings: object) -> None:
        saved = getattr(settings, "system_prompt", "")
        if self.prompt.toPlainText().strip() != saved and not self.save_button.isEnabled():
            self.prompt.setPlainText(saved)
        self._changed()


__all__ = ["ChatSettingsPanel", "DefaultPromptPage", "prompt_cost"]
