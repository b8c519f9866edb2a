"""The chat: a QListView over ``ChatModel`` painted by ``MessageDelegate``.

Messages are painted, not built from widgets, so a chat of ten thousand messages opens as fast
as one of ten. The few rows that need buttons (the summary divider, a problem card, memory
cards) get an index widget each. Streamed text is coalesced on a short timer: the answer row
is re-rendered at most every ``FLUSH_MS`` however fast deltas arrive. The view sticks to the
bottom while the person is there and keeps their place when they scroll up, where older pages
are read from the chat log on demand.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, cast

from PySide6.QtCore import (
    QEvent,
    QMetaObject,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QHideEvent,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QListView,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.reading import READING_AFTER_S
from app.store import ChatStore
from ui.cards.handoff_divider import HandoffDivider
from ui.cards.memory_card import MemoryActions, MemoryCard
from ui.cards.problem_card import ProblemCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import ROW_ROLE, WIDGET_KINDS, ChatModel, Row, RowKind, RunSource
from ui.chat.markdown import code_blocks
from ui.chat.message_delegate import PAD_X, MessageDelegate, copy_to_clipboard
from ui.chat.tool_rows import ToolRows, entries_from
from ui.icons import icon
from ui.plain import PlainLabel

log = logging.getLogger("conch.ui.chat_view")

FLUSH_MS = 40  # how often streamed text reaches the screen
READING_TICK_MS = 1_000  # how often a wait before the first word says how long it has been
UNDO_MS = 10_000  # how long "Message deleted. Undo" stays
UNDO_GAP = 6  # pixels above and below "Message deleted. Undo", in its own strip
FOCUS_MARGIN = 8  # pixels left above or below a control scrolled into view for the focus
EDIT_HINT = "Editing your message — Enter to resend, Shift+Enter for a new line, Esc to cancel"
# An edit or delete above the summary line: the fold that summarised it no longer holds.
REFOLD_NOTE = "It is above the summary line, so the summary will be made again when needed."


class MessageEditor(QWidget):
    """The person's message open for editing, in place of its bubble.

    Signals:
        submitted(str): Enter: resend with this text.
        cancelled(): Esc.
    """

    submitted = Signal(str)
    cancelled = Signal()

    def __init__(self, text: str, hint: str = EDIT_HINT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("MessageEditor")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setAutoFillBackground(True)
        self.hint = PlainLabel(hint, self)
        self.hint.setWordWrap(True)
        self.text = QPlainTextEdit(self)
        self.text.setAccessibleName("Edit your message")
        self.text.setPlainText(text)
        self.text.setMinimumHeight(80)
        self.text.installEventFilter(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addWidget(self.hint)
        layout.addWidget(self.text)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.text and event.type() == QEvent.Type.KeyPress:
            key = cast(QKeyEvent, event)
            if key.key() == Qt.Key.Key_Escape:
                self.cancelled.emit()
                return True
            if key.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                key.modifiers() & Qt.KeyboardModifier.ShiftModifier
            ):
                if self.text.toPlainText().strip():
                    self.submitted.emit(self.text.toPlainText())
                return True
        return super().eventFilter(watched, event)


class MessageUndoBar(QWidget):
    """ "Message deleted. Undo" at the foot of the chat for a while.

    Signals:
        undo_clicked(float): the deletion's stamp.
    """

    undo_clicked = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("UndoBar")
        # Without it a plain QWidget paints no stylesheet background: there but invisible.
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setAutoFillBackground(True)
        self.label = PlainLabel(self)
        self.button = QPushButton("Undo", self)
        self.button.setAccessibleName("Undo deleting the message")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self._stamp = 0.0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._expire)
        self.button.clicked.connect(self._undo)
        self.hide()

    shown_changed = Signal(bool)  # the chat makes room for the bar while it shows
    # Undo is offered (True) or not any more (False): a chat left empty stays in view meanwhile.
    offer_changed = Signal(bool)

    @property
    def offered(self) -> bool:
        parent = self.parentWidget()
        return parent is not None and self.isVisibleTo(parent)

    def offer(self, words: str, stamp: float) -> None:
        self.label.setText(words)
        self._stamp = stamp
        self.show()
        self.raise_()
        self._timer.start(UNDO_MS)
        self.offer_changed.emit(True)

    def _expire(self) -> None:
        self.hide()
        self.offer_changed.emit(False)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.shown_changed.emit(True)

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.shown_changed.emit(False)

    def _undo(self) -> None:
        self.hide()
        self.undo_clicked.emit(self._stamp)
        self.offer_changed.emit(False)


class ChatView(QListView):
    """One chat's messages.

    Signals:
        step_requested(NextStep, int): a problem card's button (the failed answer's seq).
        status(str): a short note for the status line ("Code copied").
        answering(): an action started an answer (Continue, Regenerate, an edit sent again);
            the window gives the composer back its focus.
        fork_requested(int): "Fork from here" on the message at that seq.
        typed(str): words typed while the messages had the focus; the window puts them in
            the message box.
    """

    step_requested = Signal(object, int)
    status = Signal(str)
    answering = Signal()
    fork_requested = Signal(int)
    typed = Signal(str)

    def __init__(
        self,
        store: ChatStore,
        memories: Any = None,
        *,
        model_name: Callable[[str], str] | None = None,
        colors: Callable[[str], QColor] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("Transcript")
        self.setAccessibleName("Messages")
        self._store = store
        self._memories = memories
        runs: RunSource | None = memories if memories is not None else None
        self.chat_model = ChatModel(store, runs, model_name=model_name, parent=self)
        self.setModel(self.chat_model)
        self.delegate = MessageDelegate(self, colors)
        self.setItemDelegate(self.delegate)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setUniformItemSizes(False)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setMouseTracking(True)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.verticalScrollBar().setSingleStep(24)

        self._bridge: ConversationBridge | None = None
        self._connections: list[QMetaObject.Connection] = []
        self._widgets: dict[QWidget, QPersistentModelIndex] = {}
        self._stick = True
        self._keep_from_bottom: int | None = None
        self._adjusting = False
        self._fetching = False
        self._reload_on_save = False  # an edit or regenerate changed what is above the turn
        self._editor: MessageEditor | None = None
        # Edits left open when the person went to another chat: (seq, words) by chat.
        self._unfinished_edits: dict[str, tuple[int, str]] = {}
        self._hovered = QPersistentModelIndex()  # the row under the pointer: its buttons show
        self.undo_bar = MessageUndoBar(self)
        self.undo_bar.undo_clicked.connect(self._undelete)
        self.undo_bar.shown_changed.connect(self._undo_bar_shown)

        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)
        # A turn with no first word after this long says what the wait is ("Reading the
        # chat… 35%"); tests set it to 0 rather than wait.
        self.reading_after_ms = int(READING_AFTER_S * 1000)
        self._reading_timer = QTimer(self)
        self._reading_timer.setSingleShot(True)
        self._reading_timer.timeout.connect(self._tick_reading)

        model = self.chat_model
        model.rowsInserted.connect(self._rows_inserted)
        model.modelReset.connect(self._model_reset)
        model.dataChanged.connect(self._data_changed)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.rangeChanged.connect(self._range_changed)
        self.delegate.thinking_toggled.connect(self.chat_model.toggle_thinking)
        self.delegate.expand_toggled.connect(self._toggle_expanded)
        self.delegate.copied.connect(self.status)
        self.delegate.action_requested.connect(self.act)
        self.delegate.version_step.connect(self.step_version)
        self.customContextMenuRequested.connect(self._menu)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._focus_moved)

    # --- which chat -----------------------------------------------------------------------

    @property
    def bridge(self) -> ConversationBridge | None:
        return self._bridge

    @property
    def chat_id(self) -> str:
        return self.chat_model.chat_id

    def set_chat(self, chat_id: str, bridge: ConversationBridge | None = None) -> None:
        """Show ``chat_id`` and follow ``bridge`` (its running turn, if any, shows at once)."""
        self._detach()
        self._flush_timer.stop()
        self._reading_timer.stop()
        self._keep_unfinished_edit()
        self._editor = None  # the reset below takes an open editor with it
        self.undo_bar.hide()
        self._stick = True
        self._keep_from_bottom = None
        self.chat_model.continues_answers = bridge is not None and bridge.continues_answers
        self.chat_model.set_chat(chat_id)
        if bridge is not None:
            self._attach(bridge)
            if bridge.busy and bridge.mode == "turn":
                self.chat_model.start_stream(
                    bridge.partial_text,
                    bridge.partial_thinking,
                    who=self._answering(bridge),
                    continues=bridge.continuing,
                )
                entries = entries_from(bridge.tool_events, bridge.pending_approval)
                self.chat_model.set_stream_tools(tuple(entries))
                self._reading_timer.start(0)  # the wait, if it is a long one, shows at once
        self.scroll_to_bottom()
        self._reopen_unfinished_edit()

    def _keep_unfinished_edit(self) -> None:
        """An edit left open for another chat keeps its words for when the chat shows again:
        going to another chat is not Esc."""
        editor, seq = self._editor, self.chat_model.editing
        if editor is None or seq is None:
            return
        words = editor.text.toPlainText()
        i = self.chat_model.find(RowKind.MESSAGE, seq)
        message = self.chat_model.row(i).message if i >= 0 else None
        if message is None or words != message.text:
            self._unfinished_edits[self.chat_id] = (seq, words)

    def _reopen_unfinished_edit(self) -> None:
        kept = self._unfinished_edits.pop(self.chat_id, None)
        if kept is None:
            return
        seq, words = kept
        i = self.chat_model.find(RowKind.MESSAGE, seq)
        if i < 0 or not self.start_edit(i) or self._editor is None:
            return
        self._editor.text.setPlainText(words)
        self._editor.text.moveCursor(self._editor.text.textCursor().MoveOperation.End)

    def follow(self, bridge: ConversationBridge | None) -> None:
        """Follow ``bridge`` for the chat already showing (no reload, the scroll stays)."""
        self._detach()
        self.chat_model.continues_answers = bridge is not None and bridge.continues_answers
        if bridge is not None:
            self._attach(bridge)

    def _attach(self, bridge: ConversationBridge) -> None:
        self._bridge = bridge
        self.chat_model.set_handoff(bridge.handoff)  # kept by the bridge, not the chat log
        if bridge.summary_writing:
            self._compacted(None)
        pairs: list[tuple[Any, Callable[..., Any]]] = [
            (bridge.message_saved, self._message_saved),
            (bridge.text_delta, self._delta),
            (bridge.thinking_delta, self._delta),
            (bridge.compacted, self._compacted),
            (bridge.summary_written, self._compacted),
            (bridge.handed_off, self.chat_model.set_handoff),
            (bridge.busy_changed, self._busy_changed),
            (bridge.learning_done, self._learning_done),
            (bridge.tool_event, self._tool_event),
            (bridge.approval_changed, self._tool_event),
            (bridge.reading, self._show_reading),
        ]
        self._connections = [signal.connect(slot) for signal, slot in pairs]

    def _detach(self) -> None:
        self._reading_timer.stop()
        for connection in self._connections:
            QObject.disconnect(connection)
        self._connections = []
        self._bridge = None

    # --- the turn, as the bridge reports it ------------------------------------------------

    def _message_saved(self, seq: int, role: str) -> None:
        if role == "user":
            if self._reload_on_save:
                self._reload_on_save = False
                self.chat_model.reload()
            else:
                self.chat_model.sync()
            bridge = self._bridge
            if bridge is not None and bridge.continuing is not None:
                # "Continue": the stopped answer itself grows, from the words it has.
                self.chat_model.start_stream(
                    bridge.partial_text,
                    bridge.partial_thinking,
                    who=self._answering(bridge),
                    continues=bridge.continuing,
                )
            elif bridge is not None:
                self.chat_model.start_stream(who=self._answering(bridge))
            self._show_reading()
            self.scroll_to_bottom()
        else:
            self._flush_timer.stop()
            self.chat_model.keep_expanded(seq)
            self.chat_model.end_stream()
            self.chat_model.sync()

    @staticmethod
    def _answering(bridge: ConversationBridge) -> str:
        return bridge.conversation.model.name

    def _delta(self, _text: str) -> None:
        if self.chat_model.stream_status:
            self._show_reading()  # the first word: the wait is over
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def _show_reading(self, _event: Any = None) -> None:
        """Put what the wait for the first word is in the answer's placeholder (the words
        are ``ConversationBridge.reading_words``'s); "" brings back the plain "…"."""
        bridge = self._bridge
        if bridge is None or not self.chat_model.streaming:
            return
        self.chat_model.set_stream_status(bridge.reading_words(self.reading_after_ms / 1000))

    def _tick_reading(self) -> None:
        bridge = self._bridge
        if bridge is None or not bridge.busy or bridge.mode != "turn":
            return
        self._show_reading()
        self._reading_timer.start(READING_TICK_MS)

    def flush(self) -> None:
        """Put the streamed text so far on screen (the timer calls this; tests may too)."""
        bridge = self._bridge
        if bridge is None or not self.chat_model.streaming:
            return
        self.chat_model.update_stream(bridge.partial_text, bridge.partial_thinking)
        i = self.chat_model.find(RowKind.STREAMING)
        if i >= 0:
            # The row grew: one layout pass (other rows' sizes come from the cache).
            self.delegate.sizeHintChanged.emit(self.chat_model.index(i, 0))

    def _tool_event(self, _event: Any) -> None:
        """A tool call was asked for, started or ended: its line in the running answer."""
        bridge = self._bridge
        if bridge is None or not self.chat_model.streaming:
            return
        self._show_reading()  # a call is the model answering; a result is read anew
        entries = tuple(entries_from(bridge.tool_events, bridge.pending_approval))
        self.chat_model.set_stream_tools(entries)
        i = self.chat_model.find(RowKind.STREAMING) - 1
        widget = self.indexWidget(self.chat_model.index(i, 0)) if i >= 0 else None
        if isinstance(widget, ToolRows):
            widget.set_entries(entries)

    def _column_width(self) -> int:
        return self.delegate.content_width() + 2 * PAD_X + 2

    def _compacted(self, _event: Any) -> None:
        """A fold, or its summary written after the turn: the divider as the log has it."""
        bridge = self._bridge
        writing = bridge is not None and bridge.summary_writing
        self.chat_model.set_compaction(self._store.latest_compaction(self.chat_id), writing)

    def _busy_changed(self, busy: bool) -> None:
        if busy:
            # Said before the turn's task exists: the tick checks what kind of work it is.
            self._reading_timer.start(self.reading_after_ms)
            return
        self._reading_timer.stop()
        self._flush_timer.stop()
        self.chat_model.end_stream()
        self.chat_model.sync()

    def _learning_done(self, run: Any) -> None:
        self.chat_model.add_run(run)

    def refresh_memories(self) -> None:
        """Redraw the memory cards from the book (it changed somewhere else)."""
        self.chat_model.reload_runs()

    def _toggle_expanded(self, i: int) -> None:
        # A long message grows for a while after "Show all": the person reads on from where
        # its start ended, so the view no longer follows the bottom while it does.
        self._stick = False
        self.chat_model.toggle_expanded(i)

    def _data_changed(self, first: QModelIndex, last: QModelIndex, *_roles: Any) -> None:
        # A row that looks different (thinking or a long message opened) may be taller now.
        for i in range(first.row(), last.row() + 1):
            self.delegate.sizeHintChanged.emit(self.chat_model.index(i, 0))

    # --- widgets for the special rows ------------------------------------------------------

    def _model_reset(self) -> None:
        self._widgets.clear()
        self._rows_inserted(QModelIndex(), 0, self.chat_model.rowCount() - 1)

    def _rows_inserted(self, _parent: QModelIndex, first: int, last: int) -> None:
        for i in range(first, last + 1):
            row = self.chat_model.row(i)
            if row.kind not in WIDGET_KINDS:
                continue
            index = self.chat_model.index(i, 0)
            widget = self._make_widget(row)
            if widget is None:
                continue
            self.setIndexWidget(index, widget)
            self._widgets[widget] = QPersistentModelIndex(index)
            widget.destroyed.connect(lambda _obj=None, w=widget: self._widgets.pop(w, None))
            self.delegate.sizeHintChanged.emit(index)

    def _make_widget(self, row: Row) -> QWidget | None:
        widget: Any
        if row.kind is RowKind.DIVIDER and row.handoff is not None:
            widget = HandoffDivider(row.handoff)
        elif row.kind is RowKind.DIVIDER and row.compaction is not None:
            widget = SummaryDivider(row.compaction, writing=row.writing)
        elif row.kind is RowKind.PROBLEM and row.message is not None:
            message = row.message
            problem = message.problem
            if problem is None:
                return None
            widget = ProblemCard(problem, self._asked_before(message.seq))
            seq = message.seq
            widget.step_requested.connect(lambda step, s=seq: self.step_requested.emit(step, s))
        elif row.kind is RowKind.MEMORIES and row.run is not None and self._memories is not None:
            book: MemoryActions = self._memories
            widget = MemoryCard(row.run, book)
        elif row.kind is RowKind.TOOLS:
            widget = ToolRows(row.tools, self._column_width())
        else:
            return None
        widget.size_changed.connect(lambda w=widget: self._widget_resized(w))
        return widget  # type: ignore[no-any-return]

    def _asked_before(self, seq: int) -> str:
        """What the person asked just before the answer at ``seq`` (for "new chat with it")."""
        asked = self._store.asked_before(self.chat_id, seq)
        return asked.text if asked is not None else ""

    def _widget_resized(self, widget: QWidget) -> None:
        index = self._widgets.get(widget)
        if index is not None and index.isValid():
            self.delegate.sizeHintChanged.emit(self.chat_model.index(index.row(), 0))

    def widget_at(self, kind: RowKind) -> QWidget | None:
        """The index widget of the first row of ``kind`` (the divider, a card)."""
        i = self.chat_model.find(kind)
        return self.indexWidget(self.chat_model.index(i, 0)) if i >= 0 else None

    def widgets_of(self, kind: RowKind) -> list[QWidget]:
        found: list[QWidget] = []
        for i, row in enumerate(self.chat_model.rows()):
            if row.kind is kind:
                w = self.indexWidget(self.chat_model.index(i, 0))
                if w is not None:
                    found.append(w)
        return found

    # --- scrolling ------------------------------------------------------------------------

    def scroll_to_bottom(self) -> None:
        self._stick = True
        bar = self.verticalScrollBar()
        self._adjusting = True
        bar.setValue(bar.maximum())
        self._adjusting = False

    def _focus_moved(self, _old: QWidget | None, new: QWidget | None) -> None:
        """A button on a card or on the summary line took the focus (Tab) while scrolled out of
        sight: bring it into view, as a scroll area does, or its ring is drawn where no one sees
        it and Space presses a button the person cannot read."""
        viewport = self.viewport()
        if new is None or not viewport.isAncestorOf(new):
            return
        if QApplication.mouseButtons() != Qt.MouseButton.NoButton:
            return  # a click: moving the button under the pointer would lose the release
        top = new.mapTo(viewport, QPoint(0, 0)).y()
        below = top + new.height() - viewport.height()
        bar = self.verticalScrollBar()
        if top < 0:
            bar.setValue(bar.value() + top - FOCUS_MARGIN)
        elif below > 0:
            # A control taller than the view shows its top.
            bar.setValue(bar.value() + min(top - FOCUS_MARGIN, below + FOCUS_MARGIN))

    def at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 8

    def _scrolled(self, value: int) -> None:
        if self._adjusting:
            return
        bar = self.verticalScrollBar()
        self._stick = value >= bar.maximum() - 8
        if value < max(200, self.viewport().height()) and self.chat_model.can_fetch_older():
            self._fetch_older()

    def _fetch_older(self) -> None:
        if self._fetching:
            return
        self._fetching = True
        try:
            bar = self.verticalScrollBar()
            self._keep_from_bottom = bar.maximum() - bar.value()
            if self.chat_model.fetch_older() == 0:
                self._keep_from_bottom = None
        finally:
            self._fetching = False

    def _range_changed(self, _minimum: int, maximum: int) -> None:
        bar = self.verticalScrollBar()
        self._adjusting = True
        try:
            if self._keep_from_bottom is not None:
                bar.setValue(maximum - self._keep_from_bottom)
                self._keep_from_bottom = None
            elif self._stick:
                bar.setValue(maximum)
        finally:
            self._adjusting = False
        # A first page too short to fill the view: read more (checked after the layout).
        if maximum == 0 and self.chat_model.can_fetch_older():
            QTimer.singleShot(0, self, self._fill_view)

    def _fill_view(self) -> None:
        self.executeDelayedItemsLayout()
        if self.verticalScrollBar().maximum() == 0 and self.chat_model.can_fetch_older():
            self._fetch_older()

    # --- keyboard and menu ----------------------------------------------------------------

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        # A pointing hand over links ("Copy", "Thinking", web links), like a browser.
        index = self.indexAt(event.position().toPoint())
        href = (
            self.delegate.anchor_at(index, event.position(), self.visualRect(index))
            if index.isValid()
            else ""
        )
        shape = Qt.CursorShape.PointingHandCursor if href else Qt.CursorShape.ArrowCursor
        self.viewport().setCursor(shape)
        self._hover(index)
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        self._hover(QModelIndex())
        super().leaveEvent(event)

    def _hover(self, index: QModelIndex) -> None:
        valid = self._hovered.isValid()
        old = self.chat_model.index(self._hovered.row(), 0) if valid else QModelIndex()
        if index == old:
            return
        self._hovered = QPersistentModelIndex(index)
        for i in (old, index):
            if i.isValid():
                self.viewport().update(self.visualRect(i))

    def hovered(self, index: QModelIndex | QPersistentModelIndex) -> bool:
        """Whether the pointer is over row ``index`` (the delegate shows its buttons)."""
        return self._hovered.isValid() and index.row() == self._hovered.row()

    def keyboardSearch(self, search: str) -> None:
        # A list jumps to the row starting with the typed letter: the chat moved away from
        # where the person was reading and the words were lost. They go to the message box.
        self.typed.emit(search)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        index = self.currentIndex()
        row: Row | None = index.data(ROW_ROLE) if index.isValid() else None
        if row is not None and event.matches(QKeySequence.StandardKey.Copy):
            copy_to_clipboard(self.chat_model.plain_text(row))
            self.status.emit("Message copied")
            return
        if row is not None and event.key() == Qt.Key.Key_Delete and self.act(index.row(), "delete"):
            return
        menu_key = event.key() == Qt.Key.Key_Menu or (
            event.key() == Qt.Key.Key_F10 and event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        )
        if row is not None and menu_key and row.kind not in WIDGET_KINDS:
            # The chosen message's menu (copy, edit, regenerate, delete), at that message.
            rect = self.visualRect(index)
            self._menu(QPoint(rect.left() + rect.width() // 2, rect.top() + 8))
            return
        if row is not None and event.key() in (
            Qt.Key.Key_Return,
            Qt.Key.Key_Enter,
            Qt.Key.Key_Space,
        ):
            if row.kind in WIDGET_KINDS:
                self._focus_widget(index)
                return
            if self.chat_model.toggle_thinking(index.row()):
                return
            if self.chat_model.toggle_expanded(index.row()):
                return
        super().keyPressEvent(event)

    def _focus_widget(self, index: QModelIndex) -> None:
        widget = cast("QWidget | None", self.indexWidget(index))
        if widget is None:
            return
        for child in widget.findChildren(QWidget):
            if child.isVisible() and child.focusPolicy() & Qt.FocusPolicy.TabFocus:
                child.setFocus(Qt.FocusReason.TabFocusReason)
                return

    def _menu(self, pos: QPoint) -> None:
        index = self.indexAt(pos)
        row: Row | None = index.data(ROW_ROLE) if index.isValid() else None
        if row is None or row.kind in WIDGET_KINDS:
            return
        menu = self.menu_for(index.row())
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(self.viewport().mapToGlobal(pos))

    def menu_for(self, i: int) -> QMenu:
        """The context menu of row ``i``: copy the message, copy each code block, thinking."""
        row = self.chat_model.row(i)
        text = self.chat_model.plain_text(row)
        menu = QMenu(self)
        menu.addAction("Copy message", lambda: self._copy(text, "Message copied"))
        for n, block in enumerate(code_blocks(text)):
            first = block.strip().splitlines()[0][:40] if block.strip() else "(empty)"
            menu.addAction(
                f"Copy code block {n + 1}: {first}",
                functools.partial(self._copy, block, "Code copied"),
            )
        thinking = (
            row.thinking
            if row.kind is RowKind.STREAMING
            else (row.message.thinking if row.message is not None else "")
        )
        if thinking:
            word = "Hide thinking" if row.thinking_open else "Show thinking"
            menu.addAction(word, lambda: self.chat_model.toggle_thinking(i))
        for action in self.chat_model.actions(i):
            if action != "copy":
                menu.addAction(
                    {
                        "edit": "Edit and resend",
                        "continue": "Continue the answer",
                        "regenerate": "Regenerate answer",
                    }.get(action, "Delete message"),
                    functools.partial(self.act, i, action),
                )
        m = row.message
        if m is not None and row.kind is not RowKind.STREAMING:
            menu.addSeparator()
            menu.addAction(icon("fork"), "Fork from here", lambda: self.fork_requested.emit(m.seq))
        versions = row.versions
        if versions is not None and len(versions.seqs) > 1:
            if versions.shown > 0:
                menu.addAction("Previous version", lambda: self.step_version(i, -1))
            if versions.shown < len(versions.seqs) - 1:
                menu.addAction("Next version", lambda: self.step_version(i, 1))
        return menu

    # --- message actions (hover buttons, menu, keys) ---------------------------------------

    def act(self, i: int, action: str) -> bool:
        """Do ``action`` (an ``ACTIONS`` name) on row ``i``; False when it cannot be done now."""
        if not 0 <= i < self.chat_model.rowCount() or action not in self.chat_model.actions(i):
            return False
        row = self.chat_model.row(i)
        m = row.message
        if m is None:
            return False
        if action == "copy":
            self._copy(m.text, "Message copied")
            return True
        bridge = self._bridge
        if bridge is None or bridge.busy:
            self.status.emit("Wait for the answer to finish (or Stop it) first.")
            return False
        if action == "edit":
            return self.start_edit(i)
        if action == "continue":
            if not bridge.continue_answer(m.seq):
                return False
            self.answering.emit()
            return True
        if action == "regenerate":
            self._reload_on_save = True
            if not bridge.regenerate(m.seq):
                self._reload_on_save = False
                return False
            self.answering.emit()
            return True
        if action == "delete":
            stamp = bridge.delete_message(m.seq)
            if stamp is None:
                return False
            above = self._above_fold(m.seq)
            self.chat_model.reload()
            words = (
                "Message deleted." if m.role == "assistant" else "Message and its answer deleted."
            )
            if above:
                words += " " + REFOLD_NOTE
            self.undo_bar.offer(words, stamp)
            self._place_undo_bar()
            return True
        return False

    def continuable_row(self) -> int:
        """The row of the answer the person stopped that "Continue" can go on with, or -1."""
        for i in range(self.chat_model.rowCount() - 1, -1, -1):
            row = self.chat_model.row(i)
            if row.kind is RowKind.MESSAGE:
                return i if row.continuable else -1
        return -1

    def continue_stopped(self) -> bool:
        """Go on with the stopped answer (the palette's "Continue the stopped answer")."""
        i = self.continuable_row()
        return i >= 0 and self.act(i, "continue")

    def start_edit(self, i: int) -> bool:
        """Open the person's message at row ``i`` for editing, in place."""
        self.cancel_edit()
        row = self.chat_model.row(i)
        if row.message is None or row.message.role != "user":
            return False
        seq = row.message.seq
        self.chat_model.set_editing(seq)
        i = self.chat_model.find(RowKind.MESSAGE, seq)
        hint = f"{EDIT_HINT}. {REFOLD_NOTE}" if self._above_fold(seq) else EDIT_HINT
        editor = MessageEditor(row.message.text, hint)
        editor.submitted.connect(lambda text, s=seq: self._finish_edit(s, text))
        editor.cancelled.connect(self.cancel_edit)
        index = self.chat_model.index(i, 0)
        self.setIndexWidget(index, editor)
        self._editor = editor
        self.delegate.sizeHintChanged.emit(index)
        editor.text.setFocus(Qt.FocusReason.OtherFocusReason)
        editor.text.moveCursor(editor.text.textCursor().MoveOperation.End)
        self.scrollTo(index)
        return True

    def _above_fold(self, seq: int) -> bool:
        fold = self.chat_model.compaction
        return fold is not None and seq < fold.first_kept_seq

    @property
    def editor(self) -> MessageEditor | None:
        return self._editor

    def cancel_edit(self) -> None:
        seq = self.chat_model.editing
        editor, self._editor = self._editor, None
        if seq is None:
            return
        i = self.chat_model.find(RowKind.MESSAGE, seq)
        if i >= 0:
            self.setIndexWidget(self.chat_model.index(i, 0), None)  # type: ignore[arg-type]
        if editor is not None:
            editor.deleteLater()
        self.chat_model.set_editing(None)
        self.setFocus(Qt.FocusReason.OtherFocusReason)

    def _finish_edit(self, seq: int, text: str) -> None:
        bridge = self._bridge
        if bridge is None or bridge.busy:
            self.status.emit("Wait for the answer to finish (or Stop it) first.")
            return
        self.cancel_edit()
        self._reload_on_save = True
        if not bridge.edit(seq, text):
            self._reload_on_save = False
            self.status.emit("That message could not be sent again.")
            return
        self.answering.emit()

    def step_version(self, i: int, delta: int) -> bool:
        """Show the previous (-1) or next (+1) version of the answer at row ``i``."""
        row = self.chat_model.row(i)
        versions = row.versions
        bridge = self._bridge
        if versions is None or bridge is None:
            return False
        n = versions.shown + delta
        if not 0 <= n < len(versions.seqs) or not bridge.show_version(versions.seqs[n]):
            return False
        self.chat_model.reload()
        return True

    def _undelete(self, stamp: float) -> None:
        if self._bridge is not None:
            self._bridge.undelete(stamp)
            self.chat_model.reload()
            self.status.emit("Message restored")

    def _place_undo_bar(self) -> None:
        # The bar gets a strip of its own below the messages, never over them: the last row
        # is often a problem card whose button the person still needs.
        bar = self.undo_bar
        hint = bar.sizeHint()
        self.setViewportMargins(0, 0, 0, hint.height() + 2 * UNDO_GAP)
        area = self.viewport().geometry()
        width = min(area.width() - 16, max(hint.width(), 320))
        bar.setGeometry(
            area.left() + (area.width() - width) // 2,
            area.bottom() + 1 + UNDO_GAP,
            width,
            hint.height(),
        )

    def _undo_bar_shown(self, shown: bool) -> None:
        if shown:
            self._place_undo_bar()
        else:
            self.setViewportMargins(0, 0, 0, 0)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.undo_bar.isVisible():
            self._place_undo_bar()
        for widget in self.widgets_of(RowKind.TOOLS):  # tool calls line up with the messages
            cast(ToolRows, widget).set_column_width(self._column_width())

    def _copy(self, text: str, note: str) -> None:
        copy_to_clipboard(text)
        self.status.emit(note)

    def refresh_names(self) -> None:
        """Redraw every message (model names or the theme changed)."""
        self.delegate.forget()
        self.scheduleDelayedItemsLayout()
        self.viewport().update()

    def changeEvent(self, event: QEvent) -> None:
        # A new theme or font: cached documents were rendered for the old one.
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.FontChange):
            self.delegate.forget()
            self.scheduleDelayedItemsLayout()
        super().changeEvent(event)

    # --- empty chat -----------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if self.chat_model.rowCount() == 0:
            painter = QPainter(self.viewport())
            color = self.palette().color(QPalette.ColorRole.PlaceholderText)
            painter.setPen(color)
            words = "Send a message to start." if self.chat_id else "Choose a chat or start one."
            painter.drawText(self.viewport().rect(), Qt.AlignmentFlag.AlignCenter, words)
            painter.end()
