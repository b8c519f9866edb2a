"""The shared pieces in ui._widgets, as the screens that use them show them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.store import Compaction
from engines.base import ProblemKind, TurnProblem
from tests.waits import HANG_MS as HANG
from ui.cards.problem_card import ProblemCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.tool_rows import ToolEntry, ToolLine

MARKUP = "<b>bold</b> & <a href='https://example.com'>a link</a>"


def selectable_plain(label: QLabel) -> bool:
    flags = label.textInteractionFlags()
    return (
        label.textFormat() == Qt.TextFormat.PlainText
        and bool(flags & Qt.TextInteractionFlag.TextSelectableByMouse)
        and bool(flags & Qt.TextInteractionFlag.TextSelectableByKeyboard)
        and label.wordWrap()
    )


def test_enter_opens_the_summary_line_and_a_tool_line(qtbot: QtBot) -> None:
    divider = SummaryDivider(Compaction("chat-1", 4, "The person runs a garden.", "Small", 0.0))
    line = ToolLine(ToolEntry("c", "read_file", status="done", preview="the file's first line"))
    for widget in (divider, line):
        qtbot.addWidget(widget)
    qtbot.keyClick(divider.button, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not divider.summary.isHidden(), timeout=HANG)
    qtbot.keyClick(line.button, Qt.Key.Key_Enter)
    qtbot.waitUntil(lambda: not line.details.isHidden(), timeout=HANG)
    assert "the file's first line" in line.details.text()


def test_a_summary_and_a_servers_words_show_as_selectable_plain_text(qtbot: QtBot) -> None:
    divider = SummaryDivider(Compaction("chat-1", 4, MARKUP, "Small", 0.0))
    card = ProblemCard(TurnProblem.of(ProblemKind.UNREACHABLE, detail=MARKUP))
    for widget in (divider, card):
        qtbot.addWidget(widget)
    for label in (divider.summary, card.details):
        assert label.text() == MARKUP  # shown as written, never as a link
        assert selectable_plain(label)
