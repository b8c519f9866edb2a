"""The keyboard: a sheet of every shortcut (Ctrl+/), and a ring a person can see on whatever
control has the focus, in both themes (judged by pixels, not by ``hasFocus``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QImage, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.services import AppServices, build_services
from tests.ui.windows import closed_after, shown
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView
from ui.chat.context_meter import ContextMeter
from ui.main_window import MainWindow
from ui.palette import shortcut_text
from ui.shortcuts import SHORTCUTS, ShortcutsSheet
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def services(data_dir: Path) -> Iterator[AppServices]:
    yield from closed_after(build_services(data_dir, mock=True, seed_demo_chat=True))


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    # qtbot's default wait.
    with shown(qtbot, services, start=True, timeout=5000) as win:
        yield win


def test_ctrl_slash_lists_every_shortcut_the_window_has(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_Slash, Qt.KeyboardModifier.ControlModifier)
    sheet = window.findChild(ShortcutsSheet)
    assert sheet is not None
    qtbot.waitUntil(sheet.isVisible)
    shown = {label.text() for label in sheet.findChildren(QLabel)}
    # Every key the window answers to is on the sheet, in the platform's own words...
    installed = [
        s.key().toString(QKeySequence.SequenceFormat.NativeText)
        for s in window.findChildren(QShortcut)
    ]
    assert installed and all(keys in shown for keys in installed)
    # ...and so is every key a part of the window handles itself, with what it does.
    for shortcut in SHORTCUTS:
        assert shortcut.does in shown
        assert shortcut_text(shortcut.keys.split(" / ")[0]) in " ".join(shown)
    assert {"Message box", "Messages", "Chat list", "Command palette"} <= shown
    qtbot.keyClick(sheet, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not sheet.isVisible())


def test_ctrl_q_closes_the_window_as_its_close_button_does(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    with qtbot.waitSignal(window.closed, timeout=HANG_MS):
        qtbot.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert not window.isVisible()
    assert services.settings.settings.window_geometry  # what closing the window keeps


def test_the_palette_offers_the_sheet_with_its_key(window: MainWindow) -> None:
    commands = {c.title: c for c in window.palette_commands()}
    assert commands["Keyboard shortcuts"].shortcut == "Ctrl+/"
    assert commands["New chat"].shortcut == "Ctrl+N"


def _focusable(window: MainWindow) -> list[QWidget]:
    return [
        w
        for w in window.findChildren(QWidget)
        if w.isVisible()
        and w.isEnabled()
        and w.focusPolicy() & Qt.FocusPolicy.TabFocus
        and w.width() > 4
        and w.height() > 4
    ]


def _ring_holder(control: QWidget) -> QWidget:
    """Where the ring is drawn: the control, or the frame it names (the message box's)."""
    name = control.property("focus_ring_on")
    parent = control.parentWidget()
    while name and parent is not None:
        if parent.objectName() == name:
            return parent
        parent = parent.parentWidget()
    return control


def _differs(a: QImage, b: QImage) -> int:
    """How many border pixels (the outer 3 px) differ between two grabs of one widget."""
    changed = 0
    w, h = a.width(), a.height()
    for x in range(w):
        for y in (0, 1, 2, h - 3, h - 2, h - 1):
            if a.pixelColor(x, y) != b.pixelColor(x, y):
                changed += 1
    for y in range(h):
        for x in (0, 1, 2, w - 3, w - 2, w - 1):
            if a.pixelColor(x, y) != b.pixelColor(x, y):
                changed += 1
    return changed


def test_every_focusable_control_shows_a_ring_when_it_has_the_focus(
    qtbot: QtBot, theme: ThemeManager, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)
    controls = _focusable(window)
    assert len(controls) >= 5
    unseen: list[str] = []
    for control in controls:
        window.setFocus(Qt.FocusReason.OtherFocusReason)

        def unfocused(c: QWidget = control) -> bool:
            return not c.hasFocus()

        qtbot.waitUntil(unfocused)
        holder = _ring_holder(control)
        before = holder.grab().toImage()
        control.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(control.hasFocus)
        after = holder.grab().toImage()
        # A ring is around the control: a good share of its edge changes colour.
        if _differs(before, after) < min(before.width(), before.height()):
            unseen.append(f"{type(control).__name__}#{control.objectName()}")
    assert unseen == [], "\n".join(unseen)


def _ring_pixels(image: QImage, ring: QColor) -> int:
    """How many pixels of ``image`` are the focus ring's colour (give or take antialiasing)."""
    return sum(
        1
        for x in range(image.width())
        for y in range(image.height())
        if _near(image.pixelColor(x, y), ring)
    )


def _near(a: QColor, b: QColor) -> bool:
    return abs(a.red() - b.red()) + abs(a.green() - b.green()) + abs(a.blue() - b.blue()) < 40


def test_tab_to_the_summary_line_scrolls_it_into_view_with_its_ring(
    qtbot: QtBot, theme: ThemeManager, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)
    view = window.findChild(ChatView)
    button = window.findChild(QWidget, "SummaryDividerButton")
    assert view is not None and button is not None

    def on_screen() -> bool:
        assert view is not None and button is not None
        place = QRect(button.mapTo(view.viewport(), QPoint(0, 0)), button.size())
        return view.viewport().rect().contains(place)

    # The demo chat opens on its newest messages; its summary line is far above them.
    qtbot.waitUntil(view.at_bottom)
    assert not on_screen()
    view.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(view.hasFocus)
    qtbot.keyClick(view, Qt.Key.Key_Tab)  # the next control after the messages: the line
    qtbot.waitUntil(button.hasFocus)
    assert on_screen()
    # What is painted there is the line with its ring.
    place = QRect(button.mapTo(view.viewport(), QPoint(0, 0)), button.size())
    painted = view.viewport().grab(place).toImage()
    assert _ring_pixels(painted, theme.color("focus")) >= button.width()


def test_the_context_meter_shows_a_ring_when_tab_reaches_it(
    qtbot: QtBot, theme: ThemeManager, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)
    meter = window.findChild(ContextMeter)
    assert meter is not None
    qtbot.waitUntil(meter.isVisible)
    # The meter is a 4 px bar: the ring is judged on the composer's row around it.
    row = meter.parentWidget()
    assert row is not None
    around = QRect(meter.geometry()).adjusted(-6, -8, 6, 8)
    before = _ring_pixels(row.grab(around).toImage(), theme.color("focus"))
    meter.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(meter.hasFocus)
    after = _ring_pixels(row.grab(around).toImage(), theme.color("focus"))
    assert after - before >= meter.width()


def test_tab_goes_through_the_header_together_and_from_the_box_to_the_messages(
    qtbot: QtBot, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)

    def tab_from(start: QWidget) -> QWidget | None:
        start.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(start.hasFocus)
        qtbot.keyClick(start, Qt.Key.Key_Tab)
        return QApplication.focusWidget()

    # The chat's model, then its settings beside it (the tools button shows with tool servers).
    assert tab_from(window.picker.combo) is window.chat_settings_button
    # The message box's last control, then the messages, not a jump up to the header.
    meter = window.findChild(ContextMeter)
    assert meter is not None and meter.isVisible()
    assert tab_from(meter) is window.chat_view


def test_the_model_line_stays_whole_when_its_button_has_the_focus(
    qtbot: QtBot, theme: ThemeManager, window: MainWindow, services: AppServices
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)
    combo = window.picker.combo
    # The demo's longest line ("… · 8K · not loaded"): the button is as wide as it, no wider.
    small = services.catalogue.find(MOCK_MODELS[1].key)
    assert small is not None
    window.switch_model(small)
    line = combo.currentText()
    assert "not loaded" in line
    window.resize(1280, 720)  # room in the header for the whole line
    qtbot.waitUntil(lambda: combo.shown_text() == line, timeout=HANG_MS)
    # The ring is drawn in the room the border always has: the line is not cut to "not load…".
    combo.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(combo.hasFocus)
    assert combo.shown_text() == line


def _tinted(image: QImage) -> int:
    """Pixels of a light reddish tint: the style's own focus box, filled with a wash of the
    accent (the ring is blue, the words grey, the button's face white or near-black)."""
    count = 0
    for x in range(image.width()):
        for y in range(image.height()):
            c = image.pixelColor(x, y)
            if c.red() - c.blue() > 12 and c.red() - c.green() > 6:
                count += 1
    return count


def test_a_button_reached_with_tab_shows_the_ring_and_no_box_around_its_words(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    row = QHBoxLayout(host)
    first, test = QPushButton("Save"), QPushButton("Test")
    row.addWidget(first)
    row.addWidget(test)
    host.show()
    host.activateWindow()
    qtbot.waitActive(host)
    first.setFocus(Qt.FocusReason.OtherFocusReason)
    qtbot.waitUntil(first.hasFocus)
    qtbot.keyClick(first, Qt.Key.Key_Tab)  # a real Tab: the style now draws keyboard focus
    qtbot.waitUntil(test.hasFocus)
    painted = test.grab().toImage()
    assert _ring_pixels(painted, theme.color("focus")) >= test.width()
    # Only the ring: no second, reddish box hugging the words (it read as selected text and
    # clipped the letters at its edges).
    assert _tinted(painted) == 0


def test_pressing_a_cards_button_with_the_pointer_does_not_scroll_it_away(
    qtbot: QtBot, window: MainWindow
) -> None:
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.waitActive(window)
    view = window.chat_view
    qtbot.waitUntil(view.at_bottom)
    [card] = view.widgets_of(RowKind.MEMORIES)
    undo = next(b for b in card.findChildren(QPushButton) if b.text() == "Undo")
    # Only the top few pixels of the button show at the bottom of the messages.
    bar = view.verticalScrollBar()
    top = undo.mapTo(view.viewport(), QPoint(0, 0)).y()
    bar.setValue(bar.value() + top + 4 - view.viewport().height())
    before = bar.value()
    qtbot.mousePress(undo, Qt.MouseButton.LeftButton, pos=QPoint(undo.width() // 2, 2))
    # The press gives it the focus; the view stays put, so the release lands on the button.
    assert undo.hasFocus()
    assert bar.value() == before
    qtbot.mouseRelease(undo, Qt.MouseButton.LeftButton, pos=QPoint(undo.width() // 2, 2))
