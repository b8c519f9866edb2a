"""The composer: Enter/Shift+Enter/Esc, /compact, attachments, and a 5 MB paste."""

from __future__ import annotations

import base64
import unicodedata
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QMimeData, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QLabel, QToolButton, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from tests.cost import cpu_seconds
from ui.chat.composer import COMPACT_HINT, PASTE_LIMIT, Composer, Submission, parse_compact

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def composer(qtbot: QtBot) -> Composer:
    widget = Composer()
    qtbot.addWidget(widget)
    widget.show()
    widget.edit.setFocus()
    return widget


def test_enter_sends_and_shift_enter_breaks_the_line(qtbot: QtBot, composer: Composer) -> None:
    qtbot.keyClicks(composer.edit, "first line")
    qtbot.keyClick(composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer.edit, "second line")
    assert composer.text() == "first line\nsecond line"

    with qtbot.waitSignal(composer.submitted) as sent:
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    submission = sent.args[0]
    assert isinstance(submission, Submission)
    assert submission.text == "first line\nsecond line"
    assert not submission.is_compact
    assert composer.text() == ""


def test_an_empty_box_sends_nothing(qtbot: QtBot, composer: Composer) -> None:
    with qtbot.assertNotEmitted(composer.submitted):
        qtbot.keyClicks(composer.edit, "   ")
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)


def test_while_busy_enter_keeps_the_draft_and_esc_stops(qtbot: QtBot, composer: Composer) -> None:
    composer.set_busy(True)
    assert composer.stop_button.isVisible() and not composer.send_button.isVisible()
    qtbot.keyClicks(composer.edit, "next question")
    with qtbot.assertNotEmitted(composer.submitted):
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert composer.text() == "next question"
    with qtbot.waitSignal(composer.stop_requested):
        qtbot.keyClick(composer.edit, Qt.Key.Key_Escape)
    with qtbot.waitSignal(composer.stop_requested):
        qtbot.mouseClick(composer.stop_button, Qt.MouseButton.LeftButton)
    composer.set_busy(False)
    assert composer.send_button.isVisible() and not composer.stop_button.isVisible()


def test_compact_is_a_command_with_its_focus(qtbot: QtBot, composer: Composer) -> None:
    qtbot.keyClicks(composer.edit, "/comp")
    assert composer.hint.isVisible() and composer.hint.text() == COMPACT_HINT
    qtbot.keyClicks(composer.edit, "act keep the budget numbers")
    with qtbot.waitSignal(composer.submitted) as sent:
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    submission = sent.args[0]
    assert submission.is_compact
    assert submission.compact_focus == "keep the budget numbers"
    assert not composer.hint.isVisible() or composer.hint.text() != COMPACT_HINT


def test_parse_compact() -> None:
    assert parse_compact("/compact") == ""
    assert parse_compact("  /COMPACT   keep  the names ") == "keep the names"
    assert parse_compact("/compact\nkeep the budget") == "keep the budget"
    assert parse_compact("/compactly") is None
    assert parse_compact("please /compact") is None


def test_other_slash_words_are_sent_as_text(qtbot: QtBot, composer: Composer) -> None:
    qtbot.keyClicks(composer.edit, "/usr/bin is where")
    assert "Only /compact is a command" in composer.hint.text()
    with qtbot.waitSignal(composer.submitted) as sent:
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert not sent.args[0].is_compact and sent.args[0].text == "/usr/bin is where"


def test_a_5_mb_paste_is_attached_without_freezing(qtbot: QtBot, composer: Composer) -> None:
    pasted = ("A line of a long log file, pasted whole. " * 2 + "\n") * 63_000
    assert len(pasted) > 5_000_000
    mime = QMimeData()
    mime.setText(pasted)
    mime.setHtml("<b>" + "formatted " * 10 + "</b>")

    # Work done, in CPU time, which a busy machine does not inflate: laying 5 MB out in the
    # box would take many seconds of it.
    work = cpu_seconds(lambda: composer.edit.insertFromMimeData(mime))
    qtbot.waitUntil(lambda: bool(composer.attachments()))
    assert work < 1.0
    assert composer.text() == ""  # not laid out in the box
    [attached] = composer.attachments()
    assert attached.name == "Pasted text" and attached.text == pasted
    assert "attached" in composer.hint.text()
    qtbot.keyClicks(composer.edit, "Summarise this log")
    with qtbot.waitSignal(composer.submitted) as sent:
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert sent.args[0].attachments[0].text == pasted
    assert composer.attachments() == ()


def test_a_short_paste_is_plain_text_only(composer: Composer) -> None:
    mime = QMimeData()
    mime.setHtml("<h1>Big</h1><b>bold</b>")
    mime.setText("Big bold")
    composer.edit.insertFromMimeData(mime)
    assert composer.text() == "Big bold"
    cursor = composer.edit.textCursor()
    assert not cursor.charFormat().font().bold()
    assert len("Big bold") < PASTE_LIMIT


def test_attach_a_text_file_and_a_picture(composer: Composer, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Shopping\n- larch\n", encoding="utf-8")
    picture = tmp_path / "bed.png"
    image = QImage(4, 4, QImage.Format.Format_RGB32)
    image.fill(0x00FF00)
    assert image.save(str(picture))

    assert composer.add_file(notes) == ""
    assert composer.add_file(picture) == ""
    assert [a.name for a in composer.attachments()] == ["notes.md"]
    assert composer.attachments()[0].text.startswith("# Shopping")
    [pic] = composer.pictures()
    assert pic.name == "bed.png" and pic.mime == "image/png"
    assert base64.b64decode(pic.data) == picture.read_bytes()
    assert composer.chips.isVisibleTo(composer)

    composer.remove_attachment(0)  # pictures come first
    assert composer.pictures() == ()


def test_a_file_that_is_not_text_is_refused_in_words(composer: Composer, tmp_path: Path) -> None:
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    missing = tmp_path / "gone.txt"
    assert composer.add_file(binary) == "data.bin is not a picture or a text file Conch can read."
    assert composer.add_file(missing).startswith("gone.txt could not be read")
    assert composer.attachments() == ()


def test_restore_puts_back_what_could_not_be_sent(composer: Composer) -> None:
    composer.restore(Submission(text="hello"))
    assert composer.text() == "hello"
    composer.restore(Submission(text="/compact x", compact_focus="x"))
    assert composer.text() == "/compact x"


# --- what stays and what goes with a draft ---------------------------------------------------


def in_a_window(qtbot: QtBot) -> tuple[QWidget, Composer]:
    """The composer under a chat-sized area, as in the main window."""
    window = QWidget()
    qtbot.addWidget(window)
    window.resize(800, 700)
    layout = QVBoxLayout(window)
    layout.addWidget(QWidget(window), 1)  # the chat takes what is left
    composer = Composer(window)
    layout.addWidget(composer)
    window.show()
    qtbot.waitExposed(window, timeout=10_000)
    relayout()
    return window, composer


def relayout() -> None:
    """Run the layouts that changes asked for (Qt posts those requests as events).

    Each round settles one level (the box, the composer, the window) and may post the next.
    """
    for _level in range(4):
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)


def long_paste(composer: Composer, text: str) -> None:
    mime = QMimeData()
    mime.setText(text)
    composer.edit.insertFromMimeData(mime)


def test_a_long_paste_hint_and_tall_box_go_with_the_draft(qtbot: QtBot) -> None:
    window, composer = in_a_window(qtbot)
    box_height = composer.edit.height()

    long_paste(composer, "a log line\n" * (PASTE_LIMIT // 10))
    relayout()
    assert composer.hint.isVisibleTo(window) and "attached" in composer.hint.text()
    # The hint and the chip add their own lines; the box itself does not grow.
    assert composer.edit.height() == box_height

    qtbot.keyClicks(composer.edit, "What went wrong?")
    with qtbot.waitSignal(composer.submitted, timeout=10_000):
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    relayout()
    assert not composer.hint.isVisibleTo(window)
    assert not composer.chips.isVisibleTo(window)
    assert composer.edit.height() == box_height

    # A later short paste says nothing; a new chat (clear) starts without the old hint.
    mime = QMimeData()
    mime.setText("short")
    composer.edit.insertFromMimeData(mime)
    assert not composer.hint.isVisibleTo(window)
    long_paste(composer, "x" * (PASTE_LIMIT + 1))
    assert composer.hint.isVisibleTo(window)
    composer.clear()
    assert not composer.hint.isVisibleTo(window)


def test_removing_the_pasted_file_removes_its_hint(qtbot: QtBot) -> None:
    window, composer = in_a_window(qtbot)
    long_paste(composer, "y" * (PASTE_LIMIT + 1))
    assert composer.hint.isVisibleTo(window)
    composer.remove_attachment(0)
    assert composer.attachments() == ()
    assert not composer.hint.isVisibleTo(window)


def test_the_box_grows_with_its_lines_up_to_a_limit(qtbot: QtBot) -> None:
    _window, composer = in_a_window(qtbot)
    one_line = composer.edit.height()
    composer.set_text("\n".join(f"line {n}" for n in range(6)))
    relayout()
    six_lines = composer.edit.height()
    assert six_lines > one_line
    composer.set_text("\n".join(f"line {n}" for n in range(200)))
    relayout()
    assert six_lines < composer.edit.height() <= 200


def test_clicking_stop_leaves_the_focus_in_the_box(qtbot: QtBot) -> None:
    window, composer = in_a_window(qtbot)
    window.activateWindow()
    composer.edit.setFocus()
    qtbot.waitUntil(composer.edit.hasFocus, timeout=10_000)
    composer.set_busy(True)
    with qtbot.waitSignal(composer.stop_requested, timeout=10_000):
        qtbot.mouseClick(composer.stop_button, Qt.MouseButton.LeftButton)
    composer.set_busy(False)  # the answer stopped
    assert composer.edit.hasFocus()
    qtbot.keyClicks(composer.edit, "and one more thing")
    assert composer.text() == "and one more thing"

    # The same for Send: the box keeps the focus while the answer streams.
    with qtbot.waitSignal(composer.submitted, timeout=10_000):
        qtbot.mouseClick(composer.send_button, Qt.MouseButton.LeftButton)
    composer.set_busy(True)
    assert composer.edit.hasFocus()


def _emoji(text: str) -> list[str]:
    """Characters many desktops have no font for (pictographs, outside the basic plane)."""
    return [ch for ch in text if ord(ch) > 0xFFFF or unicodedata.category(ch) == "So"]


def test_attachment_chips_draw_the_apps_icons_not_emoji(
    qtbot: QtBot, composer: Composer, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("larch\n", encoding="utf-8")
    picture = tmp_path / "bed.png"
    image = QImage(4, 4, QImage.Format.Format_RGB32)
    image.fill(0x00FF00)
    assert image.save(str(picture))
    assert composer.add_file(notes) == "" and composer.add_file(picture) == ""

    words = [w.text() for w in composer.chips.findChildren(QLabel)]
    words += [w.text() for w in composer.chips.findChildren(QToolButton)]
    assert any("notes.md" in w for w in words) and any("bed.png" in w for w in words)
    assert not [w for w in words if _emoji(w)]
    chips = composer.chips.layout()
    assert chips is not None
    items = [chips.itemAt(i) for i in range(chips.count())]  # what the row holds now
    shown = [item.widget() for item in items if item is not None]
    drawn = [
        label.pixmap()
        for chip in shown
        if chip is not None
        for label in chip.findChildren(QLabel)
        if not label.pixmap().isNull()
    ]
    assert len(drawn) == 2  # one icon per chip, from the app's own set
    for pix in drawn:
        ink = pix.toImage()
        assert any(
            ink.pixelColor(x, y).alpha() > 0
            for x in range(ink.width())
            for y in range(ink.height())
        )


def test_what_is_attached_counts_on_the_meter_before_it_is_sent(composer: Composer) -> None:
    composer.set_usage((1_000, 24_200), 32_768)
    assert composer.meter_label.text() == "4%"
    long_paste(composer, "x" * 120_000)  # about 30,000 tokens
    assert composer.meter.used == 1_000 + 30_000
    assert composer.meter_label.text() == "128%"
    assert "summarised with the next message" in composer.meter.toolTip()
    composer.remove_attachment(0)
    assert composer.meter_label.text() == "4%"
