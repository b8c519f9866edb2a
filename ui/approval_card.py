"""The card a program's permission request becomes: what it wants to do, and three answers.

"Allow once" lets this one request through; "Always for this tool" lets it through and every
later request for the same tool in this chat; "Deny" declines (the program is told, and the
chat says so). The card only reports the choice (``answered``); the chat's bridge resolves the
waiting request, so nothing here blocks the event loop.
"""

from __future__ import annotations

from typing import Literal

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engines.programs.acp import PermissionAsk

Choice = Literal["once", "always", "deny"]

CHOICES: tuple[tuple[Choice, str], ...] = (
    ("once", "Allow once"),
    ("always", "Always for this tool"),
    ("deny", "Deny"),
)


def question(ask: PermissionAsk) -> str:
    """ "Gemini CLI asks to: Run rm -rf build"."""
    return f"{ask.program} asks to: {ask.title}"


class ApprovalCard(QFrame):
    """One waiting permission request.

    Signals:
        answered(str): "once", "always" or "deny".
    """

    answered = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ApprovalCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Permission request")
        self.ask: PermissionAsk | None = None
        self.label = QLabel(self)
        self.label.setObjectName("ApprovalQuestion")
        self.label.setWordWrap(True)
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
        layout.addLayout(row)
        self.setVisible(False)

    def show_ask(self, ask: PermissionAsk | None) -> None:
        """Show ``ask`` (None hides the card)."""
        self.ask = ask
        if ask is None:
            self.setVisible(False)
            return
        self.label.setText(question(ask))
        self.label.setAccessibleName(question(ask))
        # What "always" covers: the tool (Claude Code) or the kind of action (an ACP program).
        self.buttons["always"].setToolTip(
            f"Allow it, and do not ask again in this chat for: {ask.kind or ask.title}"
        )
        # No focus taken: a key meant for the message box must never answer the question.
        self.setVisible(True)

    def _answer(self, choice: Choice) -> None:
        if self.ask is not None:
            self.answered.emit(choice)
