"""Text from outside Conch, shown as text: never read as markup, never reordered by hidden marks.

A chat title, a memory, a model id, a server's name or message, a file name: none of them was
written by Conch, so none may decide how it is drawn. Qt reads a label's text as HTML when it
looks like HTML (``Qt.AutoText``), and HTML loads images: ``<img src="/dev/zero">`` as a title
would take the window down, a FIFO would hang it. So every label here is plain text
(``PlainLabel``), a tooltip with outside words is escaped (``plain_tip``), a button or menu
entry keeps its "&" (``button_words``), and a name's direction controls are written out where
they would otherwise make ``invoice`` + U+202E + ``fdp.exe`` look like ``invoiceexe.pdf``
(``shown_name``).
"""

from __future__ import annotations

import html
import re
import unicodedata

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QClipboard,
    QContextMenuEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
)
from PySide6.QtWidgets import QLabel, QMenu, QWidget

# Characters that change the order text is drawn in without showing themselves: the embeddings
# and overrides, the isolates, the left-to-right, right-to-left and Arabic letter marks.
DIRECTION_CONTROLS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
)
_WRITTEN_OUT = {ord(c): f"[U+{ord(c):04X}]" for c in DIRECTION_CONTROLS}


def shown_name(name: str) -> str:
    """``name`` as a name is shown: each direction control written out as ``[U+202E]``, so what
    is seen is the order the characters really have (a title, a file name, a model id)."""
    return name.translate(_WRITTEN_OUT)


def plain_tip(text: str) -> str:
    """``text`` as a tooltip shows it, word for word: a tooltip is read as HTML when it looks
    like HTML, so text that could look like it is escaped (and its lines kept)."""
    if "<" not in text and "&" not in text:
        return text  # nothing Qt could take for markup: shown as it is
    return f"<p style='white-space:pre-wrap'>{html.escape(text, quote=False)}</p>"


def button_words(text: str) -> str:
    """``text`` as a button or menu entry shows it: a single "&" would underline the next
    letter and vanish, a tab would start the shortcut column."""
    return text.replace("&", "&&").replace("\t", " ")


# WORD JOINER: no line may break on either side of it, and it draws nothing.
WORD_JOINER = "\u2060"


def unbroken(words: str) -> str:
    """``words`` (a command such as ``--mock``) as one piece a wrapping label never breaks
    inside: Qt breaks lines after a hyphen. The hyphens stay the ASCII ones, so the text reads
    (and is spoken) as typed."""
    return WORD_JOINER.join(words)


def window_title(name: str, app: str = "Conch") -> str:
    """The window's title for a chat called ``name``: "[*]" in a title is Qt's mark for unsaved
    changes, so a name's own "[*]" is doubled to show as written."""
    return f"{shown_name(name).replace('[*]', '[*][*]')} — {app}"


# ZERO WIDTH SPACE: a line may break here, and it draws nothing.
BREAK_POINT = "\u200b"
# A run this long without a space is a hash, a key, a path or base64 rather than a word: a
# wrapping label may break it anywhere, or its width would become the page's least width.
LONG_WORD = 24
_LONG_RUN = re.compile(rf"\S{{{LONG_WORD},}}")


def _breakable(char: str) -> bool:
    """Whether a line may break before ``char`` without tearing what is drawn (a combining
    mark or a joiner stays with the letter before it)."""
    return unicodedata.category(char) not in ("Mn", "Mc", "Me", "Cf")


def with_break_points(text: str) -> tuple[str, list[int]]:
    """``text`` as a wrapping label shows it: a break point between the letters of every long
    run without a space (unless it was joined on purpose, see ``unbroken``), and, for each
    character shown, its index in ``text`` (-1 for a break point) so a copy gives ``text``."""
    shown: list[str] = []
    origin: list[int] = []
    done = 0
    for run in _LONG_RUN.finditer(text):
        if WORD_JOINER in run.group():
            continue
        shown.append(text[done : run.start()])
        origin.extend(range(done, run.start()))
        for index in range(run.start(), run.end()):
            if index > run.start() and _breakable(text[index]) and _breakable(text[index - 1]):
                shown.append(BREAK_POINT)
                origin.append(-1)
            shown.append(text[index])
            origin.append(index)
        done = run.end()
    shown.append(text[done:])
    origin.extend(range(done, len(text)))
    return "".join(shown), origin


class PlainLabel(QLabel):
    """A label whose text is always plain text, whatever it looks like.

    Every label in the window is one: text set later (``setText``) is never read as markup,
    so nobody has to remember which labels may one day show outside words. A wrapping one
    breaks a long run without spaces (a hash, a path) anywhere, rather than widening the page
    to fit it; ``text()``, a selection and a copy still give the characters as they were set.
    """

    def __init__(self, text: str | QWidget = "", parent: QWidget | None = None) -> None:
        if isinstance(text, QWidget):  # ``PlainLabel(parent)``, as ``QLabel(parent)``
            parent, text = text, ""
        super().__init__(parent)
        self._text = ""  # as set; what is drawn may hold break points
        self._origin: list[int] | None = None  # shown index -> index in _text, when they differ
        self.setTextFormat(Qt.TextFormat.PlainText)  # before any text arrives
        if text:
            self.setText(text)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:
        self._text = text
        self._show()

    def clear(self) -> None:
        self.setText("")

    def setWordWrap(self, on: bool) -> None:
        super().setWordWrap(on)
        self._show()

    def _show(self) -> None:
        shown, origin = with_break_points(self._text) if self.wordWrap() else (self._text, [])
        self._origin = origin if shown != self._text else None
        super().setText(shown)

    def selectedText(self) -> str:
        shown = super().selectedText()
        if self._origin is None or not shown:
            return shown
        start = self.selectionStart()
        picked = (self._origin[i] for i in range(start, start + len(shown)))
        return "".join(self._text[i] for i in picked if i >= 0)

    # A copy made by Qt itself would hold the break points: these give the text as it was set.
    def keyPressEvent(self, event: QKeyEvent) -> None:
        if self._origin is not None and event.matches(QKeySequence.StandardKey.Copy):
            if self.hasSelectedText():
                QGuiApplication.clipboard().setText(self.selectedText())
            event.accept()
            return
        super().keyPressEvent(event)
        self._selection_to_clipboard()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        self._selection_to_clipboard()

    def _selection_to_clipboard(self) -> None:
        """X11's selection (pasted with the middle button) gets the characters as set."""
        clipboard = QGuiApplication.clipboard()
        if self._origin is not None and self.hasSelectedText() and clipboard.supportsSelection():
            clipboard.setText(self.selectedText(), QClipboard.Mode.Selection)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        if self._origin is None or not self._selectable():
            super().contextMenuEvent(event)
            return
        menu = QMenu(self)
        copy = menu.addAction("Copy")
        copy.setEnabled(self.hasSelectedText())
        copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(self.selectedText()))
        whole = menu.addAction("Select All")
        whole.triggered.connect(lambda: self.setSelection(0, len(super(PlainLabel, self).text())))
        menu.exec(event.globalPos())

    def _selectable(self) -> bool:
        return bool(self.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse)
