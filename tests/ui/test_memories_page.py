"""The Memories page: every memory with its source and status; each action changes the book."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.memories import Memory, MemoryBook
from app.settings import SettingsStore
from tests.waits import HANG_MS
from ui.settings.memories_page import MemoriesPage, MemoryRow
from ui.theme import ThemeManager

# The offscreen platform says at WARNING that it cannot do some window things; nothing to fix.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

CHATS = {"c-lisbon": "Trip to Lisbon", "c-garden": "Garden plans"}


@pytest.fixture
def settings(data_dir: Path) -> SettingsStore:
    return SettingsStore.in_dir(data_dir)


@pytest.fixture
def memories(book: MemoryBook) -> dict[str, Memory]:
    return {
        "kept": book.add("Prefers answers in British English.", chat_id="c-garden"),
        "waiting": book.add(
            "Is planning a trip to Lisbon in May.", chat_id="c-lisbon", status="waiting"
        ),
        "discarded": book.add("Works night shifts.", chat_id="c-gone", status="discarded"),
        "typed": book.add("Has a dog called Pip."),
    }


@pytest.fixture
def page(
    qtbot: QtBot, book: MemoryBook, settings: SettingsStore, memories: dict[str, Memory]
) -> MemoriesPage:
    p = MemoriesPage(book, settings, chat_title=CHATS.get)
    qtbot.addWidget(p)
    p.resize(760, 600)
    p.show()
    return p


def _row(page: MemoriesPage, memory: Memory) -> MemoryRow:
    row = page.row_for(memory.id)
    assert row is not None, f"no row for {memory.text!r}"
    return row


def test_every_memory_is_listed_with_its_source_and_status_waiting_first(
    page: MemoriesPage, memories: dict[str, Memory]
) -> None:
    rows = page.rows()
    assert {r.memory.id for r in rows} == {m.id for m in memories.values()}
    assert rows[0].memory.id == memories["waiting"].id  # the one that needs the person
    waiting = _row(page, memories["waiting"])
    assert waiting.text.text() == "Is planning a trip to Lisbon in May."
    assert "Trip to Lisbon" in waiting.meta.text()
    assert waiting.status.text() == "Waiting for your OK"
    assert "a deleted chat" in _row(page, memories["discarded"]).meta.text()
    assert "Added by you" in _row(page, memories["typed"]).meta.text()
    assert _row(page, memories["kept"]).status.text() == "Kept"
    assert page.count.text() == "2 kept, 1 waiting for your OK"


def test_keep_and_discard_are_offered_only_for_a_waiting_memory(
    page: MemoriesPage, memories: dict[str, Memory]
) -> None:
    waiting = _row(page, memories["waiting"])
    kept = _row(page, memories["kept"])
    assert waiting.keep_button.isVisibleTo(page) and waiting.discard_button.isVisibleTo(page)
    assert not kept.keep_button.isVisibleTo(page)
    assert not kept.discard_button.isVisibleTo(page)


def test_keeping_a_waiting_memory_keeps_it_in_the_book(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    with qtbot.waitSignal(page.memories_changed):
        qtbot.mouseClick(_row(page, memories["waiting"]).keep_button, Qt.MouseButton.LeftButton)
    stored = book.get(memories["waiting"].id)
    assert stored is not None and stored.status == "kept"
    assert _row(page, memories["waiting"]).status.text() == "Kept"


def test_discarding_a_waiting_memory_discards_it_in_the_book(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    qtbot.mouseClick(_row(page, memories["waiting"]).discard_button, Qt.MouseButton.LeftButton)
    stored = book.get(memories["waiting"].id)
    assert stored is not None and stored.status == "discarded"
    assert book.list(status="waiting") == []


def test_a_discarded_memory_can_be_kept_after_all(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    row = _row(page, memories["discarded"])
    assert row.keep_button.text() == "Keep after all"
    qtbot.mouseClick(row.keep_button, Qt.MouseButton.LeftButton)
    stored = book.get(memories["discarded"].id)
    assert stored is not None and stored.status == "kept"


def test_editing_inline_saves_the_new_text(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    row = _row(page, memories["kept"])
    qtbot.mouseClick(row.edit_button, Qt.MouseButton.LeftButton)
    assert row.editing
    assert row.editor.toPlainText() == "Prefers answers in British English."
    row.editor.setPlainText("Prefers answers in Portuguese.")
    qtbot.mouseClick(row.save_button, Qt.MouseButton.LeftButton)
    stored = book.get(memories["kept"].id)
    assert stored is not None and stored.text == "Prefers answers in Portuguese."
    fresh = _row(page, memories["kept"])
    assert not fresh.editing
    assert fresh.text.text() == "Prefers answers in Portuguese."


def test_enter_saves_an_edit_and_escape_cancels_one(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    row = _row(page, memories["typed"])
    row.start_editing()
    row.editor.setPlainText("Has a dog called Pippa.")
    qtbot.keyClick(row.editor, Qt.Key.Key_Escape)
    assert not row.editing
    assert book.get(memories["typed"].id) == memories["typed"]

    row.start_editing()
    row.editor.setPlainText("Has a dog called Pippa.")
    qtbot.keyClick(row.editor, Qt.Key.Key_Return)
    stored = book.get(memories["typed"].id)
    assert stored is not None and stored.text == "Has a dog called Pippa."


def test_an_empty_edit_is_refused_in_words_and_changes_nothing(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    row = _row(page, memories["kept"])
    row.start_editing()
    row.editor.setPlainText("   ")
    qtbot.mouseClick(row.save_button, Qt.MouseButton.LeftButton)
    assert row.editing
    assert row.error.isVisibleTo(page)
    assert "needs some text" in row.error.text()
    assert book.get(memories["kept"].id) == memories["kept"]


def test_deleting_removes_the_memory_from_the_book_and_the_list(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    qtbot.mouseClick(_row(page, memories["kept"]).delete_button, Qt.MouseButton.LeftButton)
    assert book.get(memories["kept"].id) is None
    assert page.row_for(memories["kept"].id) is None
    assert len(page.rows()) == 3


def test_a_memory_deleted_elsewhere_shows_an_error_not_a_crash(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook, memories: dict[str, Memory]
) -> None:
    row = _row(page, memories["waiting"])
    book.delete(memories["waiting"].id)  # gone behind the page's back
    qtbot.mouseClick(row.keep_button, Qt.MouseButton.LeftButton)
    assert row.error.isVisibleTo(page)
    assert "no memory" in row.error.text().lower()


def test_the_remember_switch_changes_the_setting_and_follows_it(
    qtbot: QtBot, page: MemoriesPage, settings: SettingsStore, data_dir: Path
) -> None:
    assert page.remember.isChecked()
    page.remember.click()
    assert settings.settings.remember_automatically is False
    assert SettingsStore.in_dir(data_dir).settings.remember_automatically is False  # on disk
    settings.update(remember_automatically=True)  # changed somewhere else (Settings → Memory)
    assert page.remember.isChecked()


def test_filters_show_only_what_was_asked_for(
    page: MemoriesPage, memories: dict[str, Memory]
) -> None:
    page.set_filter("waiting")
    assert [r.memory.id for r in page.rows()] == [memories["waiting"].id]
    page.set_filter("aside")
    assert [r.memory.id for r in page.rows()] == [memories["discarded"].id]
    page.set_filter("kept")
    assert {r.memory.id for r in page.rows()} == {memories["kept"].id, memories["typed"].id}


def test_a_memory_typed_by_the_person_is_kept(
    qtbot: QtBot, page: MemoriesPage, book: MemoryBook
) -> None:
    qtbot.keyClicks(page.add_field, "Lives in Porto.")
    qtbot.keyClick(page.add_field, Qt.Key.Key_Return)
    assert [m.text for m in book.list(status="kept")][-1] == "Lives in Porto."
    assert page.add_field.text() == ""


def test_an_empty_book_explains_what_will_appear(
    qtbot: QtBot, data_dir: Path, settings: SettingsStore
) -> None:
    empty = MemoryBook(data_dir / "empty.sqlite3")
    try:
        p = MemoriesPage(empty, settings)
        qtbot.addWidget(p)
        p.show()
        assert p.rows() == []
        assert p.empty.isVisibleTo(p)
        assert "No memories yet" in p.empty.text()
    finally:
        empty.close()


# --- the list keeps its place -----------------------------------------------------------------


def relayout() -> None:
    """Run the layouts the change asked for (posted as events; one level per round)."""
    for _level in range(4):
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)


@pytest.mark.parametrize("action", ["keep", "discard"])
def test_keep_and_discard_leave_the_list_where_it_was(
    qtbot: QtBot, book: MemoryBook, settings: SettingsStore, action: str
) -> None:
    waiting = [
        book.add(f"Waiting memory number {n} about the garden.", status="waiting")
        for n in range(20)
    ]
    for n in range(20):
        book.add(f"Kept memory number {n} about the garden.")
    page = MemoriesPage(book, settings)
    qtbot.addWidget(page)
    page.resize(760, 600)
    page.show()
    qtbot.waitExposed(page, timeout=10_000)
    bar = page.row_list.verticalScrollBar()
    target = waiting[10]
    row = _row(page, target)
    qtbot.waitUntil(lambda: bar.maximum() > row.y() > 0, timeout=10_000)  # laid out
    # Scroll to a waiting memory in the middle and press its button, as a person would.
    bar.setValue(row.y() - 100)
    before = bar.value()
    assert 0 < before < bar.maximum()
    button = row.keep_button if action == "keep" else row.discard_button
    page.activateWindow()
    button.setFocus()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    relayout()

    changed = book.get(target.id)
    assert changed is not None
    assert changed.status == ("kept" if action == "keep" else "discarded")
    assert bar.value() == before


def test_a_waiting_memorys_source_and_date_keep_to_one_line_beside_its_buttons(
    qtbot: QtBot, theme: ThemeManager, page: MemoriesPage, memories: dict[str, Memory]
) -> None:
    # At the width Settings gives the page, "From “Trip to Lisbon” · today 05:03" was squeezed
    # into three lines of a word or two between the status and Use everywhere, Discard, Keep.
    page.resize(600, 600)
    qtbot.waitExposed(page, timeout=HANG_MS)
    waiting = _row(page, memories["waiting"])
    qtbot.waitUntil(lambda: waiting.meta.width() > 0, timeout=HANG_MS)
    meta = waiting.meta
    assert meta.height() < 2 * meta.fontMetrics().lineSpacing()
    assert meta.width() >= meta.fontMetrics().horizontalAdvance(meta.text())
    for button in (waiting.everywhere, waiting.discard_button, waiting.keep_button):
        assert button.width() >= button.sizeHint().width(), button.text()
