"""What the window paints, in both themes: a bar that is there is seen, a list shows whole rows,
an edit box is as tall as its text, and only the chosen row looks chosen.

These tests look at pixels (``grab()``) and geometry, not at ``isVisible``: a widget can be
visible to Qt and still paint nothing a person can see.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, Qt
from PySide6.QtGui import QColor, QHoverEvent, QImage
from PySide6.QtWidgets import QApplication, QLineEdit, QWidget
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.secrets import SessionSecrets
from app.settings import SettingsStore
from app.store import ChatStore
from engines.base import ModelInfo
from ui.chat.model_picker import ModelPicker
from ui.palette import CORNER_RADIUS, MAX_ROWS, Command, CommandPalette
from ui.settings.settings_dialog import SettingsDialog
from ui.sidebar import Sidebar
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

HANG_MS = 10_000


def share_of(image: QImage, color: QColor, rect: QRect | None = None, tolerance: int = 6) -> float:
    """How much of ``rect`` (all of ``image`` by default) is painted in about ``color``."""
    area = rect or image.rect()
    hits = total = 0
    for y in range(area.top(), area.bottom() + 1, 2):
        for x in range(area.left(), area.right() + 1, 2):
            pixel = image.pixelColor(x, y)
            total += 1
            if (
                abs(pixel.red() - color.red()) <= tolerance
                and abs(pixel.green() - color.green()) <= tolerance
                and abs(pixel.blue() - color.blue()) <= tolerance
            ):
                hits += 1
    return hits / max(1, total)


def settle(qtbot: QtBot, widget: QWidget) -> None:
    """Until ``widget`` is exposed and its layout has run (a hang guard, not a pause)."""
    qtbot.waitExposed(widget, timeout=HANG_MS)
    layout = widget.layout()
    if layout is not None:
        layout.activate()


# --- the Undo bar after deleting a chat --------------------------------------------------------


def test_the_undo_bar_is_painted_over_the_sidebar(
    qtbot: QtBot, theme: ThemeManager, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        kept = store.create_chat(title="Seed order")
        gone = store.create_chat(title="Compost bays")
        sidebar = Sidebar(store)
        qtbot.addWidget(sidebar)
        sidebar.resize(240, 600)
        sidebar.refresh()
        sidebar.show()
        settle(qtbot, sidebar)
        sidebar.set_current(gone.id)

        sidebar.delete_current()
        settle(qtbot, sidebar)

        bar = sidebar.undo_bar
        assert bar.isVisibleTo(sidebar) and bar.chat_id == gone.id
        picture = sidebar.grab().toImage()
        where = QRect(bar.mapTo(sidebar, QPoint(0, 0)), bar.size())
        # The bar's own colour fills most of it, and its words differ from that colour.
        assert share_of(picture, theme.color("tooltip"), where) > 0.5
        assert share_of(picture, theme.color("sidebar"), where) < 0.1
        label = bar.label.grab().toImage()
        assert share_of(label, theme.color("tooltip")) < 0.98  # words are drawn on it
        assert [c.id for c in store.list_chats()] == [kept.id]
    finally:
        store.close()


def test_the_sidebar_and_composer_paint_their_own_backgrounds(
    qtbot: QtBot, theme: ThemeManager, data_dir: Path
) -> None:
    from ui.chat.composer import Composer

    store = ChatStore.in_dir(data_dir)
    try:
        # Inside a window, as in the app (a window of its own always paints its background).
        host = QWidget()
        qtbot.addWidget(host)
        host.resize(900, 400)
        sidebar = Sidebar(store, host)
        sidebar.setGeometry(0, 0, 240, 400)
        composer = Composer(host)
        composer.setGeometry(260, 200, 600, 120)
        host.show()
        settle(qtbot, host)
        image = host.grab().toImage()
        assert share_of(image, theme.color("sidebar"), QRect(0, 120, 240, 200)) > 0.5
        middle = QRect(300, 230, 400, 40)  # inside the rounded box, away from the buttons
        assert share_of(image, theme.color("surface"), middle) > 0.8
    finally:
        store.close()


# --- renaming a chat ---------------------------------------------------------------------------


def test_the_rename_box_is_tall_enough_for_its_text(
    qtbot: QtBot, theme: ThemeManager, data_dir: Path
) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.create_chat(title="Community garden")
        sidebar = Sidebar(store)
        qtbot.addWidget(sidebar)
        sidebar.resize(240, 400)
        sidebar.refresh()
        sidebar.set_current(chat.id)
        sidebar.show()
        settle(qtbot, sidebar)

        sidebar.start_rename()
        qtbot.waitUntil(lambda: sidebar.list.findChild(QLineEdit) is not None, timeout=HANG_MS)
        editor = sidebar.list.findChild(QLineEdit)
        assert editor is not None
        qtbot.waitUntil(editor.isVisible, timeout=HANG_MS)
        # The line edit's own minimum (font, padding and frame) fits, so no letter is cut.
        assert editor.height() >= editor.minimumSizeHint().height()
        assert editor.height() >= editor.fontMetrics().height() + 4
        # And it stays inside the list, not over the search field above it.
        top_left = editor.mapTo(sidebar.list, QPoint(0, 0))
        assert top_left.y() >= 0
    finally:
        store.close()


# --- the model picker's list --------------------------------------------------------------------


MODELS = [
    ModelInfo(provider="mock", id="a", label="Mock model", context=32_768, local=True),
    ModelInfo(provider="mock", id="b", label="Mock model (8K)", context=8_192, local=True),
    ModelInfo(provider="mock", id="c", label="Mock model (128K)", context=131_072),
]


def test_the_model_list_drops_below_the_picker_with_every_entry_whole(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    host.resize(900, 600)
    picker = ModelPicker(host)
    picker.move(500, 8)
    picker.set_models(MODELS, MODELS[0].key)
    host.show()
    settle(qtbot, host)
    picker.adjustSize()

    picker.combo.showPopup()
    view = picker.combo.view()
    popup = view.window()
    qtbot.waitUntil(popup.isVisible, timeout=HANG_MS)
    try:
        combo_bottom = picker.combo.mapToGlobal(QPoint(0, picker.combo.height())).y()
        # Under the picker, not over the title bar above it.
        assert popup.geometry().top() >= combo_bottom - 2
        inside = view.viewport().rect()
        for row in range(picker.combo.count()):
            rect = view.visualRect(view.model().index(row, 0))
            assert inside.contains(rect), (row, rect, inside)
            assert rect.height() >= view.fontMetrics().height()
    finally:
        picker.combo.hidePopup()


# --- the command palette ----------------------------------------------------------------------


def shown_palette(qtbot: QtBot, titles: list[str]) -> tuple[QWidget, CommandPalette]:
    """A shown 1000×700 window (keep it: it owns the palette) and the command palette with
    ``titles`` popped up over it."""
    host = QWidget()
    qtbot.addWidget(host)
    host.resize(1000, 700)
    host.show()
    settle(qtbot, host)
    palette = CommandPalette(host)
    qtbot.addWidget(palette)
    palette.set_commands([Command(t, lambda: None) for t in titles])
    palette.popup(host)
    qtbot.waitExposed(palette, timeout=HANG_MS)
    settle(qtbot, palette)
    settle(qtbot, palette.card)
    return host, palette


def test_the_palette_shows_whole_rows_and_no_blank_space(qtbot: QtBot, theme: ThemeManager) -> None:
    titles = [f"Command number {n}" for n in range(MAX_ROWS)]
    _host, palette = shown_palette(qtbot, titles)

    view = palette.list
    inside = view.viewport().rect()
    for row in range(len(titles)):
        assert inside.contains(view.visualRect(view.model().index(row, 0))), row
    # The hint sits right under the last row: no band of empty card in between.
    last = view.visualRect(view.model().index(len(titles) - 1, 0))
    last_bottom = view.viewport().mapTo(palette.card, last.bottomLeft()).y()
    hint_top = palette.hint.mapTo(palette.card, QPoint(0, 0)).y()
    assert hint_top - last_bottom <= 24
    # And the card ends right under the hint.
    hint_bottom = hint_top + palette.hint.height()
    assert palette.card.height() - hint_bottom <= 4


def test_the_palettes_corners_are_cut_round_and_never_painted_see_through(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    _host, palette = shown_palette(qtbot, ["Summarise the start of this chat"])

    # Nothing of the popup relies on a compositor: an opaque window, its corners cut away.
    assert not palette.testAttribute(Qt.WidgetAttribute.WA_TranslucentBackground)
    w, h = palette.width(), palette.height()
    shape = palette.mask()
    for corner in (QPoint(0, 0), QPoint(w - 1, 0), QPoint(0, h - 1), QPoint(w - 1, h - 1)):
        assert not shape.contains(corner), corner
    for inside in (QPoint(w // 2, 0), QPoint(0, h // 2), QPoint(w // 2, h // 2)):
        assert shape.contains(inside), inside
    # What is drawn in the corner's kept pixels is the card's colour, opaque, not black.
    shot = palette.grab().toImage()
    ratio = shot.devicePixelRatio()
    card = shot.pixelColor(QPoint(int(w // 2 * ratio), int(h // 2 * ratio)))
    near = QPoint(int(CORNER_RADIUS * ratio), int(3 * ratio))  # inside the cut, by the edge
    assert shape.contains(QPoint(CORNER_RADIUS, 3))
    kept = shot.pixelColor(near)
    assert kept.alpha() == 255
    assert abs(kept.lightness() - card.lightness()) < 40


# --- the Settings menu -----------------------------------------------------------------------


def hover(widget: QWidget, at: QPoint | None, before: QPoint) -> None:
    """What the window system sends as the pointer moves over (or off) ``widget``."""
    kind = QEvent.Type.HoverMove if at is not None else QEvent.Type.HoverLeave
    where = QPointF(at if at is not None else QPoint(-1, -1))
    event = QHoverEvent(kind, where, QPointF(widget.mapToGlobal(where.toPoint())), QPointF(before))
    QApplication.sendEvent(widget, event)


def test_only_the_open_page_looks_chosen_after_settings_reopens(
    qtbot: QtBot, theme: ThemeManager, data_dir: Path
) -> None:
    settings = SettingsStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    try:
        dialog = SettingsDialog(
            settings=settings, secrets=SessionSecrets(), memories=book, health=health, theme=theme
        )
        qtbot.addWidget(dialog)
        dialog.show()
        settle(qtbot, dialog)
        nav = dialog.nav
        viewport = nav.viewport()
        health_row = nav.visualRect(nav.model().index(3, 0))
        # The person clicks Health, then closes the window with the pointer still over it ...
        hover(viewport, health_row.center(), health_row.center())
        dialog.show_page("health")
        dialog.hide()
        # ... and reopens Settings (Ctrl+,) with the pointer somewhere else.
        dialog.show_page("providers")
        dialog.show()
        settle(qtbot, dialog)

        image = nav.grab().toImage()
        chosen = theme.color("sidebar-selected")
        providers_row = nav.visualRect(nav.model().index(0, 0))
        health_row = nav.visualRect(nav.model().index(3, 0))
        at = viewport.mapTo(nav, QPoint(0, 0))
        assert share_of(image, chosen, providers_row.translated(at)) > 0.5
        # Health looks like the menu around it: not chosen, not even pointed at.
        assert share_of(image, theme.color("sidebar"), health_row.translated(at)) > 0.5

        # While the pointer really is over another row, that row still does not look chosen.
        hover(viewport, health_row.center(), health_row.center())
        nav.viewport().repaint()
        image = nav.grab().toImage()
        assert share_of(image, chosen, health_row.translated(at)) < 0.1
    finally:
        settings_closed = [settings, book, health]
        for each in settings_closed:
            close = getattr(each, "close", None)
            if callable(close):
                close()
