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

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

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


class PlainLabel(QLabel):
    """A label whose text is always plain text, whatever it looks like.

    Every label in the window is one: text set later (``setText``) is never read as markup,
    so nobody has to remember which labels may one day show outside words.
    """

    def __init__(self, text: str | QWidget = "", parent: QWidget | None = None) -> None:
        if isinstance(text, QWidget):  # ``PlainLabel(parent)``, as ``QLabel(parent)``
            parent, text = text, ""
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)  # before any text arrives
        if text:
            self.setText(text)
