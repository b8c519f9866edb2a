"""The Memories page: everything Conch learned about the person, and where it came from.

Each memory is a row with its text, its source chat, its status and what can be done with it:
keep or discard one that waits for an OK, edit any in place, delete any, and "Use everywhere":
whether chats with a model API get it too, or only chats whose model runs on this computer
(app/memories.py: learned in a chat on this computer, it starts local; added here, everywhere).
The page also holds the "Remember things automatically" switch (the same setting as Settings →
Memory). Every change goes straight to the ``MemoryBook``; the page redraws from the book, so it
never shows a state the book does not have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.memories import Memory, MemoryBook, MemoryBookError, Reach
from app.settings import Settings, SettingsStore
from ui._widgets import hint_label, page_layout
from ui.icons import MUTED, ON_ACCENT, icon
from ui.plain import PlainLabel, shown_name
from ui.settings.row_list import RowList
from ui.settings.settings_sync import (
    REMEMBER_HINT,
    listen_to_settings,
    save_remember,
    set_checked_quietly,
)

log = logging.getLogger("conch.ui.memories")

ChatTitle = Callable[[str], str | None]

EVERYWHERE = "Use everywhere"
EVERYWHERE_TIP = (
    "On: every chat gets this memory, chats with a model API too. Off: only chats whose model "
    "runs on this computer get it."
)

STATUS_WORDS: dict[str, str] = {
    "waiting": "Waiting for your OK",
    "kept": "Kept",
    "undone": "Undone",
    "discarded": "Discarded",
}
# Waiting ones first (they need the person), then what is in use, then what was set aside.
_STATUS_ORDER = {"waiting": 0, "kept": 1, "undone": 2, "discarded": 3}
FILTERS: tuple[tuple[str, str], ...] = (
    ("all", "All memories"),
    ("waiting", "Waiting for your OK"),
    ("kept", "Kept"),
    ("aside", "Undone or discarded"),
)


def when_text(timestamp: float, now: float | None = None) -> str:
    """A short, human date: "today 14:03", "yesterday", "3 Oct", "3 Oct 2025"."""
    now = time.time() if now is None else now
    then = time.localtime(timestamp)
    today = time.localtime(now)
    if then.tm_year == today.tm_year and then.tm_yday == today.tm_yday:
        return time.strftime("today %H:%M", then)
    yesterday = time.localtime(now - 86_400)
    if then.tm_year == yesterday.tm_year and then.tm_yday == yesterday.tm_yday:
        return "yesterday"
    day = str(then.tm_mday)
    if then.tm_year == today.tm_year:
        return f"{day} {time.strftime('%b', then)}"
    return f"{day} {time.strftime('%b %Y', then)}"


def _button(text: str, variant: str = "ghost", icon_name: str | None = None) -> QPushButton:
    button = QPushButton(text)
    button.setProperty("variant", variant)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    if icon_name:
        button.setIcon(icon(icon_name))
    return button


def _icon_button(icon_name: str, tip: str) -> QPushButton:
    button = QPushButton()
    button.setProperty("variant", "ghost")
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    button.setIcon(icon(icon_name, role=MUTED))
    button.setToolTip(tip)
    button.setAccessibleName(tip)
    return button


class MemoryRow(QFrame):
    """One memory: its text (or an editor while editing), where it came from, and actions.

    Signals:
        keep_requested(int), discard_requested(int), delete_requested(int): the memory's id.
        edit_submitted(int, str): the memory's id and its new text.
        reach_requested(int, str): the memory's id and where it may be used now
            ("everywhere" or "local").
    """

    reach_requested = Signal(int, str)
    keep_requested = Signal(int)
    discard_requested = Signal(int)
    delete_requested = Signal(int)
    edit_submitted = Signal(int, str)

    def __init__(self, memory: Memory, source: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.memory = memory
        self.setObjectName("MemoryRow")
        self.setProperty("status", memory.status)
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)

        self.text = PlainLabel(memory.text)
        self.text.setObjectName("MemoryText")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("MemoryEditor")
        self.editor.setTabChangesFocus(True)
        self.editor.setFixedHeight(72)
        self.editor.hide()
        self.editor.installEventFilter(self)
        self.error = PlainLabel()
        self.error.setObjectName("TestResult")
        self.error.setProperty("state", "error")
        self.error.setWordWrap(True)
        self.error.hide()

        self.status = PlainLabel(STATUS_WORDS.get(memory.status, memory.status))
        self.status.setObjectName("MemoryStatus")
        self.status.setProperty("status", memory.status)
        meta_bits = [
            f"From “{shown_name(source)}”" if source else "Added by you",
            when_text(memory.created),
        ]
        self.meta = PlainLabel(" · ".join(meta_bits))
        self.meta.setObjectName("MemoryMeta")
        self.meta.setWordWrap(True)
        self.meta.setToolTip(
            "Learned from what you said in that chat" if memory.chat_id else "You added this"
        )

        self.everywhere = QCheckBox(EVERYWHERE)
        self.everywhere.setObjectName("MemoryEverywhere")
        self.everywhere.setChecked(memory.everywhere)
        self.everywhere.setToolTip(EVERYWHERE_TIP)
        self.everywhere.setAccessibleDescription(EVERYWHERE_TIP)

        waiting = memory.status == "waiting"
        aside = memory.status in ("undone", "discarded")
        self.keep_button = _button("Keep after all" if aside else "Keep", "ghost", "check")
        self.keep_button.setVisible(waiting or aside)
        self.discard_button = _button("Discard", "ghost", "close")
        self.discard_button.setVisible(waiting)
        self.edit_button = _icon_button("edit", "Edit this memory")
        self.delete_button = _icon_button("trash", "Delete this memory for good")
        self.save_button = _button("Save", "primary")
        self.cancel_button = _button("Cancel", "secondary")
        self.save_button.hide()
        self.cancel_button.hide()
        if waiting:
            self.keep_button.setProperty("variant", "primary")
            self.keep_button.setIcon(icon("check", role=ON_ACCENT))

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(4)
        body = QVBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(4)
        body.addWidget(self.text)
        body.addWidget(self.editor)
        body.addWidget(self.error)
        top.addLayout(body, 1)
        top.addWidget(self.edit_button, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.delete_button, 0, Qt.AlignmentFlag.AlignTop)

        bottom = QHBoxLayout()
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.setSpacing(8)
        bottom.addWidget(self.status, 0, Qt.AlignmentFlag.AlignVCenter)
        bottom.addWidget(self.meta, 1)
        # A memory with Keep (and Discard) has its buttons on a line of their own: beside them
        # the source and date were squeezed into three lines of a word or two.
        actions = bottom
        if waiting or aside:
            actions = QHBoxLayout()
            actions.setContentsMargins(0, 0, 0, 0)
            actions.setSpacing(8)
            actions.addStretch(1)
        actions.addWidget(self.everywhere)
        for button in (self.discard_button, self.keep_button, self.cancel_button, self.save_button):
            actions.addWidget(button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 8, 12)
        layout.setSpacing(8)
        layout.addLayout(top)
        layout.addLayout(bottom)
        if actions is not bottom:
            layout.addLayout(actions)

        mid = memory.id
        self.keep_button.clicked.connect(lambda: self.keep_requested.emit(mid))
        self.discard_button.clicked.connect(lambda: self.discard_requested.emit(mid))
        self.delete_button.clicked.connect(lambda: self.delete_requested.emit(mid))
        self.everywhere.toggled.connect(
            lambda on: self.reach_requested.emit(mid, "everywhere" if on else "local")
        )
        self.edit_button.clicked.connect(self.start_editing)
        self.save_button.clicked.connect(self.submit_edit)
        self.cancel_button.clicked.connect(self.cancel_editing)

    @property
    def editing(self) -> bool:
        return not self.editor.isHidden()

    def start_editing(self) -> None:
        self.editor.setPlainText(self.memory.text)
        self._set_editing(True)
        self.editor.setFocus(Qt.FocusReason.OtherFocusReason)
        self.editor.selectAll()

    def cancel_editing(self) -> None:
        self.show_error("")
        self._set_editing(False)

    def submit_edit(self) -> None:
        self.edit_submitted.emit(self.memory.id, self.editor.toPlainText())

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def _set_editing(self, editing: bool) -> None:
        self.text.setVisible(not editing)
        self.editor.setVisible(editing)
        self.save_button.setVisible(editing)
        self.cancel_button.setVisible(editing)
        for button in (self.edit_button, self.delete_button):
            button.setVisible(not editing)
        waiting = self.memory.status == "waiting"
        aside = self.memory.status in ("undone", "discarded")
        self.keep_button.setVisible(not editing and (waiting or aside))
        self.discard_button.setVisible(not editing and waiting)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # A memory is one line: Enter saves, Esc cancels.
        if watched is self.editor and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                self.submit_edit()
                return True
            if event.key() == Qt.Key.Key_Escape:
                self.cancel_editing()
                return True
        return super().eventFilter(watched, event)


class MemoriesPage(QWidget):
    """Every memory with its source and status; edit, delete, keep or discard them.

    Signals:
        memories_changed(): the book changed here (cards in open chats may want a redraw).
    """

    memories_changed = Signal()

    def __init__(
        self,
        book: MemoryBook,
        settings: SettingsStore,
        chat_title: ChatTitle | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("MemoriesPage")
        self._book = book
        self._settings = settings
        self._chat_title = chat_title or (lambda _chat_id: None)
        self._rows: list[MemoryRow] = []

        self.remember = QCheckBox("Remember things automatically")
        self.remember.setChecked(settings.settings.remember_automatically)
        remember_hint = hint_label(REMEMBER_HINT)
        self.settings_error = PlainLabel()
        self.settings_error.setObjectName("TestResult")
        self.settings_error.setProperty("state", "error")
        self.settings_error.hide()

        self.filter = QComboBox()
        for key, label in FILTERS:
            self.filter.addItem(label, key)
        self.count = PlainLabel()
        self.count.setProperty("role", "caption")

        self.add_field = QLineEdit()
        self.add_field.setPlaceholderText("Add something Conch should remember…")
        self.add_button = _button("Add", "secondary")
        self.add_error = PlainLabel()
        self.add_error.setObjectName("TestResult")
        self.add_error.setProperty("state", "error")
        self.add_error.hide()

        self.row_list = RowList("MemoryList")
        self.row_list.viewport().setAutoFillBackground(False)
        self.list_host = self.row_list.host
        self.empty = self.row_list.empty

        toolbar = QHBoxLayout()
        toolbar.setSpacing(8)
        toolbar.addWidget(self.filter)
        toolbar.addWidget(self.count, 1)
        add_row = QHBoxLayout()
        add_row.setSpacing(8)
        add_row.addWidget(self.add_field, 1)
        add_row.addWidget(self.add_button)

        layout = page_layout(
            self,
            "Memories",
            "What Conch learned from what you said. Kept memories are part of your chats' "
            "instructions; the rest are not used. One learned in a chat on this computer goes "
            "only to chats on this computer unless you tick “Use everywhere”; one you add here "
            "goes everywhere.",
            bottom=16,
        )
        layout.addWidget(self.remember)
        layout.addWidget(remember_hint)
        layout.addWidget(self.settings_error)
        layout.addLayout(toolbar)
        layout.addLayout(add_row)
        layout.addWidget(self.add_error)
        layout.addWidget(self.row_list, 1)

        self.remember.toggled.connect(self._set_remember)
        self.filter.currentIndexChanged.connect(lambda _i: self.refresh())
        self.add_button.clicked.connect(self._add)
        self.add_field.returnPressed.connect(self._add)
        self._stop_listening = listen_to_settings(settings, self, MemoriesPage._settings_changed)
        self.destroyed.connect(self._stop_listening)
        self.refresh()

    # --- reading ----------------------------------------------------------------------------

    def rows(self) -> list[MemoryRow]:
        """The rows shown now, top to bottom."""
        return list(self._rows)

    def row_for(self, memory_id: int) -> MemoryRow | None:
        return next((r for r in self._rows if r.memory.id == memory_id), None)

    def set_filter(self, key: str) -> None:
        index = self.filter.findData(key)
        if index >= 0:
            self.filter.setCurrentIndex(index)

    def refresh(self) -> None:
        """Redraw from the book."""
        memories = self._book.list()
        shown = self._filtered(memories)
        shown.sort(key=lambda m: (_STATUS_ORDER.get(m.status, 9), -m.created, -m.id))
        self.row_list.clear(self._rows)
        self._rows = []
        titles: dict[str, str] = {}
        for memory in shown:
            if memory.chat_id and memory.chat_id not in titles:
                titles[memory.chat_id] = self._source_title(memory.chat_id)
            row = MemoryRow(memory, titles.get(memory.chat_id, ""), self.list_host)
            row.keep_requested.connect(self.keep)
            row.discard_requested.connect(self.discard)
            row.delete_requested.connect(self.delete)
            row.edit_submitted.connect(self.edit)
            row.reach_requested.connect(self.set_reach)
            self._rows.append(row)
        self.empty.setText(self._empty_text(memories))
        self.row_list.fill(self._rows)
        kept = sum(1 for m in memories if m.status == "kept")
        waiting = sum(1 for m in memories if m.status == "waiting")
        bits = [f"{kept} kept"]
        if waiting:
            bits.append(f"{waiting} waiting for your OK")
        self.count.setText(", ".join(bits))

    def _filtered(self, memories: Sequence[Memory]) -> list[Memory]:
        key = self.filter.currentData() or "all"
        if key == "all":
            return list(memories)
        if key == "aside":
            return [m for m in memories if m.status in ("undone", "discarded")]
        return [m for m in memories if m.status == key]

    def _empty_text(self, memories: Sequence[Memory]) -> str:
        if not memories:
            return (
                "No memories yet. When a long chat is summarised, Conch notes what you told it "
                "about yourself, and it shows up here."
            )
        return "Nothing here with this filter."

    def _source_title(self, chat_id: str) -> str:
        try:
            title = self._chat_title(chat_id)
        except Exception:  # a chat log problem must not hide the memories
            log.warning("the title of a memory's chat could not be read", exc_info=True)
            title = None
        return title or "a deleted chat"

    # --- changing ---------------------------------------------------------------------------

    def keep(self, memory_id: int) -> None:
        self._change(lambda: self._book.keep(memory_id), memory_id)

    def discard(self, memory_id: int) -> None:
        self._change(lambda: self._book.discard(memory_id), memory_id)

    def delete(self, memory_id: int) -> None:
        self._change(lambda: self._book.delete(memory_id), memory_id)

    def set_reach(self, memory_id: int, reach: str) -> None:
        """The person's "Use everywhere" mark: ``everywhere`` or ``local``."""
        where: Reach = "everywhere" if reach == "everywhere" else "local"
        self._change(lambda: self._book.set_reach(memory_id, where), memory_id)

    def edit(self, memory_id: int, text: str) -> None:
        if not text.strip():
            row = self.row_for(memory_id)
            if row is not None:
                row.show_error("A memory needs some text. Delete it if it is no longer true.")
            return
        self._change(lambda: self._book.edit(memory_id, text), memory_id)

    def _change(self, action: Callable[[], object], memory_id: int) -> None:
        try:
            action()
        except Exception as exc:  # shown in the row, never raised: nothing crashes
            row = self.row_for(memory_id)
            message = str(exc) if isinstance(exc, MemoryBookError) else _failure(exc)
            if row is not None:
                row.show_error(message)
            return
        self.refresh()
        self.memories_changed.emit()

    def _add(self) -> None:
        text = self.add_field.text().strip()
        if not text:
            return
        try:
            self._book.add(text, status="kept")
        except Exception as exc:  # shown under the field instead
            self.add_error.setText(str(exc) if isinstance(exc, MemoryBookError) else _failure(exc))
            self.add_error.show()
            return
        self.add_error.hide()
        self.add_field.clear()
        self.refresh()
        self.memories_changed.emit()

    def _set_remember(self, on: bool) -> None:
        save_remember(self._settings, self.remember, self.settings_error, on)

    def _settings_changed(self, settings: Settings) -> None:
        set_checked_quietly(self.remember, settings.remember_automatically)

    def showEvent(self, event: QShowEvent) -> None:
        self.refresh()  # a learning run may have added memories while the page was hidden
        super().showEvent(event)


def _failure(exc: BaseException) -> str:
    # Not a sentence the book wrote for the person: a bug or a storage failure, kept in the log.
    log.warning("changing the memories failed", exc_info=exc)
    return f"That did not work ({type(exc).__name__}). Nothing was changed."


__all__ = [
    "FILTERS",
    "STATUS_WORDS",
    "MemoriesPage",
    "MemoryRow",
    "when_text",
]
