"""The first screen: what an empty chat shows in place of its messages.

It says which model will answer the first message and why, what Conch found on this computer
(Ollama, LM Studio and llama.cpp, running or not, with their models; the model that came with
Conch), and offers one click for each: a ready model becomes the chat's model, a server that
is not running opens Settings to connect it. The message box below keeps the keyboard.

Everything here is read from the services as they are (the catalogue's latest list, the
bundled model's status); the window calls ``show_for`` again whenever either changes. Model
ids and server names came from outside Conch: they are shown as plain text (ui/plain.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStyle,
    QStyleOptionButton,
    QVBoxLayout,
    QWidget,
)

from engines.base import ModelInfo
from engines.local import bundled
from engines.providers.registry import BUNDLED, COMPANIES, label_of
from ui.chat.message_delegate import PAD_X
from ui.plain import PlainLabel, button_words, plain_tip, shown_name

if TYPE_CHECKING:
    from app.services import AppServices

# The servers on this computer the screen always names, found or not.
SERVERS = ("ollama", "lmstudio", "llamacpp")
MODEL_BUTTONS = 4  # a server's ready models offered as buttons; the picker has the rest
BUTTON_TEXT_PX = 260  # a model's button asks for no more room for its words than this
BUTTON_MIN_PX = 90  # and the button no narrower than this on a small screen
BUTTON_COLUMNS = 2  # model buttons side by side
ELIDE_MIDDLE = Qt.TextElideMode.ElideMiddle  # a model id's start and its size tag both show
COLUMN_PX = 620  # the screen's column, at most
BUNDLED_WHY = (
    "Small and private: good for notes and short questions; connect Ollama or LM Studio for more."
)


@dataclass(frozen=True)
class Server:
    """One server on this computer as the latest list found it."""

    name: str  # the provider's short name ("ollama")
    label: str  # what a person reads ("Ollama")
    running: bool
    models: tuple[ModelInfo, ...]  # its ready models
    note: str  # "running, 3 models", "not running"


def servers_found(services: AppServices) -> list[Server]:
    """Ollama, LM Studio and llama.cpp (and any other server on this computer that answered),
    each running or not, with its ready models."""
    catalogue = services.catalogue
    models = catalogue.models()
    extra = [
        name
        for name, adapter in catalogue.adapters.items()
        if adapter.local
        and name not in (*SERVERS, BUNDLED)
        and name not in catalogue.unreachable
        and any(m.provider == name for m in models)
    ]
    found: list[Server] = []
    for name in (*SERVERS, *extra):
        label = label_of(name)
        listed = tuple(m for m in models if m.provider == name and m.ready)
        answered = (
            catalogue.adapter(name) is not None
            and catalogue.refreshed
            and name not in catalogue.unreachable
        )
        if not answered:
            note = "not running" if catalogue.refreshed else "looking…"
        elif name in catalogue.problems:
            note = "running, but it did not list its models"
        elif listed:
            note = f"running, {len(listed)} model{'s' if len(listed) != 1 else ''}"
        else:
            note = "running, no model downloaded yet"
        found.append(Server(name, label, answered, listed, note))
    return found


def bundled_line(services: AppServices) -> tuple[str, ModelInfo | None]:
    """What the model that came with Conch is doing, and the model when it can answer."""
    name = f"{bundled.MODEL_LABEL} (came with Conch)"
    ready = [m for m in services.catalogue.models() if m.provider == BUNDLED and m.ready]
    if ready:
        return f"{name}: running on this computer", ready[0]
    if services.status:
        return f"{name}: {services.status}", None
    if not services.settings.settings.bundled_model:
        return f"{name}: turned off in Conch's settings", None
    return f"{name}: starts when no other model is ready", None


def why_this_model(model: ModelInfo | None, services: AppServices) -> str:
    """Why ``model`` answers the next message, and what it means for the person's words."""
    if services.mock:
        return "A demo model: its answers are scripted. Nothing runs and nothing is sent."
    if model is None:
        if services.status:
            return services.status
        return (
            "No model is ready yet: start Ollama, LM Studio or llama.cpp, or add a key for a "
            "model company in Settings."
        )
    if not model.ready:
        why = model.status or f"{label_of(model.provider)} did not list it"
        return f"It cannot answer now ({why}): start it, or choose a model below."
    if model.provider == BUNDLED:
        return f"It came with Conch and runs on this computer. {BUNDLED_WHY}"
    chosen = services.settings.settings.default_model_key == model.key
    because = "It is your default for new chats." if chosen else "It was the first one ready."
    where = label_of(model.provider)
    if model.local:
        return f"{because} It runs on this computer ({where}): what you write stays here."
    return f"{because} It runs at {where}: what you write in this chat is sent there."


class ServerRow(QWidget):
    """A server's name and state ("Connect…" beside it when it is not running), then a button
    for each ready model."""

    def __init__(self, server: Server, parent: QWidget | None = None, *, skip: str = "") -> None:
        super().__init__(parent)
        self.server = server
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        top = QHBoxLayout()
        top.setSpacing(12)
        # Short words (a server's name and its state): one line, never squeezed into two.
        self.status = PlainLabel(f"{shown_name(server.label)}: {server.note}", self)
        if not server.running:
            self.status.setProperty("role", "muted")
        top.addWidget(self.status)
        layout.addLayout(top)
        self.buttons: list[QPushButton] = []
        if not server.running:
            connect = QPushButton(button_words(f"Connect {server.label}…"), self)
            connect.setProperty("variant", "link")
            connect.setToolTip(plain_tip(f"Settings → Providers: {server.label}'s address"))
            self.buttons.append(connect)
            top.addWidget(connect)
        top.addStretch(1)
        offered = [m for m in server.models if m.key != skip]  # not the one answering already
        grid = QGridLayout()
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(4)
        for i, model in enumerate(offered[:MODEL_BUTTONS]):
            button = model_button(model, self)
            self.buttons.append(button)
            grid.addWidget(button, i // BUTTON_COLUMNS, i % BUTTON_COLUMNS)
        for column in range(BUTTON_COLUMNS):
            grid.setColumnStretch(column, 1)  # side by side, of one width
        if offered:
            layout.addLayout(grid)
        if len(offered) > MODEL_BUTTONS:
            more = len(offered) - MODEL_BUTTONS
            rest = PlainLabel(f"and {more} more in the model list above the chat", self)
            rest.setProperty("role", "caption")
            layout.addWidget(rest)


class ModelButton(QPushButton):
    """ "Use <model>": asks for the width of its words up to ``BUTTON_TEXT_PX``; words wider
    than the button it gets are cut in the middle (all of them in its tooltip)."""

    def __init__(self, model: ModelInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.words = f"Use {shown_name(model.name)}"
        self.setToolTip(plain_tip(shown_name(model.key)))
        self.setAccessibleName(self.words)
        self.setProperty("model_key", model.key)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(BUTTON_MIN_PX)
        self._fit(BUTTON_TEXT_PX)

    def _padding(self) -> int:
        """What the style adds around the words (the stylesheet's padding and border)."""
        option = QStyleOptionButton()
        self.initStyleOption(option)
        inner = QSize(200, self.fontMetrics().height())  # wide enough for no minimum to apply
        outer = self.style().sizeFromContents(
            QStyle.ContentsType.CT_PushButton, option, inner, self
        )
        return max(0, outer.width() - inner.width())

    def _fit(self, text_px: int) -> None:
        metrics = self.fontMetrics()
        fits = metrics.horizontalAdvance(self.words) <= text_px  # elidedText cuts at a tie
        cut = self.words if fits else metrics.elidedText(self.words, ELIDE_MIDDLE, text_px)
        self.setText(button_words(cut))

    def sizeHint(self) -> QSize:
        full = self.fontMetrics().horizontalAdvance(self.words)
        return QSize(min(full, BUTTON_TEXT_PX) + self._padding(), super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit(max(0, event.size().width() - self._padding()))  # all the room it got


def model_button(model: ModelInfo, parent: QWidget) -> QPushButton:
    """A "Use <model>" button (``ModelButton``)."""
    return ModelButton(model, parent)


@dataclass(frozen=True)
class Seen:
    """Everything the screen shows, to draw it again only when something changed."""

    model: ModelInfo | None
    why: str
    mock: bool
    demo_models: tuple[ModelInfo, ...]
    servers: tuple[Server, ...]
    bundled: tuple[str, ModelInfo | None]
    keyed: tuple[str, ...]


class FirstScreen(QScrollArea):
    """What an empty chat shows (see the module doc).

    Signals:
        model_chosen(ModelInfo): use this model for the new chat.
        settings_requested(str): open Settings on this page ("providers").
    """

    model_chosen = Signal(object)
    settings_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("FirstScreen")
        self.setAccessibleName("Start a chat")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the message box keeps the keyboard
        self._page: QWidget | None = None
        self.model_name = PlainLabel()
        self.model_why = PlainLabel()
        self.bundled = PlainLabel()
        self.companies = PlainLabel()
        self.rows: dict[str, ServerRow] = {}
        self.buttons: list[QPushButton] = []  # every button on the screen, in order
        self.model: ModelInfo | None = None
        self._seen: Seen | None = None
        self._line: tuple[int, int] | None = None  # the message box's left and width
        self._column: QWidget | None = None

    def line_up(self, left: int, width: int) -> None:
        """Put the words in the column the message box (and later the messages) use:
        ``left`` and ``width`` are the box's, in this widget's coordinates. The words start
        ``PAD_X`` in from the box's edge, as a message's do."""
        if self._line == (left, width):
            return
        centred = self._line is None
        self._line = (left, width)
        if centred and self._seen is not None:
            self._build(self._seen)  # from the centred layout to the lined-up one
        else:
            self._place_column()

    def _place_column(self) -> None:
        column = self._column
        if self._line is None or column is None:
            return
        left, width = self._line
        page = column.parentWidget()
        layout = page.layout() if page is not None else None
        if layout is not None:
            layout.setContentsMargins(max(0, left + PAD_X), 12, 0, 12)
        column.setMaximumWidth(max(0, width - 2 * PAD_X))

    def show_for(self, services: AppServices, model: ModelInfo | None) -> None:
        """Show who answers (``model``) and what the services found now; drawn again only
        when that changed (the servers are looked at again every few seconds)."""
        seen = Seen(
            model=model,
            why=why_this_model(model, services),
            mock=services.mock,
            demo_models=tuple(services.catalogue.ready_models()) if services.mock else (),
            servers=() if services.mock else tuple(servers_found(services)),
            bundled=bundled_line(services),
            keyed=tuple(_companies_keyed(services)),
        )
        if seen == self._seen:
            return
        self._seen = seen
        self._build(seen)

    def _build(self, seen: Seen) -> None:
        model = seen.model
        self.model = model
        page = QWidget()
        page.setObjectName("FirstScreenPage")
        outer = QHBoxLayout(page)
        column = QWidget(page)
        self._column = column
        if self._line is None:  # not lined up with the message box yet: centred
            outer.setContentsMargins(16, 12, 16, 12)
            column.setMaximumWidth(COLUMN_PX)
            outer.addStretch(1)
            outer.addWidget(column, 100)
        else:
            outer.addWidget(column, 100)  # as wide as the box allows (its maximum width)
        outer.addStretch(1)
        self._place_column()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)

        title = PlainLabel("Start a chat", column)
        title.setProperty("role", "title")
        layout.addWidget(title)

        layout.addWidget(_heading("Who answers", column))
        self.model_name = PlainLabel(column)
        self.model_name.setWordWrap(True)
        self.model_name.setProperty("role", "heading")
        self.model_name.setText(
            f"{shown_name(model.name)} will answer." if model else "No model is ready yet."
        )
        layout.addWidget(self.model_name)
        self.model_why = _sentence(seen.why, column)
        layout.addWidget(self.model_why)

        self.rows = {}
        self.buttons = []
        if seen.mock:
            layout.addSpacing(8)
            layout.addWidget(_heading("The demo's models", column))
            for each in seen.demo_models:
                if model is not None and each.key == model.key:
                    continue
                button = model_button(each, column)
                self._wire_model(button, each)
                layout.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
        else:
            layout.addSpacing(8)
            layout.addWidget(_heading("Found on this computer", column))
            for server in seen.servers:
                row = ServerRow(server, column, skip=model.key if model else "")
                self.rows[server.name] = row
                layout.addWidget(row)
                for button in row.buttons:
                    self._wire(button, server)
            words, ready = seen.bundled
            self.bundled = _sentence(words, column)
            layout.addWidget(self.bundled)
            if ready is not None and (model is None or model.key != ready.key):
                button = model_button(ready, column)
                self._wire_model(button, ready)
                layout.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)

            layout.addSpacing(8)
            layout.addWidget(_heading("Model companies", column))
            keyed = seen.keyed
            self.companies = _sentence(
                f"Set up: {', '.join(keyed)}. Their models are in the list above the chat."
                if keyed
                else "Have a key for OpenAI, Anthropic or another company? Add it in Settings.",
                column,
            )
            layout.addWidget(self.companies)
            add = QPushButton("Add a key…" if not keyed else "Settings…", column)
            add.setProperty("variant", "link")
            add.clicked.connect(lambda: self.settings_requested.emit("providers"))
            self.buttons.append(add)
            layout.addWidget(add, 0, Qt.AlignmentFlag.AlignLeft)

        layout.addSpacing(8)
        hint = _sentence("Type your first message below and press Enter.", column)
        hint.setProperty("role", "caption")
        layout.addWidget(hint)
        layout.addStretch(1)
        for button in self.buttons:
            # A click must not take the keyboard from the message box; Tab still reaches it.
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        old = self.takeWidget()
        self.setWidget(page)
        self._page = page
        if old is not None:
            old.deleteLater()

    def _wire(self, button: QPushButton, server: Server) -> None:
        key = button.property("model_key")
        model = next((m for m in server.models if m.key == key), None)
        if model is not None:
            self._wire_model(button, model)
        else:
            button.clicked.connect(lambda: self.settings_requested.emit("providers"))
            self.buttons.append(button)

    def _wire_model(self, button: QPushButton, model: ModelInfo) -> None:
        button.clicked.connect(lambda: self.model_chosen.emit(model))
        self.buttons.append(button)


def _companies_keyed(services: AppServices) -> Sequence[str]:
    names = services.catalogue.adapters
    return [label_of(name) for name in COMPANIES if name in names]


def _heading(text: str, parent: QWidget) -> PlainLabel:
    label = PlainLabel(text, parent)
    label.setProperty("role", "caption")
    return label


def _sentence(text: str, parent: QWidget) -> PlainLabel:
    label = PlainLabel(text, parent)
    label.setWordWrap(True)
    return label
