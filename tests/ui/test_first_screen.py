"""The first screen an empty chat shows: which model will answer and why, what was found on
this computer, one click to each; the message box keeps the keyboard.

Three computers: nothing found, Ollama running (a loopback fake), only the model that came
with Conch (its runtime a loopback fake too). What is checked is what is painted: the words'
labels lie inside the screen and have ink, not only ``isVisible()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.local.bundled import MODEL_LABEL, BundledRuntime
from tests.engines.local.test_runtime_crashes import fake_runtime
from tests.fakes.ollama_server import FakeModel, FakeOllama
from tests.ui.windows import close_files, close_window, open_window, route_to
from tests.waits import HANG_MS
from ui.chat.message_delegate import PAD_X
from ui.first_screen import BUNDLED_WHY, FirstScreen, ModelButton
from ui.main_window import DEMO_WORDS, MainWindow
from ui.plain import PlainLabel
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

MARKUP_MODEL = "<b>big</b>:7b"  # a model id that looks like markup: shown as typed
LONG_MODEL = "hf.co/someone/" + "very-long-model-name-" * 8 + "q4_K_M"


def inked(widget: QWidget, screen: FirstScreen) -> bool:
    """Whether ``widget`` lies wholly inside the screen's visible area and something is drawn
    there (more than one colour: its words on the background)."""
    view = screen.viewport()
    rect = QRect(widget.mapTo(view, QPoint(0, 0)), widget.size())
    if not view.rect().contains(rect):
        return False
    shot = view.grab(rect).toImage()
    colours = {
        QColor(shot.pixel(x, y)).rgb()
        for x in range(0, shot.width(), 2)
        for y in range(0, shot.height(), 2)
    }
    return len(colours) > 2


def showing_first_screen(win: MainWindow) -> bool:
    return win.chat_stack.currentWidget() is win.first_screen and win.first_screen.isVisible()


def focused_box(qtbot: QtBot, win: MainWindow) -> None:
    win.activateWindow()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.composer.edit, timeout=HANG_MS)


def words_of(screen: FirstScreen) -> list[str]:
    return [button.text() for button in screen.buttons]


@pytest.fixture
def real_services(data_dir: Path) -> Iterator[list[AppServices]]:
    made: list[AppServices] = []
    yield made
    for services in made:
        close_files(services)


def build(
    data_dir: Path, made: list[AppServices], runtime: BundledRuntime | None = None
) -> AppServices:
    services = build_services(data_dir, mock=False, secrets=SessionSecrets(), runtime=runtime)
    made.append(services)
    return services


def test_with_nothing_found_it_says_so_and_offers_to_connect_each_server(
    qtbot: QtBot, data_dir: Path, real_services: list[AppServices]
) -> None:
    route_to(data_dir)  # every server's address closed; the bundled model off
    services = build(data_dir, real_services)
    win = open_window(qtbot, services)
    try:
        screen = win.first_screen
        assert showing_first_screen(win)
        assert screen.model_name.text() == "No model is ready yet."
        assert "start Ollama, LM Studio or llama.cpp" in screen.model_why.text()
        assert inked(screen.model_name, screen) and inked(screen.model_why, screen)
        assert set(screen.rows) == {"ollama", "lmstudio", "llamacpp"}
        for name, label in (
            ("ollama", "Ollama"),
            ("lmstudio", "LM Studio"),
            ("llamacpp", "llama.cpp"),
        ):
            row = screen.rows[name]
            assert row.status.text() == f"{label}: not running"
            assert [b.text() for b in row.buttons] == [f"Connect {label}…"]
            assert inked(row.status, screen)
        assert "turned off" in screen.bundled.text()
        focused_box(qtbot, win)

        # Looking for the servers again (every few seconds) finds the same: nothing is redrawn,
        # so a button under the pointer or in the keyboard's path stays where it is.
        page = screen.widget()
        looked = asyncio.ensure_future(services.catalogue.refresh())
        qtbot.waitUntil(looked.done, timeout=HANG_MS)
        assert screen.widget() is page

        # "Connect Ollama…" opens Settings on the servers' page.
        qtbot.mouseClick(screen.rows["ollama"].buttons[0], Qt.MouseButton.LeftButton)
        dialog = win._settings_dialog
        assert dialog is not None and dialog.isVisible()
        assert dialog.current_page() == "providers"
        dialog.close()
    finally:
        close_window(qtbot, win, services)


def test_with_ollama_running_one_click_chooses_its_model_for_the_new_chat(
    qtbot: QtBot, data_dir: Path, real_services: list[AppServices]
) -> None:
    models = [
        FakeModel(MARKUP_MODEL),
        FakeModel("qwen3:8b"),
        FakeModel("gemma3:270m"),
        FakeModel(LONG_MODEL),
    ]
    fake = FakeOllama(models).start()
    try:
        route_to(data_dir, ollama_url=fake.url)
        services = build(data_dir, real_services)
        win = open_window(qtbot, services)
        try:
            screen = win.first_screen
            qtbot.waitUntil(
                lambda: "ollama" in screen.rows and screen.rows["ollama"].server.running
            )
            assert showing_first_screen(win)
            # The first ready model answers; its id is shown as typed, never as markup.
            assert screen.model_name.text() == f"{MARKUP_MODEL} will answer."
            assert screen.model_name.textFormat() == Qt.TextFormat.PlainText
            assert "runs on this computer (Ollama)" in screen.model_why.text()
            row = screen.rows["ollama"]
            assert row.status.text() == "Ollama: running, 4 models"
            assert inked(row.status, screen)
            # The others are a click away (the one answering already is not offered again).
            offered = [b for b in row.buttons if isinstance(b, ModelButton)]
            assert [b.text() for b in offered[:2]] == ["Use qwen3:8b", "Use gemma3:270m"]
            for button in offered:
                assert inked(button, screen)
            # A long id is cut in its middle (all of it in the tooltip), never a wider window.
            long_one = offered[2]
            assert "…" in long_one.text() and long_one.text().endswith("q4_K_M")
            assert LONG_MODEL in long_one.toolTip()
            assert win.width() <= win.screen().availableGeometry().width()
            assert screen.rows["lmstudio"].status.text() == "LM Studio: not running"
            focused_box(qtbot, win)

            qtbot.mouseClick(offered[0], Qt.MouseButton.LeftButton)
            chat = services.store.get_chat(win.current_chat_id)
            assert chat is not None and chat.model_key == "ollama/qwen3:8b"
            assert win.picker.combo.currentText().startswith("qwen3:8b")
            assert screen.model_name.text() == "qwen3:8b will answer."
            assert QApplication.focusWidget() is win.composer.edit  # typing goes on
            assert fake.chat_requests() == []  # choosing sends nothing

            # The first message takes the screen away: the chat shows in its place.
            qtbot.keyClicks(win.composer.edit, "Hello")
            qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
            qtbot.waitUntil(lambda: win.chat_stack.currentWidget() is win.chat_view)
            bridge = win.bridge()
            assert bridge is not None
            qtbot.waitUntil(lambda: not bridge.busy, timeout=HANG_MS)
            assert fake.chat_requests()[-1]["model"] == "qwen3:8b"
        finally:
            close_window(qtbot, win, services)
    finally:
        fake.stop()


def test_with_only_the_bundled_model_it_says_what_it_is_good_for(
    qtbot: QtBot, data_dir: Path, real_services: list[AppServices]
) -> None:
    route_to(data_dir, bundled_model=True)
    services = build(data_dir, real_services, runtime=fake_runtime(data_dir))
    win = open_window(qtbot, services, timeout=60_000)  # starts the (fake) runtime
    try:
        screen = win.first_screen
        assert showing_first_screen(win)
        assert screen.model_name.text() == f"{MODEL_LABEL} will answer."
        assert BUNDLED_WHY in screen.model_why.text()
        assert "small and private" in BUNDLED_WHY.lower()
        assert inked(screen.model_why, screen)
        assert screen.bundled.text() == f"{MODEL_LABEL} (came with Conch): running on this computer"
        assert all(not row.server.running for row in screen.rows.values())
        focused_box(qtbot, win)
    finally:
        close_window(qtbot, win, services)
        stop = asyncio.ensure_future(services.runtime.stop()) if services.runtime else None
        if stop is not None:
            qtbot.waitUntil(stop.done, timeout=HANG_MS)


def test_the_demo_says_it_is_a_demo_above_its_first_chat(qtbot: QtBot, data_dir: Path) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=True)
    win = open_window(qtbot, services)
    try:
        assert win.chat_stack.currentWidget() is win.chat_view  # the demo chat, with messages
        banner = win.demo_banner
        assert banner.text() == DEMO_WORDS and "demo" in banner.text()
        top_left = banner.mapTo(win, QPoint(0, 0))
        assert QRect(QPoint(0, 0), win.size()).contains(QRect(top_left, banner.size()))
        shot = banner.grab().toImage()
        assert (
            len({shot.pixel(x, y) for x in range(shot.width()) for y in range(shot.height())}) > 2
        )

        win.new_chat()  # an empty chat: the demo's models are a click away
        screen = win.first_screen
        assert showing_first_screen(win)
        assert screen.model_why.text().startswith("A demo model")
        assert "Use Mock model (8K)" in words_of(screen)
    finally:
        close_window(qtbot, win, services)
        close_files(services)


def ring_shows(qtbot: QtBot, win: MainWindow, button: QWidget) -> bool:
    """Whether focusing ``button`` from the keyboard changes a good share of its edge."""
    win.composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)
    qtbot.waitUntil(lambda: not button.hasFocus())
    before = button.grab().toImage()
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus)
    after = button.grab().toImage()
    w, h = before.width(), before.height()
    edge = [(x, y) for x in range(w) for y in (0, 1, h - 2, h - 1)]
    edge += [(x, y) for y in range(h) for x in (0, 1, w - 2, w - 1)]
    changed = sum(before.pixelColor(x, y) != after.pixelColor(x, y) for x, y in edge)
    return changed >= min(w, h)


def test_each_button_on_the_first_screen_shows_a_ring_from_the_keyboard(
    qtbot: QtBot, data_dir: Path, real_services: list[AppServices], theme: ThemeManager
) -> None:
    route_to(data_dir)
    services = build(data_dir, real_services)
    win = MainWindow(services, theme=theme)
    qtbot.addWidget(win)
    win.show()
    started = asyncio.ensure_future(win.start())
    qtbot.waitUntil(started.done, timeout=HANG_MS)
    try:
        win.activateWindow()
        qtbot.waitActive(win)
        buttons = win.first_screen.buttons
        assert len(buttons) == 4  # three servers to connect, and a key to add
        unseen = [b.text() for b in buttons if not ring_shows(qtbot, win, b)]
        assert unseen == []
    finally:
        close_window(qtbot, win, services)


@pytest.mark.parametrize("width", [1024, 1200])
def test_the_first_screens_words_line_up_with_the_message_box_as_messages_do(
    qtbot: QtBot, data_dir: Path, width: int
) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    win = open_window(qtbot, services, size=(width, 760))
    try:
        win.new_chat()
        screen = win.first_screen
        qtbot.waitUntil(lambda: showing_first_screen(win), timeout=HANG_MS)
        box = QRect(win.composer.mapTo(win, QPoint(0, 0)), win.composer.size())
        title = next(w for w in screen.findChildren(PlainLabel) if w.text() == "Start a chat")
        words = [title, screen.model_name, screen.model_why]

        def lined_up() -> bool:
            lefts = {w.mapTo(win, QPoint(0, 0)).x() for w in words}
            return lefts == {box.left() + PAD_X}

        # The words start PAD_X in from the box's edge, as a message's text does above it,
        # and wrap PAD_X before its right edge: the column is as wide as the messages'.
        qtbot.waitUntil(lined_up, timeout=HANG_MS)
        for w in words:
            right = w.mapTo(win, QPoint(w.width() - 1, 0)).x()
            assert right == box.right() - PAD_X
            assert inked(w, screen)
    finally:
        close_window(qtbot, win, services)
        close_files(services)
