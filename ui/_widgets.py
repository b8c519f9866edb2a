"""Small widgets and label kinds that several screens show the same way.

A settings page's frame (margins, spacing, title, hint) and its cards, the quiet line button
that folds a row open, and the label for text that came from outside Conch each have their
look here, once.
"""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontMetrics, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QLayout,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ui.plain import PlainLabel, plain_tip

ELIDE_MIDDLE = Qt.TextElideMode.ElideMiddle  # a file name's start and its extension both tell

L = TypeVar("L", bound=QLayout)

PAGE_MARGIN = 24  # px around a settings page's content
PAGE_SPACING = 12  # px between its parts


def few_letters(metrics: QFontMetrics, count: int) -> int:
    """Pixels for about ``count`` letters of ``metrics``' font and "…", whatever the words: a
    narrow window's header keeps this much of a line, the same for every chat and model, so
    the window's least width does not change with them."""
    return metrics.averageCharWidth() * count + metrics.horizontalAdvance("…")


def page_layout(
    page: QWidget, title: str = "", hint: str = "", *, bottom: int = PAGE_MARGIN
) -> QVBoxLayout:
    """The column a settings page lays its parts out in, opening with its ``title`` and
    ``hint`` when given (a page whose last part is a list it scrolls may want less room at the
    ``bottom``)."""
    layout = QVBoxLayout(page)
    layout.setContentsMargins(PAGE_MARGIN, PAGE_MARGIN, PAGE_MARGIN, bottom)
    layout.setSpacing(PAGE_SPACING)
    if title:
        layout.addWidget(page_title(title))
    if hint:
        layout.addWidget(hint_label(hint))
    return layout


def page_title(text: str) -> QLabel:
    """A settings page's title ("Tools", "Trash")."""
    label = PlainLabel(text)
    label.setObjectName("SettingsPageTitle")
    return label


def hint_label(text: str) -> QLabel:
    """A settings page's quieter sentence that says what a part is for."""
    label = PlainLabel(text)
    label.setObjectName("SettingsHint")
    label.setWordWrap(True)
    return label


def settings_card() -> QFrame:
    """A settings page's raised panel (rows of providers, servers or programs; a form)."""
    card = QFrame()
    card.setObjectName("SettingsCard")
    card.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
    return card


def list_card() -> tuple[QFrame, QVBoxLayout]:
    """A settings card holding a list of rows, and the column they go in."""
    card = settings_card()
    column = QVBoxLayout(card)
    column.setContentsMargins(16, 8, 16, 8)
    column.setSpacing(0)
    return card, column


def form_card(kind: type[L]) -> tuple[QFrame, L]:
    """A settings card holding a form, and the layout (of ``kind``) its fields go in."""
    card = settings_card()
    layout = kind(card)
    layout.setContentsMargins(16, 12, 16, 12)
    return card, layout


def outside_text(text: str, name: str, parent: QWidget | None = None) -> QLabel:
    """A wrapped label for words from outside the person (a summary a model wrote, what a
    server said): plain text, never markup, and selectable to copy."""
    label = PlainLabel(text, parent)
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextInteractionFlags(
        Qt.TextInteractionFlag.TextSelectableByMouse
        | Qt.TextInteractionFlag.TextSelectableByKeyboard
    )
    return label


def pause(button: QWidget, holder: QWidget) -> None:
    """Disable ``button`` for a while (a load, a start, a wait) without losing the keyboard's
    place: Qt passes a disabled control's focus on to the next one in the window, which may be
    anywhere ("New chat", a list's Clear). ``holder``, the card or panel around it, keeps it
    instead, and ``resume`` gives it back."""
    if button.hasFocus():
        holder.setFocus(Qt.FocusReason.OtherFocusReason)
    button.setEnabled(False)


def resume(button: QWidget, holder: QWidget) -> None:
    """Enable ``button`` again; the focus its ``holder`` kept meanwhile goes back to it."""
    button.setEnabled(True)
    if holder.hasFocus() and button.isVisible():
        button.setFocus(Qt.FocusReason.OtherFocusReason)


class ElidedLabel(PlainLabel):
    """One line of outside words (a file name on a chip) that gives way when room is short:
    what fits shows, with "…" in the middle and the whole in its tooltip, instead of widening
    the window. ``text()`` is always the whole."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setText(text)

    def _show(self) -> None:
        room = self.contentsRect().width()
        whole = self.text()
        fits = room <= 0 or self.fontMetrics().horizontalAdvance(whole) <= room
        shown = whole if fits else self.fontMetrics().elidedText(whole, ELIDE_MIDDLE, room)
        self._origin = None
        QLabel.setText(self, shown)
        self.setToolTip("" if fits else plain_tip(whole))

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + margins.right()
        return QSize(width + 2 * self.margin(), super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        least = min(self.sizeHint().width(), few_letters(self.fontMetrics(), 8))
        return QSize(least, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._show()


class LineButton(QToolButton):
    """A flat toggle that also opens on Enter (QToolButton only knows Space)."""

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.click()
            return
        super().keyPressEvent(event)
