"""Settings: Providers, Memory, Appearance, Programs and Health, one page each (plus the
Memories list).

The dialog is non-modal (``show()``), so it never blocks the event loop. API keys go to the
secret store (the system keyring) the moment they are entered and are never put back into a
field, written to the settings file or shown in a message. "Test" lists a provider's models
through its real adapter, as a task: a provider that fails or never answers shows what went
wrong in words, and closing the dialog cancels every test still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QPointF, Qt, Signal
from PySide6.QtGui import QCloseEvent, QHideEvent, QHoverEvent
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.health import HealthLog
from app.memories import MemoryBook
from app.providers_config import ADDRESS_FIELDS, NotSetUpError, try_provider
from app.secrets import SecretStore
from app.settings import Settings, SettingsError, SettingsStore
from app.tools import ToolSettings
from engines.base import HUMAN_TEXT, ModelInfo
from engines.local.bundled import CrashBook
from engines.providers.base import ProviderError
from engines.providers.errors import plain_os_error
from engines.providers.registry import COMPANIES, LOCAL_SERVERS, PROVIDERS
from ui._widgets import form_card, hint_label, list_card, page_layout
from ui.chat.chat_settings import DefaultPromptPage
from ui.icons import ON_ACCENT, icon
from ui.plain import PlainLabel
from ui.settings.health_page import HealthPage, StartLocal
from ui.settings.memories_page import ChatTitle, MemoriesPage
from ui.settings.programs_page import ProgramsPage
from ui.settings.settings_sync import (
    REMEMBER_HINT,
    listen_to_settings,
    save_remember,
    set_checked_quietly,
)
from ui.settings.tools_page import ToolsPage
from ui.settings.trash_page import TrashPage
from ui.theme import ThemeManager, set_style_property

if TYPE_CHECKING:
    from app.services import AppServices

log = logging.getLogger("conch.ui.settings")

TEST_TIMEOUT = 20.0  # seconds a provider may take to list its models before the test gives up

# (what tests a provider) name, address typed (or ""), key typed (or None) -> its models
ProviderTester = Callable[[str, str, str | None], Awaitable[Sequence[ModelInfo]]]

PAGES: tuple[tuple[str, str, str], ...] = (
    ("providers", "Providers", "providers"),
    ("chat", "Chat", "edit"),
    ("memory", "Memory", "memory"),
    ("appearance", "Appearance", "appearance"),
    ("programs", "Programs", "command"),
    ("tools", "Tools", "plug"),
    ("trash", "Trash", "trash"),
    ("health", "Health", "health"),
)
MEMORIES_PAGE = "memories"  # opened from the Memory page; the nav keeps "Memory" selected


APPEARANCE: tuple[tuple[str, str, str, str], ...] = (
    ("system", "Follow the system", "monitor", "Light or dark, as your computer is set."),
    ("light", "Light", "sun", "Always light."),
    ("dark", "Dark", "moon", "Always dark."),
)


def describe_models(models: Sequence[ModelInfo]) -> str:
    n = len(models)
    if n == 0:
        return "Reached it, but it lists no models."
    found = f"Found {n} model{'s' if n != 1 else ''}"
    ready = sum(1 for m in models if m.ready)
    if ready == n:
        return found
    return f"{found}, {ready} ready to use"


def describe_failure(exc: BaseException, *, timeout: float, secret: str | None = None) -> str:
    """A test failure in words a person understands; never contains the key."""
    if isinstance(exc, NotSetUpError):
        text = str(exc)
    elif isinstance(exc, TimeoutError):
        text = f"No answer within {timeout:g} seconds. Is the server busy or the address wrong?"
    elif isinstance(exc, ProviderError):
        text = HUMAN_TEXT.get(exc.kind, "The test failed.")
        detail = " ".join(exc.detail.split())
        if detail:
            text = f"{text} {detail[:160].rstrip()}{'…' if len(detail) > 160 else ''}"
    elif isinstance(exc, OSError):
        words = plain_os_error(str(exc))
        text = f"The test failed: {words}" + ("" if words.endswith(("?", ".")) else ".")
    else:
        text = f"The test failed ({type(exc).__name__}: {exc})."
    if secret:
        text = text.replace(secret, "•••")
    return text


def valid_address(text: str) -> bool:
    text = text.strip()
    if not text:
        return True  # empty: the usual address
    if any(ch.isspace() for ch in text):
        return False
    return text.startswith(("http://", "https://")) or "://" not in text


def _label(text: str, object_name: str = "", role: str = "") -> QLabel:
    label = PlainLabel(text)
    if object_name:
        label.setObjectName(object_name)
    if role:
        label.setProperty("role", role)
    label.setWordWrap(True)
    return label


class ProviderRow(QFrame):
    """One provider: its address or key field, a Test button and the test's outcome."""

    def __init__(self, name: str, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.setObjectName("ProviderRow")
        self.title = PlainLabel(label)
        self.title.setObjectName("ProviderName")
        self.title.setMinimumWidth(120)
        self.field = QLineEdit()
        self.field.setObjectName(f"field-{name}")
        self.forget_button = QPushButton("Forget")
        self.forget_button.setProperty("variant", "ghost")
        self.forget_button.setIcon(icon("trash"))
        self.forget_button.setToolTip("Remove this key from the keyring")
        self.forget_button.hide()
        self.test_button = QPushButton("Test")
        self.test_button.setProperty("variant", "secondary")
        self.test_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.result = PlainLabel()
        self.result.setObjectName("TestResult")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.hide()

        grid = QGridLayout(self)
        grid.setContentsMargins(0, 12, 0, 12)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.field, 0, 1)
        grid.addWidget(self.forget_button, 0, 2)
        grid.addWidget(self.test_button, 0, 3)
        grid.addWidget(self.result, 1, 1, 1, 3)
        grid.setColumnStretch(1, 1)

    def show_result(self, text: str, state: str) -> None:
        """``state`` is "busy", "ok" or "error" (the stylesheet colours each)."""
        set_style_property(self.result, "state", state)
        self.result.setText(text)
        self.result.setVisible(bool(text))


class SettingsDialog(QDialog):
    """Conch's settings, non-modal. Open a page with ``show_page("health")``.

    Signals:
        providers_changed(str): an address or key changed for this provider (refresh models).
        theme_chosen(str): the person picked "system", "light" or "dark".
        memories_changed(): a memory was edited, kept, discarded, deleted or added here.
    """

    providers_changed = Signal(str)
    theme_chosen = Signal(str)
    memories_changed = Signal()

    def __init__(
        self,
        *,
        settings: SettingsStore,
        secrets: SecretStore,
        memories: MemoryBook,
        health: HealthLog,
        theme: ThemeManager | None = None,
        chat_title: ChatTitle | None = None,
        tester: ProviderTester | None = None,
        test_timeout: float = TEST_TIMEOUT,
        crashes: CrashBook | None = None,
        start_local: StartLocal | None = None,
        tools: ToolSettings | None = None,
        trash: TrashPage | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("SettingsDialog")
        self.setWindowTitle("Settings")
        self.setModal(False)
        self.resize(820, 600)
        self._settings = settings
        self._secrets = secrets
        self._theme = theme
        self._tester = tester or self._default_tester
        self.test_timeout = test_timeout
        self._tests: dict[str, asyncio.Task[None]] = {}
        self._focus_back: set[str] = set()  # rows whose Test gets the focus back when done
        self.rows: dict[str, ProviderRow] = {}

        self.nav = QListWidget()
        self.nav.setObjectName("SettingsNav")
        self.nav.setFixedWidth(200)
        self.stack = QStackedWidget()
        self.stack.setObjectName("SettingsStack")
        self._page_index: dict[str, int] = {}

        self.memories_page = MemoriesPage(memories, settings, chat_title)
        self.memories_page.memories_changed.connect(self.memories_changed)
        self.health_page = HealthPage(health, crashes=crashes, start_local=start_local)
        self.chat_page = DefaultPromptPage(settings)  # the person's own system prompt
        self.programs_page = ProgramsPage(settings, secrets)
        self.tools_page = ToolsPage(
            tools or ToolSettings(settings, secrets), keyring_warning=secrets.warning
        )
        pages: dict[str, QWidget] = {
            "providers": self._providers_page(),
            "chat": self.chat_page,
            "memory": self._memory_page(),
            "appearance": self._appearance_page(),
            "programs": self._scrolling(self.programs_page),
            "tools": self._scrolling(self.tools_page),
            "health": self.health_page,
        }
        self.trash_page = trash  # the deleted chats, when the dialog has a chat log
        if trash is not None:
            pages["trash"] = trash
        for key, label, icon_name in PAGES:
            if key not in pages:
                continue
            item = QListWidgetItem(icon(icon_name), label)
            item.setData(Qt.ItemDataRole.UserRole, key)
            self.nav.addItem(item)
            self._page_index[key] = self.stack.addWidget(pages[key])
        self._page_index[MEMORIES_PAGE] = self.stack.addWidget(self.memories_page)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.nav)
        layout.addWidget(self.stack, 1)

        self.nav.currentRowChanged.connect(self._nav_changed)
        self._stop_listening = listen_to_settings(settings, self, SettingsDialog._settings_changed)
        self.destroyed.connect(self._stop_listening)
        self.nav.setCurrentRow(0)

    @classmethod
    def for_services(
        cls,
        services: AppServices,
        theme: ThemeManager | None = None,
        parent: QWidget | None = None,
    ) -> SettingsDialog:
        """The dialog wired to the app's services (the main window's way in)."""

        def chat_title(chat_id: str) -> str | None:
            chat = services.store.get_chat(chat_id)
            return chat.title if chat is not None else None

        return cls(
            settings=services.settings,
            secrets=services.secrets,
            memories=services.memories,
            health=services.health,
            theme=theme,
            chat_title=chat_title,
            crashes=None if services.mock else CrashBook(services.data_dir),
            start_local=services.start_bundled,
            tester=services.test_provider,
            tools=services.tools,
            trash=TrashPage(services.store, services.data_dir),
            parent=parent,
        )

    # --- pages ------------------------------------------------------------------------------

    def show_page(self, page: str) -> None:
        """Show one page: "providers", "memory", "memories", "appearance", "programs"
        or "health"."""
        key = page.lower()
        if key == MEMORIES_PAGE:
            self._select_nav("memory")
            self.stack.setCurrentIndex(self._page_index[MEMORIES_PAGE])
            return
        if key not in self._page_index:
            key = "providers"
        self._select_nav(key)

    def current_page(self) -> str:
        index = self.stack.currentIndex()
        return next((k for k, i in self._page_index.items() if i == index), "providers")

    def _select_nav(self, key: str) -> None:
        for row in range(self.nav.count()):
            item = self.nav.item(row)
            if item.data(Qt.ItemDataRole.UserRole) == key:
                if self.nav.currentRow() == row:
                    self._nav_changed(row)
                else:
                    self.nav.setCurrentRow(row)
                return

    def _nav_changed(self, row: int) -> None:
        item: QListWidgetItem | None = self.nav.item(row)  # None for row -1 (nothing selected)
        if item is None:
            return
        self.stack.setCurrentIndex(self._page_index[item.data(Qt.ItemDataRole.UserRole)])

    def _page(self, title: str, hint: str) -> tuple[QWidget, QVBoxLayout]:
        content = QWidget()
        return content, page_layout(content, title, hint)

    def _scrolling(self, content: QWidget) -> QScrollArea:
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        return scroll

    def _providers_page(self) -> QWidget:
        content, layout = self._page(
            "Providers",
            "Servers on this computer are found at their usual address; change it only if "
            "yours runs elsewhere. A model company is used once you add its API key.",
        )
        self.session_warning = _label(self._secrets.warning, "SessionWarning")
        self.session_warning.setVisible(bool(self._secrets.warning))
        layout.addWidget(self.session_warning)

        layout.addSpacing(4)
        layout.addWidget(_label("On this computer", role="heading"))
        card, inner = list_card()
        current = self._settings.settings
        for n, name in enumerate(LOCAL_SERVERS):
            server = PROVIDERS[name]
            row = ProviderRow(name, server.label)
            row.setProperty("first", n == 0)
            row.field.setPlaceholderText(server.server_address)
            row.field.setText(str(getattr(current, ADDRESS_FIELDS[name])))
            row.field.editingFinished.connect(lambda n=name: self._save_address(n))
            row.test_button.clicked.connect(lambda _c=False, n=name: self.test(n))
            self.rows[name] = row
            inner.addWidget(row)
        layout.addWidget(card)

        layout.addSpacing(4)
        layout.addWidget(_label("Model companies", role="heading"))
        where = "for this session only" if self._secrets.warning else "in your system keyring"
        layout.addWidget(hint_label(f"Keys are kept {where}, never in a file."))
        card, inner = list_card()
        for n, name in enumerate(COMPANIES):
            row = ProviderRow(name, PROVIDERS[name].label)
            row.setProperty("first", n == 0)
            row.field.setEchoMode(QLineEdit.EchoMode.Password)
            row.field.editingFinished.connect(lambda n=name: self._save_key(n))
            row.test_button.clicked.connect(lambda _c=False, n=name: self.test(n))
            row.forget_button.clicked.connect(lambda _c=False, n=name: self.forget_key(n))
            self.rows[name] = row
            self._show_key_state(name)
            inner.addWidget(row)
        layout.addWidget(card)
        layout.addStretch(1)
        return self._scrolling(content)

    def _memory_page(self) -> QWidget:
        content, layout = self._page(
            "Memory",
            "When a long chat is summarised, Conch first notes what you told it about "
            "yourself, so nothing important is forgotten. You can read, edit and undo every "
            "memory.",
        )
        card, inner = list_card()
        inner.setContentsMargins(16, 16, 16, 16)
        inner.setSpacing(8)
        self.remember = QCheckBox("Remember things automatically")
        self.remember.setChecked(self._settings.settings.remember_automatically)
        inner.addWidget(self.remember)
        inner.addWidget(hint_label(REMEMBER_HINT))
        self.memory_error = _label("", "TestResult")
        self.memory_error.setProperty("state", "error")
        self.memory_error.hide()
        inner.addWidget(self.memory_error)
        layout.addWidget(card)
        self.open_memories_button = QPushButton("Open memories…")
        self.open_memories_button.setProperty("variant", "primary")
        self.open_memories_button.setIcon(icon("memory", role=ON_ACCENT))
        self.open_memories_button.clicked.connect(lambda: self.show_page(MEMORIES_PAGE))
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_memories_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addStretch(1)
        self.remember.toggled.connect(self._set_remember)
        return content

    def _appearance_page(self) -> QWidget:
        content, layout = self._page("Appearance", "Changes show at once.")
        card, inner = form_card(QVBoxLayout)
        inner.setSpacing(4)
        self.theme_buttons: dict[str, QRadioButton] = {}
        self._theme_group = QButtonGroup(self)
        chosen = self._settings.settings.theme
        for key, label, icon_name, hint in APPEARANCE:
            button = QRadioButton(label)
            button.setIcon(icon(icon_name))
            button.setChecked(key == chosen)
            self._theme_group.addButton(button)
            self.theme_buttons[key] = button
            row = QVBoxLayout()
            row.setSpacing(0)
            row.setContentsMargins(0, 8, 0, 8)
            row.addWidget(button)
            note = _label(hint, role="caption")
            note.setIndent(28)
            row.addWidget(note)
            inner.addLayout(row)
            button.toggled.connect(lambda on, k=key: self._theme_toggled(k, on))
        self.appearance_error = _label("", "TestResult")
        self.appearance_error.setProperty("state", "error")
        self.appearance_error.hide()
        layout.addWidget(card)
        layout.addWidget(self.appearance_error)
        layout.addStretch(1)
        return content

    # --- providers --------------------------------------------------------------------------

    def _save_address(self, name: str) -> None:
        row = self.rows[name]
        address = row.field.text().strip()
        if not valid_address(address):
            row.show_result("An address looks like http://127.0.0.1:11434.", "error")
            return
        field = ADDRESS_FIELDS[name]
        if getattr(self._settings.settings, field) == address:
            return
        try:
            self._settings.update(**{field: address})
        except SettingsError as exc:
            row.show_result(str(exc), "error")
            return
        row.show_result("", "busy")
        self.providers_changed.emit(name)

    def _save_key(self, name: str) -> None:
        row = self.rows[name]
        key = row.field.text().strip()
        if not key:
            return
        try:
            self._secrets.set(name, key)
        except Exception as exc:  # a keyring that fails must not take the dialog down
            log.warning("saving the key for %s failed (%s)", name, type(exc).__name__)
            row.show_result(f"The key could not be saved ({type(exc).__name__}).", "error")
            return
        row.field.clear()
        self._show_key_state(name)
        row.show_result("", "busy")
        self.providers_changed.emit(name)

    def forget_key(self, name: str) -> None:
        row = self.rows[name]
        try:
            self._secrets.delete(name)
        except Exception as exc:  # a keyring that fails must not take the dialog down
            log.warning("removing the key for %s failed (%s)", name, type(exc).__name__)
            row.show_result(f"The key could not be removed ({type(exc).__name__}).", "error")
            return
        row.field.clear()
        self._show_key_state(name)
        row.show_result("Key removed.", "ok")
        self.providers_changed.emit(name)

    def _show_key_state(self, name: str) -> None:
        row = self.rows[name]
        try:
            has_key = bool(self._secrets.get(name))
        except Exception as exc:  # shown as no key: typing one in saves it again
            log.warning("reading the key for %s failed (%s)", name, type(exc).__name__)
            has_key = False
        if has_key:
            where = "this session" if self._secrets.warning else "your keyring"
            row.field.setPlaceholderText("Saved — type to replace")
            row.field.setToolTip(f"The key is saved in {where}.")
        else:
            row.field.setPlaceholderText("Paste an API key")
            row.field.setToolTip("")
        row.forget_button.setVisible(has_key)

    def test(self, name: str) -> asyncio.Task[None] | None:
        """Start testing a provider (cancelling an earlier test of it). Returns the task."""
        row = self.rows[name]
        if name in COMPANIES:
            self._save_key(name)
        else:
            if not valid_address(row.field.text()):
                row.show_result("An address looks like http://127.0.0.1:11434.", "error")
                return None
            self._save_address(name)
        old = self._tests.pop(name, None)
        if old is not None:
            old.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            row.show_result("Testing needs the app's event loop.", "error")
            return None
        row.show_result("Testing…", "busy")
        if row.test_button.hasFocus():
            # A focused button that goes grey hands the focus on to the next control: the next
            # server's address, where typing would change it. It waits in this row's own
            # field and goes back to Test when the test ends.
            row.field.setFocus(Qt.FocusReason.OtherFocusReason)
            self._focus_back.add(name)
        row.test_button.setEnabled(False)
        task = loop.create_task(self._run_test(name), name=f"settings-test-{name}")
        self._tests[name] = task
        task.add_done_callback(functools.partial(self._test_finished, name))
        return task

    async def _run_test(self, name: str) -> None:
        row = self.rows[name]
        if name in COMPANIES:
            address, key = "", self._secrets.get(name)
        else:
            address, key = row.field.text().strip(), None
        try:
            async with asyncio.timeout(self.test_timeout):
                models = await self._tester(name, address, key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A server that is down or refuses is an answer; anything else is a bug to trace.
            if not isinstance(exc, ProviderError | TimeoutError | NotSetUpError | OSError):
                log.warning("testing %s failed", name, exc_info=exc)
            row.show_result(describe_failure(exc, timeout=self.test_timeout, secret=key), "error")
            return
        row.show_result(describe_models(models), "ok")

    def _test_finished(self, name: str, task: asyncio.Task[None]) -> None:
        if self._tests.get(name) is task:
            del self._tests[name]
        row = self.rows.get(name)
        if row is None:
            return
        with contextlib.suppress(RuntimeError):  # the dialog is being destroyed
            row.test_button.setEnabled(True)
            if name in self._focus_back and not self._tests.get(name):
                self._focus_back.discard(name)
                if row.field.hasFocus():  # the person has not moved on meanwhile
                    row.test_button.setFocus(Qt.FocusReason.OtherFocusReason)
            if task.cancelled() and row.result.text() == "Testing…":
                row.show_result("Test stopped.", "error")

    async def _default_tester(
        self, name: str, address: str, key: str | None
    ) -> Sequence[ModelInfo]:
        return await try_provider(self._settings.settings, name, address, key)

    def running_tests(self) -> list[asyncio.Task[None]]:
        return list(self._tests.values())

    def cancel_tests(self) -> None:
        for task in list(self._tests.values()):
            task.cancel()

    # --- memory and appearance --------------------------------------------------------------

    def _set_remember(self, on: bool) -> None:
        save_remember(self._settings, self.remember, self.memory_error, on)

    def _theme_toggled(self, choice: str, on: bool) -> None:
        if on:
            self.choose_theme(choice)

    def choose_theme(self, choice: str) -> None:
        """Save the theme and restyle the whole app now."""
        if self._theme is not None:
            self._theme.apply(choice)
        if self._settings.settings.theme != choice:
            try:
                self._settings.update(theme=choice)
            except SettingsError as exc:
                self.appearance_error.setText(str(exc))
                self.appearance_error.show()
        self.theme_chosen.emit(choice)

    def _settings_changed(self, settings: Settings) -> None:
        set_checked_quietly(self.remember, settings.remember_automatically)
        button = self.theme_buttons.get(settings.theme)
        if button is not None:
            set_checked_quietly(button, True)

    # --- closing ----------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        self.cancel_tests()
        super().closeEvent(event)

    def hideEvent(self, event: QHideEvent) -> None:
        self.cancel_tests()  # a hidden dialog has no one to show the result to
        # The pointer leaves with the window, but no "leave" arrives for a hidden widget: the
        # row it was over would still look pointed at (a second chosen row) when Settings
        # opens again with the pointer elsewhere.
        viewport = self.nav.viewport()
        outside = QPointF(-1, -1)
        QApplication.sendEvent(
            viewport, QHoverEvent(QEvent.Type.HoverLeave, outside, outside, outside)
        )
        super().hideEvent(event)

    def done(self, result: int) -> None:
        self.cancel_tests()
        super().done(result)


__all__ = [
    "PAGES",
    "ProviderRow",
    "ProviderTester",
    "SettingsDialog",
    "describe_failure",
    "describe_models",
    "valid_address",
]
