"""Code blocks wrap: at any width a person reaches every character of a long line and the
block's Copy link, on screen. Emoji use a colour emoji font when the system has one."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest
from PySide6.QtCore import QPoint, QPointF, QRect
from PySide6.QtGui import QColor, QFontDatabase, QFontMetricsF, QTextCursor
from pytestqt.qtbot import QtBot

from tests.ui.conftest import Chat
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView
from ui.chat.message_delegate import PAD_X, PAD_Y

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

LONG_LINE = "total = " + " + ".join(f"bed_{n}" for n in range(60)) + "  # END-OF-LINE"
CODE = f"Sum them:\n\n```python\n{LONG_LINE}\nprint(total)\n```\n"


def narrow_view(qtbot: QtBot, chat: Chat, width: int) -> ChatView:
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(width, 600)
    view.show()
    qtbot.waitExposed(view)
    view.set_chat(chat.chat_id)
    view.executeDelayedItemsLayout()
    view.viewport().grab()
    return view


@pytest.mark.parametrize("width", [320, 700, 1400])
def test_a_long_code_line_and_its_copy_link_stay_on_screen(
    qtbot: QtBot, chat_factory: Callable[..., Chat], width: int
) -> None:
    chat = chat_factory()
    chat.store.append_message(chat.chat_id, "assistant", CODE, model_key="m/x")
    view = narrow_view(qtbot, chat, width)
    i = view.chat_model.find(RowKind.MESSAGE, 0)
    index = view.chat_model.index(i, 0)
    rect = view.visualRect(index)
    area = view.viewport().rect()
    assert area.contains(rect.topLeft()) and rect.bottom() <= area.bottom()

    # The Copy link is where the person can click it: found by looking along the painted row.
    copy = [
        QPoint(x, y)
        for y in range(rect.top(), rect.bottom(), 3)
        for x in range(rect.left(), rect.right(), 3)
        if view.delegate.anchor_at(index, QPointF(x, y), rect) == "conch-copy:0"
    ]
    assert copy and all(area.contains(p) for p in copy)

    # The long line's last characters are laid out inside the column, not past its edge.
    doc = view.delegate.document(view.chat_model.row(i), view.delegate.content_width())
    assert doc.idealWidth() <= view.delegate.content_width() + 1
    found = doc.find("END-OF-LINE")
    assert not found.isNull()
    end = QTextCursor(found)
    end.setPosition(found.selectionEnd())
    block = end.block()
    line = block.layout().lineForTextPosition(end.positionInBlock())
    box = doc.documentLayout().blockBoundingRect(block)
    # PySide6's stub says object; Qt returns the x and the position it was asked about.
    at_x, _ = cast(tuple[float, int], line.cursorToX(end.positionInBlock()))
    x = box.left() + at_x
    y = box.top() + line.y() + line.height() / 2
    left = view.delegate.column(rect).left() + PAD_X
    spot = QPoint(int(left + x) - 1, int(rect.top() + PAD_Y + y))
    assert area.contains(spot)
    # And it is painted there: ink under the last letters of the line.
    shot = view.viewport().grab().toImage()
    background = QColor(shot.pixel(spot.x(), spot.y() - int(line.height())))
    inked = [
        QColor(shot.pixel(px, py))
        for px in range(max(0, spot.x() - 40), spot.x())
        for py in range(spot.y() - 4, spot.y() + 4)
    ]
    assert any(abs(c.lightness() - background.lightness()) > 60 for c in inked)


EMOJI_FAMILIES = ("Noto Color Emoji", "Apple Color Emoji", "Segoe UI Emoji", "Twemoji")


def emoji_family() -> str:
    have = set(QFontDatabase.families())
    return next((family for family in EMOJI_FAMILIES if family in have), "")


def test_emoji_use_a_colour_emoji_font_when_the_system_has_one(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    family = emoji_family()
    if not family:
        pytest.skip("no colour emoji font on this system (fonts-noto-color-emoji)")
    chat = chat_factory()
    words = "one two three four five six"
    chat.store.append_message(chat.chat_id, "assistant", f"Done 🎉🌱🍅\n\n{words}", model_key="m/x")
    view = narrow_view(qtbot, chat, 600)
    row = view.chat_model.row(0)
    doc = view.delegate.document(row, view.delegate.content_width())
    # Words keep the text font's spaces (naming the emoji font among the font's families
    # set every space in its wider one).
    block = doc.find(words).block()
    width = block.layout().lineAt(0).naturalTextWidth()
    assert abs(width - QFontMetricsF(view.font()).horizontalAdvance(words)) < 8  # not 30
    rect: QRect = view.visualRect(view.chat_model.index(0, 0))
    shot = view.viewport().grab().toImage()
    colours = {
        QColor(shot.pixel(x, y)).hsvSaturation()
        for x in range(rect.left(), rect.right(), 2)
        for y in range(rect.top(), rect.bottom(), 2)
    }
    assert max(colours) > 120  # drawn in colour, not as an empty box
