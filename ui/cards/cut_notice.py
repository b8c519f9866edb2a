"""The line a turn shows when less than half of the person's message could be sent.

The engine keeps the head and tail of a message too big for the model's window and says how
much went. This says so above the message box, in words, and when a ready model reads the
whole message it offers it: pressing the button sends the message again, whole, from the
chat log, to that model.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QToolButton, QWidget

from engines.base import Shortened
from ui.plain import PlainLabel, button_words


class CutNotice(QFrame):
    """Signals:
    step_requested(object, int): the person took the offer (the ``NextStep``, and the seq of
        the person's message it is about).
    """

    step_requested = Signal(object, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CutNotice")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Part of your message was sent")
        self.shown: Shortened | None = None
        self.label = PlainLabel(self)
        self.label.setObjectName("CutNoticeText")
        self.label.setWordWrap(True)
        self.button = QPushButton(self)
        self.button.setObjectName("CutNoticeSwitch")
        self.button.clicked.connect(self._take)
        self.dismiss = QToolButton(self)
        self.dismiss.setText("×")
        self.dismiss.setAccessibleName("Dismiss")
        self.dismiss.clicked.connect(lambda: self.show_for(None))
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 8, 6)
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        row.addWidget(self.dismiss)
        self.hide()

    def show_for(self, event: Shortened | None) -> None:
        """Show what ``event`` says (None: hide)."""
        self.shown = event
        if event is None:
            self.hide()
            return
        self.label.setText(event.text)
        step = event.next_step
        self.button.setVisible(step is not None)
        if step is not None:
            self.button.setText(button_words(step.label))
        self.show()

    def _take(self) -> None:
        event = self.shown
        if event is not None and event.next_step is not None:
            self.show_for(None)
            self.step_requested.emit(event.next_step, event.seq)
