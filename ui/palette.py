"""The command palette (Ctrl+K, ⌘K on macOS): type a few letters, press Enter.

Commands are plain data registered by whoever owns the actions (the main window); the palette
knows nothing about the window. Matching is a fuzzy subsequence match scored so that a prefix
beats a word start, a word start beats the middle of a word, and letters in a row beat scattered
ones: "summ" finds "Summarise the start of this chat" first, "nc" finds "New chat".
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QRectF,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QCursor,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPalette,
    QRegion,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QFrame,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from ui.plain import PlainLabel

log = logging.getLogger("conch.ui.palette")

PALETTE_SHORTCUT = "Ctrl+K"  # Qt maps Ctrl to ⌘ on macOS
MAX_ROWS = 8  # more matches scroll
CORNER_RADIUS = 14  # the card's rounded corners (#CommandPalette's border-radius in base.qss)
_WORD_BREAKS = frozenset(" -_/.,:;()[]…'\"")
_TITLE_ROLE = Qt.ItemDataRole.UserRole
_SHORTCUT_ROLE = Qt.ItemDataRole.UserRole + 1


@dataclass(frozen=True)
class Command:
    """One palette entry.

    ``shortcut`` is a key sequence in portable text ("Ctrl+N"); the palette shows it in the
    platform's own words (⌘N on macOS). ``keywords`` are other words that should find it
    ("compact" for the summarise command). ``callback`` may return an awaitable: it is then
    run as a task on the running event loop.
    """

    title: str
    callback: Callable[[], object]
    shortcut: str = ""
    keywords: tuple[str, ...] = field(default_factory=tuple)


def fuzzy_score(query: str, text: str) -> int | None:
    """How well ``query`` matches ``text`` (higher is better), or None when it does not.

    Every query letter must appear in order. Each matched letter scores 1, plus 10 at the start
    of the text, 8 at the start of a word and 6 right after the previous matched letter; each
    skipped letter between two matches costs 1. The best alignment wins (dynamic programming,
    so "sc" in "Summarise the start of this chat" aligns with "start"'s s, not the first one).
    """
    q = "".join(query.lower().split())
    t = text.lower()
    if not q:
        return 0
    n, m = len(q), len(t)
    if n > m:
        return None
    neg = -(10**9)
    # best[j] = best score of the query prefix matched so far with its last letter at t[j]
    prev = [neg] * m
    for i in range(n):
        cur = [neg] * m
        best_before = neg  # max over k < j of prev[k] + k (so the gap cost is j - k - 1)
        for j in range(m):
            if i > 0 and j > 0 and prev[j - 1] > neg:
                best_before = max(best_before, prev[j - 1] + (j - 1))
            if t[j] != q[i]:
                continue
            bonus = 1
            if j == 0:
                bonus += 10
            elif t[j - 1] in _WORD_BREAKS:
                bonus += 8
            if i == 0:
                cur[j] = bonus
                continue
            options = []
            if j > 0 and prev[j - 1] > neg:
                options.append(prev[j - 1] + 6)  # consecutive
            if best_before > neg:
                options.append(best_before - (j - 1))  # gap of j - k - 1 letters
            if options:
                cur[j] = max(options) + bonus
        prev = cur
    best = max(prev)
    return None if best <= neg else best


def rank(query: str, commands: Iterable[Command]) -> list[Command]:
    """The commands that match, best first; on a tie the shorter title (the tighter match)."""
    scored: list[tuple[int, int, int, Command]] = []
    for order, command in enumerate(commands):
        score = fuzzy_score(query, command.title)
        for word in command.keywords:
            alt = fuzzy_score(query, word)
            if alt is not None:
                alt -= 4  # a keyword match ranks below an equally good title match
                score = alt if score is None else max(score, alt)
        if score is not None:
            # Nothing typed: the registered order as is.
            tighter = len(command.title) if query.strip() else 0
            scored.append((-score, tighter, order, command))
    scored.sort(key=lambda item: item[:3])
    return [item[3] for item in scored]


def shortcut_text(shortcut: str) -> str:
    """A portable key sequence in the platform's words ("Ctrl+N" shows as ⌘N on macOS)."""
    if not shortcut:
        return ""
    seq = QKeySequence.fromString(shortcut, QKeySequence.SequenceFormat.PortableText)
    native = seq.toString(QKeySequence.SequenceFormat.NativeText)
    return native or shortcut


class _ShortcutDelegate(QStyledItemDelegate):
    """Draws the item as usual, then its shortcut right-aligned in a muted colour.

    The row under the pointer gets no hover shade of its own: the pointer moves the choice
    (``CommandPalette``), so one row is lit, never the choice and a hovered row beside it."""

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        option = QStyleOptionViewItem(option)
        option.state &= ~QStyle.StateFlag.State_MouseOver
        super().paint(painter, option, index)
        keys = index.data(_SHORTCUT_ROLE)
        if not keys:
            return
        painter.save()
        pal: QPalette = option.palette
        color = QColor(pal.color(QPalette.ColorRole.PlaceholderText))
        painter.setPen(color)
        font = painter.font()
        font.setPixelSize(12)
        painter.setFont(font)
        rect: QRect = option.rect
        painter.drawText(
            rect.adjusted(0, 0, -16, 0),
            int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
            str(keys),
        )
        painter.restore()


def rounded_region(width: int, height: int, radius: int) -> QRegion:
    """The pixels of a ``width`` x ``height`` rectangle with rounded corners."""
    path = QPainterPath()
    path.addRoundedRect(QRectF(0, 0, width, height), radius, radius)
    return QRegion(path.toFillPolygon().toPolygon())


class CommandPalette(QFrame):
    """A frameless popup with a search field over a list of commands.

    Keyboard: type to filter, Up/Down (and Page Up/Down, Home/End) to move, Enter to run,
    Esc to close. Moving the pointer over a command chooses it (a pointer resting where the
    popup opened or the list changed chooses nothing); a click runs the clicked command.

    Signals:
        command_run(str): the title of the command that just ran.
    """

    command_run = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup | Qt.WindowType.FramelessWindowHint)
        self.setObjectName("CommandPalettePopup")
        # Rounded by a mask, not by a see-through window: where no compositor draws
        # transparency, a see-through popup shows black in its corners.
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.card = QFrame(self)
        self.card.setObjectName("CommandPalette")
        self.card.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self._commands: list[Command] = []
        self._shown: list[Command] = []
        self._tasks: set[asyncio.Task[object]] = set()
        self._pointer = QPoint()  # where the pointer last was (screen), to see it move

        self.search = QLineEdit(self.card)
        self.search.setObjectName("PaletteSearch")
        self.search.setPlaceholderText("Type a command…")
        self.search.setClearButtonEnabled(False)
        self.list = QListWidget(self.card)
        self.list.setObjectName("PaletteList")
        self.list.setItemDelegate(_ShortcutDelegate(self.list))
        self.list.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setMouseTracking(True)  # moves without a button held reach the filter
        self.list.viewport().installEventFilter(self)
        self.list.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.hint = PlainLabel("↑↓ to choose · Enter to run · Esc to close", self.card)
        self.hint.setObjectName("PaletteHint")
        self.empty = PlainLabel("No command matches.", self.card)
        self.empty.setObjectName("PaletteEmpty")
        self.empty.hide()

        inner = QVBoxLayout(self.card)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.setSpacing(0)
        inner.addWidget(self.search)
        inner.addWidget(self.list)
        inner.addWidget(self.empty)
        inner.addWidget(self.hint)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.card)
        self._layouts = (inner, outer)
        self.resize(560, 360)

        self.search.textChanged.connect(self._refilter)
        self.search.installEventFilter(self)
        self.list.itemClicked.connect(self._run_item)

    # --- commands ---------------------------------------------------------------------------

    def set_commands(self, commands: Iterable[Command]) -> None:
        """Replace the registered commands."""
        self._commands = list(commands)
        self._refilter(self.search.text())

    def add_command(self, command: Command) -> None:
        self._commands.append(command)
        self._refilter(self.search.text())

    def commands(self) -> list[Command]:
        return list(self._commands)

    def visible_titles(self) -> list[str]:
        """The titles shown now, in order."""
        return [c.title for c in self._shown]

    def current_title(self) -> str | None:
        row = self.list.currentRow()
        return self._shown[row].title if 0 <= row < len(self._shown) else None

    # --- showing ----------------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.setMask(rounded_region(self.width(), self.height(), CORNER_RADIUS))

    def popup(self, anchor: QWidget | None = None) -> None:
        """Show over ``anchor``'s window (centred, near the top), empty and ready to type."""
        self.search.clear()
        self._refilter("")
        self._pointer = QCursor.pos()  # a pointer that happens to rest there chooses nothing
        host = anchor.window() if anchor is not None else self.parentWidget()
        if host is not None:
            width = min(560, max(320, host.width() - 64))
            self.resize(width, self.height())
            self._fit_height()
            top_left = host.mapToGlobal(QPoint((host.width() - width) // 2, 72))
            self.move(top_left)
        self.show()
        self.raise_()
        self.activateWindow()
        self.search.setFocus(Qt.FocusReason.PopupFocusReason)

    # --- running ----------------------------------------------------------------------------

    def run_current(self) -> bool:
        """Close the palette and run the selected command. False when nothing is selected."""
        row = self.list.currentRow()
        if not 0 <= row < len(self._shown):
            return False
        self._run(self._shown[row])
        return True

    def _run_item(self, item: QListWidgetItem) -> None:
        row = self.list.row(item)
        if 0 <= row < len(self._shown):
            self._run(self._shown[row])

    def _run(self, command: Command) -> None:
        # Close first so whatever the command opens (a dialog, a menu) is not under the popup.
        self.hide()
        try:
            result = command.callback()
        except Exception:
            log.exception("palette command %r failed", command.title)
            return
        if inspect.isawaitable(result):
            self._start_task(result)
        self.command_run.emit(command.title)

    def _start_task(self, awaitable: Awaitable[object]) -> None:
        try:
            task = asyncio.ensure_future(awaitable)
        except RuntimeError:
            log.warning("palette command needs an event loop; none is running")
            close = getattr(awaitable, "close", None)
            if callable(close):
                close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- filtering and keys -----------------------------------------------------------------

    def _refilter(self, text: str) -> None:
        self._shown = rank(text, self._commands)
        self.list.clear()
        for command in self._shown:
            item = QListWidgetItem(command.title)
            item.setData(_TITLE_ROLE, command.title)
            item.setData(_SHORTCUT_ROLE, shortcut_text(command.shortcut))
            self.list.addItem(item)
        has_any = bool(self._shown)
        self.list.setVisible(has_any)
        self.empty.setVisible(not has_any)
        if has_any:
            self.list.setCurrentRow(0)
        self._fit_height()

    def _fit_height(self) -> None:
        """As tall as the matches need (up to ``MAX_ROWS``), so the popup hugs its list.

        The list gets exactly the rows' height and everything else its own: an earlier version
        sized the popup but let the layout share it out, so the hint line took the spare room
        and the list showed four and a half rows over a blank band.
        """
        self.ensurePolished()  # the stylesheet's paddings count in every size below
        if self._shown:
            rows = min(len(self._shown), MAX_ROWS)
            row = max(self.list.sizeHintForRow(0), 1)
            margins = self.list.contentsMargins()  # the frame and the stylesheet's padding
            body = rows * row + margins.top() + margins.bottom()
            fits = len(self._shown) <= MAX_ROWS
            self.list.setVerticalScrollBarPolicy(
                Qt.ScrollBarPolicy.ScrollBarAlwaysOff
                if fits
                else Qt.ScrollBarPolicy.ScrollBarAsNeeded
            )
            self.list.setFixedHeight(body)
        # A window's layout keeps its old minimum height until it runs again: run both now.
        for layout in self._layouts:
            layout.invalidate()
            layout.activate()
        self.resize(self.width(), self._layouts[0].sizeHint().height())

    def _move(self, delta: int) -> None:
        count = len(self._shown)
        if not count:
            return
        row = self.list.currentRow()
        # Single steps wrap around, as a short list invites; page steps stop at the ends.
        wrap = delta in (-1, 1)
        row = (row + delta) % count if wrap else max(0, min(count - 1, row + delta))
        self.list.setCurrentRow(row)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.search and event.type() == QEvent.Type.KeyPress:
            assert isinstance(event, QKeyEvent)
            return self._handle_key(event)
        if watched is self.list.viewport() and event.type() == QEvent.Type.MouseMove:
            assert isinstance(event, QMouseEvent)
            self._pointed(event)
        return super().eventFilter(watched, event)

    def _pointed(self, event: QMouseEvent) -> None:
        """The pointer moved over the list: the command under it is the choice. Only a move
        of the pointer itself counts: rows scrolled or filtered under a pointer at rest must
        not take the choice from the keys."""
        at = event.globalPosition().toPoint()
        if at == self._pointer:
            return
        self._pointer = at
        row = self.list.indexAt(event.position().toPoint()).row()
        if row >= 0 and row != self.list.currentRow():
            self.list.setCurrentRow(row)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if not self._handle_key(event):
            super().keyPressEvent(event)

    def _handle_key(self, event: QKeyEvent) -> bool:
        key = event.key()
        if key == Qt.Key.Key_Escape:
            self.hide()
            return True
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.run_current()
            return True
        steps = {
            Qt.Key.Key_Down: 1,
            Qt.Key.Key_Up: -1,
            Qt.Key.Key_PageDown: 5,
            Qt.Key.Key_PageUp: -5,
        }
        if key in steps:
            self._move(steps[Qt.Key(key)])
            return True
        if key == Qt.Key.Key_Home and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self._move(-len(self._shown))
            return True
        if key == Qt.Key.Key_End and event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self._move(len(self._shown))
            return True
        return False


__all__ = [
    "PALETTE_SHORTCUT",
    "Command",
    "CommandPalette",
    "fuzzy_score",
    "rank",
    "shortcut_text",
]
