"""Paints chat messages: one QTextDocument per *visible* row, never one widget per message.

HTML is rendered once per message version (Markdown parsing is the slow part) and a row's
height once per width; both are cached, so scrolling and a streaming answer only lay out the
rows that changed. A long message shown whole is one row per piece
(``ui.chat.markdown.split_long``): the view asks every row's height at once, so a piece is laid
out only while this turn of the event loop has time (``GROW_BUDGET_S``); the rest get an
estimate and are laid out on later turns, so "Show all" on a megabyte never stops the window
answering.

Links inside a message are hit-tested on click: a code block's "Copy", the "Thinking" toggle,
"Show all" under a long message, and ordinary web links. Messages are set in a centred column
no wider than ``READING_CHARS`` characters, however wide the window.
"""

from __future__ import annotations

import html
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QColor,
    QDesktopServices,
    QFontMetrics,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPalette,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from ui.chat.chat_model import ACTIONS, ROW_ROLE, WIDGET_KINDS, Row, RowKind, mark_for, preview
from ui.chat.markdown import (
    COPY_SCHEME,
    DARK,
    EXPAND_HREF,
    LIGHT,
    THINKING_HREF,
    MarkdownRenderer,
    MessageDocument,
    Rendered,
    code_block,
    code_blocks,
    plain_to_html,
)

PAD_X = 14
PAD_Y = 8
GAP = 6  # space between rows
STREAM_MARKDOWN_LIMIT = 20_000  # longer answers stream as plain text, Markdown once at the end
STREAM_SHOWN_CHARS = 20_000  # a longer answer shows only its end while it streams
READING_CHARS = 90  # the widest line of a message, in average characters: easy to read
_DOC_CACHE = 160  # laid-out documents kept (a few screens' worth)
_HTML_CACHE = 2_000
GROW_BUDGET_S = 0.02  # time per turn of the event loop for laying out pieces of long messages

_Index = QModelIndex | QPersistentModelIndex

ACTION_SCHEME = "conch-action"  # a hover button: "conch-action:edit"
VERSION_SCHEME = "conch-version"  # "‹" and "›" beside an answer's "2/3": -1 or +1


def _is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


class MessageDelegate(QStyledItemDelegate):
    """Draws message rows of a ``ChatModel`` inside ``view``.

    Signals:
        copied(str): something was put on the clipboard (what, in words, for a status line).
        thinking_toggled(int): the "Thinking" link of a row was clicked (the row).
        expand_toggled(int): "Show all" or "Show less" of a long message (the row).
        action_requested(int, str): a hover button was clicked (the row, an ``ACTIONS`` name).
        version_step(int, int): "‹" (-1) or "›" (+1) beside an answer's versions (the row).
    """

    copied = Signal(str)
    thinking_toggled = Signal(int)
    expand_toggled = Signal(int)
    action_requested = Signal(int, str)
    version_step = Signal(int, int)

    def __init__(
        self, view: QAbstractItemView, colors: Callable[[str], QColor] | None = None
    ) -> None:
        super().__init__(view)
        self._view = view
        self._colors = colors  # theme tokens ("user-bubble"), when a theme is running
        self._light = MarkdownRenderer(LIGHT)
        self._dark = MarkdownRenderer(DARK)
        self._html: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._docs: OrderedDict[tuple[Any, ...], QTextDocument] = OrderedDict()
        self._heights: dict[tuple[Any, ...], int] = {}
        # Pieces of long messages only estimated so far, in the order the view asked for them.
        self._pending: dict[tuple[Any, ...], int] = {}  # key: the row it was at
        self._guesses: dict[tuple[Any, ...], int] = {}
        self._seen: dict[int, tuple[Row, int, int]] = {}  # id(row): the row, width, height
        self._lights: dict[tuple[Any, ...], int] = {}  # pieces on screen to colour, by row
        self._width: tuple[int, int] | None = None  # (viewport width, content width)
        self._metrics: tuple[int, int] | None = None  # (average character, line spacing)
        self._turn_end: float | None = None
        self._grow_timer = QTimer(self)
        self._grow_timer.setSingleShot(True)
        self._grow_timer.setInterval(0)
        self._grow_timer.timeout.connect(self._grow)

    # --- geometry -------------------------------------------------------------------------

    def content_width(self) -> int:
        """The width a message's text is laid out in: the view's, up to the reading cap."""
        viewport = self._view.viewport().width()
        if self._width is None or self._width[0] != viewport:
            cap = READING_CHARS * QFontMetrics(self._view.font()).averageCharWidth()
            self._width = (viewport, max(120, min(viewport - 2 * PAD_X - 2, cap)))
        return self._width[1]

    def column(self, rect: QRect) -> QRect:
        """The part of a row's ``rect`` a message is drawn in: centred, as wide as its text."""
        width = min(rect.width(), self.content_width() + 2 * PAD_X + 2)
        left = rect.left() + (rect.width() - width) // 2
        return QRect(left, rect.top(), width, rect.height())

    def column_width(self, viewport: int) -> int:
        """How wide the message column is in a view ``viewport`` pixels wide (the composer
        below lines up with it)."""
        cap = READING_CHARS * QFontMetrics(self._view.font()).averageCharWidth()
        return min(viewport, max(120, min(viewport - 2 * PAD_X - 2, cap)) + 2 * PAD_X + 2)

    def updateEditorGeometry(
        self, editor: QWidget, option: QStyleOptionViewItem, index: _Index
    ) -> None:
        # A card, the divider or a message being edited sits in the messages' column, not
        # across a wide window, and leaves the row's last GAP pixels empty as a message's
        # bubble does (sizeHint added them), so it never touches the row below.
        editor.setGeometry(self.column(option.rect).adjusted(0, 0, 0, -GAP))

    def sizeHint(self, option: QStyleOptionViewItem, index: _Index) -> QSize:
        row: Row | None = index.data(ROW_ROLE)
        width = self._view.viewport().width()
        if row is None:
            return QSize(width, 0)
        if row.kind in WIDGET_KINDS or row.editing:
            # The stubs say never None, but a row's widget is only set just after insertion.
            widget = cast("QWidget | None", self._view.indexWidget(index))
            if widget is None:
                return QSize(width, 32)
            w = max(120, self.column(QRect(0, 0, width, 0)).width())
            wanted = widget.heightForWidth(w) if widget.hasHeightForWidth() else -1
            return QSize(width, (wanted if wanted > 0 else widget.sizeHint().height()) + GAP)
        cw = self.content_width()
        # The view asks every row's height at each layout: a row object seen at this width
        # answers without building its key (a megabyte is hundreds of rows).
        seen = self._seen.get(id(row))
        if seen is not None and seen[0] is row and seen[1] == cw:
            return QSize(width, seen[2])
        key = (*row.cache_key, cw)
        h = self._heights.get(key)
        if h is None:
            if len(self._heights) > 20_000:
                self._heights.clear()
                self._guesses.clear()
            # Measured with its code uncoloured (the same lines): a row only gets Pygments'
            # colours when it is painted, so opening a long chat colours just what shows.
            doc = self._docs.get((*key, True)) or self._docs.get((*key, False))
            if doc is None and row.parts > 1 and not self._may_lay_out():
                self._later(key, index)
                guess = self._guesses.get(key)
                if guess is None:
                    guess = self._guesses[key] = self._estimate(row, cw)
                self._seen[id(row)] = (row, cw, guess)  # until it is measured
                return QSize(width, guess)
            # Laid out now: the first rows of a long message, the ones on screen; keep them.
            h = self._measure(row, cw, doc or self.document(row, cw, lit=False))
            self._heights[key] = h
            if row.parts > 1:
                # The view may have been told a guess before (and this may be a paint
                # asking, not a layout): it lays the rows out again with the real height.
                self._guesses.pop(key, None)
                self._later(key, index)
        if len(self._seen) > 20_000:
            self._seen.clear()
        self._seen[id(row)] = (row, cw, h)
        return QSize(width, h)

    # --- painting -------------------------------------------------------------------------

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        row: Row | None = index.data(ROW_ROLE)
        if row is None or row.kind in WIDGET_KINDS or row.editing:
            return
        rect = self.column(QRect(option.rect))
        top, bottom = self._pads(row)
        # The pieces of a long message join into one bubble: edges inside it are not drawn.
        body = rect.adjusted(0, 0 if row.first_part else -20, 0, -GAP if row.last_part else 20)
        palette: QPalette = option.palette
        state = option.state
        painter.save()
        painter.setClipRect(rect)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        mine = row.message is not None and row.message.role == "user"
        if mine:
            if self._colors is not None:
                bubble = self._colors("user-bubble")
                painter.setPen(self._colors("user-bubble-border"))
            else:
                bubble = palette.color(QPalette.ColorRole.Highlight)
                bubble.setAlpha(40)
                painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(bubble)
            painter.drawRoundedRect(QRectF(body.adjusted(4, 0, -4, 0)), 8, 8)
        if state & QStyle.StateFlag.State_HasFocus or state & QStyle.StateFlag.State_Selected:
            pen = palette.color(QPalette.ColorRole.Highlight)
            painter.setPen(pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(QRectF(body.adjusted(2, 0, -2, 0)), 8, 8)
        painter.translate(rect.left() + PAD_X, rect.top() + top)
        clip = QRectF(0, 0, rect.width() - 2 * PAD_X, rect.height() - top - bottom)
        painter.setClipRect(clip)
        ctx = QAbstractTextDocumentLayout.PaintContext()
        ctx.palette = palette
        ctx.clip = clip
        cw = self.content_width()
        key = (*row.cache_key, cw)
        doc = self._docs.get((*key, True))
        if doc is None and row.parts > 1:
            # A piece's code is coloured on a later turn (Pygments takes longer than the
            # layout); until then it shows plain, the same lines.
            self._lights[key] = index.row()
            if not self._grow_timer.isActive():
                self._grow_timer.start()
            doc = self.document(row, cw, lit=False)
        doc = doc or self.document(row, cw)
        doc.documentLayout().draw(painter, ctx)
        if key not in self._heights:
            self._later(key, index)  # painted before it was measured
        painter.restore()
        hovered = getattr(self._view, "hovered", None)
        shown = state & (QStyle.StateFlag.State_HasFocus | QStyle.StateFlag.State_Selected)
        if shown or (hovered is not None and hovered(index)):
            self._paint_buttons(painter, palette, index, QRect(option.rect))

    # --- hover buttons --------------------------------------------------------------------

    def buttons(self, index: _Index, rect: QRect) -> list[tuple[str, QRect]]:
        """Row ``index``'s buttons (action, where) in view coordinates: on its name line, at
        the right of its column."""
        model = self._view.model()
        if not hasattr(model, "actions"):
            return []
        actions: tuple[str, ...] = model.actions(index.row())
        if not actions:
            return []
        metrics = QFontMetrics(self._view.font())
        column = self.column(rect)
        right = column.right() - PAD_X
        top = column.top() + PAD_Y - 2
        height = metrics.height() + 4
        out: list[tuple[str, QRect]] = []
        for action in reversed(actions):
            width = metrics.horizontalAdvance(ACTIONS[action]) + 12
            out.append((action, QRect(right - width, top, width, height)))
            right -= width + 4
        out.reverse()
        return out

    def _paint_buttons(
        self, painter: QPainter, palette: QPalette, index: _Index, rect: QRect
    ) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setFont(self._view.font())
        for action, where in self.buttons(index, rect):
            painter.setPen(palette.color(QPalette.ColorRole.Mid))
            painter.setBrush(palette.color(QPalette.ColorRole.Base))
            painter.drawRoundedRect(QRectF(where), 4, 4)
            painter.setPen(palette.color(QPalette.ColorRole.Text))
            painter.drawText(where, Qt.AlignmentFlag.AlignCenter, ACTIONS[action])
        painter.restore()

    # --- documents ------------------------------------------------------------------------

    def document(self, row: Row, width: int, *, lit: bool = True) -> QTextDocument:
        """Row ``row`` laid out at ``width``; ``lit`` False: its code blocks uncoloured."""
        key = (*row.cache_key, width, lit)
        doc = self._docs.get(key)
        if doc is not None:
            self._docs.move_to_end(key)
            return doc
        doc = self._new_document(self.html_for(row, lit=lit), width)
        self._docs[key] = doc
        while len(self._docs) > _DOC_CACHE:
            self._docs.popitem(last=False)
        return doc

    def _new_document(self, html_text: str, width: int) -> QTextDocument:
        doc = MessageDocument()  # loads nothing a message names
        doc.setDocumentMargin(0)
        # Emoji come from the system's colour emoji font by fontconfig's fallback; naming it
        # among the font's families would set every space in its (wider) space instead.
        doc.setDefaultFont(self._view.font())
        doc.setHtml(html_text)
        doc.setTextWidth(width)
        return doc

    # --- long messages ----------------------------------------------------------------------

    def _pads(self, row: Row) -> tuple[int, int]:
        """Space above a row's text and below it (gap included): the pieces of a long message
        follow each other with none between them."""
        return (PAD_Y if row.first_part else 0), (PAD_Y + GAP if row.last_part else 0)

    def _may_lay_out(self) -> bool:
        """Whether this turn of the event loop has time left to lay out a piece of a long
        message (else it is estimated now and laid out on a later turn)."""
        now = time.perf_counter()
        if self._turn_end is None:
            self._turn_end = now + GROW_BUDGET_S
            QTimer.singleShot(0, self, self._end_turn)
        return now < self._turn_end

    def _end_turn(self) -> None:
        self._turn_end = None

    def _measure(self, row: Row, width: int, doc: QTextDocument | None) -> int:
        """Row ``row``'s height at ``width``, from ``doc`` when it is laid out already."""
        if doc is None and row.parts > 1:
            # A piece measured off screen is not kept: a megabyte's pieces would push the
            # documents on screen out of the cache, and they would be made again every paint.
            html_text = self._build_html(row, _is_dark(self._view.palette()), lit=False)
            doc = self._new_document(html_text, width)
        doc = doc or self.document(row, width, lit=False)
        top, bottom = self._pads(row)
        return int(doc.size().height()) + top + bottom

    def _estimate(self, row: Row, width: int) -> int:
        """A height for a piece not laid out yet: its lines, or its letters over a line's."""
        if self._metrics is None:
            metrics = QFontMetrics(self._view.font())
            self._metrics = (max(1, metrics.averageCharWidth()), metrics.lineSpacing())
        char, spacing = self._metrics
        body = row.body
        lines = max(body.count("\n") + 1, len(body) * char // width)
        top, bottom = self._pads(row)
        return lines * spacing + top + bottom

    def _later(self, key: tuple[Any, ...], index: _Index) -> None:
        self._pending[key] = index.row()
        if not self._grow_timer.isActive():
            self._grow_timer.start()

    def _grow(self) -> None:
        """Lay out pieces of long messages that were only estimated, for one turn's budget,
        and let the view know their real heights; then colour the pieces on screen."""
        until = time.perf_counter() + GROW_BUDGET_S
        model = self._view.model()
        width = self.content_width()
        while self._pending and time.perf_counter() < until:
            key, i = next(iter(self._pending.items()))
            del self._pending[key]
            row = self._row_at(i, key, width)
            if row is None:
                continue  # the row shows something else now, or the width changed
            if key not in self._heights:
                self._heights[key] = self._measure(row, width, self._docs.get((*key, False)))
                self._guesses.pop(key, None)
            self._seen[id(row)] = (row, width, self._heights[key])
            self.sizeHintChanged.emit(model.index(i, 0))
        while self._lights and not self._pending and time.perf_counter() < until:
            key, i = next(iter(self._lights.items()))
            del self._lights[key]
            row = self._row_at(i, key, width)
            if row is not None:
                self.document(row, width, lit=True)
                self._view.viewport().update(self._view.visualRect(model.index(i, 0)))
        if self._pending or self._lights:
            self._grow_timer.start()

    def _row_at(self, i: int, key: tuple[Any, ...], width: int) -> Row | None:
        """The row at ``i`` if it is still the one ``key`` was made for."""
        model = self._view.model()
        row: Row | None = model.index(i, 0).data(ROW_ROLE) if 0 <= i < model.rowCount() else None
        return row if row is not None and (*row.cache_key, width) == key else None

    @property
    def laying_out(self) -> bool:
        """Whether pieces of long messages are still waiting to be laid out or coloured."""
        return bool(self._pending or self._lights)

    def shown_text(self, row: Row) -> str:
        """The text row ``row`` shows, as laid out."""
        return self.document(row, self.content_width()).toPlainText()

    def html_for(self, row: Row, *, lit: bool = True) -> str:
        dark = _is_dark(self._view.palette())
        key = (*row.cache_key, dark, lit)
        cached = self._html.get(key)
        if cached is not None:
            return cached
        out = self._build_html(row, dark, lit)
        self._html[key] = out
        while len(self._html) > _HTML_CACHE:
            self._html.popitem(last=False)
        return out

    def rendered(self, text: str) -> Rendered:
        dark = _is_dark(self._view.palette())
        return (self._dark if dark else self._light).render(text)

    def _build_html(self, row: Row, dark: bool, lit: bool = True) -> str:
        renderer = self._dark if dark else self._light
        head, body, plain, tail = self._sections(row, dark)
        if plain:
            middle = plain_to_html(body)
        else:
            middle = renderer.render(body, highlight=lit).html if body else ""
        return head + middle + tail

    def _sections(self, row: Row, dark: bool) -> tuple[str, str, bool, str]:
        """Row ``row`` as HTML before its text, its text (Markdown, or plain when the flag
        says so) and HTML after it."""
        quiet = (self._dark if dark else self._light).style.quiet
        head: list[str] = []
        tail: list[str] = []
        plain = False
        if row.kind is RowKind.STREAMING:
            who = row.who or "Answering…"
            text, thinking = row.text, row.thinking
            body = text
            plain = len(text) > STREAM_MARKDOWN_LIMIT
            mark = ""
            extra = ""
            fixed = ""
            if len(text) > STREAM_SHOWN_CHARS:
                # Laid out again at every flush: only its end, the whole once it is saved.
                start = len(text) - STREAM_SHOWN_CHARS
                line_end = text.find("\n", start, start + STREAM_SHOWN_CHARS // 2)
                start = line_end + 1 if line_end >= 0 else start
                body = text[start:]
                fixed = (
                    f'<p style="color:{quiet}; margin:0 0 4px 0;"><i>'
                    f"… {start:,} characters above; all of it shows when the answer is done"
                    "</i></p>"
                )
        else:
            m = row.message
            assert m is not None
            model = self._view.model()
            if m.role == "user":
                who = "You"
            elif hasattr(model, "model_name"):
                who = model.model_name(m.model_key)
            else:
                who = "Assistant"
            text, thinking = m.text, m.thinking
            body = ""
            fixed = ""
            if row.collapsible and not row.expanded:
                body = preview(text)
                tail.append(_expand_link(f"Show all ({len(text):,} characters)", quiet))
            elif row.collapsible:
                body = row.body  # a long message is one row per piece
                tail.append(_expand_link("Show less", quiet))
            elif text:
                body = text
            mark = mark_for(m)
            extra = ""
            if m.attachments:
                names = ", ".join(html.escape(a.name) for a in m.attachments)
                extra += f'<p style="color:{quiet}; margin:0;">Attached: {names}</p>'
            if m.pictures:
                names = ", ".join(html.escape(p.name) for p in m.pictures)
                extra += f'<p style="color:{quiet}; margin:0;">Pictures: {names}</p>'
            if not text and m.problem is not None and not mark:
                fixed = f'<p style="color:{quiet};"><i>{html.escape(m.problem.message)}</i></p>'
        head.append(f'<p style="margin:0 0 4px 0;"><b>{html.escape(who)}</b></p>')
        if thinking:
            arrow = "▾" if row.thinking_open else "▸"
            label = "Thinking" if row.kind is not RowKind.STREAMING or text else "Thinking…"
            head.append(
                f'<p style="margin:0 0 4px 0;"><a href="{THINKING_HREF}" '
                f'style="color:{quiet}; text-decoration:none;">{arrow} {label}</a></p>'
            )
            if row.thinking_open:
                head.append(
                    f'<table width="100%" cellpadding="6" cellspacing="0"><tr><td '
                    f'style="color:{quiet};">{plain_to_html(thinking)}</td></tr></table>'
                )
        head.append(extra)
        head.append(fixed)
        if row.kind is RowKind.STREAMING and not text and not thinking:
            # Before the first word: "…", or what the wait is once it is a long one.
            waiting = html.escape(row.status) if row.status else "…"
            tail.append(f'<p style="color:{quiet};">{waiting}</p>')
        if mark:
            # A stopped last answer offers to go on, in plain sight (also a hover button).
            more = (
                f' · <a href="{ACTION_SCHEME}:continue" style="color:{quiet};">Continue</a>'
                if row.continuable
                else ""
            )
            tail.append(
                f'<p style="color:{quiet}; margin:4px 0 0 0;"><i>{html.escape(mark)}</i>{more}</p>'
            )
        if row.versions is not None and len(row.versions.seqs) > 1:
            tail.append(_versions_line(row.versions.label, quiet))
        line = row.stats.line() if row.stats is not None else ""
        if line:
            tail.append(
                f'<p style="color:{quiet}; font-size:small; margin:6px 0 0 0;">'
                f"{html.escape(line)}</p>"
            )
        if not row.first_part:
            head = []
        if not row.last_part:
            tail = []
        return "".join(head), body, plain, "".join(tail)

    # --- clicks ---------------------------------------------------------------------------

    def anchor_at(self, index: _Index, pos: QPointF, rect: QRect) -> str:
        """The link under ``pos`` (view coordinates) in row ``index``, or ""."""
        row: Row | None = index.data(ROW_ROLE)
        if row is None or row.kind in WIDGET_KINDS or row.editing:
            return ""
        for action, where in self.buttons(index, rect):
            if where.contains(pos.toPoint()):
                return f"{ACTION_SCHEME}:{action}"
        left = self.column(rect).left()
        top, _bottom = self._pads(row)
        local = QPointF(pos.x() - left - PAD_X, pos.y() - rect.top() - top)
        return self.document(row, self.content_width()).documentLayout().anchorAt(local)

    def editorEvent(
        self,
        event: QEvent,
        model: Any,
        option: QStyleOptionViewItem,
        index: _Index,
    ) -> bool:
        if event.type() != QEvent.Type.MouseButtonRelease or not isinstance(event, QMouseEvent):
            return False
        if event.button() != Qt.MouseButton.LeftButton:
            return False
        href = self.anchor_at(index, event.position(), QRect(option.rect))
        return self.activate_link(index, href) if href else False

    def activate_link(self, index: _Index, href: str) -> bool:
        row: Row | None = index.data(ROW_ROLE)
        if row is None:
            return False
        if href == THINKING_HREF:
            self.thinking_toggled.emit(index.row())
            return True
        if href == EXPAND_HREF:
            self.expand_toggled.emit(index.row())
            return True
        if href.startswith(ACTION_SCHEME + ":"):
            self.action_requested.emit(index.row(), href.split(":", 1)[1])
            return True
        if href.startswith(VERSION_SCHEME + ":"):
            self.version_step.emit(index.row(), int(href.split(":", 1)[1]))
            return True
        if href.startswith(COPY_SCHEME + ":"):
            text = row.message.text if row.message is not None else row.text
            try:
                n = int(href.split(":", 1)[1])
            except ValueError:
                return False
            # Each piece of a long message numbers its own blocks.
            blocks = code_blocks(text)
            code = code_block(text, row.part, n) if row.parts > 1 else None
            if code is None and row.parts == 1 and 0 <= n < len(blocks):
                code = blocks[n]
            if code is None:
                return False
            copy_to_clipboard(code)
            self.copied.emit("Code copied")
            return True
        url = QUrl(href)
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
            return True
        return False

    def forget(self) -> None:
        """Drop cached documents and sizes (theme or font changed)."""
        self._html.clear()
        self._docs.clear()
        self._heights.clear()
        self._pending.clear()
        self._guesses.clear()
        self._seen.clear()
        self._lights.clear()
        self._width = None
        self._metrics = None


def _expand_link(words: str, color: str) -> str:
    return (
        f'<p style="margin:4px 0 0 0;"><a href="{EXPAND_HREF}" '
        f'style="color:{color};">{html.escape(words)}</a></p>'
    )


def _versions_line(label: str, color: str) -> str:
    link = f'style="color:{color}; text-decoration:none;"'
    return (
        f'<p style="color:{color}; margin:4px 0 0 0;">'
        f'<a href="{VERSION_SCHEME}:-1" {link}>&#8249;</a> {html.escape(label)} '
        f'<a href="{VERSION_SCHEME}:1" {link}>&#8250;</a></p>'
    )


def copy_to_clipboard(text: str) -> None:
    clipboard = QGuiApplication.clipboard()
    if clipboard is not None:
        clipboard.setText(text)


__all__ = ["ACTION_SCHEME", "GAP", "VERSION_SCHEME", "MessageDelegate", "copy_to_clipboard"]
