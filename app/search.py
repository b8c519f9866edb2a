"""Searching chats: which chats match, and where, with a short snippet around the match.

A chat matches when its title or one of its shown messages (not deleted, not a version set
aside) holds the words. A match in a message names it (``seq``), so the window can open the
chat there; the newest such message is the one shown. A match in what a tool gave back says so
in its snippet ("Tool result: …"): those are not the person's or the model's words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.store import UNTITLED_TITLE, ChatStore
from app.tool_calls import RESULT_LABEL

SNIPPET_BEFORE = 32  # characters of context before the match
SNIPPET_CHARS = 110  # the snippet's length at most, the match included
MAX_HITS = 200  # a search lists at most this many chats


@dataclass(frozen=True, slots=True)
class Hit:
    """One chat that matched. ``seq`` is None when only the title matched; ``start``/``end``
    mark the match inside ``snippet``; ``role`` is the matching message's ("tool": a result)."""

    chat_id: str
    title: str
    seq: int | None = None
    snippet: str = ""
    start: int = 0
    end: int = 0
    role: str = ""


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_SQL = f"""
SELECT id, title, seq FROM (
    SELECT c.id, COALESCE(NULLIF(c.title, ''), ?2) AS title, c.updated,
        (SELECT m.seq FROM messages m WHERE m.chat_id = c.id AND m.deleted_at IS NULL
            AND m.shelved = 0 AND m.text LIKE ?1 ESCAPE '\\' ORDER BY m.seq DESC LIMIT 1) AS seq
    FROM chats c WHERE c.deleted_at IS NULL
) WHERE title LIKE ?1 ESCAPE '\\' OR seq IS NOT NULL ORDER BY updated DESC LIMIT {MAX_HITS}
"""


def search(store: ChatStore, query: str) -> list[Hit]:
    """The chats matching ``query`` (a phrase, any case), most recently used first."""
    words = " ".join(query.split())
    if not words:
        return []
    hits: list[Hit] = []
    for chat_id, title, seq in store.query(_SQL, (_like(words), UNTITLED_TITLE)):
        message = store.message(chat_id, seq) if seq is not None else None
        if message is None:
            hits.append(Hit(chat_id, title))
            continue
        snippet, start, end = snippet_of(message.text, words)
        if message.role == "tool":
            lead = f"{RESULT_LABEL}: "
            snippet, start, end = lead + snippet, start + len(lead), end + len(lead)
        hits.append(Hit(chat_id, title, int(seq), snippet, start, end, message.role))
    return hits


def snippet_of(text: str, words: str) -> tuple[str, int, int]:
    """A one-line piece of ``text`` around the first match of ``words``, cut at word
    boundaries with "…" where it was cut, and where the match sits in it."""
    flat = " ".join(text.split())
    pattern = r"\s+".join(re.escape(w) for w in words.split())
    found = re.search(pattern, flat, re.IGNORECASE)
    if found is None:  # LIKE folds only ASCII case; show the start rather than nothing
        piece = flat[:SNIPPET_CHARS]
        cut = len(piece) < len(flat)
        return (piece.rstrip() + "…" if cut else piece), 0, 0
    begin = max(0, found.start() - SNIPPET_BEFORE)
    if begin > 0:
        space = flat.find(" ", begin, found.start())
        begin = space + 1 if space >= 0 else begin
    stop = min(len(flat), max(found.end(), begin + SNIPPET_CHARS))
    if stop < len(flat):
        space = flat.rfind(" ", found.end(), stop)
        stop = space if space >= 0 else stop
    lead = "…" if begin > 0 else ""
    tail = "…" if stop < len(flat) else ""
    snippet = lead + flat[begin:stop] + tail
    start = len(lead) + found.start() - begin
    return snippet, start, start + (found.end() - found.start())
