"""The spin boxes of a chat's settings show their step arrows, in both themes.

Under the fields' padding, Fusion once squeezed both buttons into a sliver at the box's right
edge with no arrow in them. These tests look at the pixels of each button (``grab()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QAbstractSpinBox, QStyle, QStyleOptionSpinBox
from pytestqt.qtbot import QtBot

from app.store import ChatStore
from tests.waits import HANG_MS
from ui.chat.chat_settings import ChatSettingsPanel
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

MIN_BUTTON = 14  # px: a button a finger-tip of a pointer hits, and an arrow fits in


@pytest.fixture
def panel(qtbot: QtBot, data_dir: Path, theme: ThemeManager) -> Iterator[ChatSettingsPanel]:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Garden")
    made = ChatSettingsPanel(store, lambda: "")
    qtbot.addWidget(made)
    made.show_chat(chat.id, [], "")
    qtbot.waitExposed(made, timeout=HANG_MS)
    yield made
    store.close()


def button_rect(spin: QAbstractSpinBox, part: QStyle.SubControl) -> QRect:
    option = QStyleOptionSpinBox()
    spin.initStyleOption(option)
    return spin.style().subControlRect(QStyle.ComplexControl.CC_SpinBox, option, part, spin)


def ink(image: QImage, rect: QRect, color: QColor, tolerance: int = 48) -> QRect:
    """The bounding box of the pixels in ``rect`` painted in about ``color`` (an arrow)."""
    found = QRect()
    for y in range(rect.top(), rect.bottom() + 1):
        for x in range(rect.left(), rect.right() + 1):
            pixel = image.pixelColor(x, y)
            if (
                abs(pixel.red() - color.red()) <= tolerance
                and abs(pixel.green() - color.green()) <= tolerance
                and abs(pixel.blue() - color.blue()) <= tolerance
            ):
                found = found.united(QRect(x, y, 1, 1))
    return found


def test_each_spin_box_shows_an_up_and_a_down_arrow_in_its_own_button(
    panel: ChatSettingsPanel, theme: ThemeManager
) -> None:
    arrow = theme.color("muted")  # the chevrons' colour, as the combo box's
    panel.temperature.setValue(0.7)  # not at an end: both ways open
    panel.answer.setValue(2048)
    spins: tuple[QAbstractSpinBox, ...] = (panel.temperature, panel.answer)
    for spin in spins:
        image = spin.grab().toImage()
        up = button_rect(spin, QStyle.SubControl.SC_SpinBoxUp)
        down = button_rect(spin, QStyle.SubControl.SC_SpinBoxDown)
        for rect in (up, down):
            assert rect.width() >= MIN_BUTTON and rect.height() >= MIN_BUTTON, rect
        assert up.bottom() < down.top() + 2  # one above the other, not overlapping
        for rect, pointing in ((up, "up"), (down, "down")):
            drawn = ink(image, rect.adjusted(1, 1, -1, -1), arrow)
            # A chevron: wider than tall, inside its button, not a line along an edge.
            assert drawn.width() >= 7 and 3 <= drawn.height() < drawn.width(), (pointing, drawn)
            assert rect.adjusted(2, 2, -2, -2).contains(drawn), (pointing, drawn, rect)
