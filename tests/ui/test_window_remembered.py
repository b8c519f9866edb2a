"""The window opens at the size it was closed at, across a restart (the settings file); a long
chat title is cut with "…" at the header's edge, and in the narrowest window the title and the
model's line both still show their start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QLabel, QWidget
from pytestqt.qtbot import QtBot

from app.services import build_services
from tests.ui.windows import close_files, shown
from ui._widgets import few_letters
from ui.main_window import TITLE_CHARS

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def test_the_window_comes_back_at_the_size_it_was_closed_at(qtbot: QtBot, data_dir: Path) -> None:
    first = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        with shown(qtbot, first, start=True) as win:
            room = win.screen().availableGeometry().size()
            chosen = QSize(min(870, room.width() - 40), min(610, room.height() - 40))
            assert win.size() != chosen  # not the size a first window gets anyway
            win.resize(chosen)
            qtbot.waitUntil(lambda: win.size() == chosen)
            win.close()
    finally:
        close_files(first)
    saved = json.loads((data_dir / "settings.json").read_text(encoding="utf-8"))
    assert saved["window_geometry"]  # written to the settings file, not kept in memory

    again = build_services(data_dir, mock=True, seed_demo_chat=False)  # a new start
    try:
        with shown(qtbot, again, start=True) as reopened:
            assert reopened.size() == chosen
    finally:
        close_files(again)


def test_a_long_title_is_cut_with_an_ellipsis_at_the_headers_edge(
    qtbot: QtBot, data_dir: Path
) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    title = "Planning the community garden's build day with the library and the school " * 3
    try:
        with shown(qtbot, services, start=True, size=(720, 540)) as win:
            chat = services.store.create_chat(title=title)
            win.sidebar.refresh()
            win.open_chat(chat.id)
            label = win.title_label
            assert label.text() == title  # the words are all there (and in the tooltip)
            assert title in label.toolTip()
            # It ends before the model picker, and what it paints is the title cut with "…".
            assert label.geometry().right() < win.picker.geometry().left()
            room = label.contentsRect().width()
            cut = label.fontMetrics().elidedText(title, Qt.TextElideMode.ElideRight, room)
            assert cut.endswith("…") and len(cut) < len(title)
            shot = ink(label.grab().toImage())
            # Closer to the title cut with "…" than to the title cut off at the edge.
            misses_cut = sum(a != b for a, b in zip(shot, ink(drawn(label, cut)), strict=True))
            misses_edge = sum(a != b for a, b in zip(shot, ink(drawn(label, title)), strict=True))
            assert misses_cut * 2 < misses_edge
    finally:
        close_files(services)


def test_the_narrowest_window_shows_the_start_of_the_title_and_of_the_models_line(
    qtbot: QtBot, data_dir: Path
) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    title = "Community garden build day"
    try:
        with shown(qtbot, services, start=True) as win:
            chat = services.store.create_chat(title=title)
            win.sidebar.refresh()
            win.open_chat(chat.id)
            win.resize(560, 540)  # room for the picker's whole line, or for the title
            label, button = win.title_label, win.picker.combo
            parent, pane = label.parentWidget(), win.splitter.widget(1)
            assert parent is not None and pane is not None
            header: QWidget = parent
            right: QWidget = pane
            qtbot.waitUntil(lambda: win.width() == 560 and header.width() == right.width())
            assert label.geometry().right() < win.picker.geometry().left()

            # The title was squeezed to nothing beside the picker: its start shows, then "…".
            assert label.contentsRect().width() >= few_letters(label.fontMetrics(), TITLE_CHARS)
            cut = label.shown()
            assert cut.endswith("…") and title.startswith(cut[:-1]) and len(cut) > TITLE_CHARS // 2
            shot = ink(label.grab().toImage())
            misses_cut = sum(a != b for a, b in zip(shot, ink(drawn(label, cut)), strict=True))
            misses_edge = sum(a != b for a, b in zip(shot, ink(drawn(label, title)), strict=True))
            assert misses_cut * 2 < misses_edge

            # The model's line gave way, and ends in "…" where it was cut mid-word ("loade").
            line = button.currentText()
            painted = button.shown_text()
            assert painted.endswith("…") and line.startswith(painted[:-1].rstrip())
            assert button.width() < button.sizeHint().width()

            win.resize(1100, 700)  # with room again, both are whole
            qtbot.waitUntil(lambda: button.shown_text() == line)
            assert label.shown() == title
    finally:
        close_files(services)


def drawn(label: QLabel, text: str) -> QImage:
    """``text`` as ``label`` would draw it on a white ground, clipped to the label."""
    image = QImage(label.size(), QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.white)
    painter = QPainter(image)
    painter.setFont(label.font())
    painter.setPen(label.palette().color(label.foregroundRole()))
    flags = int(label.alignment() | Qt.AlignmentFlag.AlignVCenter)
    painter.drawText(label.contentsRect(), flags, text)
    painter.end()
    return image


def ink(image: QImage) -> list[bool]:
    """Which pixels are dark (the words), row by row."""
    return [
        QColor(image.pixel(x, y)).lightness() < 128
        for y in range(image.height())
        for x in range(image.width())
    ]
