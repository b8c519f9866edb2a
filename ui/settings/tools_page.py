"""Settings → Tools: the MCP servers a chat can use, each with its state in words.

One row per server: its name, what it runs or where it is reached (secrets shown as dots), its
state as it changes ("Starts when a chat needs it", "Starting…", "Ready, 14 tools", "Failed:
…"), a switch that turns it off for every chat, "Start again" after a failure, and Remove.
Below, a server is added by hand (a program with its arguments and environment, or a Streamable
HTTP address with its headers) or imported from the ``mcpServers`` JSON that Claude Desktop,
Cursor and LM Studio use, pasted or picked from a file. A value that is a secret goes to the
keyring; settings keep only its name. Bad input is one sentence under the form; nothing typed
is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QWidget,
)
from shiboken6 import Shiboken

from app.background import Background
from app.tools import ToolsError, ToolSettings, parse_pairs, secret_refs, split_args
from engines.tools.config import HttpServer, SecretRef, ServerConfig, Value
from engines.tools.servers import ServerState
from ui._widgets import form_card, hint_label, list_card, page_layout
from ui.icons import icon
from ui.plain import PlainLabel, shown_name
from ui.settings.import_form import heading, import_card, pick_json_file, read_import, result_label
from ui.theme import set_style_property

log = logging.getLogger("conch.ui.tools")

SECRET_SHOWN = "•••"
EMPTY = "No tool servers yet. Add one below, or import the list you use in another app."

FilePicker = Callable[[QWidget, Callable[[str], None]], None]


def shown(value: Value) -> str:
    """A value as the page shows it: a secret as dots, never its text."""
    return SECRET_SHOWN if isinstance(value, SecretRef) else value


def what_it_runs(config: ServerConfig) -> str:
    """ "npx -y @modelcontextprotocol/server-filesystem /home/me" or the server's address."""
    if isinstance(config, HttpServer):
        return shown(config.url)
    parts = [config.command, *(shown(a) for a in config.args)]
    text = " ".join(parts)
    if config.env:
        names = ", ".join(sorted(config.env))
        text += f"  (with {names})"
    return text


def state_look(state: ServerState) -> str:
    """The stylesheet's state for a server's words: ok, busy, error or "" (quiet)."""
    return {"ready": "ok", "starting": "busy", "failed": "error"}.get(state.phase, "")


# The add card's labels, its name's and both forms', line up at this width.
_LABEL_WIDTH = 90


def _line(placeholder: str, name: str) -> QLineEdit:
    field = QLineEdit()
    field.setPlaceholderText(placeholder)
    field.setAccessibleName(name)
    return field


def _lines(placeholder: str, name: str) -> QPlainTextEdit:
    field = QPlainTextEdit()
    field.setPlaceholderText(placeholder)
    field.setAccessibleName(name)
    field.setFixedHeight(64)
    return field


def _form(*fields: QWidget) -> QWidget:
    """One form of the add card: each field labelled with its accessible name."""
    form = QWidget()
    grid = QGridLayout(form)
    grid.setContentsMargins(0, 0, 0, 0)
    grid.setHorizontalSpacing(12)
    grid.setColumnMinimumWidth(0, _LABEL_WIDTH)
    for row, field in enumerate(fields):
        label = PlainLabel(field.accessibleName())
        if isinstance(field, QPlainTextEdit):
            grid.addWidget(label, row, 0, Qt.AlignmentFlag.AlignTop)
        else:
            grid.addWidget(label, row, 0)
        grid.addWidget(field, row, 1)
    return form


def _pick_file(parent: QWidget, chosen: Callable[[str], None]) -> None:
    pick_json_file(parent, "Import MCP servers", chosen)


class SecretsForm(QWidget):
    """A server's secrets, to type again (a keyring that kept them only until Conch quit, a key
    that changed). Each field shows whether the keyring has its value, never the value."""

    def __init__(self, refs: list[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.fields: dict[str, QLineEdit] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 4, 0, 0)
        grid.setHorizontalSpacing(12)
        for n, (what, key) in enumerate(refs):
            field = QLineEdit()
            field.setEchoMode(QLineEdit.EchoMode.Password)
            field.setAccessibleName(what)
            self.fields[key] = field
            grid.addWidget(PlainLabel(what), n, 0)
            grid.addWidget(field, n, 1)
        self.save_button = QPushButton("Save to the keyring")
        self.save_button.setProperty("variant", "secondary")
        grid.addWidget(self.save_button, len(refs), 1, Qt.AlignmentFlag.AlignRight)
        grid.setColumnStretch(1, 1)

    def show_saved(self, saved: dict[str, bool]) -> None:
        for key, field in self.fields.items():
            field.setPlaceholderText(
                "Saved — type to replace" if saved.get(key) else "Missing — type it again"
            )

    def values(self) -> dict[str, str]:
        return {key: field.text() for key, field in self.fields.items()}


class ServerRow(QFrame):
    """One server: name, what it runs, its state, and what the person can do with it."""

    def __init__(self, config: ServerConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.server_id = config.id
        self.setObjectName("ProviderRow")
        self.title = PlainLabel(shown_name(config.name))
        self.title.setObjectName("ProviderName")
        self.detail = PlainLabel(what_it_runs(config))
        self.detail.setProperty("role", "caption")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.state_label = PlainLabel()
        self.state_label.setObjectName("TestResult")
        self.state_label.setWordWrap(True)
        self.state_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.switch = QCheckBox("On")
        self.switch.setChecked(config.enabled)
        self.switch.setAccessibleName(f"Use {config.name}")
        self.again_button = QPushButton("Start again")
        self.again_button.setProperty("variant", "secondary")
        self.again_button.hide()
        self.remove_button = QPushButton("Remove")
        self.remove_button.setProperty("variant", "ghost")
        self.remove_button.setIcon(icon("trash"))
        self.remove_button.setAccessibleName(f"Remove {config.name}")
        refs = secret_refs(config)
        self.secrets_button = QPushButton("Keys…")
        self.secrets_button.setProperty("variant", "ghost")
        self.secrets_button.setToolTip("Type this server's keys or tokens again")
        self.secrets_button.setVisible(bool(refs))
        self.secrets = SecretsForm(refs)
        self.secrets.hide()
        self.secrets_button.clicked.connect(
            lambda: self.secrets.setVisible(self.secrets.isHidden())
        )
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 12, 0, 12)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.switch, 0, 1, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.again_button, 0, 2)
        grid.addWidget(self.secrets_button, 0, 3)
        grid.addWidget(self.remove_button, 0, 4)
        grid.addWidget(self.detail, 1, 0, 1, 5)
        grid.addWidget(self.state_label, 2, 0, 1, 5)
        grid.addWidget(self.secrets, 3, 0, 1, 5)
        grid.setColumnStretch(0, 1)

    def show_state(self, state: ServerState) -> None:
        set_style_property(self.state_label, "state", state_look(state))
        self.state_label.setText(state.text)
        self.state_label.setAccessibleName(state.text)
        self.again_button.setVisible(state.phase == "failed")


class ToolsPage(QWidget):
    """The Tools page for the app's ``ToolSettings``."""

    def __init__(
        self,
        tools: ToolSettings,
        *,
        keyring_warning: str = "",
        pick_file: FilePicker | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._tools = tools
        self._pick_file = pick_file or _pick_file
        self._tasks = Background(log, "starting a tool server again failed")
        self.rows: dict[str, ServerRow] = {}

        layout = page_layout(
            self,
            "Tools",
            "Tool servers (MCP) let a model read files, search and more. A server starts when a "
            "chat first needs it, and Conch asks you before a tool runs. Each chat can choose "
            "which servers it uses.",
        )
        warning = PlainLabel(keyring_warning)
        warning.setObjectName("SessionWarning")
        warning.setWordWrap(True)
        warning.setVisible(bool(keyring_warning))
        layout.addWidget(warning)

        card, self._list = list_card()
        self.empty = PlainLabel(EMPTY)
        self.empty.setProperty("role", "caption")
        self.empty.setWordWrap(True)
        self.empty.setContentsMargins(0, 8, 0, 8)
        self._list.addWidget(self.empty)
        layout.addWidget(card)

        layout.addSpacing(4)
        layout.addWidget(heading("Add a server"))
        layout.addWidget(self._add_form())
        layout.addSpacing(4)
        layout.addWidget(heading("Import"))
        layout.addWidget(
            hint_label(
                "Paste the “mcpServers” JSON from Claude Desktop, Cursor or LM Studio's "
                "mcp.json, or choose the file. Keys and tokens in it go to the keyring."
            )
        )
        layout.addWidget(self._import_form())
        layout.addStretch(1)

        stop = tools.on_change(self._changed)
        self.destroyed.connect(lambda *_: stop())
        self.refresh()

    # --- building ---------------------------------------------------------------------------

    def _add_form(self) -> QWidget:
        card, grid = form_card(QGridLayout)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(8)
        self.kind = QComboBox()
        self.kind.setObjectName("ToolServerKind")
        self.kind.addItem("A program on this computer (stdio)", "stdio")
        self.kind.addItem("A web address (Streamable HTTP)", "http")
        self.kind.setAccessibleName("How Conch reaches the server")
        self.name_field = QLineEdit()
        self.name_field.setPlaceholderText("Files")
        self.name_field.setAccessibleName("Server name")
        grid.addWidget(PlainLabel("Reached as"), 0, 0)
        grid.addWidget(self.kind, 0, 1)
        grid.addWidget(PlainLabel("Name"), 1, 0)
        grid.addWidget(self.name_field, 1, 1)

        self.kind_pages = QStackedWidget()
        self.command_field = _line("npx", "Command")
        self.args_field = _line(
            "-y @modelcontextprotocol/server-filesystem ~/Documents", "Arguments"
        )
        self.env_field = _lines("NAME=value, one a line (keys go to the keyring)", "Environment")
        stdio = _form(self.command_field, self.args_field, self.env_field)
        self.url_field = _line("https://example.com/mcp", "Address")
        self.headers_field = _lines("Name: value, one a line (tokens go to the keyring)", "Headers")
        http = _form(self.url_field, self.headers_field)
        grid.setColumnMinimumWidth(0, _LABEL_WIDTH)
        self.kind_pages.addWidget(stdio)
        self.kind_pages.addWidget(http)
        self.kind.currentIndexChanged.connect(self.kind_pages.setCurrentIndex)
        grid.addWidget(self.kind_pages, 2, 0, 1, 2)

        self.add_button = QPushButton("Add server")
        self.add_button.setProperty("variant", "primary")
        self.add_button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.add_button.clicked.connect(self.add_server)
        self.add_result = result_label()
        row = QHBoxLayout()
        row.addWidget(self.add_result, 1)
        row.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignRight)
        grid.addLayout(row, 3, 0, 1, 2)
        grid.setColumnStretch(1, 1)
        return card

    def _import_form(self) -> QWidget:
        made = import_card(
            "ToolImport",
            '{"mcpServers": {"files": {"command": "npx", …}}}',
            "Servers' JSON to import",
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

    # --- the list ---------------------------------------------------------------------------

    def _changed(self) -> None:
        if Shiboken.isValid(self):
            self.refresh()

    def refresh(self) -> None:
        """Rows for the servers in settings (made or dropped as the list changes), each
        showing its current state."""
        configs = self._tools.configs
        wanted = [c.id for c in configs]
        if list(self.rows) != wanted or any(
            self.rows[c.id].title.text() != c.name
            or self.rows[c.id].detail.text() != what_it_runs(c)
            for c in configs
        ):
            self._rebuild(configs)
        for config in configs:
            row = self.rows[config.id]
            if row.switch.isChecked() != config.enabled:
                row.switch.blockSignals(True)
                row.switch.setChecked(config.enabled)
                row.switch.blockSignals(False)
            row.show_state(self._tools.state(config.id))
        self.empty.setVisible(not configs)

    def _rebuild(self, configs: tuple[ServerConfig, ...]) -> None:
        for row in self.rows.values():
            self._list.removeWidget(row)
            row.deleteLater()
        self.rows = {}
        for n, config in enumerate(configs):
            row = ServerRow(config)
            row.setProperty("first", n == 0)
            row.switch.toggled.connect(lambda on, s=config.id: self.set_enabled(s, on))
            row.again_button.clicked.connect(lambda _c=False, s=config.id: self.start_again(s))
            row.remove_button.clicked.connect(lambda _c=False, s=config.id: self.remove(s))
            row.secrets.save_button.clicked.connect(
                lambda _c=False, s=config.id: self.save_secrets(s)
            )
            # Whether the keyring still has each value, looked at when the form opens.
            row.secrets_button.clicked.connect(lambda _c=False, r=row: self._show_saved(r))
            self._show_saved(row)
            self.rows[config.id] = row
            self._list.addWidget(row)

    # --- actions ----------------------------------------------------------------------------

    def _say(self, label: QLabel, text: str, state: str) -> None:
        set_style_property(label, "state", state)
        label.setText(text)
        label.setVisible(bool(text))

    def add_server(self) -> bool:
        """Add the server the form describes; False (the form says why, and keeps what was
        typed) when it cannot be added."""
        name = self.name_field.text()
        try:
            if self.kind.currentData() == "http":
                headers = parse_pairs(self.headers_field.toPlainText(), ":")
                server: ServerConfig = self._tools.add_http(name, self.url_field.text(), headers)
            else:
                args = split_args(self.args_field.text())
                env = parse_pairs(self.env_field.toPlainText(), "=")
                server = self._tools.add_stdio(name, self.command_field.text(), args, env)
        except ToolsError as exc:
            self._say(self.add_result, str(exc), "error")
            return False
        for field in (self.name_field, self.command_field, self.args_field, self.url_field):
            field.clear()
        self.env_field.clear()
        self.headers_field.clear()
        self._say(self.add_result, f"Added “{server.name}”. It starts when a chat needs it.", "ok")
        return True

    def import_text(self, text: str) -> int:
        """Import pasted JSON; returns how many servers were added (the page says what was
        skipped, and keeps the text when nothing was added)."""
        try:
            imported = self._tools.import_text(text)
        except ToolsError as exc:
            self._say(self.import_result, str(exc), "error")
            return 0
        n = len(imported.servers)
        parts: list[str] = []
        if n:
            names = ", ".join(f"“{s.name}”" for s in imported.servers)
            parts.append(f"Added {names}.")
            self.import_field.clear()
        parts.extend(imported.problems)
        self._say(
            self.import_result, " ".join(parts), "ok" if n and not imported.problems else "error"
        )
        return n

    def _import_pasted(self) -> None:
        self.import_text(self.import_field.toPlainText())

    def _import_chosen(self, path: str) -> None:
        self.import_file(path)

    def import_file(self, path: str) -> int:
        """Import the servers in the file at ``path`` (its text shows in the box)."""
        text, why = read_import(
            path, "a list of servers; choose its mcp.json or Claude Desktop's config."
        )
        if text is None:
            self._say(self.import_result, why, "error")
            return 0
        self.import_field.setPlainText(text)
        return self.import_text(text)

    def set_enabled(self, sid: str, on: bool) -> None:
        try:
            self._tools.set_enabled(sid, on)
        except ToolsError as exc:
            row = self.rows.get(sid)
            if row is not None:
                self._say(row.state_label, str(exc), "error")
                row.switch.blockSignals(True)
                row.switch.setChecked(not on)
                row.switch.blockSignals(False)

    def remove(self, sid: str) -> None:
        try:
            self._tools.remove(sid)
        except ToolsError as exc:
            row = self.rows.get(sid)
            if row is not None:
                self._say(row.state_label, str(exc), "error")

    def _show_saved(self, row: ServerRow) -> None:
        row.secrets.show_saved({k: self._tools.has_secret(k) for k in row.secrets.fields})

    def save_secrets(self, sid: str) -> bool:
        """Put what was typed in a server's key fields in the keyring; a server that failed
        is started again with them."""
        row = self.rows.get(sid)
        if row is None:
            return False
        try:
            self._tools.set_secrets(row.secrets.values())
        except ToolsError as exc:
            self._say(row.state_label, str(exc), "error")
            return False
        for field in row.secrets.fields.values():
            field.clear()
        self._show_saved(row)
        row.secrets.hide()
        if self._tools.state(sid).phase == "failed":
            self.start_again(sid)
        return True

    def start_again(self, sid: str) -> asyncio.Task[ServerState] | None:
        """Lift a failed server's hold and start it (as a task; the row follows its state)."""
        try:
            return self._tasks.start(self._tools.start_again(sid))
        except RuntimeError:  # no event loop runs: nothing to start it on
            return None
