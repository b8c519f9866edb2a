"""Settings → Trash: the deleted chats, each of which can come back, and "Empty trash".

Deleting a chat asks nothing (the sidebar offers Undo) and puts it here. "Empty trash" asks
nothing either: the chats leave the list at once and an Undo bar stays for a few seconds;
only when it runs out (or the page closes) are they deleted for good (app/trash.py).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.store import Chat, ChatStore, StoreError
from app.trash import empty_trash
from ui._widgets import hint_label, page_layout, page_title
from ui.icons import icon
from ui.plain import PlainLabel, shown_name
from ui.settings.memories_page import when_text
from ui.settings.row_list import RowList
from ui.sidebar import UndoBar

EMPTY_KEY = "empty-trash"  # the Undo bar's key for an emptying that may still be undone


class TrashRow(QFrame):
    """One deleted chat: its title, when it was deleted, and Restore.

    Signals:
        restore_requested(str): the chat's id.
    """

    restore_requested = Signal(str)

    def __init__(self, chat: Chat, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.chat = chat
        self.setObjectName("TrashRow")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.title = PlainLabel(shown_name(chat.title))
        self.title.setObjectName("TrashTitle")
        self.title.setWordWrap(True)
        self.meta = PlainLabel(f"Deleted {when_text(chat.deleted_at or chat.updated)}")
        self.meta.setObjectName("SettingsHint")
        self.restore_button = QPushButton("Restore")
        self.restore_button.setProperty("variant", "secondary")
        self.restore_button.setIcon(icon("undo"))
        self.restore_button.setAccessibleName(f"Restore “{shown_name(chat.title)}”")
        self.restore_button.setCursor(Qt.CursorShape.PointingHandCursor)
        text = QVBoxLayout()
        text.setContentsMargins(0, 0, 0, 0)
        text.setSpacing(2)
        text.addWidget(self.title)
        text.addWidget(self.meta)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(16, 10, 10, 10)
        layout.addLayout(text, 1)
        layout.addWidget(self.restore_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.restore_button.clicked.connect(lambda: self.restore_requested.emit(chat.id))


class TrashPage(QWidget):
    """The trash, read from the chat log each time it shows.

    Signals:
        chat_restored(str): a chat came back (the sidebar lists it again).
        trash_emptied(int): this many chats were deleted for good.
    """

    chat_restored = Signal(str)
    trash_emptied = Signal(int)

    def __init__(self, store: ChatStore, data_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("TrashPage")
        self._store = store
        self._data_dir = data_dir
        self._pending: list[str] = []  # emptied, but Undo may still bring them back
        self._rows: list[TrashRow] = []

        title = page_title("Trash")
        hint = hint_label("Deleted chats stay here until you empty the trash.")
        self.empty_button = QPushButton("Empty trash")
        self.empty_button.setProperty("variant", "danger")
        self.empty_button.setIcon(icon("trash"))
        self.empty_button.setAccessibleName("Empty the trash: delete these chats for good")
        self.list = RowList("TrashList", "The trash is empty.")
        self.error = PlainLabel()
        self.error.setObjectName("TestResult")
        self.error.setProperty("state", "error")
        self.error.setWordWrap(True)
        self.error.hide()
        self.undo_bar = UndoBar(self)
        self.undo_bar.button.setAccessibleName("Undo emptying the trash")

        head = QHBoxLayout()
        head.addWidget(title, 1)
        head.addWidget(self.empty_button)
        layout = page_layout(self)
        layout.addLayout(head)
        layout.addWidget(hint)
        layout.addWidget(self.error)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.undo_bar)

        self.empty_button.clicked.connect(self.empty)
        self.undo_bar.undo_clicked.connect(self._undo_empty)
        self.undo_bar.expired.connect(lambda _key: self.finish_emptying())

    # --- contents -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw from the chat log (chats still pending deletion are left out)."""
        try:
            chats = [c for c in self._store.deleted_chats() if c.id not in self._pending]
        except StoreError as exc:
            self._say(str(exc))
            chats = []
        self.list.clear(self._rows)
        self._rows = [TrashRow(chat, self.list.host) for chat in chats]
        for row in self._rows:
            row.restore_requested.connect(self.restore)
        self.list.fill(self._rows)
        self.empty_button.setVisible(bool(self._rows))

    def titles(self) -> list[str]:
        return [row.chat.title for row in self._rows]

    def row_for(self, chat_id: str) -> TrashRow | None:
        return next((r for r in self._rows if r.chat.id == chat_id), None)

    # --- actions ------------------------------------------------------------------------------

    def restore(self, chat_id: str) -> None:
        try:
            self._store.restore_chat(chat_id)
        except StoreError as exc:
            self._say(str(exc))
            return
        self._say("")
        self.refresh()
        self.chat_restored.emit(chat_id)

    def empty(self) -> None:
        """Take every chat out of the list now; delete them for good once Undo runs out."""
        ids = [row.chat.id for row in self._rows]
        if not ids:
            return
        self.finish_emptying()  # an earlier emptying no longer waits
        self._pending = ids
        n = len(ids)
        self.undo_bar.offer(EMPTY_KEY, f"Trash emptied ({n} chat{'s' if n != 1 else ''}).")
        self.refresh()

    def finish_emptying(self) -> None:
        """Delete what was emptied for good (Undo is over)."""
        ids, self._pending = self._pending, []
        if self.undo_bar.chat_id == EMPTY_KEY:
            self.undo_bar.hide_bar()
        if not ids:
            return
        try:
            empty_trash(self._store, self._data_dir, ids)
        except StoreError as exc:
            self._say(f"The trash could not be emptied: {exc}")
            self.refresh()
            return
        self.trash_emptied.emit(len(ids))

    def _undo_empty(self, _key: str) -> None:
        self._pending = []
        self.refresh()

    def _say(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(bool(text))

    # --- events -------------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()

    def hideEvent(self, event: QHideEvent) -> None:
        # Nobody can click Undo on a page that is not showing: what was emptied goes now.
        self.finish_emptying()
        super().hideEvent(event)


__all__ = ["TrashPage", "TrashRow"]
