"""The summary line (and the handoff line) is as tall as its words: no descender is cut off
("messaqes"), whatever height the chat view offers its row."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from app.services import build_services
from app.store import Compaction
from engines.base import HandedOff
from tests.ui.windows import close_files, shown
from ui.cards.handoff_divider import HandoffDivider
from ui.cards.summary_divider import SummaryDivider
from ui.chat.chat_model import RowKind
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def ink_rows(image: QImage, rect: QRect) -> list[int]:
    """The rows of ``rect`` where something differs from the rect's top-left background."""
    back = image.pixelColor(rect.left(), rect.top())
    rows = []
    for y in range(rect.top(), rect.bottom() + 1):
        for x in range(rect.left(), rect.right() + 1):
            pixel = image.pixelColor(x, y)
            if (
                abs(pixel.red() - back.red())
                + abs(pixel.green() - back.green())
                + abs(pixel.blue() - back.blue())
                > 60
            ):
                rows.append(y)
                break
    return rows


def words_fit(line: SummaryDivider) -> None:
    button = line.button
    # The style's own answer for the words and their padding, and the font's full height.
    assert button.height() >= button.sizeHint().height()
    assert button.height() >= button.fontMetrics().height()
    assert line.height() >= line.sizeHint().height()
    image = line.grab().toImage()
    where = button.geometry()
    rows = ink_rows(image, where)
    assert rows, "the line's words are painted"
    # Cut-off words end on the widget's last row; whole ones end above it, inside the padding.
    assert max(rows) < where.bottom()


def test_the_summary_line_in_the_window_is_not_cut_off(
    qtbot: QtBot, theme: ThemeManager, tmp_path: Path
) -> None:
    services = build_services(tmp_path / "demo", mock=True)  # opens with its summary line
    try:
        with shown(qtbot, services, start=True) as win:
            line = win.chat_view.widget_at(RowKind.DIVIDER)
            assert isinstance(line, SummaryDivider)
            qtbot.waitUntil(line.isVisible)
            words_fit(line)

            line.set_open(True)
            qtbot.waitUntil(lambda: line.height() >= line.needed_height() > 100)
            # Opened, its last control (Copy summary) is inside it too.
            assert line.rect().contains(line.copy_button.geometry())
            line.set_open(False)
            qtbot.waitUntil(lambda: line.height() < 100)
            words_fit(line)
    finally:
        close_files(services)


@pytest.mark.parametrize("kind", ["summary", "handoff"])
def test_a_line_given_too_little_height_keeps_its_words_whole(
    qtbot: QtBot, theme: ThemeManager, kind: str
) -> None:
    holder = QWidget()
    qtbot.addWidget(holder)
    line: SummaryDivider
    if kind == "summary":
        line = SummaryDivider(Compaction("chat-1", 4, "Garden notes.", "Small mock", 0.0), holder)
    else:
        handoff = HandedOff(
            first_seq=4, program="Claude Code", text="Claude Code starts from here, typing"
        )
        line = HandoffDivider(handoff, holder)
    holder.resize(500, 200)
    holder.show()
    qtbot.waitUntil(line.isVisible)
    line.setGeometry(0, 0, 480, 12)  # less than the words need, as the chat's rows offer

    words_fit(line)
