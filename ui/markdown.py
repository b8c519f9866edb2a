"""Markdown → the HTML subset QTextDocument renders, for chat messages.

Messages are CommonMark plus tables and strikethrough (markdown-it-py). Raw HTML in a message is
shown as text, never interpreted: a model's answer must not restyle the window. Code blocks
become a one-cell table (QTextDocument draws table backgrounds and borders, not ``<pre>``
boxes) headed by a "Copy" link whose href names the block, so a painted message can still
offer Copy without one widget per block. A block that names its language is highlighted by
Pygments, as inline styles (QTextDocument reads no style sheet classes); one without a
language, or with one Pygments does not know, stays plain (guessing is slow and often wrong).
"""

from __future__ import annotations

import html
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
            f'<pre style="font-family:{s.mono_family}; margin:0;">{code_html}</pre>'
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


def code_blocks(text: str) -> tuple[str, ...]:
    """The code blocks of a message, in order, without rendering it."""
    found: list[str] = []
    for token in _parser().parse(text):
        if token.type in ("fence", "code_block"):
            found.append(token.content.rstrip("\n"))
    return tuple(found)
