"""The list of chats: new, rename (F2 or double-click), delete with Undo, search, export.

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
from PySide6.QtGui import QAction, QColor, QFont, QFontMetrics, QKeySequence, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
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
from app.store import ChatStore
from ui.icons import icon
from ui.plain import PlainLabel, plain_tip, shown_name

UNDO_SECONDS = 8
ID_ROLE = int(Qt.ItemDataRole.UserRole) + 1
SEQ_ROLE = ID_ROLE + 1  # a search hit in a message: that message's seq
SNIPPET_ROLE = ID_ROLE + 2  # (snippet, start, end): the line shown under the title
SNIPPET_ALPHA = 170  # the snippet's words, a little quieter than the title
LEAD_SHARE = 0.3  # of the row's width, at most, for the words before the match


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


class Sidebar(QWidget):
    """The chats, newest first.

    Signals:
        chat_selected(str): the person opened a chat.
        new_chat_requested(): the "New chat" button.
        chat_deleted(str): a chat was (soft-)deleted.
        chat_restored(str): Undo brought a chat back.
        chat_renamed(str, str): id, new title.
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

    def __init__(self, store: ChatStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self._store = store
        self._current = ""
        self._changed_item: QListWidgetItem | None = None  # the row the last choice picked

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
        self.list = QListWidget(self)
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
        for hit in hits:
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
            if hit.chat_id == self._current:
                self.list.setCurrentItem(item)
        del blocker
        self.empty.setVisible(bool(query) and not hits)
        offered = self._store.get_chat(self.undo_bar.chat_id) if self.undo_bar.chat_id else None
        if offered is not None and offered.deleted_at is None:
            self.undo_bar.hide_bar()  # back already (from the Trash): nothing left to undo

    def clear_search(self) -> None:
        """Drop the search filter; the caller refreshes (a new chat is not among the hits, and
        a filter left on would hide it and the other chats)."""
        self.search.clear()
        self._search_timer.stop()

    def chat_ids(self) -> list[str]:
        return [str(self.list.item(i).data(ID_ROLE)) for i in range(self.list.count())]

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def snippets(self) -> list[str]:
        """Each row's snippet ("" for a chat found by its title, or with no search)."""
        rows = (self.list.item(i).data(SNIPPET_ROLE) for i in range(self.list.count()))
        return [row[0] if row else "" for row in rows]

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

    def _clicked(self, item: QListWidgetItem) -> None:
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

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        chat_id = str(item.data(ID_ROLE))
        menu = QMenu(self)
        menu.addAction("Rename", lambda: self.list.editItem(item))
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
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(self.list.viewport().mapToGlobal(pos))
