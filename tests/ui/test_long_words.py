"""A long run without spaces (a hash, base64, a path) wraps inside its card at a narrow width,
instead of widening the page under a horizontal scrollbar; copying it gives it unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.secrets import SessionSecrets
from app.settings import SettingsStore
from engines.base import Attachment
from tests.ui.conftest import Chat
from tests.waits import HANG_MS
from ui.cards.memory_card import MemoryCard
from ui.chat.composer import Submission
from ui.chat.tool_rows import ToolEntry, ToolRows
from ui.main_window import MainWindow
from ui.plain import PlainLabel
from ui.settings.row_list import RowList
from ui.settings.settings_dialog import SettingsDialog
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

HASH = "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" * 3
PATH = "/home/someone/" + "a_very_long_directory_name_without_any_separator" * 4 + ".txt"


@pytest.fixture
def dialog(qtbot: QtBot, data_dir: Path, theme: ThemeManager) -> Iterator[SettingsDialog]:
    settings = SettingsStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    health.add("summary-failed", f"The model answered {HASH} instead of a summary.", "qwen")
    book.add(f"My notes live in {PATH}")
    secrets = SessionSecrets()
    shown = SettingsDialog(settings=settings, secrets=secrets, memories=book, health=health)
    qtbot.addWidget(shown)
    shown.resize(566, 600)
    shown.show()
    yield shown
    book.close()
    health.close()


def fits(row: QWidget, scroll: QScrollArea) -> bool:
    """Whether ``row`` is laid out within the list's visible width, with no sideways scroll."""
    QApplication.processEvents()
    right = row.mapTo(scroll.viewport(), QPoint(row.width(), 0)).x()
    return not scroll.horizontalScrollBar().isVisible() and right <= scroll.viewport().width()


@pytest.mark.parametrize("page", ["health", "memories"])
def test_a_long_word_wraps_inside_its_card_at_a_narrow_width(
    qtbot: QtBot, dialog: SettingsDialog, page: str
) -> None:
    dialog.show_page(page)
    shown = dialog.health_page if page == "health" else dialog.memories_page
    scroll = shown.findChild(RowList)
    assert scroll is not None
    (row,) = shown.rows()
    qtbot.waitUntil(lambda: fits(row, scroll), timeout=HANG_MS)
    label = row.text
    assert isinstance(label, PlainLabel)
    assert label.height() > 2 * label.fontMetrics().height()  # on several lines
    assert HASH in label.text() or PATH in label.text()  # the words as they came


def test_a_copy_of_a_broken_word_gives_the_characters_as_they_were(qtbot: QtBot) -> None:
    label = PlainLabel(f"key {HASH} end")
    label.setWordWrap(True)
    label.setTextInteractionFlags(
        Qt.TextInteractionFlag.TextSelectableByMouse
        | Qt.TextInteractionFlag.TextSelectableByKeyboard
    )
    qtbot.addWidget(label)
    label.resize(200, 400)
    label.show()
    label.setFocus()
    qtbot.keyClick(label, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    assert label.selectedText() == f"key {HASH} end"
    clipboard = QGuiApplication.clipboard()
    clipboard.clear()
    qtbot.keyClick(label, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert clipboard.text() == f"key {HASH} end"


def test_a_long_file_name_on_a_chip_leaves_the_window_narrow(
    qtbot: QtBot, window: MainWindow
) -> None:
    window.new_chat()

    def narrowest() -> int:
        QApplication.processEvents()  # the window's least width follows its layout's events
        window.resize(200, 700)  # as far as the person could drag the edge
        return window.width()

    least = narrowest()
    name = "quarterly_report_" + "x9" * 60 + ".txt"
    window.composer.restore(Submission(text="", attachments=(Attachment(name=name, text="hi"),)))
    (chip,) = window.composer.chip_list
    assert narrowest() == least
    window.resize(566, 700)
    qtbot.waitUntil(lambda: window.composer.width() < 566, timeout=HANG_MS)
    right = chip.mapTo(window.composer, QPoint(chip.width(), 0)).x()
    assert right <= window.composer.width()  # its ✕ in view
    assert chip.label.text().startswith(name)  # the whole name, for reading aloud
    assert name in chip.label.toolTip()  # shown in part, whole on hover


def test_a_tool_result_s_long_line_wraps_inside_the_chat_s_column(qtbot: QtBot) -> None:
    entry = ToolEntry("1", "read_file", arguments={"path": PATH}, status="done", preview=HASH)
    rows = ToolRows([entry], width=500)
    qtbot.addWidget(rows)
    (line,) = rows.lines.values()
    line.button.click()  # opened: the arguments and the result's first lines
    # As the chat view places a row's widget: the column's width, whatever the row asks for.
    rows.setGeometry(0, 0, 540, rows.heightForWidth(540))
    rows.show()
    qtbot.waitExposed(rows, timeout=HANG_MS)
    assert rows.minimumSizeHint().width() <= 540
    details = line.details
    qtbot.waitUntil(
        lambda: details.mapTo(rows, QPoint(details.width(), 0)).x() <= 540, timeout=HANG_MS
    )
    # Its longest line fits the width it was given (no result cut off at the right), on as
    # many lines as that takes.
    assert details.minimumSizeHint().width() <= details.width()
    assert details.height() >= details.heightForWidth(details.width())
    assert HASH in details.text()


def test_a_memory_card_in_the_chat_wraps_a_long_path_beside_its_undo(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    said = f"My notes live in {PATH}"
    run = chat.book.add_run(
        chat.chat_id, [said], seq_from=0, seq_to=1, waiting=False, source="fold"
    )
    assert run is not None
    card = MemoryCard(run, chat.book)
    qtbot.addWidget(card)
    # As the chat view places a row's widget: the column's width, whatever the card asks for.
    assert card.minimumSizeHint().width() <= 400
    card.setGeometry(0, 0, 400, card.heightForWidth(400))
    card.show()
    qtbot.waitExposed(card, timeout=HANG_MS)
    undo = card.buttons[(run.memories[0].id, "Undo")]
    assert undo.mapTo(card, QPoint(undo.width(), 0)).x() <= 400  # Undo in view
    (item,) = card.findChildren(PlainLabel, "MemoryCardItem")
    assert item.text() == f"• {said}" and item.height() > 2 * item.fontMetrics().height()
