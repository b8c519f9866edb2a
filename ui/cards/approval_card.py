"""The card a request to act becomes: what is asked, and three answers.

Two kinds of request show here. A program's permission request (``PermissionAsk``: "Gemini CLI
asks to: Run rm -rf build") and a model's tool call (``ToolAsk``: the tool, its server, what
it does and the arguments it would run with). "Allow once" lets this one request through;
"Always for this tool" lets it through and every later request for the same tool of the same
server, as it is set up now, in this chat;
"Deny" declines (the program or the model is told, and the chat goes on). The card only
reports the choice (``answered``); the chat's bridge resolves the waiting request, so nothing
here blocks the event loop.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from engines.base import PermissionAsk, ToolAsk
from ui.plain import PlainLabel, plain_tip, shown_name

Choice = Literal["once", "always", "deny"]
Ask = PermissionAsk | ToolAsk

CHOICES: tuple[tuple[Choice, str], ...] = (
    ("once", "Allow once"),
    ("always", "Always for this tool"),
    ("deny", "Deny"),
)

ARGUMENT_LINES = 8  # lines of a tool call's arguments the card shows; the rest is "…"
ARGUMENT_CHARS = 160  # characters of one argument's line


def question(ask: Ask) -> str:
    """ "Gemini CLI asks to: Run rm -rf build", or "The model asks to use read_file (Files)"."""
    if isinstance(ask, ToolAsk):
        where = f" ({shown_name(ask.server)})" if ask.server else ""
        return f"The model asks to use {shown_name(ask.tool)}{where}"
    return f"{ask.program} asks to: {shown_name(ask.title)}"


def argument_lines(arguments: dict[str, Any]) -> str:
    """A call's arguments, one a line (``path: "notes.txt"``), long ones cut, at most
    ``ARGUMENT_LINES`` lines: the person sees what would run without scrolling."""
    if not arguments:
        return "No arguments"
    lines: list[str] = []
    for name, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(str(text).split())
        line = f"{name}: {text}"
        if len(line) > ARGUMENT_CHARS:
            line = line[: ARGUMENT_CHARS - 1] + "…"
        lines.append(line)
    if len(lines) > ARGUMENT_LINES:
        more = len(lines) - ARGUMENT_LINES + 1
        lines = [*lines[: ARGUMENT_LINES - 1], f"… and {more} more"]
    return "\n".join(lines)


def covers(ask: Ask) -> str:
    """What "Always for this tool" covers: the tool of its server (a model's call; a server
    whose command or address changes asks again), the tool (Claude Code) or the kind of
    action (an ACP program)."""
    if isinstance(ask, ToolAsk):
        return f"{ask.tool} on {ask.server}" if ask.server else ask.tool
    return ask.kind or ask.title


class ApprovalCard(QFrame):
    """One waiting request.

    Signals:
        answered(str): "once", "always" or "deny".
    """

    answered = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ApprovalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Permission request")
        self.ask: Ask | None = None
        self.label = PlainLabel(self)
        self.label.setObjectName("ApprovalQuestion")
        self.label.setWordWrap(True)
        self.about = PlainLabel(self)  # what the tool does, in its own words
        self.about.setProperty("role", "caption")
        self.about.setWordWrap(True)
        self.about.hide()
        self.arguments = PlainLabel(self)
        self.arguments.setObjectName("ApprovalArguments")
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.arguments.setWordWrap(True)
        self.arguments.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.arguments.hide()
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        row.addStretch(1)
        for choice, words in CHOICES:
            button = QPushButton(words, self)
            button.setObjectName(f"Approval-{choice}")
            button.clicked.connect(lambda _checked=False, c=choice: self._answer(c))
            self.buttons[choice] = button
            row.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.label)
        layout.addWidget(self.about)
        layout.addWidget(self.arguments)
        layout.addLayout(row)
        self.setVisible(False)

    def show_ask(self, ask: Ask | None) -> None:
        """Show ``ask`` (None hides the card)."""
        self.ask = ask
        if ask is None:
            self.setVisible(False)
            return
        self.label.setText(question(ask))
        tool = isinstance(ask, ToolAsk)
        description = ask.description if isinstance(ask, ToolAsk) else ""
        self.about.setText(description)
        self.about.setVisible(bool(description))
        # The arguments are the tool's input as the model wrote it: plain text, never markup.
        self.arguments.setText(argument_lines(ask.arguments) if isinstance(ask, ToolAsk) else "")
        self.arguments.setVisible(tool)
        spoken = question(ask)
        if isinstance(ask, ToolAsk):
            spoken += f", with {argument_lines(ask.arguments)}"
        self.label.setAccessibleName(spoken)
        self.buttons["always"].setToolTip(
            plain_tip(f"Allow it, and do not ask again in this chat for: {shown_name(covers(ask))}")
        )
        # No focus taken: a key meant for the message box must never answer the question.
        self.setVisible(True)

    def _answer(self, choice: Choice) -> None:
        if self.ask is not None:
            self.answered.emit(choice)
