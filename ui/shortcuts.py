"""Every keyboard shortcut, in one table, and the sheet that lists them (Ctrl+/).

The window installs its shortcuts from ``SHORTCUTS`` by action name, so the sheet cannot miss
one; keys a widget handles itself (Enter in the message box, Delete in the chat list) are
listed here too, with where they work.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QGridLayout, QPushButton, QVBoxLayout, QWidget

from ui.palette import PALETTE_SHORTCUT, shortcut_text
from ui.plain import PlainLabel

ANYWHERE = "Anywhere"


@dataclass(frozen=True, slots=True)
class Shortcut:
    keys: str  # portable text ("Ctrl+N"; Qt shows ⌘N on macOS); alternatives split by " / "
    does: str
    where: str = ANYWHERE
    action: str = ""  # the window's action this key runs; "" when a widget handles it


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut("Ctrl+N", "Start a new chat", action="new-chat"),
    Shortcut(PALETTE_SHORTCUT, "Open the command palette", action="palette"),
    Shortcut("Ctrl+,", "Open Settings", action="settings"),
    Shortcut("Ctrl+F", "Search the chats", action="search"),
    Shortcut("Ctrl+L", "Go to the message box", action="composer"),
    Shortcut("F2", "Rename the open chat", action="rename"),
    Shortcut("Ctrl+/", "Show these shortcuts", action="shortcuts"),
    Shortcut("Ctrl+Q", "Quit Conch (an answer being written keeps what arrived)", action="quit"),
    Shortcut("Enter", "Send the message", "Message box"),
    Shortcut("Shift+Enter", "Start a new line", "Message box"),
    Shortcut("Esc", "Stop the answer, keeping what arrived", "Message box"),
    Shortcut("Ctrl+C", "Copy the chosen message", "Messages"),
    Shortcut("Enter", "Open its thinking, a long message or a card", "Messages"),
    Shortcut(
        "Menu / Shift+F10",
        "Copy, edit, continue, regenerate or delete the chosen message",
        "Messages",
    ),
    Shortcut("Delete", "Delete the chosen message (Undo brings it back)", "Messages"),
    Shortcut(
        "Enter", "Send the edited message again (Esc: leave it as it was)", "Editing a message"
    ),
    Shortcut("Delete", "Delete the chosen chat (Undo brings it back)", "Chat list"),
    Shortcut("Up / Down", "Choose a command", "Command palette"),
    Shortcut("Enter", "Run the chosen command", "Command palette"),
    Shortcut("Esc", "Close the palette or a dialog", "Command palette"),
)


def window_shortcuts() -> dict[str, str]:
    """The window's own shortcuts: action name → portable keys."""
    return {s.action: s.keys for s in SHORTCUTS if s.action}


def _key_text(keys: str) -> str:
    return " / ".join(shortcut_text(k.strip()) for k in keys.split(" / "))


class ShortcutsSheet(QDialog):
    """A small window listing ``SHORTCUTS`` by where they work; Esc or Close closes it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ShortcutsSheet")
        self.setWindowTitle("Keyboard shortcuts")
        self.setAccessibleName("Keyboard shortcuts")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(6)
        grid = QGridLayout()
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(4)
        row = 0
        where = ""
        for shortcut in SHORTCUTS:
            if shortcut.where != where:
                where = shortcut.where
                heading = PlainLabel(where, self)
                heading.setProperty("role", "heading")
                heading.setStyleSheet("font-weight: 600; margin-top: 8px;")
                grid.addWidget(heading, row, 0, 1, 2)
                row += 1
            keys = PlainLabel(_key_text(shortcut.keys), self)
            keys.setObjectName("ShortcutKeys")
            keys.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(keys, row, 0)
            grid.addWidget(PlainLabel(shortcut.does, self), row, 1)
            row += 1
        layout.addLayout(grid)
        close = QPushButton("Close", self)
        close.clicked.connect(self.accept)
        close.setDefault(True)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignRight)
