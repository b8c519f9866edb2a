"""Settings → Health: what Conch fixed or noticed by itself, newest first.

Healed "too long" refusals, summaries that failed, servers that could not be reached: each note
shows when it happened, which model, and (when known) the window involved. Reading the notes
never changes them; "Clear" empties the log after the person asks for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.health import HealthLog, HealthNote
from ui.row_list import RowList

TOPIC_WORDS: dict[str, str] = {
    "healed": "Healed",
    "too-long": "Too long",
    "summary-failed": "Summary failed",
    "unreachable": "Unreachable",
    "transcript-recovered": "Chat recovered",
    "window-learned": "Window learned",
    "learning": "Learning",
    "provider": "Provider",
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
        bits.append(note.model)
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
        self.topic = QLabel(topic_text(note.topic))
        self.topic.setObjectName("HealthTopic")
        self.topic.setProperty("topic", note.topic)
        self.meta = QLabel(note_meta(note))
        self.meta.setObjectName("HealthMeta")
        self.text = QLabel(note.text)
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


class HealthPage(QWidget):
    """The list of health notes, refreshed each time the page is shown."""

    def __init__(self, health: HealthLog, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("HealthPage")
        self._health = health
        self._rows: list[HealthRow] = []

        title = QLabel("Health")
        title.setObjectName("SettingsPageTitle")
        hint = QLabel(
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
        self.count = QLabel()
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


__all__ = ["TOPIC_WORDS", "HealthPage", "HealthRow", "note_meta", "note_time", "topic_text"]
