"""Settings → Programs: where each program Conch can chat through lives, when not on the PATH.

One row per program command ("claude", "codex", "gemini", "copilot"): what it is, a field for
the person's own path (empty: found on the PATH), and whether it is found, with the command
that installs it when it is not. A path that does not lead to a program is not saved; the row
says so and the field keeps what was typed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLineEdit, QWidget

from app.settings import SettingsError, SettingsStore
from engines.programs.catalogue import CLAUDE_CODE, PROGRAMS
from ui._widgets import list_card, page_layout
from ui.plain import PlainLabel
from ui.theme import set_style_property

# Commands a Python package carries its own copy of (Claude Code's CLI in the SDK's wheel).
_SDK_CARRIED = {p.command[0] for p in PROGRAMS if p.key == CLAUDE_CODE}


def _sdk_installed() -> bool:
    return importlib.util.find_spec("claude_agent_sdk") is not None


@dataclass(frozen=True)
class ProgramCommand:
    """One command and the programs that run through it (Codex serves three entries)."""

    name: str  # the usual command: "codex"
    labels: tuple[str, ...]
    note: str
    install: str


def program_commands() -> list[ProgramCommand]:
    out: dict[str, ProgramCommand] = {}
    for p in PROGRAMS:
        name = p.command[0]
        seen = out.get(name)
        if seen is None:
            out[name] = ProgramCommand(name, (p.label,), p.note, p.install)
        else:
            out[name] = ProgramCommand(name, (*seen.labels, p.label), seen.note, seen.install)
    return list(out.values())


def where(path: str, usual: str) -> str | None:
    """The program a path (or, empty, the usual command on the PATH) leads to, or None."""
    path = path.strip()
    if not path:
        return shutil.which(usual)
    found = shutil.which(path)
    if found is not None:
        return found
    candidate = Path(path).expanduser()
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


class ProgramRow(QFrame):
    def __init__(self, command: ProgramCommand, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.command = command
        self.setObjectName("ProviderRow")
        title = PlainLabel(command.labels[0])
        title.setObjectName("ProviderName")
        title.setMinimumWidth(120)
        self.note = PlainLabel(command.note)
        self.note.setProperty("role", "caption")
        self.note.setWordWrap(True)
        self.field = QLineEdit()
        self.field.setObjectName(f"program-{command.name}")
        self.field.setPlaceholderText(f"{command.name} (found on the PATH)")
        self.field.setAccessibleName(f"Path to {command.labels[0]}")
        self.result = PlainLabel()
        self.result.setObjectName("TestResult")
        self.result.setWordWrap(True)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 12, 0, 12)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.addWidget(title, 0, 0)
        grid.addWidget(self.field, 0, 1)
        grid.addWidget(self.note, 1, 1)
        grid.addWidget(self.result, 2, 1)
        grid.setColumnStretch(1, 1)

    def show_result(self, text: str, state: str) -> None:
        set_style_property(self.result, "state", state)
        self.result.setText(text)


class ProgramsPage(QWidget):
    """The Programs page. Saves a path the moment its field is left.

    Signals:
        programs_changed(): a program's path was saved (the picker lists programs again).
    """

    programs_changed = Signal()

    def __init__(self, settings: SettingsStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self.rows: dict[str, ProgramRow] = {}
        layout = page_layout(
            self,
            "Programs",
            "Programs that keep their own chat show in the model picker when Conch finds them "
            "on the PATH. If yours lives elsewhere, give its full path.",
        )
        card, inner = list_card()
        saved = settings.settings.program_paths
        for command in program_commands():
            row = ProgramRow(command)
            row.field.setText(saved.get(command.name, ""))
            row.field.editingFinished.connect(lambda c=command.name: self.save(c))
            self.rows[command.name] = row
            inner.addWidget(row)
            self._show_found(command.name)
        layout.addWidget(card)
        layout.addStretch(1)

    def save(self, name: str) -> bool:
        """Save the path typed for ``name``; False (the row says why) when it is no program."""
        row = self.rows[name]
        path = row.field.text().strip()
        if path and where(path, name) is None:
            row.show_result(
                f"“{path}” is not a program Conch can run. Give the full path to "
                f"{row.command.labels[0]}, or leave the field empty to look on the PATH.",
                "error",
            )
            return False
        paths = dict(self._settings.settings.program_paths)
        if paths.get(name, "") == path:
            self._show_found(name)
            return True
        if path:
            paths[name] = path
        else:
            paths.pop(name, None)
        try:
            self._settings.update(program_paths=paths)
        except SettingsError as exc:
            row.show_result(str(exc), "error")
            return False
        self._show_found(name)
        self.programs_changed.emit()
        return True

    def _show_found(self, name: str) -> None:
        row = self.rows[name]
        own = self._settings.settings.program_paths.get(name, "")
        found = where(own, name)
        if found is None and not own and name in _SDK_CARRIED and _sdk_installed():
            row.show_result("Found: the copy that comes with the Claude Agent SDK", "ok")
        elif found is not None:
            row.show_result(f"Found: {found}", "ok")
        else:
            row.show_result(f"Not installed. Install it with “{row.command.install}”.", "error")
