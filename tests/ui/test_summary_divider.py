"""The summary line, opened: the summary, and what its word-for-word list is and left out."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.store import Compaction
from engines.context.facts import FACTS_SHARE, SECTIONS, keep_facts
from tests.waits import HANG_MS as HANG
from ui.cards.summary_divider import SummaryDivider

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
