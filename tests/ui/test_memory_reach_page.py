"""The Memories page shows each memory's "Use everywhere" mark and changes it in the book."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.memories import MemoryBook
from app.settings import SettingsStore
from ui.settings.memories_page import EVERYWHERE, MemoriesPage

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def test_the_memories_page_shows_the_mark_and_changes_it(qtbot: QtBot, data_dir: Path) -> None:
    book = MemoryBook.in_dir(data_dir, reach_of=lambda _chat, _start, _end: "local")
    try:
        learned = book.add("Sam is training for a marathon.", chat_id="c-run")
        typed = book.add("Sam prefers short answers.")
        page = MemoriesPage(book, SettingsStore.in_dir(data_dir))
        qtbot.addWidget(page)
        page.show()

        learned_row = page.row_for(learned.id)
        typed_row = page.row_for(typed.id)
        assert learned_row is not None and typed_row is not None
        assert learned_row.everywhere.text() == EVERYWHERE == "Use everywhere"
        assert not learned_row.everywhere.isChecked()  # learned in a local chat: local only
        assert typed_row.everywhere.isChecked()  # typed by the person: everywhere

        learned_row.everywhere.click()
        assert book.get(learned.id).reach == "everywhere"  # type: ignore[union-attr]
        assert "marathon" in book.kept_for_prompt(4_000, local=False)
        again = page.row_for(learned.id)
        assert again is not None and again.everywhere.isChecked()

        again.everywhere.click()
        assert book.get(learned.id).reach == "local"  # type: ignore[union-attr]
        assert "marathon" not in book.kept_for_prompt(4_000, local=False)
    finally:
        book.close()
