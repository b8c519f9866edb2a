"""The main window: chats on the left; the model picker, the chat and the composer on the right.

The window wires widgets to the app's services and to one ``ConversationBridge`` per open
chat; it never talks to an engine. A chat whose answer is still streaming keeps its bridge
when the person looks at another chat, and a deleted chat's turn is stopped (what arrived is
kept, and Undo brings the chat back). An empty chat shows the first screen in the messages'
place (ui/first_screen.py: who answers, what was found, one click to each). The palette and
the settings dialog (ui/palette.py, ui/settings/settings_dialog.py) are built on first use,
or injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QByteArray,
    QChildEvent,
    QEvent,
    QObject,
    QPoint,
    QSize,
    QStandardPaths,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QCloseEvent, QKeySequence, QPainter, QPaintEvent, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QMainWindow,
    QSplitter,
    QStackedWidget,
    QStatusBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.background import Background
from app.export import SUFFIXES, ExportError, export_chat, suggested_name
from app.export import Kind as ExportKind
from app.import_fold import chats_to_fold
from app.importers import SOURCE_NAMES, ImportFailedError, Parsed, read_file, save
from app.services import ServicesError
from app.settings import SettingsError
from app.sqlite import StorageError
from app.store import StoredMessage
from engines.base import Approval, ModelInfo, NextStep, PermissionAsk, Shortened, ToolAsk
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.programs.catalogue import program
from engines.programs.slash import SlashCommand, slash_commands_of
from ui._widgets import few_letters
from ui.cards.approval_card import ApprovalCard
from ui.cards.cut_notice import CutNotice
from ui.cards.memory_card import MemoryCard, tidied_words
from ui.cards.problem_card import ProblemCard
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_settings import ChatSettingsPanel
from ui.chat.chat_tools import ChatToolsButton
from ui.chat.chat_view import ChatView
from ui.chat.composer import Composer, Submission
from ui.chat.drafts import ChatDrafts
from ui.chat.forks import ForkActions, OriginLink
from ui.chat.match_highlight import MatchHighlight, show_message
from ui.chat.model_picker import ModelPicker, provider_name
from ui.first_screen import FirstScreen
from ui.icons import icon
from ui.plain import PlainLabel, plain_tip, shown_name, unbroken, window_title
from ui.settings.local_models import LocalModelsController
from ui.shortcuts import ShortcutsSheet, window_shortcuts
from ui.sidebar import Sidebar
from ui.status_toast import StatusToast

if TYPE_CHECKING:
    from app.services import AppServices
    from ui.theme import ThemeManager

log = logging.getLogger("conch.ui.window")

STATUS_MS = 5000
DEMO_WORDS = (
    "This is a demo: the answers are scripted and no model runs. Start Conch without "
    f"{unbroken('--mock')} to chat with a model."
)


FIRST_SIZE = QSize(1100, 760)  # the least first window on a screen with room for it
FIRST_SHARE = (0.65, 0.8)  # of a big screen's free area (width, height)
SCREEN_SHARE = 0.9  # of the screen's free area, at most, on any screen
COMPOSER_SIDE = 12  # room beside the message box, at least
TITLE_CHARS = 12  # about what a narrow window still shows of the chat's title, then "…"


def first_size(room: QSize) -> QSize:
    """The first window's size: a share of the screen's free area (``FIRST_SHARE``), at least
    ``FIRST_SIZE`` where that fits, never more than ``SCREEN_SHARE`` of it, so Send, the
    cards' buttons and the gear are never off-screen and a big screen gets a window to match."""
    share_w, share_h = FIRST_SHARE
    return QSize(
        min(int(room.width() * SCREEN_SHARE), max(FIRST_SIZE.width(), int(room.width() * share_w))),
        min(
            int(room.height() * SCREEN_SHARE),
            max(FIRST_SIZE.height(), int(room.height() * share_h)),
        ),
    )


class ChatTitle(PlainLabel):
    """The chat's title above it: cut with "…" where the header ends (all of it in the
    tooltip), never a wider window. A title is any length (an imported one too), but a narrow
    window still shows about its first ``TITLE_CHARS`` characters: the model picker beside it
    gives way first."""

    def shown(self) -> str:
        """The title as painted: whole, or cut with "…" where its room ends."""
        room = self.contentsRect().width()
        metrics = self.fontMetrics()
        if metrics.horizontalAdvance(self.text()) <= room:
            return self.text()
        return metrics.elidedText(self.text(), Qt.TextElideMode.ElideRight, room)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        margins = self.contentsMargins()
        wide = few_letters(self.fontMetrics(), TITLE_CHARS) + margins.left() + margins.right()
        return QSize(wide, hint.height())

    def paintEvent(self, event: QPaintEvent) -> None:
        shown = self.shown()
        if shown == self.text():
            super().paintEvent(event)  # whole: Qt draws it (and what the mouse selected)
            return
        painter = QPainter(self)
        room = self.contentsRect()
        painter.drawText(room, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)
        painter.end()

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(plain_tip(text))


class ComposerHolder(QWidget):
    """The room around the message box. Its side margins line the box up with the messages'
    column (``MainWindow._line_up_composer``), wide in a wide window; its least width counts
    only ``COMPOSER_SIDE`` a side, or the window could never again be made narrower than the
    width it last had."""

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        layout = self.layout()
        if layout is None or not hint.isValid():
            return hint
        margins = layout.contentsMargins()
        lined_up = max(0, margins.left() - COMPOSER_SIDE) + max(0, margins.right() - COMPOSER_SIDE)
        return QSize(hint.width() - lined_up, hint.height())


class MainWindow(QMainWindow):
    """Conch's window for ``services``.

    Signals:
        closed(): the window was closed (the app shuts down after it).
        chat_opened(str): a chat is now showing.
    """

    closed = Signal()
    chat_opened = Signal(str)

    def __init__(
        self,
        services: AppServices,
        *,
        theme: ThemeManager | None = None,
        palette_factory: Callable[[MainWindow], Any] | None = None,
        settings_factory: Callable[[MainWindow], Any] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("MainWindow")
        self.services = services
        self.theme = theme
        self._palette_factory = palette_factory
        self._settings_factory = settings_factory
        self._palette: Any = None
        self._settings_dialog: Any = None
        self._shortcuts_sheet: ShortcutsSheet | None = None
        self._file_dialog: QFileDialog | None = None  # the export or import dialog last opened
        self._chat_settings: ChatSettingsPanel | None = None
        self._bridges: dict[str, ConversationBridge] = {}
        self._tasks = Background(log, "a window task failed")
        self._current = ""
        self._drafts = ChatDrafts(services.store)  # each chat's unsent words, across restarts
        self._unsubscribe: list[Callable[[], None]] = []
        self._closing = False

        self._build()
        self._show_title("")
        self._connect_signals()
        self._restore_geometry()
        self.sidebar.refresh()
        self.picker.set_models(self._picker_models(services.catalogue.models()), "")
        self.picker.set_starting(services.status or None)
        self.local_models = LocalModelsController(self)  # bigger windows, loading, downloads
        self._open_first_chat()
        for problem in services.startup_problems:
            self.show_status(problem)

    # --- building -------------------------------------------------------------------------

    def _build(self) -> None:
        services = self.services
        self.sidebar = Sidebar(services.store, self)
        self.picker = ModelPicker(self, provider_label=self._provider_label)
        self.title_label = ChatTitle(self)
        self.title_label.setObjectName("ChatTitle")
        self.title_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chat_view = ChatView(
            services.store,
            services.memories,
            model_name=self._model_name,
            colors=self.theme.color if self.theme is not None else None,
        )
        self.composer = Composer(self)
        self.composer.slash_source = self.slash_commands
        self.approval_card = ApprovalCard(self)
        self.cut_notice = CutNotice(self)
        self.match_highlight = MatchHighlight(self.chat_view)  # a search hit's message, lit up

        top = QWidget(self)
        top.setObjectName("ChatHeader")
        top.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        top_layout = QHBoxLayout(top)
        top_layout.setContentsMargins(10, 6, 10, 6)
        # The title, and under it where a forked chat came from (a link back to that chat).
        self.origin_link = OriginLink(top)
        titles = QVBoxLayout()
        titles.setSpacing(0)
        titles.addWidget(self.title_label)
        titles.addWidget(self.origin_link)
        top_layout.addLayout(titles, 1)
        top_layout.addWidget(self.picker)
        self.tools_button = ChatToolsButton(services.tools, services.store, top)
        top_layout.addWidget(self.tools_button)  # which tool servers this chat may use
        self.chat_settings_button = QToolButton(top)
        self.chat_settings_button.setObjectName("ChatSettingsButton")
        self.chat_settings_button.setIcon(icon("settings"))
        self.chat_settings_button.setToolTip("Chat settings: system prompt, temperature, length")
        self.chat_settings_button.setAccessibleName("Chat settings")
        self.chat_settings_button.clicked.connect(self.show_chat_settings)
        top_layout.addWidget(self.chat_settings_button)

        right = QWidget(self)
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(0)
        right_layout.addWidget(top)
        if services.mock:
            # Said in the chat too, not only in the title bar: the answers are the demo's.
            self.demo_banner = PlainLabel(DEMO_WORDS, right)
            self.demo_banner.setObjectName("Banner")
            self.demo_banner.setProperty("kind", "info")
            self.demo_banner.setWordWrap(True)
            banner_holder = QWidget(right)
            banner_layout = QVBoxLayout(banner_holder)
            banner_layout.setContentsMargins(12, 8, 12, 0)
            banner_layout.addWidget(self.demo_banner)
            right_layout.addWidget(banner_holder)
        # An empty chat shows the first screen (who answers, what was found) in its place.
        self.first_screen = FirstScreen(self)
        self.chat_stack = QStackedWidget(right)
        self.chat_stack.addWidget(self.chat_view)
        self.chat_stack.addWidget(self.first_screen)
        right_layout.addWidget(self.chat_stack, 1)
        holder = ComposerHolder(self)
        self.composer_holder = holder
        holder_layout = QVBoxLayout(holder)
        holder_layout.setContentsMargins(COMPOSER_SIDE, 4, COMPOSER_SIDE, 12)
        holder_layout.addWidget(self.approval_card)  # a program's question, above the box
        holder_layout.addWidget(self.cut_notice)  # "Conch sent the first and last N characters"
        holder_layout.addWidget(self.composer)
        right_layout.addWidget(holder)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 760])
        self.setCentralWidget(self.splitter)
        # The status bar holds the message and its timeout but never shows: an empty strip
        # under every chat looked like a part of the window that had failed to load, and one
        # that came and went moved the chat. What it says floats over the chat's bottom.
        status = QStatusBar(self)
        status.setSizeGripEnabled(False)
        status.setVisible(False)
        self.setStatusBar(status)
        self.status_toast = StatusToast(self.chat_stack)
        status.messageChanged.connect(self.status_toast.say)
        self.resize(first_size(self.screen().availableGeometry().size()))
        # The header's controls one after another for Tab: chat settings were reached from the
        # message box's meter, between the box and the messages, far from the model beside it.
        QWidget.setTabOrder(self.picker.combo, self.tools_button)
        QWidget.setTabOrder(self.tools_button, self.chat_settings_button)

        # The keys live in ui/shortcuts.py (the sheet lists them from there); the actions here.
        actions: dict[str, Callable[[], Any]] = {
            "new-chat": lambda: self.new_chat(),
            "palette": self.open_palette,
            "settings": lambda: self.show_settings("providers"),
            "search": lambda: self.sidebar.search.setFocus(),
            "composer": self.composer.edit.setFocus,
            "rename": self.sidebar.start_rename,
            "shortcuts": self.show_shortcuts,
            "quit": self.close,  # as the window's close button: the app ends with the window
        }
        for name, keys in window_shortcuts().items():
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.activated.connect(actions[name])

    def _connect_signals(self) -> None:
        self.sidebar.chat_selected.connect(self.open_chat)
        self.forks = ForkActions(
            self.services.store,
            open_chat=self._open_copy,
            status=self.show_status,
            bridge_for=lambda chat_id: self.bridge(chat_id),
            parent=self,
        )
        self.chat_view.fork_requested.connect(lambda seq: self.forks.fork(self._current, seq))
        self.sidebar.from_summary_requested.connect(self.forks.from_summary)
        self.origin_link.open_requested.connect(self.open_chat)
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.chat_deleted.connect(self._chat_deleted)
        self.sidebar.chat_restored.connect(self.open_chat)
        self.sidebar.chat_renamed.connect(self._chat_renamed)
        self.sidebar.settings_requested.connect(lambda: self.show_settings("providers"))
        self.sidebar.match_chosen.connect(self.show_match)
        self.sidebar.export_requested.connect(self.export_dialog)
        self.sidebar.import_requested.connect(self.import_dialog)
        self.composer.submitted.connect(self.submit)
        self.composer.stop_requested.connect(self.stop)
        self.picker.model_chosen.connect(self.switch_model)
        self.first_screen.model_chosen.connect(self.start_with)
        self.first_screen.settings_requested.connect(self.show_settings)
        chat_rows = self.chat_view.chat_model
        chat_rows.modelReset.connect(self._update_first_screen)
        chat_rows.rowsInserted.connect(self._update_first_screen)
        chat_rows.rowsRemoved.connect(self._update_first_screen)
        self.chat_view.undo_bar.offer_changed.connect(self._update_first_screen)
        self.approval_card.answered.connect(self._approval_answered)
        self.tools_button.settings_requested.connect(lambda: self.show_settings("tools"))
        # The person's message is at ``seq``; take_step looks for it before the seq it is given.
        self.cut_notice.step_requested.connect(lambda step, seq: self.take_step(step, seq + 1))
        self.chat_view.step_requested.connect(self.take_step)
        self.chat_view.status.connect(self.show_status)
        # After Continue, Regenerate or an edit, the person types the next message at once.
        self.chat_view.answering.connect(lambda: self.composer.edit.setFocus())
        self.chat_view.typed.connect(self._type_in_box)
        self.sidebar.list.typed.connect(self._type_in_box)
        # A card's button or the undo bar hides (or is rebuilt) once pressed; Qt would pass the
        # focus on to the next control in the chain ("New chat", where Space starts a chat).
        self.chat_view.undo_bar.undo_clicked.connect(lambda _stamp: self.focus_box())
        self.chat_view.viewport().installEventFilter(self)
        self.composer_holder.installEventFilter(self)
        self.chat_stack.currentChanged.connect(lambda _i: self._line_up_composer())
        self._unsubscribe.append(self.services.catalogue.on_change(self._models_changed))
        self._unsubscribe.append(self.services.on_status(self._runtime_status))
        now = self.services.settings.settings
        self._program_paths = (now.program_paths, now.acp_agents)
        self._unsubscribe.append(self.services.settings.on_change(self._settings_changed))
        # The widgets can be gone before ``aclose`` runs (a window deleted on close) while a
        # model listing still under way ends: then no listener may reach them.
        stops = self._unsubscribe

        def stop_listening(*_args: object) -> None:
            for stop in stops:
                stop()
            stops.clear()

        self.chat_view.destroyed.connect(stop_listening)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and (
            watched is self.composer_holder or watched is self.chat_view.viewport()
        ):
            self._line_up_composer()
        # Cards become children of the chat's viewport when the chat view shows them.
        if (
            event.type() == QEvent.Type.ChildAdded
            and isinstance(event, QChildEvent)
            and watched is self.chat_view.viewport()
        ):
            child = event.child()
            if isinstance(child, MemoryCard) and not child.property("focus_wired"):
                child.setProperty("focus_wired", True)
                child.changed.connect(lambda _run: self.focus_box())
            elif isinstance(child, ProblemCard) and not child.property("focus_wired"):
                child.setProperty("focus_wired", True)
                child.reload_requested.connect(lambda _offer: self.focus_box())
        return super().eventFilter(watched, event)

    def focus_box(self) -> None:
        """Give the keyboard to the message box (after a control that had it went away)."""
        self.composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    def _type_in_box(self, text: str) -> None:
        """Words typed while the messages or the chat list had the keyboard: on into the
        message box."""
        if not text.isprintable() or not self.composer.edit.isEnabled():
            return
        self.focus_box()
        self.composer.edit.insertPlainText(text)

    # --- start and stop -------------------------------------------------------------------

    async def start(self) -> None:
        """List the models (starting the bundled one if nothing else answers)."""
        try:
            await self.services.refresh_models()
        except Exception:  # a provider's bug must not keep the window from working
            log.exception("listing models failed")
            self.show_status("Conch could not list the models; see Settings → Health.")
        self._reopen_current()
        self._update_meter()

    async def aclose(self) -> None:
        """Stop every turn (keeping what arrived) and close the conversations."""
        self._closing = True
        for stop in self._unsubscribe:
            stop()
        self._unsubscribe.clear()
        bridges = list(self._bridges.values())
        self._bridges.clear()
        await asyncio.gather(*(b.aclose(quitting=True) for b in bridges), return_exceptions=True)
        await asyncio.gather(*self._tasks.cancel(), return_exceptions=True)

    def closeEvent(self, event: QCloseEvent) -> None:
        self._save_state()
        if self._current:  # what the box holds waits in its chat for the next start
            self._drafts.keep(self._current, self.composer.draft())
        if self._settings_dialog is not None:
            with contextlib.suppress(RuntimeError):
                self._settings_dialog.close()
        super().closeEvent(event)
        self.closed.emit()

    def _line_up_composer(self) -> None:
        """The message box (and the notes above it) as wide as the messages' column and
        centred under it, however wide the window: not a box across a 2560-pixel screen."""
        holder = self.composer_holder
        layout = holder.layout()
        if layout is None or self._closing:
            return
        view = self.chat_view.viewport()
        if self.chat_stack.currentWidget() is self.chat_view and view.width() > 0:
            area = view.width()
            left_edge = view.mapTo(self, QPoint(0, 0)).x() - holder.mapTo(self, QPoint(0, 0)).x()
        else:  # the first screen: the column the messages will have, centred in the window
            area = holder.width() - self.chat_view.verticalScrollBar().sizeHint().width()
            left_edge = 0
        column = self.chat_view.delegate.column_width(max(0, area))
        left = max(COMPOSER_SIDE, left_edge + (area - column) // 2)
        right = max(COMPOSER_SIDE, holder.width() - left - column)
        margins = layout.contentsMargins()
        if (margins.left(), margins.right()) != (left, right):
            layout.setContentsMargins(left, margins.top(), right, margins.bottom())
        if self.chat_stack.currentWidget() is self.first_screen:
            # The first screen's words in the same column as the box below them.
            at = holder.mapTo(self, QPoint(left, 0))
            self.first_screen.line_up(self.first_screen.viewport().mapFrom(self, at).x(), column)

    def _restore_geometry(self) -> None:
        saved = self.services.settings.settings.window_geometry
        if saved:
            self.restoreGeometry(QByteArray.fromBase64(saved.encode("ascii")))
        # A size saved on a bigger screen (or a second monitor since unplugged) still fits.
        room = self.screen().availableGeometry()
        if self.width() > room.width() or self.height() > room.height():
            self.resize(first_size(room.size()))
        # Typing goes to the message box from the first key, never to "New chat".
        self.composer.edit.setFocus()

    def _save_state(self) -> None:
        geometry = bytes(self.saveGeometry().toBase64().data()).decode("ascii")
        try:
            self.services.settings.update(window_geometry=geometry, last_chat_id=self._current)
        except SettingsError as exc:
            log.warning("could not save the window state: %s", exc)

    def _open_first_chat(self) -> None:
        last = self.services.settings.settings.last_chat_id
        chat = self.services.store.get_chat(last) if last else None
        if chat is not None and chat.deleted_at is None:
            self.open_chat(chat.id)
            return
        chats = self.services.store.list_chats()
        if chats:
            self.open_chat(chats[0].id)
        else:
            self._show_nothing()

    # --- chats ----------------------------------------------------------------------------

    async def tidy_memories_now(self) -> None:
        """The palette's "Tidy up memories now": each run shows as the daily tidy-up's do, and
        the status line says what came of it (it said nothing at all before)."""
        self.show_status("Tidying up memories…")
        try:
            runs = await self.services.tidy_up_now()
        except Exception:  # the daily tidy-up tries again; the window must not go down
            log.exception("tidying up memories failed")
            self.show_status("Memories could not be tidied up now; Conch tries again later.")
            return
        for run in runs:
            if run.chat_id == self._current:
                self.chat_view.chat_model.add_run(run)
        self.show_status(tidied_words(runs))

    def show_learning(self, run: Any) -> None:
        """A learning run from outside a turn (the tidy-up): a card if its chat is open."""
        if getattr(run, "chat_id", None) == self._current:
            self.chat_view.chat_model.add_run(run)
        else:
            self.show_status("Memories were tidied up; see the Memories page.")

    @property
    def current_chat_id(self) -> str:
        return self._current

    def bridge(
        self, chat_id: str | None = None, *, quiet: bool = False
    ) -> ConversationBridge | None:
        """The chat's bridge, made on first use; None when no model can run it.

        ``quiet``: say nothing when there is no model yet (opening a chat before the models
        are listed); sending says why it cannot.
        """
        chat_id = chat_id or self._current
        if not chat_id:
            return None
        existing = self._bridges.get(chat_id)
        if existing is not None:
            return existing
        made: list[ConversationBridge] = []

        async def approve(ask: PermissionAsk) -> Approval:
            # A program's permission request: the chat's card asks the person.
            return await made[0].approve(ask) if made else Approval.DENY

        async def approve_tool(ask: ToolAsk) -> Approval:
            # A model's tool call: the same card asks the person.
            return await made[0].approve_tool(ask) if made else Approval.DENY

        try:
            conversation = self.services.conversation(
                chat_id, approve=approve, approve_tool=approve_tool
            )
        except Exception as exc:  # ServicesError: no model ready, or the chat is gone
            if not isinstance(exc, ServicesError | StorageError):  # else a bug: keep its trace
                log.warning("opening the chat's conversation failed", exc_info=True)
            if not quiet:
                self.show_status(str(exc))
            return None
        bridge = ConversationBridge(conversation, self)
        made.append(bridge)
        bridge.approval_changed.connect(lambda ask, b=bridge: self._approval_changed(b, ask))
        bridge.busy_changed.connect(lambda busy, b=bridge: self._busy_changed(b, busy))
        bridge.message_saved.connect(lambda _seq, role, b=bridge: self._saved(b, role))
        bridge.note.connect(lambda note: self.show_status(note.text))
        bridge.shortened.connect(lambda event, b=bridge: self._shortened(b, event))
        bridge.done.connect(self._turn_done)
        self._bridges[chat_id] = bridge
        # A summary cut off when the chat or the app closed is written now, not at the next turn.
        bridge.resume_summary()
        return bridge

    def open_chat(self, chat_id: str) -> bool:
        chat = self.services.store.get_chat(chat_id)
        if chat is None or chat.deleted_at is not None:
            return False
        if chat_id != self._current:
            self._swap_draft(chat_id)
        self._current = chat_id
        self.origin_link.show_for(self.services.store, chat_id)
        bridge = self.bridge(chat_id, quiet=True)
        self.chat_view.set_chat(chat_id, bridge)
        self.sidebar.set_current(chat_id)
        self.tools_button.show_chat(chat_id)
        self._show_title(chat.title)
        model = bridge.conversation.model if bridge is not None else None
        self.picker.select(model.key if model is not None else chat.model_key)
        self.composer.set_busy(bridge is not None and bridge.busy)
        self.approval_card.show_ask(bridge.pending_approval if bridge is not None else None)
        self.cut_notice.show_for(None)
        self._update_meter()
        self.chat_opened.emit(chat_id)
        return True

    def _swap_draft(self, chat_id: str) -> None:
        """Each chat keeps its own unsent words: what the box holds stays with the chat being
        left, and the chat opened gets its own back (or an empty box), so nothing is sent to a
        chat it was not written for. Words typed with no chat open go into the one opened."""
        if self._current:
            self._drafts.keep(self._current, self.composer.draft())
            self.composer.clear()
        kept = self._drafts.take(chat_id)
        if kept is not None and self.composer.draft() is None:
            self.composer.restore(kept)

    def new_chat(self, text: str = "") -> str:
        """Start a chat (on the default model) and focus its box, holding ``text``."""
        model = self.services.default_model()
        current = self.bridge() if self._current else None
        if current is not None and current.conversation.model.ready:
            model = current.conversation.model
        chat = self.services.store.create_chat(model_key=model.key if model else "")
        self.sidebar.clear_search()
        self.sidebar.refresh()
        self.open_chat(chat.id)
        self.composer.clear()
        if text:
            self.composer.set_text(text)
        self.composer.edit.setFocus()
        return chat.id

    def _open_copy(self, chat_id: str) -> None:
        """Show a chat just made from another (a fork): in the list, open, box focused."""
        self.sidebar.clear_search()
        self.sidebar.refresh()
        self.open_chat(chat_id)
        self.composer.edit.setFocus()

    def _show_nothing(self) -> None:
        self._current = ""
        self.origin_link.show_for(self.services.store, "")
        self.tools_button.show_chat("")
        self.approval_card.show_ask(None)
        self.chat_view.set_chat("", None)
        self._show_title("")
        self.composer.set_busy(False)
        self.composer.set_usage(None)

    def _chat_deleted(self, chat_id: str) -> None:
        showing = chat_id == self._current
        if showing:
            # Its unsent words go into the trash with it (Undo brings both back); the chat
            # opened next starts with its own.
            self._drafts.keep(chat_id, self.composer.draft())
            self.composer.clear()
            self._current = ""
        bridge = self._bridges.pop(chat_id, None)
        if bridge is not None:
            # Stop the turn (its partial answer is saved) and close the engine in the background.
            self._run(self._retire(bridge))
        if showing:
            chats = self.services.store.list_chats()
            if chats:
                self.open_chat(chats[0].id)
            else:
                self._show_nothing()

    async def _retire(self, bridge: ConversationBridge) -> None:
        try:
            await bridge.aclose()
        finally:
            bridge.deleteLater()

    def show_match(self, chat_id: str, seq: int) -> bool:
        """Open the chat at the message ``seq`` (a search hit) and light it up briefly."""
        if chat_id != self._current and not self.open_chat(chat_id):
            return False
        if not show_message(self.chat_view, self.match_highlight, seq):
            self.show_status("That message is no longer in the chat.")
            return False
        return True

    def _restored_from_trash(self, chat_id: str) -> None:
        self.sidebar.refresh()
        chat = self.services.store.get_chat(chat_id)
        if chat is not None:
            self.show_status(f"“{shown_name(chat.title)}” is back in your chats.")
        if not self._current:
            self.open_chat(chat_id)

    def _chat_renamed(self, chat_id: str, title: str) -> None:
        if chat_id == self._current:
            self._show_title(title)

    # --- sending --------------------------------------------------------------------------

    def submit(self, submission: Submission) -> None:
        """The composer sent something: a message, or ``/compact [focus]``."""
        if not self._current:
            self.new_chat()
        bridge = self.bridge()
        if bridge is None:
            self.composer.restore(submission)
            return
        if submission.is_compact:
            accepted = bridge.compact(submission.compact_focus or "")
            if accepted:
                self.show_status("Summarising the start of this chat…")
        else:
            accepted = bridge.send(
                submission.text, submission.pictures, submission.attachments, submission.pasted
            )
        if accepted:
            self._drafts.forget(self._current)  # sent: no longer waiting in the chat
        else:
            self.composer.restore(submission)

    def stop(self) -> None:
        bridge = self._bridges.get(self._current)
        if bridge is not None:
            bridge.stop()

    def compact_current(self, focus: str = "") -> bool:
        """Summarise the start of the current chat now (the palette and ``/compact``)."""
        bridge = self.bridge()
        if bridge is None:
            return False
        accepted = bridge.compact(focus)
        if accepted:
            self.show_status("Summarising the start of this chat…")
        return accepted

    def _busy_changed(self, bridge: ConversationBridge, busy: bool) -> None:
        if bridge.chat_id == self._current:
            self.composer.set_busy(busy)
            if not busy:
                self._update_meter()
        if not busy:
            self.sidebar.refresh()
            model = bridge.conversation.model
            listed = self.services.catalogue.find(model.key)
            if model.local and listed is not None and not listed.loaded and not self._closing:
                # It has just answered, so its server holds it now: the picker should say so.
                self._run(self.services.answered(model))

    def _turn_done(self, reason: str) -> None:
        if reason == "error":
            self.show_status("Something went wrong while saving the chat; see the log.")

    def _saved(self, bridge: ConversationBridge, role: str) -> None:
        if role == "user":
            self.sidebar.refresh()  # the chat moved to the top and may have got its title
            if bridge.chat_id == self._current:
                chat = self.services.store.get_chat(bridge.chat_id)
                if chat is not None:
                    self._show_title(chat.title)

    # --- models ---------------------------------------------------------------------------

    def switch_model(self, model: ModelInfo) -> None:
        """Use ``model`` for the current chat from the next message on."""
        if not self._current:
            return
        bridge = self._bridges.get(self._current)
        if bridge is not None and _other_engine(bridge.conversation.model, model):
            self._change_engine(bridge, model)
            return
        bridge = self.bridge()
        if bridge is None:
            self.services.store.set_model(self._current, model.key)
            bridge = self.bridge()
        if bridge is not None:
            bridge.conversation.switch_model(model)
        self.picker.select(model.key)
        self._update_meter()
        self._update_first_screen()

    def start_with(self, model: ModelInfo) -> None:
        """The first screen's "Use <model>": this empty chat (or a new one) on ``model``."""
        if not self._current or self.chat_view.chat_model.rowCount() > 0:
            self.new_chat()
        self.switch_model(model)
        self.focus_box()

    def _next_model(self) -> ModelInfo | None:
        """The model that answers the next message typed in the box now."""
        bridge = self._bridges.get(self._current)
        if bridge is not None:
            return bridge.conversation.model
        chat = self.services.store.get_chat(self._current) if self._current else None
        if chat is not None:
            return self.services.model_for(chat)
        return self.services.default_model()

    def _update_first_screen(self, *_args: object) -> None:
        """The first screen in place of an empty chat (drawn again from what is found now);
        the messages as soon as there is one."""
        if self._closing:
            return
        # A chat whose last message was just deleted stays in view while Undo is offered.
        if self.chat_view.chat_model.rowCount() == 0 and not self.chat_view.undo_bar.offered:
            self.first_screen.show_for(self.services, self._next_model())
            self.chat_stack.setCurrentWidget(self.first_screen)
        else:
            self.chat_stack.setCurrentWidget(self.chat_view)

    def _change_engine(self, old: ConversationBridge, model: ModelInfo) -> None:
        """To or from a program: a new conversation on the new engine (the old one closes);
        the chat's messages and summary carry over as what the new engine is handed."""
        if old.busy:
            self.picker.select(old.conversation.model.key)
            self.show_status("Wait for the answer to finish, or stop it first.")
            return
        chat_id = old.chat_id
        self._bridges.pop(chat_id, None)
        self._run(self._retire(old))
        self.services.store.set_model(chat_id, model.key)
        bridge = self.bridge(chat_id)
        self.chat_view.set_chat(chat_id, bridge)  # the divider as the store now has it
        self.approval_card.show_ask(None)
        self.picker.select(model.key)
        self._update_meter()

    def _approval_changed(self, bridge: ConversationBridge, ask: PermissionAsk | None) -> None:
        if bridge.chat_id == self._current:
            self.approval_card.show_ask(ask)
        elif ask is not None:
            self.show_status(f"{ask.program} asks for permission in another chat.")

    def _approval_answered(self, choice: str) -> None:
        bridge = self._bridges.get(self._current)
        if bridge is not None:
            bridge.answer_approval(choice)

    def _settings_changed(self, settings: Any) -> None:
        # A program's path set, or an agent added, in Settings → Programs: list them again.
        programs = (settings.program_paths, settings.acp_agents)
        if programs != self._program_paths and not self._closing:
            self._program_paths = programs
            self._models_changed(self.services.catalogue.models())

    def _picker_models(self, models: list[ModelInfo]) -> list[ModelInfo]:
        return [*models, *self.services.programs()]

    def switch_model_dialog(self) -> None:
        """The palette's "Switch model…": open the picker's list."""
        self.picker.combo.setFocus()
        self.picker.combo.showPopup()

    def _models_changed(self, models: list[ModelInfo]) -> None:
        if self._closing:
            return
        # A chat opened before the list arrived runs on a stand-in: give it the real model.
        for each in self._bridges.values():
            listed = self.services.catalogue.find(each.conversation.model.key)
            if listed is not None and listed != each.conversation.model and not each.busy:
                each.conversation.switch_model(listed)
        if self._current and self._current not in self._bridges:
            QTimer.singleShot(0, self, self._reopen_current)
        self.chat_view.refresh_names()
        bridge = self._bridges.get(self._current)
        key = bridge.conversation.model.key if bridge is not None else ""
        if not key and self._current:
            chat = self.services.store.get_chat(self._current)
            key = chat.model_key if chat else ""
        self.picker.set_models(self._picker_models(models), key)
        # The list may carry a new window for the chat's model (reloaded with 16K, or the real
        # model in place of a stand-in): the meter's share is of that window, so read it now.
        self._update_meter()
        self._update_first_screen()  # what was found, and who answers now

    def _runtime_status(self, text: str) -> None:
        if not self._closing:
            self.picker.set_starting(text or None)
            self._update_first_screen()

    def _provider_label(self, provider: str) -> str:
        adapter = self.services.catalogue.adapter(provider)
        label = getattr(adapter, "label", "") if adapter is not None else ""
        return str(label) if label else provider_name(provider)

    def _model_name(self, model_key: str) -> str:
        found = self.services.catalogue.find(model_key) if model_key else None
        if found is not None:
            return found.name
        provider, _, key = model_key.partition("/")
        listed = program(key) if provider == PROGRAMS else None
        if listed is not None:
            return listed.label
        return model_key.split("/", 1)[-1] or "Assistant"

    def _update_meter(self) -> None:
        bridge = self._bridges.get(self._current)
        usage = None
        window = 0
        if bridge is not None:
            window = bridge.conversation.model.context
            try:
                usage = bridge.conversation.context_usage()
            except Exception:  # the meter is a hint; never let it break the window
                log.exception("context usage failed")
        self.composer.set_usage(usage, window)

    # --- a problem card's next step -------------------------------------------------------

    def take_step(self, step: NextStep, failed_seq: int) -> None:
        """Carry out what a problem card offered for the answer at ``failed_seq``."""
        asked = self.services.store.asked_before(self._current, failed_seq)
        if step.kind == "switch-model" and step.model is not None:
            model = self.services.catalogue.find(step.model.key) or step.model
            self.switch_model(model)
            self._resend(asked)
        elif step.kind == "new-chat":
            self.new_chat(step.text or (asked.text if asked else ""))
        elif step.kind in ("retry", "wait"):
            self._resend(asked)
        elif step.kind == "open-settings":
            self.show_settings(step.text or "providers")  # text: the page, when one is named
        elif step.kind == "rebuild-runtime":
            self.show_settings("health")  # the command, the runtime's log, "Start again"
        if step.kind not in ("open-settings", "rebuild-runtime"):
            self.focus_box()  # the card's button is gone (or going): typing goes on

    def _resend(self, message: StoredMessage | None) -> None:
        # In place: the same message goes again; the chat does not show the question twice.
        bridge = self.bridge()
        if message is None or bridge is None:
            return
        if not bridge.resend(message.seq):
            self.show_status("Wait for the answer to finish, or stop it first.")

    # --- palette, settings, export (ui/palette.py and ui/settings/settings_dialog.py call these) --

    def palette_commands(self) -> list[Any]:
        from ui.palette import Command

        keys = window_shortcuts()
        # Offered while the chat ends with an answer the person stopped.
        go_on = Command(
            "Continue the stopped answer",
            self.chat_view.continue_stopped,
            keywords=("go on", "resume", "more"),
        )
        return [
            *([go_on] if self.chat_view.continuable_row() >= 0 else []),
            Command(
                "Summarise the start of this chat",
                lambda: self.compact_current(""),
                keywords=("compact", "fold", "summary", "memory"),
            ),
            Command("New chat", self.new_chat, shortcut=keys["new-chat"]),
            Command("Switch model…", self.switch_model_dialog, keywords=("model",)),
            Command(
                "Chat settings…",
                self.show_chat_settings,
                keywords=("system prompt", "temperature", "answer length"),
            ),
            Command(
                "Tidy up memories now",
                self.tidy_memories_now,
                keywords=("learn", "memories"),
            ),
            Command("Memories", lambda: self.show_settings("memories"), keywords=("remember",)),
            Command("Settings", lambda: self.show_settings("providers"), shortcut=keys["settings"]),
            Command(
                "Keyboard shortcuts",
                self.show_shortcuts,
                shortcut=keys["shortcuts"],
                keywords=("keys", "help"),
            ),
            Command("Health", lambda: self.show_settings("health"), keywords=("problems",)),
            Command("Export chat as Markdown", self.export_dialog, keywords=("save", "markdown")),
            Command(
                "Export chat as JSON",
                lambda: self.export_dialog(kind="json"),
                keywords=("save", "json"),
            ),
            Command(
                "Import chats…",
                self.import_dialog,
                keywords=("chatgpt", "open webui", "json"),
            ),
            *(
                Command(
                    f"{c.text} — {c.description}" if c.description else c.text,
                    functools.partial(self._type_command, c.text),
                    keywords=(c.name,),
                )
                for c in self.slash_commands()
            ),
        ]

    def slash_commands(self) -> tuple[SlashCommand, ...]:
        """The current chat's program's own slash commands (the composer and the palette)."""
        bridge = self._bridges.get(self._current) if self._current else None
        return slash_commands_of(bridge.conversation.engine) if bridge is not None else ()

    def _type_command(self, text: str) -> None:
        """A program's command from the palette: put in the box, to add to and send."""
        self.composer.set_text(f"{text} ")
        self.composer.edit.setFocus()

    def show_shortcuts(self) -> None:
        """The sheet of every keyboard shortcut (Ctrl+/)."""
        if self._shortcuts_sheet is None:
            self._shortcuts_sheet = ShortcutsSheet(self)
        self._shortcuts_sheet.show()
        self._shortcuts_sheet.raise_()
        self._shortcuts_sheet.activateWindow()

    def show_chat_settings(self) -> None:
        """The current chat's settings (non-modal): model, system prompt, temperature and
        answer length."""
        if not self._current:
            self.show_status("Open a chat first.")
            return
        if self._chat_settings is None:
            panel = ChatSettingsPanel(self.services.store, self.services.own_prompt, parent=self)
            panel.saved.connect(self._chat_settings_saved)
            panel.model_chosen.connect(self._chat_settings_model)
            panel.follow(self.picker)
            self._chat_settings = panel
        bridge = self._bridges.get(self._current)
        chat = self.services.store.get_chat(self._current)
        key = bridge.conversation.model.key if bridge is not None else ""
        if not key and chat is not None:
            key = chat.model_key
        models = self._picker_models(self.services.catalogue.models())
        self._chat_settings.show_chat(self._current, models, key)

    def _chat_settings_saved(self, chat_id: str) -> None:
        if chat_id == self._current:
            self._update_meter()  # the system prompt and answer length take room
        self.show_status("Chat settings saved; they apply from the next message.")

    def _chat_settings_model(self, chat_id: str, model: ModelInfo) -> None:
        if chat_id != self._current:
            self.open_chat(chat_id)
        self.switch_model(model)

    def open_palette(self) -> None:
        if self._palette is None:
            if self._palette_factory is not None:
                self._palette = self._palette_factory(self)
            else:
                from ui.palette import CommandPalette

                self._palette = CommandPalette(self)
        self._palette.set_commands(self.palette_commands())
        self._palette.popup(self)

    def show_settings(self, page: str = "providers") -> None:
        """Open the (non-modal) settings dialog on ``page``."""
        if self._settings_dialog is None:
            if self._settings_factory is not None:
                self._settings_dialog = self._settings_factory(self)
            else:
                from ui.settings.settings_dialog import SettingsDialog

                dialog = SettingsDialog.for_services(self.services, self.theme, parent=self)
                dialog.providers_changed.connect(
                    lambda _name: self._run(self.services.reconfigure())
                )
                self._settings_dialog = dialog
            changed = getattr(self._settings_dialog, "memories_changed", None)
            if changed is not None:
                # A memory edited on the Memories page: the chat's card shows the new words.
                changed.connect(self.chat_view.refresh_memories)
            trash = getattr(self._settings_dialog, "trash_page", None)
            if trash is not None:
                trash.chat_restored.connect(self._restored_from_trash)
                self.sidebar.chat_deleted.connect(lambda _id: trash.refresh())
        self._settings_dialog.show_page(page)
        self._settings_dialog.show()
        self._settings_dialog.raise_()

    # --- export and import (app/export.py, app/importers.py) -----------------------------

    def export_dialog(self, chat_id: str = "", kind: ExportKind = "markdown") -> None:
        """Ask where to save a chat (the current one by default), offering a file name made
        of its title and today's date."""
        chat = self.services.store.get_chat(chat_id or self._current)
        if chat is None:
            self.show_status("Open a chat first, then export it.")
            return
        words = "Markdown" if kind == "markdown" else "JSON"
        # open(), not exec(): a modal loop would stall the asyncio loop's tasks.
        dialog = QFileDialog(self, f"Export chat as {words}")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilter(f"{words} (*{SUFFIXES[kind]})")
        dialog.setDefaultSuffix(SUFFIXES[kind].lstrip("."))
        dialog.setDirectory(_documents())
        dialog.selectFile(suggested_name(chat.title, kind=kind))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda path: self.export_chat(chat.id, Path(path)))
        self._open_file_dialog(dialog)

    def _open_file_dialog(self, dialog: QFileDialog) -> None:
        self._file_dialog = dialog
        dialog.destroyed.connect(self._file_dialog_gone)
        dialog.open()

    def _file_dialog_gone(self) -> None:
        self._file_dialog = None

    def export_chat(self, chat_id: str, path: Path) -> Path | None:
        """Write the chat to ``path`` (JSON for a ".json" name, else Markdown)."""
        try:
            saved = export_chat(self.services.store, chat_id, path, model_name=self._model_name)
        except ExportError as exc:
            self.show_status(str(exc))
            return None
        self.show_status(f"Saved to {shown_name(saved.name)}")
        return saved

    def export_current_markdown(self, path: Path) -> Path | None:
        """Write the current chat, every message, as Markdown to ``path``."""
        return self.export_chat(self._current, path) if self._current else None

    def import_dialog(self) -> None:
        """Ask for a file of chats exported by Conch, ChatGPT or Open WebUI, and import it."""
        dialog = QFileDialog(self, "Import chats")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setNameFilter("Chat exports (*.json);;All files (*)")
        dialog.setDirectory(_documents())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(lambda path: self._run(self.import_file(Path(path))))
        self._open_file_dialog(dialog)

    async def import_file(self, path: Path) -> list[str]:
        """Import the chats in ``path`` (read and written off the window's thread) and open
        the first; a file that cannot be imported says why in the status line."""
        self.show_status(f"Reading {shown_name(path.name)}…")
        store, data_dir = self.services.store, self.services.data_dir
        loop = asyncio.get_running_loop()

        def saved(done: int, total: int) -> None:
            # From the worker thread: the status line is the window's, so it is told there.
            said = f"Importing {path.name}: {done:,} of {total:,} messages…"
            loop.call_soon_threadsafe(self.show_status, said)

        def work() -> tuple[Parsed, list[str]]:
            parsed = read_file(path)
            return parsed, save(store, data_dir, parsed.chats, saved)

        try:
            parsed, ids = await asyncio.to_thread(work)
        except ImportFailedError as exc:
            self.show_status(str(exc))
            return []
        if self._closing:
            return ids
        self.sidebar.refresh()
        self.open_chat(ids[0])
        n = len(ids)
        self.show_status(
            f"Imported {n} chat{'s' if n != 1 else ''} from {SOURCE_NAMES[parsed.source]}."
        )
        await self._fold_imported(ids)
        return ids

    async def _fold_imported(self, ids: list[str]) -> None:
        """Fold each imported chat too long for its model now, its summary written in the
        background, so its first reply waits on nothing (the divider says it is being
        written)."""
        services = self.services
        long = await asyncio.to_thread(chats_to_fold, services, ids)
        for chat_id in long:
            if self._closing:
                return
            bridge = self.bridge(chat_id, quiet=True)
            if bridge is not None:
                bridge.fold_to_fit()

    # --- small helpers --------------------------------------------------------------------

    def _shortened(self, bridge: ConversationBridge, event: Shortened) -> None:
        if bridge.chat_id == self._current:
            self.cut_notice.show_for(event)

    def _show_title(self, title: str) -> None:
        """Show the open chat's ``title`` above it and in the window's title bar ("" for none);
        ``--mock`` says there that it is a demo, so nobody takes its scripted answers for a
        model's."""
        self.title_label.setText(shown_name(title))
        app = "Conch demo (scripted answers)" if self.services.mock else "Conch"
        self.setWindowTitle(window_title(title, app) if title else app)

    def show_status(self, text: str) -> None:
        self.statusBar().showMessage(text, STATUS_MS)

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self._tasks.start(coroutine)

    def _reopen_current(self) -> None:
        # The chat could not get a model before; now that models are listed it may.
        if not self._current or self._current in self._bridges or self._closing:
            return
        bridge = self.bridge(self._current, quiet=True)
        if bridge is None:
            return
        self.chat_view.follow(bridge)
        self.picker.select(bridge.conversation.model.key)
        self._update_meter()


def _documents() -> str:
    """Where export and import dialogs start: the person's documents folder, else home."""
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return docs if docs and Path(docs).is_dir() else str(Path.home())


def _other_engine(old: ModelInfo, new: ModelInfo) -> bool:
    """Whether ``new`` needs another engine: a program keeps (or is handed) the chat itself,
    so moving to, from or between programs builds a new conversation."""
    programs = (old.provider == PROGRAMS, new.provider == PROGRAMS)
    return any(programs) and old.key != new.key
