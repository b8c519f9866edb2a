"""The model picker in the top bar: every ready model, grouped by provider, local ones first.

Each entry shows the model's window in the short form people read ("8K", "32K", "200K") and, for
a model on this computer, whether it is already loaded. While the bundled model is starting,
the picker says so ("Starting the local model…") with its progress. A model that cannot answer
for a reason its provider names (the bundled runtime "stopped" after a crash) is listed with
that word and cannot be chosen; it never shows as ready.

Programs that keep their own chat (Claude Code, Codex, ACP agents) come last, in their own
"Programs" section, each with a short note of what it is; one that is not installed says so
with the command that installs it, and cannot be chosen.

When the chat's model runs on this computer with a window it could raise, a button beside the
list offers "Reload with 16K" (its tooltip says the memory that takes); while a model loads or
an Ollama model downloads, the same line as "Starting the local model…" says so. With Ollama
set up, the list ends with "Download a model…".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QSignalBlocker, QSize, Qt, Signal
from PySide6.QtGui import QFont, QPaintEvent, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QProgressBar,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QToolButton,
    QWidget,
)

from engines.base import ModelInfo
from engines.local.reload import ReloadOffer
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.programs.catalogue import program
from engines.providers.registry import label_of
from ui._widgets import few_letters
from ui.plain import PlainLabel, plain_tip, shown_name

KEY_ROLE = int(Qt.ItemDataRole.UserRole) + 1
PULL_KEY = "action:pull"  # the "Download a model…" entry: not a model
PULL_TEXT = "Download a model…"
LOADING_WIDTH = 200  # pixels the "Loading … into memory…" line may take beside the list
NARROW_CHARS = 12  # about what a narrow window still shows of the model's line, then "…"


def window_label(tokens: int) -> str:
    """8192 → "8K", 131072 → "128K", 200000 → "200K", 1048576 → "1M"."""
    if tokens < 1000:
        return str(max(0, tokens))
    if tokens % 1000 == 0:
        k = tokens // 1000
    elif tokens % 1024 == 0:
        k = tokens // 1024
    else:
        k = round(tokens / 1000)
    if k < 1000:
        return f"{k}K"
    m = k / 1024 if k % 1024 == 0 else k / 1000
    return f"{round(m, 1):g}M"


def memory_label(size: int) -> str:
    """Bytes in the gigabytes people see in their system monitor: 6493978624 → "6.5 GB"."""
    gb = size / 1e9
    return f"{gb:.1f} GB" if gb < 100 else f"{gb:.0f} GB"


def reload_label(offer: ReloadOffer) -> str:
    """ "Reload qwen3:8b with a 16K window" """
    return f"Reload {offer.model.name} with a {window_label(offer.window)} window"


def memory_note(offer: ReloadOffer) -> str:
    """What the reload will take: "It will take about 6.5 GB of memory (this computer has
    16.0 GB)." — or nothing, when the server does not say how big the model is."""
    if offer.memory is None:
        return ""
    note = f"It will take about {memory_label(offer.memory)} of memory"
    if offer.memory_total:
        note += f" (this computer has {memory_label(offer.memory_total)})"
    return note + "."


def provider_name(provider: str) -> str:
    """The heading a provider's models are listed under."""
    return "Programs" if provider == PROGRAMS else label_of(provider)


def program_note(model: ModelInfo) -> str:
    """What a program is, in one line ("" for a model)."""
    found = program(model.id) if model.provider == PROGRAMS else None
    return found.note if found is not None else ""


def entry_text(model: ModelInfo) -> str:
    if model.provider == PROGRAMS:
        # A program sizes its own context: its note says more than a window would.
        short = program_note(model).split(";", 1)[0]
        said = model.status if not model.ready and model.status else short
        return "  ·  ".join(x for x in (shown_name(model.name), said) if x)
    parts = [shown_name(model.name), window_label(model.context)]
    if not model.ready and model.status:
        parts.append(model.status)
    elif model.local:
        parts.append("loaded" if model.loaded else "not loaded")
    return "  ·  ".join(parts)


def shown(model: ModelInfo) -> bool:
    """Ready models, and those whose provider says why they are not ("stopped")."""
    return model.ready or bool(model.status)


def ordered(models: Sequence[ModelInfo]) -> list[tuple[str, list[ModelInfo]]]:
    """Shown models grouped by provider: local providers first, each group in listed order,
    programs last."""
    groups: dict[str, list[ModelInfo]] = {}
    local: dict[str, bool] = {}
    for m in models:
        if not shown(m):
            continue
        groups.setdefault(m.provider, []).append(m)
        local[m.provider] = local.get(m.provider, False) or m.local
    names = sorted(groups, key=lambda p: (p == PROGRAMS, not local[p], list(groups).index(p)))
    return [(p, groups[p]) for p in names]


class ModelButton(QComboBox):
    """The list's button: as wide as its words when there is room; in a narrow window it
    gives way (to the chat's title beside it) and its line ends in "…" instead of being cut
    mid-word ("loade")."""

    def _option(self) -> QStyleOptionComboBox:
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        return option

    def shown_text(self) -> str:
        """The model's line as painted: whole, or cut with "…" where the button ends."""
        option = self._option()
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        return self.fontMetrics().elidedText(
            option.currentText, Qt.TextElideMode.ElideRight, max(0, field.width())
        )

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        few = few_letters(self.fontMetrics(), NARROW_CHARS)
        small = self.style().sizeFromContents(
            QStyle.ContentsType.CT_ComboBox, self._option(), QSize(few, hint.height()), self
        )
        return QSize(small.width(), hint.height())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        option = self._option()
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)


class ModelPicker(QWidget):
    """A combo box of models plus a "starting" line for the bundled model.

    Signals:
        model_chosen(ModelInfo): the person picked a different model.
        reload_requested(ReloadOffer): the person pressed "Reload with …".
        pull_requested(): the person chose "Download a model…".
        shown_changed(): the list or the model it shows changed (what follows it reads
            ``listed`` and ``shown_key`` again).
    """

    model_chosen = Signal(object)
    shown_changed = Signal()
    reload_requested = Signal(object)
    pull_requested = Signal()

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        provider_label: Callable[[str], str] = provider_name,
    ) -> None:
        super().__init__(parent)
        self._provider_label = provider_label
        self._models: dict[str, ModelInfo] = {}
        self._all: list[ModelInfo] = []
        self._seen: set[str] = set()  # providers with a heading in the list so far
        self.combo = ModelButton(self)
        self.combo.setObjectName("ModelButton")
        self.combo.setAccessibleName("Model")
        self.combo.setToolTip("The model this chat talks to")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.combo.setMinimumContentsLength(18)
        self._items = QStandardItemModel(self.combo)
        self.combo.setModel(self._items)
        self.status = PlainLabel(self)
        self.status.setObjectName("ModelPickerStatus")
        self.status.setVisible(False)
        self.progress = QProgressBar(self)
        self.progress.setObjectName("ModelPickerProgress")
        self.progress.setAccessibleName("Starting the local model")
        self.progress.setMaximumWidth(120)
        self.progress.setTextVisible(False)
        self.progress.setVisible(False)
        self.offer: ReloadOffer | None = None
        self.reload_button = QToolButton(self)
        self.reload_button.setObjectName("ModelPickerReload")
        self.reload_button.setVisible(False)
        self.reload_button.clicked.connect(self._reload_pressed)
        self._can_pull = False
        self._shown_key = ""
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo)
        layout.addWidget(self.reload_button)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        self.combo.activated.connect(self._activated)

    # --- contents -------------------------------------------------------------------------

    def set_models(self, models: Sequence[ModelInfo], current_key: str = "") -> None:
        """Show ``models`` (only ready ones) and select ``current_key``."""
        blocker = QSignalBlocker(self.combo)
        self._all = list(models)
        self._seen = set()
        self._items.clear()
        self._models = {}
        for provider, group in ordered(models):
            if provider == PROGRAMS and self._can_pull and "ollama" not in self._seen:
                self._append_ollama_heading()  # Ollama has no model yet: "Download" first
            self._items.appendRow(self._heading(provider))
            self._seen.add(provider)
            for m in group:
                item = QStandardItem(entry_text(m))
                item.setData(m.key, KEY_ROLE)
                name = shown_name(m.name)
                item.setToolTip(plain_tip(f"{name} reads about {m.context:,} tokens at once"))
                spoken = f"{m.name}, {window_label(m.context)}"
                note = program_note(m)
                if note:
                    item.setToolTip(plain_tip(f"{name}: {note}"))
                    spoken = f"{m.name}, {note}"
                if not m.ready and note:
                    # Not installed: the entry itself carries the command that installs it.
                    item.setFlags(Qt.ItemFlag.NoItemFlags)
                    spoken += f", {m.status}"
                elif not m.ready:
                    # Seen, not chosen: it cannot answer now (Settings → Health says why).
                    item.setFlags(Qt.ItemFlag.NoItemFlags)
                    item.setToolTip(plain_tip(f"{name} is {m.status}; Settings → Health says why"))
                    spoken += f", {m.status}"
                item.setData(spoken, Qt.ItemDataRole.AccessibleTextRole)
                self._items.appendRow(item)
                if m.ready:
                    self._models[m.key] = m
            if provider == "ollama" and self._can_pull:
                self._items.appendRow(self._pull_item())  # at the end of Ollama's models
        if not self._models and not self._items.rowCount():
            empty = QStandardItem("No model is ready")
            empty.setFlags(Qt.ItemFlag.NoItemFlags)
            self._items.appendRow(empty)
        if self._can_pull and "ollama" not in self._seen:
            self._append_ollama_heading()  # Ollama has no model yet
        self.select(current_key)
        del blocker

    def _heading(self, provider: str) -> QStandardItem:
        header = QStandardItem(self._provider_label(provider))
        header.setFlags(Qt.ItemFlag.NoItemFlags)  # a heading, not a choice
        font = QFont(header.font())
        font.setBold(True)
        header.setFont(font)
        return header

    def _append_ollama_heading(self) -> None:
        self._items.appendRow(self._heading("ollama"))
        self._items.appendRow(self._pull_item())
        self._seen.add("ollama")

    def _pull_item(self) -> QStandardItem:
        pull = QStandardItem(PULL_TEXT)
        pull.setData(PULL_KEY, KEY_ROLE)
        pull.setToolTip("Fetch a model from Ollama's library by its name")
        return pull

    def select(self, key: str) -> None:
        """Show ``key`` as the current model (no signal)."""
        self._shown_key = key
        blocker = QSignalBlocker(self.combo)
        for row in range(self._items.rowCount()):
            if self._items.item(row).data(KEY_ROLE) == key:
                self.combo.setCurrentIndex(row)
                break
        else:
            first = next(
                (
                    r
                    for r in range(self._items.rowCount())
                    if self._items.item(r).data(KEY_ROLE) not in (None, PULL_KEY)
                ),
                -1,
            )
            self.combo.setCurrentIndex(first if not key else -1)
            if key:
                self.combo.setPlaceholderText(
                    shown_name(key.split("/", 1)[-1]) + " (not available)"
                )
        del blocker
        self.shown_changed.emit()

    def models(self) -> list[ModelInfo]:
        return list(self._models.values())

    def listed(self) -> list[ModelInfo]:
        """Every model the list was given, ready or not (``set_models``)."""
        return list(self._all)

    @property
    def shown_key(self) -> str:
        """The key of the model the chat is on, as last selected (it may not be listed)."""
        return self._shown_key

    def current_key(self) -> str:
        key = self.combo.currentData(KEY_ROLE)
        return str(key) if key and key != PULL_KEY else ""

    def entries(self) -> list[str]:
        """What the list shows, headings included (for tests and screen readers)."""
        return [self._items.item(r).text() for r in range(self._items.rowCount())]

    # --- the bundled model starting --------------------------------------------------------

    def set_starting(self, text: str | None, fraction: float | None = None) -> None:
        """Show "Starting the local model…" (``text``) with progress 0..1, or hide it (None)."""
        shown = text is not None
        self.status.setVisible(shown)
        self.progress.setVisible(shown)
        if not shown:
            return
        self.status.setText(text or "Starting the local model…")
        self.status.setAccessibleName(text or "Starting the local model…")
        if fraction is None:
            self.progress.setRange(0, 0)  # busy, no known end
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(int(max(0.0, min(1.0, fraction)) * 100))

    # --- a bigger window, downloads -------------------------------------------------------

    def set_reload_offer(self, offer: ReloadOffer | None) -> None:
        """Offer to reload the current model with a bigger window (None: offer nothing)."""
        self.offer = offer
        self.reload_button.setVisible(offer is not None)
        if offer is None:
            return
        self.reload_button.setText(f"Reload with {window_label(offer.window)}")
        said = reload_label(offer)
        note = memory_note(offer)
        self.reload_button.setToolTip(plain_tip(f"{said}. {note}".strip()))
        self.reload_button.setAccessibleName(said)
        self.reload_button.setEnabled(True)

    def set_can_pull(self, can: bool) -> None:
        """Whether the list ends with "Download a model…" (Ollama is set up)."""
        if can == self._can_pull:
            return
        self._can_pull = can
        self.set_models(self._all, self._shown_key)

    def set_loading(
        self, text: str | None, fraction: float | None = None, *, short: str = ""
    ) -> None:
        """ "Loading qwen3:8b into memory…", "Downloading gemma3:1b…" with progress 0..1 (None:
        busy), on the line "Starting the local model…" uses; None hides it. The reload button
        steps aside meanwhile, and a long line is cut short (all of it in its tooltip)."""
        self.reload_button.setEnabled(text is None)
        self.reload_button.setVisible(text is None and self.offer is not None)
        self.set_starting(text, fraction)
        if text is not None:
            # The list beside it names the model already: ``short`` may leave it out.
            shown = self.status.fontMetrics().elidedText(
                short or text, Qt.TextElideMode.ElideRight, LOADING_WIDTH
            )
            self.status.setText(shown)
            self.status.setToolTip(plain_tip(text))
            self.progress.setAccessibleName(text)

    def _reload_pressed(self) -> None:
        if self.offer is not None:
            self.reload_requested.emit(self.offer)

    # --- choosing -------------------------------------------------------------------------

    def _activated(self, row: int) -> None:
        key = self._items.item(row).data(KEY_ROLE) if row >= 0 else None
        if key == PULL_KEY:
            self.select(self._shown_key)  # the list goes back to the chat's model
            self.pull_requested.emit()
            return
        model = self._models.get(str(key)) if key else None
        if model is not None:
            self.model_chosen.emit(model)
