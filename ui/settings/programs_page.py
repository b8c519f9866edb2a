"""Settings → Programs: where each program Conch can chat through lives, when not on the PATH,
and the ACP agents the person adds.

One row per program command ("claude", "codex", "gemini", "copilot"): what it is, a field for
the person's own path (empty: found on the PATH), and whether it is found, with the command
that installs it when it is not. A path that does not lead to a program is not saved; the row
says so and the field keeps what was typed.

Below, any ACP agent is added by command, arguments and environment (run exactly as given; a
secret value goes to the keyring), or imported from Zed's ``agent_servers``. Each program
has a box that gives it Conch's MCP servers (Settings → Tools), off until ticked; Codex's one
box covers its three entries. Bad input is one sentence under the form; nothing typed is lost.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QWidget,
)

from app.program_agents import AgentsError, ProgramAgents
from app.secrets import SecretStore, SessionSecrets
from app.settings import SettingsError, SettingsStore
from app.tools import ToolsError, parse_pairs, split_args
from engines.programs.agents import AgentConfig
from engines.programs.catalogue import CLAUDE_CODE, PROGRAMS
from engines.tools.config import SecretRef
from ui._widgets import form_card, hint_label, list_card, page_layout
from ui.plain import PlainLabel
from ui.settings.import_form import heading, import_card, pick_json_file, read_import, result_label
from ui.theme import set_style_property

TOOLS_BOX = "Give it Conch's tools (Settings → Tools)"
NO_AGENTS = "No agents added yet. Add one by its command below, or import Zed's agent_servers."
SECRET_SHOWN = "•••"
TITLE_MIN = 120  # the narrowest a row's name column gets

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
    tool_keys: tuple[str, ...] = ()  # its programs that take Conch's MCP servers


def program_commands() -> list[ProgramCommand]:
    out: dict[str, ProgramCommand] = {}
    for p in PROGRAMS:
        name = p.command[0]
        seen = out.get(name)
        keys = (p.key,) if p.takes_tools else ()
        if seen is None:
            out[name] = ProgramCommand(name, (p.label,), p.note, p.install, keys)
        else:
            out[name] = ProgramCommand(
                name, (*seen.labels, p.label), seen.note, seen.install, seen.tool_keys + keys
            )
    return list(out.values())


def command_line(agent: AgentConfig) -> str:
    """How an added agent is started, a secret shown as dots: "codex-acp --model o3"."""
    parts = [agent.command, *(SECRET_SHOWN if isinstance(a, SecretRef) else a for a in agent.args)]
    text = " ".join(parts)
    if agent.env:
        text += f"  (with {', '.join(sorted(agent.env))})"
    return text


def _tools_box(name: str) -> QCheckBox:
    box = QCheckBox(TOOLS_BOX)
    box.setAccessibleName(f"Give {name} Conch's tools")
    return box


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
        self.title = title = PlainLabel(command.labels[0])
        title.setObjectName("ProviderName")
        title.setMinimumWidth(TITLE_MIN)
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
        self.tools = _tools_box(command.labels[0])
        self.tools.setVisible(bool(command.tool_keys))
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 12, 0, 12)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.addWidget(title, 0, 0)
        grid.addWidget(self.field, 0, 1)
        grid.addWidget(self.note, 1, 1)
        grid.addWidget(self.result, 2, 1)
        grid.addWidget(self.tools, 3, 1)
        grid.setColumnStretch(1, 1)

    def show_result(self, text: str, state: str) -> None:
        set_style_property(self.result, "state", state)
        self.result.setText(text)


class AgentRow(QFrame):
    """An agent the person added: its name, how it starts, its tools box and Remove."""

    def __init__(self, agent: AgentConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.agent = agent
        self.setObjectName("ProviderRow")
        self.title = PlainLabel(agent.name)
        self.title.setObjectName("ProviderName")
        self.title.setMinimumWidth(TITLE_MIN)
        self.detail = PlainLabel(command_line(agent))
        self.detail.setProperty("role", "caption")
        self.detail.setWordWrap(True)
        self.result = PlainLabel()
        self.result.setObjectName("TestResult")
        self.result.setWordWrap(True)
        self.tools = _tools_box(agent.name)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setProperty("variant", "ghost")
        self.remove_button.setAccessibleName(f"Remove {agent.name}")
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 12, 0, 12)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.detail, 0, 1)
        grid.addWidget(self.remove_button, 0, 2)
        grid.addWidget(self.result, 1, 1)
        grid.addWidget(self.tools, 2, 1)
        grid.setColumnStretch(1, 1)

    def show_result(self, text: str, state: str) -> None:
        set_style_property(self.result, "state", state)
        self.result.setText(text)


def _pick_file(parent: QWidget, chosen: Callable[[str], None]) -> None:
    pick_json_file(parent, "Import Zed's agents", chosen)


class ProgramsPage(QWidget):
    """The Programs page. Saves a path the moment its field is left, a tools box the moment
    it is ticked.

    Signals:
        programs_changed(): a program's path was saved, or an agent added or removed (the
            picker lists programs again).
    """

    programs_changed = Signal()

    def __init__(
        self,
        settings: SettingsStore,
        secrets: SecretStore | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self.agents = ProgramAgents(settings, secrets or SessionSecrets())
        self.rows: dict[str, ProgramRow] = {}
        self.agent_rows: dict[str, AgentRow] = {}
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
            row.tools.setChecked(any(self.agents.has_tools(k) for k in command.tool_keys))
            row.tools.toggled.connect(lambda on, r=row: self._set_tools(r.command.tool_keys, on, r))
            self.rows[command.name] = row
            inner.addWidget(row)
            self._show_found(command.name)
        layout.addWidget(card)

        layout.addWidget(heading("Agents you added"))
        layout.addWidget(
            hint_label(
                "Any program that speaks the Agent Client Protocol, run exactly as given here. "
                "Keys in its environment go to the keyring."
            )
        )
        list_frame, self._agent_list = list_card()
        self.empty = PlainLabel(NO_AGENTS)
        self.empty.setProperty("role", "caption")
        self.empty.setWordWrap(True)
        self._agent_list.addWidget(self.empty)
        layout.addWidget(list_frame)
        layout.addWidget(self._add_form())
        layout.addWidget(heading("Import from Zed"))
        layout.addWidget(
            hint_label(
                "Paste Zed's settings.json (or its “agent_servers” part), or choose the file."
            )
        )
        layout.addWidget(self._import_form())
        layout.addStretch(1)
        self._pick_file: Callable[[QWidget, Callable[[str], None]], None] = _pick_file
        self.refresh_agents()

    # --- building ---------------------------------------------------------------------------

    def _add_form(self) -> QWidget:
        card, grid = form_card(QGridLayout)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(8)
        self.name_field = QLineEdit()
        self.name_field.setPlaceholderText("Codex ACP")
        self.name_field.setAccessibleName("Agent name")
        self.command_field = QLineEdit()
        self.command_field.setPlaceholderText("codex-acp")
        self.command_field.setAccessibleName("Command")
        self.args_field = QLineEdit()
        self.args_field.setPlaceholderText("--acp (only what the agent itself needs)")
        self.args_field.setAccessibleName("Arguments")
        self.env_field = QPlainTextEdit()
        self.env_field.setPlaceholderText("NAME=value, one a line (keys go to the keyring)")
        self.env_field.setAccessibleName("Environment")
        self.env_field.setFixedHeight(64)
        for n, (label, field) in enumerate(
            (
                ("Name", self.name_field),
                ("Command", self.command_field),
                ("Arguments", self.args_field),
                ("Environment", self.env_field),
            )
        ):
            top = Qt.AlignmentFlag.AlignTop if field is self.env_field else Qt.AlignmentFlag(0)
            grid.addWidget(PlainLabel(label), n, 0, top)
            grid.addWidget(field, n, 1)
        self.add_button = QPushButton("Add agent")
        self.add_button.setProperty("variant", "primary")
        self.add_button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.add_button.clicked.connect(self.add_agent)
        self.add_result = result_label()
        row = QHBoxLayout()
        row.addWidget(self.add_result, 1)
        row.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignRight)
        grid.addLayout(row, 4, 0, 1, 2)
        grid.setColumnStretch(1, 1)
        return card

    def _import_form(self) -> QWidget:
        made = import_card(
            "AgentImport",
            '{"agent_servers": {"My Agent": {"command": "node", "args": [...], "env": {}}}}',
            "Zed's agent_servers to import",
        )
        self.import_field = made.field
        self.import_button = made.import_button
        self.file_button = made.file_button
        self.import_result = made.result
        self.import_button.clicked.connect(
            lambda: self.import_text(self.import_field.toPlainText())
        )
        self.file_button.clicked.connect(lambda: self._pick_file(self, self._import_chosen))
        return made.card

    # --- the agents -------------------------------------------------------------------------

    def refresh_agents(self) -> None:
        """Rows for the agents in settings, in order."""
        for row in self.agent_rows.values():
            self._agent_list.removeWidget(row)
            row.deleteLater()
        self.agent_rows = {}
        for agent in self.agents.agents:
            row = AgentRow(agent)
            row.tools.setChecked(self.agents.has_tools(agent.key))
            row.tools.toggled.connect(lambda on, r=row: self._set_tools((r.agent.key,), on, r))
            row.remove_button.clicked.connect(lambda _c=False, a=agent.id: self.remove_agent(a))
            found = shutil.which(agent.command)
            if found is None:
                row.show_result(
                    f"“{agent.command}” was not found; give its full path or install it.",
                    "error",
                )
            self.agent_rows[agent.id] = row
            self._agent_list.addWidget(row)
        self.empty.setVisible(not self.agent_rows)
        self._line_up_titles()

    def _line_up_titles(self) -> None:
        """One width for every row's name, the widest program's ("GitHub Copilot CLI"), so
        the fields beside them start at one x (each row lays itself out on its own)."""
        titles = [row.title for row in self.rows.values()]
        for title in titles:
            title.ensurePolished()  # the stylesheet's bold face, measured
        width = max([TITLE_MIN, *(title.sizeHint().width() for title in titles)])
        for title in [*titles, *(row.title for row in self.agent_rows.values())]:
            title.setMinimumWidth(width)

    def showEvent(self, event: QShowEvent) -> None:
        # Measured again when shown: the theme's font may have changed since.
        self._line_up_titles()
        super().showEvent(event)

    def _say(self, label: QLabel, text: str, state: str) -> None:
        set_style_property(label, "state", state)
        label.setText(text)
        label.setVisible(bool(text))

    def add_agent(self) -> bool:
        """Add the agent the form describes; False (the form says why, and keeps what was
        typed) when it cannot be added."""
        try:
            args = split_args(self.args_field.text())
            env = parse_pairs(self.env_field.toPlainText(), "=")
            agent = self.agents.add(self.name_field.text(), self.command_field.text(), args, env)
        except (ToolsError, AgentsError) as exc:
            self._say(self.add_result, str(exc), "error")
            return False
        for field in (self.name_field, self.command_field, self.args_field):
            field.clear()
        self.env_field.clear()
        self._say(self.add_result, f"Added “{agent.name}”. Choose it in the model picker.", "ok")
        self.refresh_agents()
        self.programs_changed.emit()
        return True

    def import_text(self, text: str) -> int:
        """Import Zed's agents from pasted text; returns how many were added (the page says
        what was skipped, and keeps the text when nothing was added)."""
        try:
            imported = self.agents.import_text(text)
        except AgentsError as exc:
            self._say(self.import_result, str(exc), "error")
            return 0
        n = len(imported.agents)
        parts: list[str] = []
        if n:
            parts.append(f"Added {', '.join(f'“{a.name}”' for a in imported.agents)}.")
            self.import_field.clear()
            self.refresh_agents()
            self.programs_changed.emit()
        parts.extend(imported.problems)
        state = "ok" if n and not imported.problems else "error"
        self._say(self.import_result, " ".join(parts), state)
        return n

    def _import_chosen(self, path: str) -> None:
        self.import_file(path)

    def import_file(self, path: str) -> int:
        """Import the agents in Zed's settings file at ``path`` (its text shows in the box)."""
        text, why = read_import(path, "Zed's settings; choose its settings.json.")
        if text is None:
            self._say(self.import_result, why, "error")
            return 0
        self.import_field.setPlainText(text)
        return self.import_text(text)

    def remove_agent(self, agent_id: str) -> None:
        try:
            self.agents.remove(agent_id)
        except AgentsError as exc:
            row = self.agent_rows.get(agent_id)
            if row is not None:
                row.show_result(str(exc), "error")
            return
        self.refresh_agents()
        self.programs_changed.emit()

    def _set_tools(self, keys: tuple[str, ...], on: bool, row: ProgramRow | AgentRow) -> None:
        try:
            for key in keys:
                self.agents.set_tools(key, on)
        except AgentsError as exc:
            row.show_result(str(exc), "error")
            row.tools.blockSignals(True)
            row.tools.setChecked(not on)
            row.tools.blockSignals(False)
            return
        if on:
            row.show_result(
                "It gets the tool servers that are on in Settings → Tools from its next new "
                "session.",
                "ok",
            )

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
