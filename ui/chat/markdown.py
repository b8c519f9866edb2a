"""Markdown → the HTML subset QTextDocument renders, for chat messages.

Messages are CommonMark plus tables and strikethrough (markdown-it-py). Raw HTML in a message is
shown as text, never interpreted: a model's answer must not restyle the window. Code blocks
become a one-cell table (QTextDocument draws table backgrounds and borders, not ``<pre>``
boxes) headed by a "Copy" link whose href names the block, so a painted message can still
offer Copy without one widget per block. A block that names its language is highlighted by
Pygments, as inline styles (QTextDocument reads no style sheet classes); one without a
language, or with one Pygments does not know, stays plain (guessing is slow and often wrong).
Code wraps (``pre-wrap``), so every character and the Copy link stay inside the column.

Every document a message is drawn in is a ``MessageDocument``: it loads nothing from disk or
the network, whatever its HTML names (Qt's own loader would read ``<img src="/dev/zero">``
until memory runs out, or block for good on a FIFO).

A long message is cut into pieces of bounded size (``split_long``: between paragraphs where it
can, a code block closed and opened again, a table's header repeated, a very long line folded),
each rendered and laid out on its own, so the window never lays out one huge document at once.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound
from PySide6.QtCore import QByteArray, QObject, QUrl
from PySide6.QtGui import QImage, QTextDocument, QTextOption

COPY_SCHEME = "conch-copy"  # href "conch-copy:<n>" copies code block n of the message
THINKING_HREF = "conch-thinking:toggle"
EXPAND_HREF = "conch-expand:toggle"  # "Show all" / "Show less" under a long message


@dataclass(frozen=True, slots=True)
class MarkdownStyle:
    """Colours that depend on the theme (light or dark palette)."""

    code_background: str = "#f3f3f5"
    code_border: str = "#d6d6dc"
    table_border: str = "#c8c8d0"
    link: str = "#2a62c9"
    quiet: str = "#6b6b76"
    mono_family: str = "monospace"
    code_style: str = "default"  # the Pygments style code blocks are coloured with


LIGHT = MarkdownStyle()
DARK = MarkdownStyle(
    code_background="#25262b",
    code_border="#3a3b42",
    table_border="#4a4b55",
    link="#8ab4ff",
    quiet="#9a9aa6",
    code_style="github-dark",
)
HIGHLIGHT_LIMIT = 20_000  # characters of one code block; a longer block is shown plain


@lru_cache(maxsize=64)
def _lexer(lang: str) -> Lexer | None:
    try:
        return get_lexer_by_name(lang, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=4)
def _formatter(style: str) -> HtmlFormatter:
    return HtmlFormatter(style=style, noclasses=True, nowrap=True)


def highlighted(code: str, lang: str, style: str) -> str | None:
    """``code`` as HTML spans coloured for ``lang`` in Pygments style ``style``; None when
    there is no lexer for ``lang`` (the caller shows it plain)."""
    lexer = _lexer(lang.lower()) if lang else None
    if lexer is None or len(code) > HIGHLIGHT_LIMIT:
        return None
    return str(highlight(code, lexer, _formatter(style))).rstrip("\n")


class MessageDocument(QTextDocument):
    """A QTextDocument that never loads a resource: only what Conch added to it with
    ``addResource`` (looked up before this is asked) is ever shown.

    Every picture a message names gets an empty placeholder; an empty answer would make Qt's
    image handler read the path from disk itself. Text wraps anywhere when a word is wider
    than the column (a long URL, a base64 line), so nothing runs past the edge."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        option = self.defaultTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setDefaultTextOption(option)

    def loadResource(self, kind: int, name: QUrl | str) -> Any:
        if kind == int(QTextDocument.ResourceType.ImageResource.value):
            return _placeholder()
        return QByteArray()


@lru_cache(maxsize=1)
def _placeholder() -> QImage:
    image = QImage(1, 1, QImage.Format.Format_ARGB32)
    image.fill(0)
    return image


@dataclass(frozen=True, slots=True)
class Rendered:
    """A message's HTML and the raw text of each code block (for Copy)."""

    html: str
    code_blocks: tuple[str, ...]


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    return md


class MarkdownRenderer:
    """Renders messages; one instance per style (the parser is reusable and not cheap)."""

    def __init__(self, style: MarkdownStyle = LIGHT) -> None:
        self.style = style
        self._md = _parser()
        # Set on the renderer directly: add_render_rule would rebind our methods to it.
        rules: dict[str, Any] = self._md.renderer.rules  # type: ignore[attr-defined]
        rules["fence"] = self._fence
        rules["code_block"] = self._fence
        rules["code_inline"] = self._code_inline
        rules["table_open"] = self._table_open
        rules["link_open"] = self._link_open
        rules["image"] = self._image
        self._blocks: list[str] = []
        self._highlight = True

    def render(self, text: str, *, highlight: bool = True) -> Rendered:
        """``text`` as HTML. ``highlight`` False leaves code plain: the same lines and the
        same height, for measuring a row that is not on screen (colouring waits for paint)."""
        self._blocks = []
        self._highlight = highlight
        body = self._md.render(text)
        blocks = tuple(self._blocks)
        self._blocks = []
        return Rendered(body, blocks)

    # --- render rules (markdown-it calls them with tokens, idx, options, env) ---------------

    def _fence(self, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
        token = tokens[idx]
        code = token.content
        n = len(self._blocks)
        self._blocks.append(code.rstrip("\n"))
        lang = (token.info or "").strip().split(" ")[0]
        s = self.style
        label = f"{html.escape(lang)} · " if lang else ""
        plain = code.rstrip("\n")
        lit = highlighted(plain, lang, s.code_style) if self._highlight else None
        code_html = lit or html.escape(plain)
        return (
            f'<table width="100%" cellspacing="0" cellpadding="6" border="1" '
            f'style="border-color:{s.code_border}; border-style:solid;" '
            f'bgcolor="{s.code_background}">'
            f'<tr><td><p align="right" style="margin:0;"><span style="color:{s.quiet};">'
            f"{label}</span>"
            f'<a href="{COPY_SCHEME}:{n}" style="color:{s.link};">Copy</a></p>'
            f'<pre style="font-family:{s.mono_family}; margin:0; white-space:pre-wrap;">'
            f"{code_html}</pre>"
            "</td></tr></table>\n"
        )

    def _code_inline(self, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
        s = self.style
        return (
            f'<code style="font-family:{s.mono_family}; background-color:{s.code_background};">'
            f"{html.escape(tokens[idx].content)}</code>"
        )

    def _table_open(self, _tokens: Sequence[Token], _idx: int, _options: Any, _env: Any) -> str:
        s = self.style
        return (
            f'<table cellspacing="0" cellpadding="4" border="1" '
            f'style="border-color:{s.table_border}; border-style:solid;">\n'
        )

    def _link_open(self, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
        href = str(tokens[idx].attrGet("href") or "")
        # Only ordinary links are clickable; our own schemes must not be forged by a message.
        if href.split(":", 1)[0].lower() not in ("http", "https", "mailto"):
            href = ""
        return f'<a href="{html.escape(href, quote=True)}" style="color:{self.style.link};">'

    def _image(self, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
        # Never let a message make the document load a file or URL: show the picture's name.
        token = tokens[idx]
        alt = token.content or "picture"
        src = str(token.attrGet("src") or "")
        shown = html.escape(f"[picture: {alt}]")
        if src.split(":", 1)[0].lower() in ("http", "https"):
            href = html.escape(src, quote=True)
            return f'<a href="{href}" style="color:{self.style.link};">{shown}</a>'
        return shown


def plain_to_html(text: str) -> str:
    """Text shown as it is (line breaks kept): a very long answer while it is still streaming."""
    return f'<p style="white-space:pre-wrap;">{html.escape(text)}</p>'


# --- long messages in pieces -----------------------------------------------------------------

PIECE_CHARS = 6_000  # a piece of a long message: one row, laid out in tens of milliseconds
PIECE_LINES = 120  # lines per piece (a code line costs more than its letters)
TABLE_LINES = 24  # table rows per piece (a table row costs more still)
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_BLANK_LINE = re.compile(r"^[ \t]*$", re.MULTILINE)
_TABLE_RULE = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of a long message, Markdown on its own. ``head``: the piece starts inside a
    code block cut across pieces (it opens it again), ``tail``: it ends inside one (it closes
    it); each the block's code as a span of the whole message's text."""

    text: str
    head: tuple[int, int] | None = None
    tail: tuple[int, int] | None = None


class _Splitter:
    """``split_long``'s state: the piece being filled, and what it is inside of."""

    def __init__(self, text: str, size: int, max_lines: int) -> None:
        self.text = text
        self.size = size
        self.max_lines = max_lines
        self.pieces: list[Piece] = []
        self.cur: list[str] = []
        self.length = 0
        self.lines = 0
        self.filled = False  # the piece has more than what it carried over
        self.mid = False  # the piece ends inside a line
        self.head: tuple[int, int] | None = None
        self.fence: tuple[str, str, int] | None = None  # its opening line, character, length
        self.span = (0, 0)  # where the code of the block being read is in the text
        self.table = ""  # the header and rule lines of the table being read
        self.previous = ""  # the last line outside code

    def add(self, part: str) -> None:
        self.cur.append(part)
        self.length += len(part)
        self.lines += part.count("\n")
        self.filled = True
        self.mid = not part.endswith("\n")

    def cut(self) -> None:
        """End the piece here, carrying an open code block or a table on to the next."""
        carry = ""
        tail = None
        if self.fence is not None:
            opening, char, count = self.fence
            self.cur.append(("\n" if self.mid else "") + char * count + "\n")
            carry = opening
            tail = self.span
        elif self.table:
            carry = self.table
        self.pieces.append(Piece("".join(self.cur), self.head, tail))
        self.head = tail
        self.cur = [carry] if carry else []
        self.length = len(carry)
        self.lines = carry.count("\n")
        self.filled = self.mid = False

    def run(self) -> list[Piece]:
        text, size = self.text, self.size
        pos = 0
        while pos < len(text):
            if self.fence is not None:
                pos = self.code(pos)
                continue
            if self.table:
                after = self.rows(pos)
                if after != pos:
                    pos = after
                    continue
            nl = text.find("\n", pos)
            end = len(text) if nl < 0 else nl + 1
            if end - pos > size:
                self.fold(pos, end)  # a very long line: no structure to keep inside it
                pos = end
                self.previous = self.table = ""
                continue
            unit = text[pos:end]
            pos = end
            most = TABLE_LINES if self.table else self.max_lines * 3 // 2
            full = self.length + len(unit) > size * 3 // 2 or self.lines >= most
            if self.filled and full and unit.strip():
                self.cut()  # no blank line came in time: cut between lines
            self.add(unit)
            line = unit.rstrip("\r\n")
            opened = _FENCE_OPEN.fullmatch(line)
            if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
                self.fence = (line + "\n", opened.group(1)[0], len(opened.group(1)))
                self.table = ""
            elif not line.strip():
                self.table = ""
                if self.length >= size or self.lines >= self.max_lines:
                    self.cut()
            elif (
                not self.table
                and "|" in self.previous
                and "|" in line
                and _TABLE_RULE.fullmatch(line)
            ):
                self.table = self.previous + line + "\n"
            self.previous = line + "\n" if line.strip() else ""
        if "".join(self.cur).strip():
            self.pieces.append(Piece("".join(self.cur), self.head))
        return self.pieces

    def fold(self, start: int, end: int) -> None:
        text, size = self.text, self.size
        while start < end:
            stop = min(end, start + size)
            if stop < end:
                space = text.rfind(" ", start + size * 4 // 5, stop)
                stop = space + 1 if space > start else stop
            if self.filled and self.length + (stop - start) > size * 3 // 2:
                self.cut()
            self.add(text[start:stop])
            start = stop

    def rows(self, pos: int) -> int:
        """Read a table's rows from ``pos`` to the blank line that ends it (or the end),
        ``TABLE_LINES`` a piece; returns where that blank line starts."""
        text, most = self.text, self.size * 3 // 2
        blank = _BLANK_LINE.search(text, pos)
        stop = blank.start() if blank is not None else len(text)
        while pos < stop:
            if self.filled and (self.lines >= TABLE_LINES or self.length >= most):
                self.cut()
            pos = self.take(pos, stop, TABLE_LINES - self.lines, most - self.length)
        return pos

    def take(self, pos: int, stop: int, lines: int, chars: int) -> int:
        """Add the whole lines from ``pos`` that fit in ``lines`` and ``chars`` (before
        ``stop``); a line too long for an empty piece is added in part. Returns the end."""
        text = self.text
        limit = min(stop, pos + max(1, chars))
        window = text[pos:limit]
        parts = window.split("\n", max(1, lines))
        if len(parts) > max(1, lines):  # more lines than room: end after the last that fits
            end = limit - len(parts[-1])
        elif limit == stop:
            end = stop  # all the rest fits
        else:
            end = pos + window.rfind("\n") + 1
        if end == pos:
            if self.filled:
                self.cut()
                return pos
            end = limit  # a line longer than a piece: fold it
        self.add(text[pos:end])
        return end

    def code(self, pos: int) -> int:
        """Read a code block's lines from ``pos`` to its closing line (or the end), cutting
        by lines and characters; returns where the text after the block starts."""
        assert self.fence is not None
        text, size = self.text, self.size
        _opening, char, count = self.fence
        found = _closing_line(text, pos, char, count)
        stop = found if found >= 0 else len(text)
        self.span = (pos, stop)
        while pos < stop:
            if self.filled and (self.lines >= self.max_lines or self.length >= size):
                self.cut()
            pos = self.take(pos, stop, self.max_lines - self.lines, size - self.length)
        if found < 0:
            return len(text)
        line_end = text.find("\n", found)
        after = len(text) if line_end < 0 else line_end + 1
        if self.mid:
            self.cur.append("\n")  # the block's last line had no line end of its own
        self.add(text[found:after])
        self.fence = None
        self.previous = ""
        return after


def _closing_line(text: str, pos: int, char: str, count: int) -> int:
    """Where the line closing a code block opened with ``count`` × ``char`` starts, at or
    after ``pos`` (which starts a line); -1 when the block runs to the end."""
    fence = char * count
    at = pos
    while True:
        found = text.find(fence, at)
        if found < 0:
            return -1
        start = text.rfind("\n", 0, found) + 1
        if start >= pos and not text[start:found].strip(" ") and found - start <= 3:
            end = text.find("\n", found)
            rest = text[found : len(text) if end < 0 else end]
            if not rest.strip(char).strip(" \t\r"):
                return start
        at = found + count


def split_long(text: str, size: int = PIECE_CHARS, max_lines: int = PIECE_LINES) -> list[Piece]:
    """``text`` cut into pieces of about ``size`` characters or ``max_lines`` lines: after a
    blank line where one comes soon enough, else between lines (a code block is closed and
    opened again, a table's header repeated), a very long line folded. A short text is one
    piece, itself."""
    if len(text) <= size and text.count("\n") < max_lines:
        return [Piece(text)]
    return _Splitter(text, size, max_lines).run()


@lru_cache(maxsize=8)
def pieces_of(text: str) -> tuple[Piece, ...]:
    """``split_long(text)``, kept for the last few long messages."""
    return tuple(split_long(text))


def _block_parser() -> MarkdownIt:
    # Blocks only: finding code blocks needs no inline parsing (most of the time on a table).
    md = _parser()
    md.disable("inline")
    return md


_BLOCKS = _block_parser()


@lru_cache(maxsize=64)
def _raw_blocks(text: str) -> tuple[str, ...]:
    return tuple(
        token.content for token in _BLOCKS.parse(text) if token.type in ("fence", "code_block")
    )


_MAY_HAVE_CODE = re.compile(r"```|~~~|^(?: {4}|\t)", re.MULTILINE)


def _blocks_of(text: str, piece: Piece) -> list[str]:
    """The code blocks of ``piece`` of message ``text``, in order; one cut across pieces is
    read whole from the message. Only a piece that may hold code is parsed (a table is slow)."""
    raw = list(_raw_blocks(piece.text)) if _MAY_HAVE_CODE.search(piece.text) else []
    if piece.tail is not None and raw:
        raw[-1] = text[piece.tail[0] : piece.tail[1]]
    if piece.head is not None and raw:
        raw[0] = text[piece.head[0] : piece.head[1]]
    return [block.rstrip("\n") for block in raw]


@lru_cache(maxsize=8)
def code_blocks(text: str) -> tuple[str, ...]:
    """The code blocks of a message, in order, without rendering it (a block cut across the
    pieces of a long message is one block)."""
    found: list[str] = []
    for piece in pieces_of(text):
        if piece.head is not None and piece.head == piece.tail:
            continue  # all of it inside a block counted where the block starts
        blocks = _blocks_of(text, piece)
        found.extend(blocks[1:] if piece.head is not None else blocks)
    return tuple(found)


def code_block(text: str, part: int, n: int) -> str | None:
    """The code block whose Copy link is ``n`` in piece ``part`` of message ``text`` (each
    piece numbers its own), whole; None when there is none."""
    pieces = pieces_of(text)
    if not 0 <= part < len(pieces):
        return None
    blocks = _blocks_of(text, pieces[part])
    return blocks[n] if 0 <= n < len(blocks) else None
