"""The command palette: type a few letters, arrows move, Enter runs, Esc closes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QKeySequence
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from tests.waits import HANG_MS
from ui.palette import Command, CommandPalette, fuzzy_score, rank, shortcut_text
from ui.theme import ThemeManager

# The offscreen platform cannot raise windows or grab the keyboard; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

TITLES = (
    "Summarise the start of this chat",
    "New chat",
    "Switch model…",
    "Tidy up memories now",
    "Settings",
    "Health",
    "Export chat as Markdown",
)
SHORTCUTS = {"New chat": "Ctrl+N", "Settings": "Ctrl+,", "Summarise the start of this chat": ""}


class Window:
    """Stands in for the main window: records which command ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def action(self, title: str) -> Callable[[], None]:
        return lambda: self.ran.append(title)


@pytest.fixture
def host(qtbot: QtBot) -> QWidget:
    widget = QWidget()
    widget.resize(900, 600)
    qtbot.addWidget(widget)
    widget.show()
    return widget


@pytest.fixture
def window() -> Window:
    return Window()


@pytest.fixture
def palette(qtbot: QtBot, host: QWidget, window: Window) -> CommandPalette:
    p = CommandPalette(host)
    qtbot.addWidget(p)
    p.set_commands(
        Command(title, window.action(title), shortcut=SHORTCUTS.get(title, "")) for title in TITLES
    )
    p.popup(host)
    return p


def test_typing_summ_finds_summarise_first_and_enter_runs_it(
    qtbot: QtBot, palette: CommandPalette, window: Window
) -> None:
    assert palette.isVisible()
    qtbot.keyClicks(palette.search, "summ")
    assert palette.visible_titles()[0] == "Summarise the start of this chat"
    assert palette.current_title() == "Summarise the start of this chat"
    with qtbot.waitSignal(palette.command_run) as ran:
        qtbot.keyClick(palette.search, Qt.Key.Key_Return)
    assert ran.args == ["Summarise the start of this chat"]
    assert window.ran == ["Summarise the start of this chat"]
    assert not palette.isVisible()


def test_escape_closes_without_running_anything(
    qtbot: QtBot, palette: CommandPalette, window: Window
) -> None:
    qtbot.keyClicks(palette.search, "new")
    qtbot.keyClick(palette.search, Qt.Key.Key_Escape)
    assert not palette.isVisible()
    assert window.ran == []


def test_arrows_move_the_selection_and_enter_runs_the_selected_one(
    qtbot: QtBot, palette: CommandPalette, window: Window
) -> None:
    assert palette.visible_titles() == list(TITLES)  # nothing typed: everything, in order
    assert palette.current_title() == TITLES[0]
    qtbot.keyClick(palette.search, Qt.Key.Key_Down)
    qtbot.keyClick(palette.search, Qt.Key.Key_Down)
    assert palette.current_title() == TITLES[2]
    qtbot.keyClick(palette.search, Qt.Key.Key_Up)
    assert palette.current_title() == TITLES[1]
    qtbot.keyClick(palette.search, Qt.Key.Key_Enter)
    assert window.ran == ["New chat"]


def test_up_from_the_top_wraps_to_the_last_command(qtbot: QtBot, palette: CommandPalette) -> None:
    qtbot.keyClick(palette.search, Qt.Key.Key_Up)
    assert palette.current_title() == TITLES[-1]
    qtbot.keyClick(palette.search, Qt.Key.Key_Down)
    assert palette.current_title() == TITLES[0]


def test_reopening_starts_with_an_empty_search(
    qtbot: QtBot, palette: CommandPalette, host: QWidget
) -> None:
    qtbot.keyClicks(palette.search, "heal")
    qtbot.keyClick(palette.search, Qt.Key.Key_Escape)
    palette.popup(host)
    assert palette.search.text() == ""
    assert len(palette.visible_titles()) == len(TITLES)


def test_no_match_says_so_and_enter_does_nothing(
    qtbot: QtBot, palette: CommandPalette, window: Window
) -> None:
    qtbot.keyClicks(palette.search, "qqqq")
    assert palette.visible_titles() == []
    assert palette.empty.isVisibleTo(palette)
    qtbot.keyClick(palette.search, Qt.Key.Key_Return)
    assert window.ran == []
    assert palette.isVisible()


def test_clicking_a_command_runs_it(qtbot: QtBot, palette: CommandPalette, window: Window) -> None:
    qtbot.keyClicks(palette.search, "export")
    item = palette.list.item(0)
    rect = palette.list.visualItemRect(item)
    qtbot.mouseClick(palette.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.ran == ["Export chat as Markdown"]


def lit_rows(palette: CommandPalette, ground: QColor) -> list[str]:
    """The titles of the rows painted with a highlight: left of their words, the row is not
    the palette's ``ground`` colour."""
    shot = palette.grab().toImage()
    ratio = shot.devicePixelRatio()
    view = palette.list.viewport()
    lit = []
    for row in range(palette.list.count()):
        rect = palette.list.visualItemRect(palette.list.item(row))
        at = view.mapTo(palette, QPoint(rect.left() + 6, rect.center().y()))
        colour = QColor(shot.pixel(int(at.x() * ratio), int(at.y() * ratio)))
        if max(abs(colour.red() - ground.red()), abs(colour.green() - ground.green())) > 4:
            lit.append(palette.list.item(row).text())
    return lit


def test_the_pointer_moves_the_choice_and_only_the_choice_is_lit(
    qtbot: QtBot, theme: ThemeManager, host: QWidget, window: Window
) -> None:
    palette = CommandPalette(host)
    qtbot.addWidget(palette)
    palette.set_commands(Command(title, window.action(title)) for title in TITLES)
    palette.popup(host)
    qtbot.waitExposed(palette)
    ground = theme.color("surface")
    assert lit_rows(palette, ground) == [TITLES[0]]

    # The pointer over the fourth row makes it the choice: one row lit, and Enter runs it.
    view = palette.list.viewport()
    fourth = palette.list.visualItemRect(palette.list.item(3)).center()
    qtbot.mouseMove(view, fourth - QPoint(0, 3))
    qtbot.mouseMove(view, fourth)
    qtbot.waitUntil(lambda: palette.current_title() == TITLES[3], timeout=HANG_MS)
    assert lit_rows(palette, ground) == [TITLES[3]]

    # The keys still move it, and the row left under the resting pointer is not lit as well.
    qtbot.keyClick(palette.search, Qt.Key.Key_Down)
    assert palette.current_title() == TITLES[4]
    assert lit_rows(palette, ground) == [TITLES[4]]
    with qtbot.waitSignal(palette.command_run) as ran:
        qtbot.keyClick(palette.search, Qt.Key.Key_Return)
    assert ran.args == [TITLES[4]] and window.ran == [TITLES[4]]


def test_shortcuts_are_shown_in_the_platforms_words(palette: CommandPalette) -> None:
    shown = {
        palette.list.item(i).text(): palette.list.item(i).data(Qt.ItemDataRole.UserRole + 1)
        for i in range(palette.list.count())
    }
    expected = QKeySequence("Ctrl+N").toString(QKeySequence.SequenceFormat.NativeText)
    assert shown["New chat"] == expected
    assert shortcut_text("") == ""


def test_palette_opens_over_its_window(palette: CommandPalette, host: QWidget) -> None:
    top_left = host.mapToGlobal(host.rect().topLeft())
    centre = palette.geometry().center().x()
    assert abs(centre - (top_left.x() + host.width() // 2)) <= 2
    assert palette.geometry().top() > top_left.y()
    assert palette.width() < host.width()


def test_a_command_that_returns_a_coroutine_runs_as_a_task(qtbot: QtBot, host: QWidget) -> None:
    done: list[str] = []

    async def compact() -> None:
        done.append("compacted")

    p = CommandPalette(host)
    qtbot.addWidget(p)
    p.set_commands([Command("Summarise the start of this chat", compact)])
    p.popup(host)
    qtbot.keyClick(p.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: done == ["compacted"], timeout=2000)


@pytest.mark.allow_error_log  # the command's failure is logged, and the test reads it
def test_a_failing_command_does_not_take_the_palette_down(
    qtbot: QtBot, host: QWidget, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise ValueError("boom")

    p = CommandPalette(host)
    qtbot.addWidget(p)
    p.set_commands([Command("Health", broken), Command("Settings", lambda: None)])
    p.popup(host)
    qtbot.keyClick(p.search, Qt.Key.Key_Return)
    assert "Health" in caplog.text
    p.popup(host)  # still usable
    assert p.visible_titles() == ["Health", "Settings"]


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("summ", "Summarise the start of this chat"),
        ("nc", "New chat"),
        ("set", "Settings"),
        ("tidy", "Tidy up memories now"),
        ("md", "Switch model…"),
        ("exp", "Export chat as Markdown"),
        ("chat", "New chat"),  # a word start in a short title beats the same in a long one
    ],
)
def test_ranking_puts_prefixes_and_word_starts_first(query: str, first: str) -> None:
    commands = [Command(t, lambda: None) for t in TITLES]
    assert rank(query, commands)[0].title == first


def test_scoring_prefers_prefix_then_word_start_then_middle() -> None:
    prefix = fuzzy_score("sta", "Start the chat")
    word = fuzzy_score("sta", "The start")
    middle = fuzzy_score("sta", "Restart")
    scattered = fuzzy_score("sta", "Sometimes that")
    assert prefix is not None and word is not None and middle is not None
    assert scattered is not None
    assert prefix > word > middle > scattered
    assert fuzzy_score("xyz", "Settings") is None
    assert fuzzy_score("", "Settings") == 0


def test_keywords_find_a_command_but_rank_below_its_title_words() -> None:
    summarise = Command("Summarise the start of this chat", lambda: None, keywords=("compact",))
    commands = [Command("Settings", lambda: None), summarise]
    assert rank("compact", commands) == [summarise]


def test_the_popup_hugs_its_matches(qtbot: QtBot, palette: CommandPalette) -> None:
    everything = palette.height()
    qtbot.keyClicks(palette.search, "summ")
    assert palette.height() < everything
    assert not palette.list.verticalScrollBar().isVisible()  # the one match fits
