"""What the window's status line says, shown over the bottom of the chat.

A status strip that appears for a few seconds pushes every message up by its height and back
again; floated over the chat instead, it moves nothing, and clicks go through it to whatever is
under it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QWidget

from ui.plain import PlainLabel

MARGIN = 12  # px between the note and the edges of what it floats over
MAX_WIDTH = 560  # px: a long note wraps rather than spanning a wide window


class StatusToast(PlainLabel):
    """A plain-text note floated at the bottom centre of ``over``; ``say("")`` hides it."""

    def __init__(self, over: QWidget) -> None:
        super().__init__(over)
        self.setObjectName("StatusToast")
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        over.installEventFilter(self)
        self.setVisible(False)

    def say(self, text: str) -> None:
        if not text:
            self.setVisible(False)
            return
        self.setText(text)
        self.setAccessibleName(text)
        self._place()
        self.setVisible(True)
        self.raise_()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.parentWidget() and event.type() == QEvent.Type.Resize:
            self._place()
        return False

    def _place(self) -> None:
        over = self.parentWidget()
        if over is None:
            return
        # A wrapping label's size hint is a compromise width: a short note would wrap early.
        self.setWordWrap(False)
        one_line = self.sizeHint().width()
        self.setWordWrap(True)
        width = min(max(1, over.width() - 2 * MARGIN), MAX_WIDTH, one_line)
        height = self.heightForWidth(width)
        self.setGeometry(
            (over.width() - width) // 2, over.height() - height - MARGIN, width, height
        )
