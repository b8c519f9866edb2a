"""The tool calls of an answer: one quiet line each, opening to what the tool gave back.

A line says which tool ran (and on which server), with what arguments, how long it took and
whether the model was sent all of the result or a shortened one; while the call waits for the
person's OK or runs, it says so. Opened, it shows the arguments in full and the first lines of
the result. The lines are built from the turn's events (``ToolCall``, ``ToolStarted``,
``ToolResult``, folded per call by ``entries_from``), so a call shows the moment the model asks
for it. Results are text from outside the person: shown as plain text, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import Shiboken

from app.store import StoredMessage
from app.tool_calls import RESULT_LABEL
from engines.base import ToolAsk, ToolCall, ToolResult, ToolStarted, arguments_line
from engines.context.tool_loop import preview
from ui._widgets import LineButton
from ui.plain import PlainLabel, button_words, shown_name
from ui.theme import set_style_property

VIEW_INSET = 6  # px the chat's list view takes off a row's widget (its item margins)
LINE_ARGUMENT_CHARS = 60  # of the arguments, the collapsed line shows this much

# What a call's line says about how it ended (or that it has not yet).
STATUS_WORDS: dict[str, str] = {
    "asked": "Waiting for your OK",
    "starting": "Starting…",  # asked for, with no question open (a program's pending call)
    "running": "Running…",
    "done": "",
    "failed": "Failed",
    "denied": "Not allowed",
    "unknown": "No such tool",
    "invalid": "Wrong arguments",
    "stopped": "Stopped",
    "closed": "Cut off when Conch closed",
    "not-run": "Not run",
}


@dataclass(frozen=True)
class ToolEntry:
    """One call as its line shows it."""

    call_id: str
    tool: str
    server: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    # "asked", "starting", "running", or how it ended (engines.base.ToolStatus)
    status: str = "asked"
    preview: str = ""
    seconds: float = 0.0
    shortened: bool = False
    sent_chars: int = 0
    total_chars: int = 0

    @property
    def finished(self) -> bool:
        return self.status not in ("asked", "starting", "running")


def entries_from(
    events: Iterable[ToolCall | ToolStarted | ToolResult], asking: object = None
) -> list[ToolEntry]:
    """The turn's calls in the order the model asked for them, each in its latest state;
    ``asking`` (the request on the approval card) names the server of the call it is about.
    A call not started yet waits for the person's OK only while a question is open; without
    one it is starting (an ACP agent reports a call "pending" before it runs, whether or not
    a permission question follows)."""
    out: dict[str, ToolEntry] = {}
    for event in events:
        if isinstance(event, ToolCall):
            call = event.call
            key = call.id or f"#{len(out)}"
            if key not in out:
                out[key] = ToolEntry(key, call.name, arguments=dict(call.arguments))
        elif isinstance(event, ToolStarted):
            old = out.get(event.call_id) or ToolEntry(event.call_id, event.tool)
            out[event.call_id] = replace(
                old,
                tool=event.tool,
                server=event.server,
                arguments=dict(event.arguments),
                status="running",
            )
        else:
            out[event.call_id] = ToolEntry(
                event.call_id,
                event.tool,
                server=event.server,
                arguments=dict(event.arguments),
                status=event.status,
                preview=event.preview,
                seconds=event.seconds,
                shortened=event.shortened,
                sent_chars=event.sent_chars,
                total_chars=event.total_chars,
            )
    if isinstance(asking, ToolAsk) and asking.call_id in out:
        out[asking.call_id] = replace(out[asking.call_id], server=asking.server)
    if asking is None:
        for key, entry in out.items():
            if entry.status == "asked":
                out[key] = replace(entry, status="starting")
    return list(out.values())


def stored_entry(message: StoredMessage, call: ToolResult | None) -> ToolEntry:
    """A tool call saved in the chat log: its "tool" message and, when kept, how it went."""
    if call is None:  # the record is missing: the result still shows, under a plain name
        return ToolEntry(
            f"seq-{message.seq}", RESULT_LABEL, status="done", preview=preview(message.text)
        )
    return replace(entries_from([call])[0], call_id=f"seq-{message.seq}")


def took(seconds: float) -> str:
    """ "0.3 s", "12 s", "2 min 5 s"."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def line_text(entry: ToolEntry) -> str:
    """The collapsed line: ``read_file (Files)  path="notes.txt"  · 0.3 s · shortened``."""
    where = f" ({entry.server})" if entry.server else ""
    args = arguments_line(entry.arguments) if entry.arguments else ""
    if len(args) > LINE_ARGUMENT_CHARS:
        args = args[: LINE_ARGUMENT_CHARS - 1] + "…"
    parts = [f"{entry.tool}{where}" + (f"  {args}" if args else "")]
    words = STATUS_WORDS.get(entry.status, entry.status)
    if words:
        parts.append(words)
    if entry.finished and entry.status in ("done", "failed") and entry.seconds > 0:
        # A row with no measured time (a plan, a change reported only once made) shows none.
        parts.append(took(entry.seconds))
    if entry.shortened:
        parts.append("shortened")
    return " · ".join(parts)


def shortened_words(entry: ToolEntry) -> str:
    if not entry.shortened:
        return ""
    return (
        f"The result was {entry.total_chars:,} characters; the model was sent "
        f"{entry.sent_chars:,} of them, its start and end, with the middle left out."
    )


def details_text(entry: ToolEntry) -> str:
    """What an opened line shows: the arguments in full and the first lines of the result."""
    lines: list[str] = []
    if entry.arguments:
        lines.append(json.dumps(entry.arguments, ensure_ascii=False, indent=2, default=str))
    if entry.preview:
        lines.append(entry.preview)
    elif entry.status == "running":
        lines.append("Running…")
    elif entry.status in ("asked", "starting"):
        lines.append(STATUS_WORDS[entry.status])
    note = shortened_words(entry)
    if note:
        lines.append(note)
    return "\n\n".join(lines)


class ToolLine(QFrame):
    """One call: a quiet line that opens to its details.

    Signals:
        toggled(bool): opened or closed (its height changed).
    """

    toggled = Signal(bool)

    def __init__(self, entry: ToolEntry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolLine")
        self.entry = entry
        self._open = False
        self.button = LineButton(self)
        self.button.setObjectName("ToolLineButton")
        self.button.setAutoRaise(True)
        self.button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.button.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.details = PlainLabel(self)
        self.details.setObjectName("ToolLineDetails")
        self.details.setWordWrap(True)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setContentsMargins(18, 0, 0, 4)
        self.details.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.details)
        self.button.clicked.connect(lambda: self._toggle(not self._open))
        self.show_entry(entry)

    @property
    def opened(self) -> bool:
        return self._open

    def show_entry(self, entry: ToolEntry) -> None:
        self.entry = entry
        arrow = "▾" if self.opened else "▸"
        self.button.setText(button_words(f"{arrow} {shown_name(line_text(entry))}"))
        self.button.setAccessibleName(f"Tool call: {line_text(entry)}")
        self.button.setToolTip("Show the arguments and the first lines of the result")
        self.details.setText(details_text(entry))
        # The stylesheet keeps a finished call quiet and a failed or refused one visible.
        set_style_property(self.button, "status", entry.status)

    def _toggle(self, on: bool) -> None:
        self._open = on
        self.details.setVisible(on)
        self.show_entry(self.entry)
        self.button.setAccessibleDescription("Opened" if on else "Closed")
        layout = self.layout()
        if layout is not None:
            layout.activate()  # the new height is known before the chat lays the row out
        self.toggled.emit(on)


class ToolRows(QFrame):
    """An answer's tool calls, one ``ToolLine`` each, in the chat's column.

    Signals:
        size_changed(): a line was added or opened (the chat view re-lays the row out).
    """

    size_changed = Signal()

    def __init__(
        self, entries: Iterable[ToolEntry] = (), width: int = 0, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ToolRows")
        self.setAccessibleName("Tool calls")
        self.column = QFrame(self)
        self.column.setObjectName("ToolRowsColumn")
        self._lines_layout = QVBoxLayout(self.column)
        self._lines_layout.setContentsMargins(14, 0, 14, 0)
        self._lines_layout.setSpacing(0)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addStretch(1)
        outer.addWidget(self.column, 100)
        outer.addStretch(1)
        self.lines: dict[str, ToolLine] = {}
        self.set_column_width(width)
        self.set_entries(entries)

    def set_column_width(self, width: int) -> None:
        """Line up with the messages: as wide as their column (0: as wide as the row)."""
        if width > 0:
            self.column.setMaximumWidth(width)

    def set_entries(self, entries: Iterable[ToolEntry]) -> None:
        """Show ``entries`` (lines kept open across updates; a new call adds a line)."""
        grew = False
        for entry in entries:
            line = self.lines.get(entry.call_id)
            if line is None:
                line = ToolLine(entry, self.column)
                line.toggled.connect(lambda _on: self._resized())
                self.lines[entry.call_id] = line
                self._lines_layout.addWidget(line)
                grew = True
            elif line.entry != entry:
                line.show_entry(entry)
                grew = grew or line.opened
        if grew:
            self._resized()

    def _resized(self) -> None:
        if not Shiboken.isValid(self):
            return
        for layout in (self._lines_layout, self.layout()):
            if layout is not None:
                layout.activate()
        self.size_changed.emit()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        # Shown, the stylesheet's fonts and padding apply: the chat measures the row again,
        # or a line would be cut at the bottom (an underscore in a tool's name with it).
        QTimer.singleShot(0, self, self._resized)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        layout = self.layout()
        assert layout is not None
        # The list view places a row's widget VIEW_INSET px inside the height the row asks
        # for: asked for with it, no line is cut off at the bottom.
        return max(self.sizeHint().height(), layout.totalHeightForWidth(width)) + VIEW_INSET
