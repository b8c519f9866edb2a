"""A scrolling column of rows with a line of its own when there are none.

The Memories and Health pages list their items this way, and redraw the whole column from
their source of truth on every change, so it never shows a row the source no longer has.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QFrame, QScrollArea, QVBoxLayout, QWidget

from ui.plain import PlainLabel


class RowList(QScrollArea):
    """Rows live in ``host`` (their parent); ``empty`` shows instead when there are none."""

    def __init__(self, host_name: str, empty_text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = QWidget()
        self.host.setObjectName(host_name)
        self.column = QVBoxLayout(self.host)
        self.column.setContentsMargins(0, 0, 4, 0)
        self.column.setSpacing(8)
        self.empty = PlainLabel(empty_text)
        self.empty.setObjectName("EmptyState")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidget(self.host)
        self._place: int | None = None
        self.verticalScrollBar().rangeChanged.connect(self._keep_place)

    def clear(self, rows: Iterable[QWidget]) -> None:
        """Delete the rows shown and empty the column (``empty`` is kept for ``fill``).

        The column stays where it was: a redraw after Keep or Discard must not move the list
        under the pointer.
        """
        self._place = self.verticalScrollBar().value()
        focused = QApplication.focusWidget()
        if focused is not None and self.host.isAncestorOf(focused):
            # Deleting a focused row passes the focus down the rows one by one, and the
            # scroll area scrolls to each: the list ended at the bottom.
            self.setFocus(Qt.FocusReason.OtherFocusReason)
        for row in rows:
            row.setParent(None)
            row.deleteLater()
        while self.column.count():
            item = self.column.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None and widget is not self.empty:
                widget.setParent(None)

    def fill(self, rows: Iterable[QWidget]) -> None:
        """Show ``rows`` top to bottom (made with ``host`` as their parent), or ``empty``."""
        shown = False
        for row in rows:
            self.column.addWidget(row)
            row.show()  # now, not at the next turn of the loop: the height below counts it
            shown = True
        self.column.addWidget(self.empty)
        self.empty.setVisible(not shown)
        self.column.addStretch(1)
        if self._place is not None:
            self.verticalScrollBar().setValue(self._place)

    def _keep_place(self, _minimum: int, maximum: int) -> None:
        # The new rows' height arrives with the next layout: put the place back once it has.
        if self._place is not None:
            place, self._place = self._place, None
            self.verticalScrollBar().setValue(min(place, maximum))


__all__ = ["RowList"]
