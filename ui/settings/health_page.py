"""Settings → Health: what Conch fixed or noticed by itself, newest first.

Healed "too long" refusals, summaries that failed, servers that could not be reached: each note
shows when it happened, which model, and (when known) the window involved. Reading the notes
never changes them; "Clear" empties the log after the person asks for it.

When the bundled model's runtime has crashed, a panel above the notes says how (the sentence
the chat showed), gives the command that rebuilds the runtime when the crash calls for it, shows
the runtime's last log lines, and offers "Start the local model again": after two crashes in a
row Conch starts it only when the person asks here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.health import HealthLog, HealthNote
from engines.local.bundled import CrashBook
from ui._widgets import pause, resume
from ui.plain import PlainLabel, shown_name
from ui.settings.row_list import RowList

log = logging.getLogger("conch.ui.health")

StartLocal = Callable[[], Awaitable[object]]

TOPIC_WORDS: dict[str, str] = {
    "healed": "Healed",
    "too-long": "Too long",
    "summary-failed": "Summary failed",
    "unreachable": "Unreachable",
    "transcript-recovered": "Chat recovered",
    "window-learned": "Window learned",
    "learning": "Learning",
    "provider": "Provider",
    "local-model": "Local model",
    "other": "Note",
}
SHOWN = 500  # the newest notes; the log keeps more


def topic_text(topic: str) -> str:
    return TOPIC_WORDS.get(topic, topic.replace("-", " ").capitalize() or "Note")


def note_time(timestamp: float, now: float | None = None) -> str:
    """ "Today 14:03", "Yesterday 09:12", "3 Oct 14:03", "3 Oct 2025 14:03"."""
    now = time.time() if now is None else now
    then = time.localtime(timestamp)
    today = time.localtime(now)
    clock = time.strftime("%H:%M", then)
    if then.tm_year == today.tm_year and then.tm_yday == today.tm_yday:
        return f"Today {clock}"
    yesterday = time.localtime(now - 86_400)
    if then.tm_year == yesterday.tm_year and then.tm_yday == yesterday.tm_yday:
        return f"Yesterday {clock}"
    if then.tm_year == today.tm_year:
        return f"{then.tm_mday} {time.strftime('%b', then)} {clock}"
    return f"{then.tm_mday} {time.strftime('%b %Y', then)} {clock}"


def note_meta(note: HealthNote, now: float | None = None) -> str:
    bits = [note_time(note.time, now)]
    if note.model:
        bits.append(shown_name(note.model))
    if note.window:
        bits.append(f"window {note.window:,} tokens")
    return " · ".join(bits)


class HealthRow(QFrame):
    """One note: a topic chip, the text, and when / which model."""

    def __init__(self, note: HealthNote, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.note = note
        self.setObjectName("HealthRow")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.topic = PlainLabel(topic_text(note.topic))
        self.topic.setObjectName("HealthTopic")
        self.topic.setProperty("topic", note.topic)
        self.meta = PlainLabel(note_meta(note))
        self.meta.setObjectName("HealthMeta")
        self.text = PlainLabel(note.text)
        self.text.setObjectName("HealthText")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(8)
        top.addWidget(self.topic)
        top.addWidget(self.meta, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.setSpacing(8)
        layout.addLayout(top)
        layout.addWidget(self.text)


class LocalModelPanel(QFrame):
    """The bundled runtime's latest crash: what happened, how to fix it, its log, a restart.

    ``crashes`` is read each time the page is shown; ``start_local`` starts the model (the
    services' ``start_bundled``), called only when the person presses the button.
    """

    def __init__(
        self,
        crashes: CrashBook,
        start_local: StartLocal | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("LocalModelPanel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._crashes = crashes
        self._start_local = start_local
        self._task: asyncio.Task[None] | None = None

        self.title = PlainLabel("Local model")
        self.title.setObjectName("HealthTopic")
        self.sentence = PlainLabel()
        self.sentence.setObjectName("HealthText")
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.command = PlainLabel()
        self.command.setObjectName("RuntimeCommand")
        self.command.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.command.setAccessibleName("The command that rebuilds the local runtime")
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.command.setFont(fixed)
        self.log = QPlainTextEdit()
        self.log.setObjectName("RuntimeLog")
        self.log.setReadOnly(True)
        self.log.setFont(fixed)
        self.log.setAccessibleName("The local runtime's last log lines")
        self.log.setMaximumHeight(160)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.start_button = QPushButton("Start the local model again")
        self.start_button.setObjectName("StartLocalModelButton")
        self.start_button.setEnabled(start_local is not None)
        self.result = PlainLabel()
        self.result.setProperty("role", "caption")
        self.result.setWordWrap(True)

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.result, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.setSpacing(8)
        layout.addWidget(self.title)
        layout.addWidget(self.sentence)
        layout.addWidget(self.command)
        layout.addWidget(self.log)
        layout.addLayout(buttons)
        self.start_button.clicked.connect(self.start_again)
        self.refresh()

    def refresh(self) -> None:
        crash = self._crashes.last()
        self.setVisible(crash is not None)
        if crash is None:
            return
        self.sentence.setText(crash.sentence(refused=crash.held))
        step = crash.next_step()
        self.command.setText(step.text if step.kind == "rebuild-runtime" else "")
        self.command.setVisible(bool(self.command.text()))
        self.log.setPlainText("\n".join(crash.log) or "(the runtime wrote nothing)")
        busy = self._task is not None and not self._task.done()
        self.start_button.setEnabled(self._start_local is not None and not busy)

    def start_again(self) -> asyncio.Task[None] | None:
        """The person asked: forget the crashes in a row and start the local model."""
        if self._start_local is None or (self._task is not None and not self._task.done()):
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.result.setText("Starting the local model needs the app's event loop.")
            return None
        self._crashes.clear()
        pause(self.start_button, self)
        self.result.setText("Starting the local model…")
        self._task = loop.create_task(self._start(self._start_local))
        return self._task

    async def _start(self, start: StartLocal) -> None:
        started: object = False
        try:
            started = await start()
        except Exception:  # the page must survive whatever starting does
            log.exception("starting the local model failed")
        if self._crashes.last() is not None:
            said = "The local model stopped again; see above."
        elif started is False:
            said = "The local model did not start; the notes below say why."
        else:
            said = "The local model is running again."
        self.result.setText(said)
        held = self.hasFocus()
        self.refresh()  # hidden when the runtime runs: no crash to show
        if self.isHidden():
            page = self.parentWidget()
            if held and page is not None:
                page.setFocus(Qt.FocusReason.OtherFocusReason)  # the notes' page, not the nav
        elif self._start_local is not None:
            resume(self.start_button, self)


class HealthPage(QWidget):
    """The list of health notes, refreshed each time the page is shown, under the local
    model's panel (shown only after a crash of its runtime)."""

    def __init__(
        self,
        health: HealthLog,
        parent: QWidget | None = None,
        *,
        crashes: CrashBook | None = None,
        start_local: StartLocal | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("HealthPage")
        self._health = health
        self._rows: list[HealthRow] = []
        self.local_model = (
            LocalModelPanel(crashes, start_local, self) if crashes is not None else None
        )

        title = PlainLabel("Health")
        title.setObjectName("SettingsPageTitle")
        hint = PlainLabel(
            "What Conch fixed or noticed on its own: answers it made fit after a model said "
            "“too long”, summaries that failed, servers it could not reach."
        )
        hint.setObjectName("SettingsHint")
        hint.setWordWrap(True)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setProperty("variant", "ghost")
        self.clear_button = QPushButton("Clear")
        self.clear_button.setProperty("variant", "ghost")
        self.clear_button.setToolTip("Forget every note (the chats are not touched)")
        self.count = PlainLabel()
        self.count.setProperty("role", "caption")

        self.row_list = RowList(
            "HealthList",
            "Nothing to report. When Conch heals a refusal or a server is unreachable, "
            "a note appears here.",
        )
        self.list_host = self.row_list.host
        self.empty = self.row_list.empty

        bar = QHBoxLayout()
        bar.setSpacing(8)
        bar.addWidget(self.count, 1)
        bar.addWidget(self.refresh_button)
        bar.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 24, 24, 16)
        layout.setSpacing(12)
        layout.addWidget(title)
        layout.addWidget(hint)
        if self.local_model is not None:
            layout.addWidget(self.local_model)
        layout.addLayout(bar)
        layout.addWidget(self.row_list, 1)

        self.refresh_button.clicked.connect(self.refresh)
        self.clear_button.clicked.connect(self.clear)
        self.refresh()

    def rows(self) -> list[HealthRow]:
        return list(self._rows)

    def refresh(self) -> None:
        notes = sorted(self._health.notes(limit=SHOWN), key=lambda n: n.time, reverse=True)
        self._show(notes)
        if self.local_model is not None:
            self.local_model.refresh()

    def clear(self) -> None:
        self._health.clear()
        self.refresh()

    def _show(self, notes: Sequence[HealthNote]) -> None:
        self.row_list.clear(self._rows)
        self._rows = [HealthRow(note, self.list_host) for note in notes]
        self.row_list.fill(self._rows)
        self.clear_button.setEnabled(bool(notes))
        n = len(notes)
        self.count.setText("" if not n else f"{n} note{'s' if n != 1 else ''}, newest first")

    def showEvent(self, event: QShowEvent) -> None:
        self.refresh()
        super().showEvent(event)


__all__ = [
    "TOPIC_WORDS",
    "HealthPage",
    "HealthRow",
    "LocalModelPanel",
    "note_meta",
    "note_time",
    "topic_text",
]
