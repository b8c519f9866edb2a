"""The summary line, opened: the summary, and what its word-for-word list is and left out."""

from __future__ import annotations

from collections import Counter

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from app.store import Compaction
from engines.context.facts import FACTS_SHARE, SECTIONS, keep_facts
from tests.waits import HANG_MS as HANG
from ui.cards.summary_divider import WRITING, SummaryDivider
from ui.theme import ThemeManager

LOG = "\n".join(
    f"2026-05-{1 + n % 28:02d} 06:{n % 60:02d}:41 irrigation INFO zone {1 + n % 4} "
    f"moisture={18 + n % 9}%"
    for n in range(40)
)
FOLDED = (
    "Person: Priya Raman chairs the committee; the grant reference is GR-2026-0417.\n"
    "Assistant: Noted.\n"
    f"Person: I pasted this from our files:\n\n{LOG}\n\nWhat am I missing?\n"
)


def divider(qtbot: QtBot, summary: str) -> SummaryDivider:
    widget = SummaryDivider(Compaction("chat-1", 12, summary, "Small mock", 0.0))
    qtbot.addWidget(widget)
    return widget


def shown(label: QLabel) -> bool:
    return not label.isHidden()


def test_opened_it_says_what_the_kept_list_holds_and_what_its_cap_left_out(
    qtbot: QtBot,
) -> None:
    # The smallest cap with room for the person's facts and the line saying the pasted log's
    # shape was left out.
    summary = next(
        kept
        for cap in range(0, 400, 5)
        if "from pasted text"
        in (kept := keep_facts("The person runs a garden.", FOLDED, 3_000, limit_tokens=cap))
    )
    assert "Priya Raman" in summary and all(part in summary for part in SECTIONS)
    line = divider(qtbot, summary)
    assert not shown(line.facts)
    qtbot.mouseClick(line.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: shown(line.facts), timeout=HANG)
    assert line.summary.text() == summary  # the list itself, as the model reads it
    caption = line.facts.text()
    assert "kept word for word" in caption and f"{round(FACTS_SHARE * 100)}%" in caption
    assert "Left out to stay within that:" in caption and "from pasted text" in caption
    assert "(" not in caption  # said in words, not the list's bracketed line
    qtbot.mouseClick(line.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not shown(line.facts), timeout=HANG)


def test_a_summary_without_a_kept_list_shows_no_caption(qtbot: QtBot) -> None:
    line = divider(qtbot, "The person runs a garden.")
    qtbot.mouseClick(line.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: shown(line.summary), timeout=HANG)
    assert not shown(line.facts) and line.facts.text() == ""


def hosted(qtbot: QtBot, widget: SummaryDivider, width: int, height: int = 60) -> QWidget:
    """``widget`` in a plain window of the theme's colour, shown; the window."""
    host = QWidget()
    qtbot.addWidget(host)
    QVBoxLayout(host).addWidget(widget)
    host.resize(width, height)
    host.show()
    qtbot.waitExposed(host, timeout=HANG)
    return host


def ink(widget: QWidget) -> tuple[int, int]:
    """(how many rows, how strong: the largest grey step) of the words ``widget`` paints over
    its own background, as its window shows them (its frame's edge left out)."""
    top = widget.window()
    rect = QRect(widget.mapTo(top, QPoint(0, 0)), widget.size()).adjusted(3, 3, -3, -3)
    image = top.grab().toImage().copy(rect).convertToFormat(QImage.Format.Format_Grayscale8)
    line, data = image.bytesPerLine(), bytes(image.constBits())
    lines = [data[y * line : y * line + image.width()] for y in range(image.height())]
    back = Counter(b"".join(lines)).most_common(1)[0][0]
    steps = [max(abs(v - back) for v in row) for row in lines]
    inked = [step for step in steps if step > 40]
    return len(inked), max(inked, default=0)


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_the_words_saying_the_summary_is_being_written_are_as_quiet_as_the_line(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    # They were painted in the body text's size and colour, louder than the line they explain.
    compaction = Compaction("chat-1", 12, "- Kept.", "Small mock", 0.0)
    widget = SummaryDivider(compaction, writing=True)
    _host = hosted(qtbot, widget, 700)
    label, line = widget.writing_label, widget.button
    assert label.isVisible() and label.text() == WRITING
    assert label.fontInfo().pixelSize() == line.fontInfo().pixelSize()
    words, line_words = ink(label), ink(line)
    assert words[0] <= line_words[0] + 1  # no taller than the line's own words
    assert words[1] <= line_words[1] + 12  # and no stronger


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_the_note_under_an_opened_summary_is_quieter_than_the_summary(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    # It was painted in the body text's size and colour, louder than the summary it explains.
    compaction = Compaction("chat-1", 12, keep_facts("", FOLDED, 3_000), "Mock", 0.0)
    widget = SummaryDivider(compaction)
    _host = hosted(qtbot, widget, 700, 600)
    widget.set_open(True)
    qtbot.waitUntil(widget.facts.isVisible, timeout=HANG)
    note, summary = widget.facts, widget.summary
    assert note.fontInfo().pixelSize() < summary.fontInfo().pixelSize()
    assert ink(note)[1] <= ink(summary)[1] + 12  # no stronger than the summary's words
