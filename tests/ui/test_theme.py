"""Themes: light, dark and following the system, applied live to a running app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QPushButton
from pytestqt.qtbot import QtBot

from ui.icons import APP_ICON, ICON_NAMES, app_icon, icon, render_svg, svg_source
from ui.resources import resource_path
from ui.theme import ThemeManager, load_theme, parse_tokens, set_style_property

SCHEMES = ("light", "dark")


@pytest.fixture
def restore_app(qapp: QApplication) -> Iterator[QApplication]:
    """Themes change the whole application; put it back for the next test."""
    sheet, palette, style = qapp.styleSheet(), qapp.palette(), qapp.style().name()
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


@pytest.fixture
def manager(restore_app: QApplication) -> Iterator[ThemeManager]:
    tm = ThemeManager(restore_app, "light")
    yield tm
    tm.close()


def _text_colour(widget: QLabel) -> QColor:
    return widget.palette().color(QPalette.ColorRole.WindowText)


def test_switching_theme_restyles_a_live_widget_without_a_restart(
    qtbot: QtBot, manager: ThemeManager, restore_app: QApplication
) -> None:
    label = QLabel("Hello")
    qtbot.addWidget(label)
    label.show()
    light_sheet = restore_app.styleSheet()
    light_text = _text_colour(label)
    assert light_text == load_theme("light").color("text")

    with qtbot.waitSignal(manager.changed) as changed:
        manager.apply("dark")
    assert changed.args == ["dark"]
    assert restore_app.styleSheet() != light_sheet
    assert load_theme("dark").tokens["window"] in restore_app.styleSheet()
    qtbot.waitUntil(lambda: _text_colour(label) == load_theme("dark").color("text"))
    assert restore_app.palette().color(QPalette.ColorRole.Window) == QColor(
        load_theme("dark").tokens["window"]
    )

    manager.apply("light")
    assert restore_app.styleSheet() == light_sheet
    qtbot.waitUntil(lambda: _text_colour(label) == light_text)


def test_following_the_system_switches_when_the_system_does(
    manager: ThemeManager, restore_app: QApplication
) -> None:
    manager.apply("system")
    hints = restore_app.styleHints()
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # what Qt sends when the OS flips
    assert manager.scheme == "dark"
    assert restore_app.styleSheet() == load_theme("dark").stylesheet
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    # mypy keeps the narrowing of the assert above; the signal has changed it since.
    assert manager.scheme == "light"  # type: ignore[comparison-overlap]
    assert restore_app.styleSheet() == load_theme("light").stylesheet


def test_a_fixed_choice_ignores_the_system(
    manager: ThemeManager, restore_app: QApplication
) -> None:
    manager.apply("light")
    restore_app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert manager.scheme == "light"
    assert manager.choice == "light"


def test_an_unknown_choice_falls_back_to_the_system(manager: ThemeManager) -> None:
    manager.apply("purple")
    assert manager.choice == "system"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_token_the_rules_use_is_defined(scheme: str) -> None:
    theme = load_theme(scheme)  # type: ignore[arg-type]
    assert theme.missing == frozenset()
    assert "@" not in re.sub(r"/\*.*?\*/", "", theme.stylesheet, flags=re.DOTALL)


def test_both_themes_define_the_same_tokens() -> None:
    light, _ = parse_tokens(resource_path("styles", "light.qss").read_text("utf-8"))
    dark, _ = parse_tokens(resource_path("styles", "dark.qss").read_text("utf-8"))
    assert set(light) == set(dark)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_files_the_stylesheet_points_at_exist(scheme: str) -> None:
    sheet = load_theme(scheme).stylesheet  # type: ignore[arg-type]
    urls = re.findall(r'url\("([^"]+)"\)', sheet)
    assert urls, "the check boxes and combo boxes draw images"
    for url in urls:
        assert Path(url).is_file(), url


def _contrast(a: QColor, b: QColor) -> float:
    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        return (
            0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())
        )

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# Every text colour on the backgrounds it is used on (see base.qss).
READABLE_PAIRS = (
    ("text", "window"),
    ("text", "surface"),
    ("text", "user-bubble"),
    ("text", "sidebar-selected"),
    ("muted", "window"),
    ("muted", "surface"),
    ("muted", "sidebar"),
    ("muted", "chip"),
    ("faint", "window"),
    ("faint", "surface"),
    ("faint", "surface-2"),
    ("on-accent", "accent"),
    ("accent-text", "window"),
    ("accent-text", "accent-soft"),
    ("danger", "window"),
    ("danger", "danger-bg"),
    ("success", "surface"),
    ("warning", "warning-bg"),
    ("tooltip-text", "tooltip"),
)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_text_is_readable_in_both_themes(scheme: str) -> None:
    theme = load_theme(scheme)  # type: ignore[arg-type]
    too_faint = [
        f"{fg} on {bg}: {_contrast(theme.color(fg), theme.color(bg)):.2f}"
        for fg, bg in READABLE_PAIRS
        if _contrast(theme.color(fg), theme.color(bg)) < 4.5
    ]
    assert too_faint == []


def test_icons_follow_the_theme_without_being_set_again(
    qtbot: QtBot, manager: ThemeManager
) -> None:
    button = QPushButton()
    qtbot.addWidget(button)
    button.setIcon(icon("send"))

    def ink() -> set[str]:
        image = button.icon().pixmap(24, 24).toImage()
        return {
            image.pixelColor(x, y).name()
            for x in range(24)
            for y in range(24)
            if image.pixelColor(x, y).alpha() == 255
        }

    assert ink() == {load_theme("light").tokens["text"]}
    manager.apply("dark")
    assert ink() == {load_theme("dark").tokens["text"]}


def test_every_icon_exists_and_draws_something() -> None:
    blank = []
    for name in (*ICON_NAMES, APP_ICON):
        source = svg_source(name)
        image = render_svg(source, QSize(32, 32), QColor("#000000"))
        drawn = sum(1 for x in range(32) for y in range(32) if image.pixelColor(x, y).alpha() > 0)
        if not source.startswith("<svg") or drawn < 20:
            blank.append(name)
    assert blank == []


def test_the_app_icon_has_the_sizes_desktops_ask_for() -> None:
    sizes = {s.width() for s in app_icon().availableSizes()}
    assert {16, 32, 48, 256} <= sizes


def test_set_style_property_repolishes_at_once(qtbot: QtBot, manager: ThemeManager) -> None:
    label = QLabel("Found 3 models")
    label.setObjectName("TestResult")
    qtbot.addWidget(label)
    label.show()
    set_style_property(label, "state", "ok")
    ok = _text_colour(label)
    set_style_property(label, "state", "error")
    assert _text_colour(label) != ok
    assert _text_colour(label) == load_theme("light").color("danger")
