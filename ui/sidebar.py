"""The list of chats: new, rename (F2 or double-click), delete with Undo, search, export,
pin to the top, folders (drag a chat onto a folder or one of its chats; the chat's menu moves
it too), and a new chat from one (fork, from the summary: the window's actions).

Deleting is soft in the chat log (``deleted_at``); an Undo bar stays for ``UNDO_SECONDS`` and
puts the chat back exactly as it was (Settings → Trash keeps it after that). Search looks at
titles and at message text (app/search.py); a chat found by a message shows a line of it
under the title, the match in bold, and choosing it opens the chat at that message.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSignalBlocker,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QColor,
    QDropEvent,
    QFont,
    QFontMetrics,
    QKeySequence,
    QPainter,
    QPalette,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.search import Hit, search
from app.store import Chat, ChatStore, folder_name
from ui.icons import icon
from ui.plain import PlainLabel, plain_tip, shown_name

UNDO_SECONDS = 8
ID_ROLE = int(Qt.ItemDataRole.UserRole) + 1
SEQ_ROLE = ID_ROLE + 1  # a search hit in a message: that message's seq
SNIPPET_ROLE = ID_ROLE + 2  # (snippet, start, end): the line shown under the title
SNIPPET_ALPHA = 170  # the snippet's words, a little quieter than the title
LEAD_SHARE = 0.3  # of the row's width, at most, for the words before the match
FOLDER_ROLE = ID_ROLE + 3  # a folder's header row: the folder's name
INDENT_ROLE = ID_ROLE + 4  # a chat shown inside a folder: drawn a step to the right
PINNED_ROLE = ID_ROLE + 5  # a chat shown among the pinned ones at the top
IN_FOLDER_ROLE = ID_ROLE + 6  # a chat row: the folder it is in ("" for none)
INDENT = 18  # pixels a chat in a folder is drawn to the right of its folder's name


class UndoBar(QWidget):
    """ "Chat deleted. Undo" for a few seconds (or any other words, with ``offer``).

    Signals:
        undo_clicked(str): the key it was offered for (a chat id) — undo that.
        expired(str): the time to undo ran out for that key (it was not clicked).
    """

    undo_clicked = Signal(str)
    expired = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("UndoBar")
        # A plain QWidget paints no stylesheet background without this: the bar would be there
        # (and clickable) but invisible.
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.label = PlainLabel(self)
        self.label.setWordWrap(True)
        self.button = QPushButton("Undo", self)
        self.button.setAccessibleName("Undo deleting the chat")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self._chat_id = ""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._expire)
        self.button.clicked.connect(self._undo)
        self.setVisible(False)

    @property
    def chat_id(self) -> str:
        return self._chat_id

    def show_for(self, chat_id: str, title: str, seconds: float = UNDO_SECONDS) -> None:
        self.offer(chat_id, f"“{shown_name(title)}” deleted.", seconds)

    def offer(self, key: str, words: str, seconds: float = UNDO_SECONDS) -> None:
        """Show ``words`` with Undo for ``key``; a key still offered expires first."""
        if self._chat_id and self._chat_id != key:
            self._expire()
        self._chat_id = key
        self.label.setText(words)
        self.setVisible(True)
        self._timer.start(int(seconds * 1000))

    def _expire(self) -> None:
        key = self._chat_id
        self.hide_bar()
        if key:
            self.expired.emit(key)

    def hide_bar(self) -> None:
        self._chat_id = ""
        self._timer.stop()
        self.setVisible(False)

    def _undo(self) -> None:
        chat_id = self._chat_id
        self.hide_bar()
        if chat_id:
            self.undo_clicked.emit(chat_id)


class TitleDelegate(QStyledItemDelegate):
    """Renames a chat in an edit box as tall as its text, and draws a search hit's snippet.

    Qt puts the editor over the row's text area, which the stylesheet's padding leaves shorter
    than a line edit (its own padding and frame included): the title would be cut in half.
    A row with a snippet is two lines: the title, then the snippet with the match in bold.
    """

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            size.setHeight(size.height() + QFontMetrics(option.font).lineSpacing() + 2)
        return size

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        found = index.data(SNIPPET_ROLE)
        if not found:
            if index.data(INDENT_ROLE):
                option = QStyleOptionViewItem(option)
                option.rect.adjust(INDENT, 0, 0, 0)
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title = opt.text
        opt.text = ""  # the background, hover and selection as the stylesheet paints them
        widget = opt.widget
        style = widget.style() if widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        area = (
            style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
            if style is not None
            else opt.rect
        )
        metrics = QFontMetrics(opt.font)
        line = metrics.lineSpacing()
        top = area.center().y() - (2 * line + 2) // 2
        color = opt.palette.color(QPalette.ColorRole.Text)
        painter.save()
        painter.setClipRect(opt.rect)
        painter.setPen(color)
        painter.setFont(opt.font)
        elided = metrics.elidedText(title, Qt.TextElideMode.ElideRight, area.width())
        painter.drawText(area.left(), top + metrics.ascent(), elided)
        quiet = QColor(color)
        quiet.setAlpha(SNIPPET_ALPHA)
        painter.setPen(quiet)
        self._snippet(painter, opt.font, area.left(), area.right(), top + line + 2, found)
        painter.restore()

    @staticmethod
    def _snippet(
        painter: QPainter, font: QFont, left: int, right: int, top: int, found: tuple[str, int, int]
    ) -> None:
        """Draw the snippet on one line, its match in bold, cut with "…" at ``right``."""
        snippet, start, end = found
        bold = QFont(font)
        bold.setBold(True)
        # A narrow sidebar shows little: the words before the match give way first, so the
        # match itself is always in view.
        before = snippet[:start]
        room = int((right - left) * LEAD_SHARE)
        if QFontMetrics(font).horizontalAdvance(before) > room:
            before = QFontMetrics(font).elidedText(
                before.lstrip("…"), Qt.TextElideMode.ElideLeft, room
            )
        x = left
        for text, piece_font in (
            (before, font),
            (snippet[start:end], bold),
            (snippet[end:], font),
        ):
            if not text or x >= right:
                continue
            metrics = QFontMetrics(piece_font)
            shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, right - x)
            painter.setFont(piece_font)
            painter.drawText(x, top + metrics.ascent(), shown)
            x += metrics.horizontalAdvance(shown)

    def updateEditorGeometry(
        self,
        editor: QWidget,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        rect = QRect(option.rect)  # the whole row, not just its text
        need = editor.minimumSizeHint().height()
        if rect.height() < need:
            rect.setTop(rect.center().y() - need // 2)
            rect.setHeight(need)
        editor.setGeometry(rect)


class ChatList(QListWidget):
    """The chats' list; a chat dropped on a folder (its name or one of its chats) goes into it.

    Signals:
        dropped(str, str, bool): the chat's id, the folder it was dropped into ("" for none),
            and whether it was dropped among the pinned chats.
        typed(str): words typed while the list had the keyboard (after a chat was clicked).
    """

    dropped = Signal(str, str, bool)
    typed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDragEnabled(True)
        self.setAcceptDrops(True)
        self.setDropIndicatorShown(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)

    def keyboardSearch(self, search: str) -> None:
        # A list jumps to the chat starting with the typed letter, opening it: the person had
        # clicked a chat and started to write, and the words were lost. They go to the box.
        self.typed.emit(search)

    def dropEvent(self, event: QDropEvent) -> None:
        moved = self.currentItem()
        target = self.itemAt(event.position().toPoint())
        # Nothing moves by Qt's own means: the chat's folder changes, and the list is drawn
        # again from the chat log in its own order.
        event.setDropAction(Qt.DropAction.IgnoreAction)
        event.accept()
        if moved is None or moved.data(ID_ROLE) is None:
            return
        if target is None:
            self.dropped.emit(str(moved.data(ID_ROLE)), "", False)
        elif target.data(FOLDER_ROLE) is not None:
            self.dropped.emit(str(moved.data(ID_ROLE)), str(target.data(FOLDER_ROLE)), False)
        elif target is not moved:
            self.dropped.emit(
                str(moved.data(ID_ROLE)),
                str(target.data(IN_FOLDER_ROLE) or ""),
                bool(target.data(PINNED_ROLE)),
            )


class Sidebar(QWidget):
    """The chats: pinned ones first, then each folder (its name, then its chats, newest first;
    a click on the name folds it away), then the rest, newest first. A search shows its hits
    in one list.

    Signals:
        chat_selected(str): the person opened a chat.
        new_chat_requested(): the "New chat" button.
        chat_deleted(str): a chat was (soft-)deleted.
        chat_restored(str): Undo brought a chat back.
        chat_renamed(str, str): id, new title.
        from_summary_requested(str): the chat's menu: a new chat from its latest summary.
        settings_requested(): the Settings button at the bottom.
        match_chosen(str, int): a search hit was chosen: open the chat at that message's seq.
        export_requested(str, str): the chat's menu: export it ("markdown" or "json").
        import_requested(): the Import button at the bottom.
    """

    match_chosen = Signal(str, int)
    export_requested = Signal(str, str)
    import_requested = Signal()
    chat_selected = Signal(str)
    new_chat_requested = Signal()
    chat_deleted = Signal(str)
    chat_restored = Signal(str)
    chat_renamed = Signal(str, str)
    settings_requested = Signal()
    from_summary_requested = Signal(str)

    def __init__(self, store: ChatStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self._store = store
        self._current = ""
        self._changed_item: QListWidgetItem | None = None  # the row the last choice picked
        self._folded: set[str] = set()  # folders whose chats are hidden under their name

        self.new_button = QPushButton("New chat", self)
        self.new_button.setObjectName("NewChatButton")
        self.new_button.setIcon(icon("new-chat"))
        self.new_button.setAccessibleName("New chat")
        self.new_button.setToolTip("Start a new chat (Ctrl+N)")
        self.search = QLineEdit(self)
        self.search.setObjectName("SidebarSearch")
        self.search.setPlaceholderText("Search chats")
        self.search.setAccessibleName("Search chats by title and text")
        self.search.setClearButtonEnabled(True)
        self.list = ChatList(self)
        self.list.setObjectName("ChatList")
        self.list.setAccessibleName("Chats")
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.DoubleClicked
        )
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        # Long titles end in "…" rather than pushing a sideways scroll bar into the sidebar.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setWordWrap(False)
        self.list.setItemDelegate(TitleDelegate(self.list))
        self.empty = PlainLabel("No chats found.", self)
        self.empty.setVisible(False)
        self.undo_bar = UndoBar(self)
        self.footer = QWidget(self)
        self.footer.setObjectName("SidebarFooter")
        self.settings_button = self._footer_button(
            "settings", "Settings", "Settings", "Settings (Ctrl+,)"
        )
        self.import_button = self._footer_button(
            "file",
            "Import",
            "Import chats",
            "Import chats exported by Conch, ChatGPT (conversations.json) or Open WebUI",
        )
        footer_layout = QHBoxLayout(self.footer)
        footer_layout.setContentsMargins(0, 0, 0, 0)
        footer_layout.addWidget(self.settings_button)
        footer_layout.addStretch(1)
        footer_layout.addWidget(self.import_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty)
        layout.addWidget(self.undo_bar)
        layout.addWidget(self.footer)

        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(150)  # search as you type, once typing pauses
        self._search_timer.timeout.connect(self.refresh)

        delete = QAction("Delete chat", self.list)
        delete.setShortcut(QKeySequence.StandardKey.Delete)
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self.delete_current)
        self.list.addAction(delete)

        self.new_button.clicked.connect(self.new_chat_requested)
        self.settings_button.clicked.connect(self.settings_requested)
        self.import_button.clicked.connect(self.import_requested)
        self.list.itemClicked.connect(self._clicked)
        self.search.textChanged.connect(lambda _t: self._search_timer.start())
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_edited)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.dropped.connect(self._dropped)
        self.undo_bar.undo_clicked.connect(self.restore)

    def _footer_button(self, icon_name: str, text: str, name: str, tip: str) -> QToolButton:
        """A flat button in the footer, its icon beside its word."""
        button = QToolButton(self.footer)
        button.setIcon(icon(icon_name))
        button.setText(text)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        button.setAutoRaise(True)
        button.setAccessibleName(name)
        button.setToolTip(tip)
        return button

    # --- contents -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the chats (filtered by the search text) and keep the current one selected."""
        query = self.search.text().strip()
        hits = (
            search(self._store, query)
            if query
            else [Hit(c.id, c.title) for c in self._store.list_chats()]
        )
        blocker = QSignalBlocker(self.list)
        self.list.clear()
        self._changed_item = None
        if query:
            for hit in hits:
                self._add_hit(hit)
        else:
            self._add_grouped(self._store.list_chats())
        del blocker
        self.empty.setVisible(bool(query) and not hits)
        offered = self._store.get_chat(self.undo_bar.chat_id) if self.undo_bar.chat_id else None
        if offered is not None and offered.deleted_at is None:
            self.undo_bar.hide_bar()  # back already (from the Trash): nothing left to undo

    def _add_hit(self, hit: Hit) -> None:
        title = shown_name(hit.title)
        item = QListWidgetItem(title)
        item.setData(ID_ROLE, hit.chat_id)
        item.setToolTip(plain_tip(title))
        if hit.seq is not None:
            item.setData(SEQ_ROLE, hit.seq)
            item.setData(SNIPPET_ROLE, (hit.snippet, hit.start, hit.end))
            item.setToolTip(plain_tip(f"{title}\n{hit.snippet}"))
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
        self.list.addItem(item)
        # A pinned chat in a folder has two rows: the first one listed is the one selected.
        chosen = self.list.currentItem()
        if hit.chat_id == self._current and (chosen is None or chosen.data(ID_ROLE) != hit.chat_id):
            self.list.setCurrentItem(item)

    def _add_chat(self, chat: Chat, *, pinned: bool = False, indent: bool = False) -> None:
        self._add_hit(Hit(chat.id, chat.title))
        item = self.list.item(self.list.count() - 1)
        item.setData(IN_FOLDER_ROLE, chat.folder)
        if chat.pinned:
            item.setIcon(icon("pin"))
            item.setToolTip(plain_tip(f"{shown_name(chat.title)}\nPinned to the top"))
        if pinned:
            item.setData(PINNED_ROLE, True)
        if indent:
            item.setData(INDENT_ROLE, True)

    def _add_grouped(self, chats: list[Chat]) -> None:
        """Pinned chats, then each folder with its chats, then the rest (each newest first).

        A pinned chat in a folder is listed in both places (with its pin in the folder too),
        so a folder never shows its name with nothing under it.
        """
        for chat in chats:
            if chat.pinned:
                self._add_chat(chat, pinned=True)
        folders: dict[str, list[Chat]] = {}
        for chat in chats:
            if chat.folder:
                folders.setdefault(chat.folder, []).append(chat)
        for name in sorted({c.folder for c in chats if c.folder}, key=str.casefold):
            inside = folders.get(name, [])
            folded = name in self._folded
            header = QListWidgetItem(icon("chevron-right" if folded else "chevron-down"), "")
            header.setText(f"{shown_name(name)}  ({len(inside)})" if folded else shown_name(name))
            header.setData(FOLDER_ROLE, name)
            header.setIcon(icon("folder"))
            header.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsDropEnabled)
            header.setToolTip(
                plain_tip(
                    f"Folder “{shown_name(name)}”: {len(inside)} "
                    f"{'chat' if len(inside) == 1 else 'chats'}. "
                    + ("Click to show them." if folded else "Click to fold them away.")
                )
            )
            header.setData(Qt.ItemDataRole.AccessibleTextRole, f"Folder {name}")
            bold = QFont(self.list.font())
            bold.setBold(True)
            header.setFont(bold)
            self.list.addItem(header)
            if not folded:
                for chat in inside:
                    self._add_chat(chat, indent=True)
        for chat in chats:
            if not chat.folder and not chat.pinned:
                self._add_chat(chat)

    def clear_search(self) -> None:
        """Drop the search filter; the caller refreshes (a new chat is not among the hits, and
        a filter left on would hide it and the other chats)."""
        self.search.clear()
        self._search_timer.stop()

    def chat_ids(self) -> list[str]:
        """Each chat's id once, in the order listed (a pinned chat in a folder has two rows)."""
        rows = (self.list.item(i).data(ID_ROLE) for i in range(self.list.count()))
        return list(dict.fromkeys(str(chat_id) for chat_id in rows if chat_id is not None))

    def titles(self) -> list[str]:
        """Each chat row's title, in order (folder names are not chats)."""
        rows = (self.list.item(i) for i in range(self.list.count()))
        return [row.text() for row in rows if row.data(ID_ROLE) is not None]

    def folder_rows(self) -> list[str]:
        """The folders' names as listed, in order."""
        rows = (self.list.item(i).data(FOLDER_ROLE) for i in range(self.list.count()))
        return [str(name) for name in rows if name is not None]

    def row_of(self, chat_id: str) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == chat_id:
                return self.list.item(i)
        return None

    def snippets(self) -> list[str]:
        """Each chat row's snippet ("" for a chat found by its title, or with no search)."""
        rows = (self.list.item(i) for i in range(self.list.count()))
        found = (row.data(SNIPPET_ROLE) for row in rows if row.data(ID_ROLE) is not None)
        return [hit[0] if hit else "" for hit in found]

    def set_current(self, chat_id: str) -> None:
        self._current = chat_id
        blocker = QSignalBlocker(self.list)
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == chat_id:
                self.list.setCurrentRow(i)
                break
        else:
            self.list.clearSelection()
        del blocker

    def update_title(self, chat_id: str) -> None:
        chat = self._store.get_chat(chat_id)
        if chat is None:
            return
        blocker = QSignalBlocker(self.list)
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) == chat_id:
                item.setText(shown_name(chat.title))
                item.setToolTip(plain_tip(shown_name(chat.title)))
        del blocker

    # --- actions --------------------------------------------------------------------------

    def rename(self, chat_id: str, title: str) -> None:
        self._store.rename_chat(chat_id, title)
        self.update_title(chat_id)
        chat = self._store.get_chat(chat_id)
        self.chat_renamed.emit(chat_id, chat.title if chat else title)

    def start_rename(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def delete(self, chat_id: str) -> None:
        chat = self._store.get_chat(chat_id)
        if chat is None or chat.deleted_at is not None:
            return
        self._store.delete_chat(chat_id)
        self.undo_bar.show_for(chat_id, chat.title)
        self.refresh()
        self.chat_deleted.emit(chat_id)

    def delete_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.delete(str(item.data(ID_ROLE)))

    def set_pinned(self, chat_id: str, pinned: bool) -> None:
        self._store.set_pinned(chat_id, pinned)
        self.refresh()

    def move_to_folder(self, chat_id: str, folder: str) -> None:
        """Put the chat in ``folder`` ("" takes it out); the folder shows open."""
        self._store.set_folder(chat_id, folder)
        self._folded.discard(folder_name(folder))
        self.refresh()

    def new_folder_for(self, chat_id: str) -> None:
        name, ok = QInputDialog.getText(self, "New folder", "Name of the new folder:")
        if ok and folder_name(name):
            self.move_to_folder(chat_id, name)

    def rename_folder(self, old: str) -> None:
        name, ok = QInputDialog.getText(
            self, "Rename folder", "New name of the folder:", QLineEdit.EchoMode.Normal, old
        )
        if ok and folder_name(name) and folder_name(name) != old:
            self._store.rename_folder(old, name)
            if old in self._folded:
                self._folded.discard(old)
                self._folded.add(folder_name(name))
            self.refresh()

    def remove_folder(self, name: str) -> None:
        """Take every chat out of the folder (the chats stay, outside any folder)."""
        self._store.rename_folder(name, "")
        self._folded.discard(name)
        self.refresh()

    def toggle_folder(self, name: str) -> None:
        if name in self._folded:
            self._folded.discard(name)
        else:
            self._folded.add(name)
        self.refresh()

    def restore(self, chat_id: str) -> None:
        self._store.restore_chat(chat_id)
        self.refresh()
        self.chat_restored.emit(chat_id)

    # --- reactions ------------------------------------------------------------------------

    def _current_changed(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is None:
            return
        chat_id = str(item.data(ID_ROLE))
        seq = item.data(SEQ_ROLE)
        self._changed_item = item
        if seq is not None:
            self._current = chat_id
            self.match_chosen.emit(chat_id, int(seq))
        elif chat_id != self._current:
            self._current = chat_id
            self.chat_selected.emit(chat_id)

    def _dropped(self, chat_id: str, folder: str, pinned: bool) -> None:
        chat = self._store.get_chat(chat_id)
        if chat is None:
            return
        if pinned != chat.pinned:
            self._store.set_pinned(chat_id, pinned)
        if not pinned:
            self.move_to_folder(chat_id, folder)
        else:
            self.refresh()

    def _clicked(self, item: QListWidgetItem) -> None:
        name = item.data(FOLDER_ROLE)
        if name is not None:
            self.toggle_folder(str(name))
            return
        # A click on the hit already chosen shows its match again (the person scrolled away);
        # the click that chose it has just done so.
        if item is self._changed_item:
            self._changed_item = None
            return
        seq = item.data(SEQ_ROLE)
        if seq is not None:
            self.match_chosen.emit(str(item.data(ID_ROLE)), int(seq))

    def _item_edited(self, item: QListWidgetItem) -> None:
        chat_id = str(item.data(ID_ROLE))
        chat = self._store.get_chat(chat_id)
        if chat is None or item.text() == shown_name(chat.title):
            return  # not renamed (a title is shown with its direction marks written out)
        self.rename(chat_id, item.text())

    def _folder_menu(self, name: str) -> QMenu:
        menu = QMenu(self)
        menu.addAction(icon("edit"), "Rename folder…", lambda: self.rename_folder(name))
        menu.addAction("Remove folder (its chats stay)", lambda: self.remove_folder(name))
        return menu

    def chat_menu(self, chat_id: str) -> QMenu:
        """The chat's menu (its row's right click)."""
        chat = self._store.get_chat(chat_id)
        menu = QMenu(self)
        item = self.row_of(chat_id)
        if item is not None:
            menu.addAction("Rename", lambda: self.list.editItem(item))
        pinned = chat is not None and chat.pinned
        menu.addAction(
            icon("pin"),
            "Unpin" if pinned else "Pin to top",
            lambda: self.set_pinned(chat_id, not pinned),
        )
        move = menu.addMenu(icon("folder"), "Move to folder")
        here = chat.folder if chat is not None else ""
        for name in self._store.folders():
            if name != here:
                # The folder's own name, never read as markup or an accelerator.
                action = move.addAction(shown_name(name).replace("&", "&&"))
                action.triggered.connect(lambda _c=False, n=name: self.move_to_folder(chat_id, n))
        move.addAction("New folder…", lambda: self.new_folder_for(chat_id))
        if here:
            move.addSeparator()
            move.addAction("Take out of the folder", lambda: self.move_to_folder(chat_id, ""))
        menu.addAction(
            icon("fork"),
            "New chat from summary",
            lambda: self.from_summary_requested.emit(chat_id),
        )
        menu.addSeparator()
        menu.addAction(
            icon("export"),
            "Export as Markdown…",
            lambda: self.export_requested.emit(chat_id, "markdown"),
        )
        menu.addAction(
            icon("export"), "Export as JSON…", lambda: self.export_requested.emit(chat_id, "json")
        )
        menu.addSeparator()
        menu.addAction(icon("trash"), "Delete", lambda: self.delete(chat_id))
        return menu

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        name = item.data(FOLDER_ROLE)
        menu = (
            self._folder_menu(str(name))
            if name is not None
            else self.chat_menu(str(item.data(ID_ROLE)))
        )
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(self.list.viewport().mapToGlobal(pos))
