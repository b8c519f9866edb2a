"""Opening a chat at a search match: scroll to the message and light it up for a moment.

The chat view reads a long chat a page at a time; a match further back is read in first (one
read reaching it), then centred. The light is a see-through layer over the message's row that
lets the pointer through and goes after ``HIGHLIGHT_MS``; it follows the row if the view
scrolls meanwhile.
"""

from __future__ import annotations

from PySide6.QtCore import QPersistentModelIndex, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QAbstractItemView, QWidget

from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView

HIGHLIGHT_MS = 1600
FETCH_MARGIN = 20  # messages read beyond the match, so it does not sit on the page's edge


class MatchHighlight(QWidget):
    """The light over one row of ``view``."""

    def __init__(self, view: ChatView) -> None:
        super().__init__(view.viewport())
        self.setObjectName("MatchHighlight")
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        self._view = view
        self._index = QPersistentModelIndex()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.fade)
        view.verticalScrollBar().valueChanged.connect(lambda _v: self._place())
        view.chat_model.modelReset.connect(self.fade)  # another chat: the row is gone
        self.hide()

    @property
    def seq(self) -> int | None:
        """The message lit up now, if any."""
        if not self.isVisible() or not self._index.isValid():
            return None
        row = self._view.chat_model.row(self._index.row())
        return row.message.seq if row.message is not None else None

    def light(self, index: QPersistentModelIndex, ms: int = HIGHLIGHT_MS) -> None:
        self._index = index
        self._place()
        self.show()
        self.raise_()
        self._timer.start(ms)

    def fade(self) -> None:
        self._timer.stop()
        self._index = QPersistentModelIndex()
        self.hide()

    def _place(self) -> None:
        if not self._index.isValid():
            return
        rect = self._view.visualRect(self._view.chat_model.index(self._index.row(), 0))
        self.setGeometry(rect.adjusted(4, 1, -4, -1))

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        accent = self.palette().color(QPalette.ColorRole.Highlight)
        fill = QColor(accent)
        fill.setAlpha(48)
        painter.setPen(QPen(accent, 2))
        painter.setBrush(fill)
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(1, 1, -1, -1), 10, 10)


def show_message(view: ChatView, highlight: MatchHighlight, seq: int) -> bool:
    """Scroll ``view`` (showing the message's chat) to the message at ``seq`` and light it
    up. False when the chat does not show that message (deleted, or a version set aside)."""
    model = view.chat_model
    row = model.find(RowKind.MESSAGE, seq)
    while row < 0 and model.can_fetch_older():
        first = model.messages[0].seq
        if first <= seq:
            break
        model.fetch_older(first - seq + FETCH_MARGIN)
        row = model.find(RowKind.MESSAGE, seq)
    if row < 0:
        return False
    if model.row(row).collapsible and not model.row(row).expanded:
        model.toggle_expanded(row)  # the match may be past the start a long message shows
    index = model.index(row, 0)
    view.doItemsLayout()  # the rows read just now have their heights before scrolling
    view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
    highlight.light(QPersistentModelIndex(index))
    return True


__all__ = ["HIGHLIGHT_MS", "MatchHighlight", "show_message"]
