"""Exporting one chat as Markdown (to read) or JSON (to keep, or to import again).

Both hold what the person sees: every shown message, files and pictures named (JSON carries
them whole), and each summary as readable text. What a tool gave back is marked as such: in
Markdown a labelled block quoted as plain text (it is not the model's words, nor markup), in
JSON a "tool" message with the call it answered. JSON also keeps the other versions of a
regenerated answer. Neither holds a setting, a key or anything about the computer: the chat's
own words only. Summaries are scrubbed of secrets once more on the way out, since one written
before a scrubbing rule existed may still hold what the rule now catches; the messages are the
person's own words and go out as they are.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from app.settings import write_atomically
from app.store import ChatStore, StoredMessage
from app.tool_calls import RESULT_LABEL, tool_call_book
from engines.base import ToolResult
from engines.scrub import scrub

FORMAT = "conch-chat"  # the JSON export's "format"; app/importers.py recognises it
VERSION = 1
NAME_CHARS = 80  # a suggested file name's title part, at most

Kind = Literal["markdown", "json"]
SUFFIXES: dict[Kind, str] = {"markdown": ".md", "json": ".json"}

# Names Windows keeps for devices: a file called "con.md" cannot be made there.
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{n}" for p in ("com", "lpt") for n in range(10)}


class ExportError(Exception):
    """The export could not be written; ``str()`` says why and what to do."""


def suggested_name(title: str, when: float | None = None, kind: Kind = "markdown") -> str:
    """A file name from the chat's title and the date: letters, digits, spaces, "-" and "_"
    only, so it is valid on every system ("Garden plans 2026-11-30.md")."""
    text = unicodedata.normalize("NFC", title)
    text = "".join(ch if ch.isalnum() or ch in " -_" else " " for ch in text)
    text = re.sub(r"\s+", " ", text).strip(" -_")[:NAME_CHARS].rstrip(" -_") or "Chat"
    if text.lower() in _RESERVED:
        text = f"Chat {text}"
    day = datetime.fromtimestamp(time.time() if when is None else when).strftime("%Y-%m-%d")
    return f"{text} {day}{SUFFIXES[kind]}"


def kind_of(path: Path) -> Kind:
    return "json" if path.suffix.lower() == ".json" else "markdown"


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _summaries(store: ChatStore, chat_id: str) -> list[tuple[int, str, str, float]]:
    """Every summary the chat had, oldest first, as (first kept seq, text, model, created);
    a withdrawn fold (an empty summary) is left out."""
    rows = store.query(
        "SELECT first_kept_seq, summary, model, created FROM compactions "
        "WHERE chat_id = ? AND summary != '' ORDER BY id",
        (chat_id,),
    )
    return [(int(r[0]), scrub(str(r[1])), str(r[2]), float(r[3])) for r in rows]


def _default_name(model_key: str) -> str:
    return model_key.split("/", 1)[-1] or "Assistant"


def to_markdown(
    store: ChatStore, chat_id: str, model_name: Callable[[str], str] = _default_name
) -> str:
    """The chat as Markdown: the title, each message under who wrote it, and the latest
    summary where the model's memory starts."""
    chat = store.get_chat(chat_id)
    if chat is None:
        raise ExportError("That chat is gone; there is nothing to export.")
    lines = [f"# {chat.title}", ""]
    fold = store.latest_compaction(chat_id)
    messages = store.messages(chat_id)
    calls = _tool_calls(store, chat_id, messages)
    for m in messages:
        if fold is not None and m.seq == fold.first_kept_seq:
            lines += ["---", "", f"*Earlier messages are summarised for {fold.model}:*", ""]
            summary = scrub(fold.summary)
            lines += ["> " + line if line else ">" for line in summary.splitlines()]
            lines += ["", "---", ""]
        if m.role == "tool":
            lines += _tool_block(m.text, calls.get(m.seq))
            continue
        who = "You" if m.role == "user" else model_name(m.model_key)
        lines += [f"**{who}:**", "", m.text, ""]
        for a in m.attachments:
            lines += [f"*Attached: {a.name}*", ""]
        for p in m.pictures:
            lines += [f"*Picture: {p.name}*", ""]
    return "\n".join(lines)


def _tool_calls(
    store: ChatStore, chat_id: str, messages: list[StoredMessage]
) -> dict[int, ToolResult]:
    """How each "tool" message's call went, by seq, where the chat log kept it."""
    seqs = [m.seq for m in messages if m.role == "tool"]
    book = tool_call_book(store) if seqs else None
    return book.between(chat_id, seqs[0], seqs[-1]) if book is not None else {}


def _tool_block(text: str, call: ToolResult | None) -> list[str]:
    """A tool's result as Markdown: "**Tool result · read_file (Files):**" over the text, quoted
    and fenced so that it reads as what the tool gave back, never as markup."""
    label = RESULT_LABEL
    if call is not None:
        label += f" · {call.tool}" + (f" ({call.server})" if call.server else "")
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)  # longer than any run in the text
    body = [fence + "text", *text.splitlines(), fence]
    return [f"**{label}:**", "", *("> " + line if line else ">" for line in body), ""]


def _message(m: StoredMessage, call: ToolResult | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "text": m.text, "created": _iso(m.created)}
    if m.model_key:
        out["model"] = m.model_key
    if m.thinking:
        out["thinking"] = m.thinking
    if m.partial:
        out["partial"] = True  # stopped or cut off before the end
    if m.attachments:
        out["attachments"] = [{"name": a.name, "text": a.text} for a in m.attachments]
    if m.pictures:
        out["pictures"] = [p.model_dump() for p in m.pictures]
    if call is not None:  # a "tool" message: the call it is the result of
        out["tool"] = {
            "name": call.tool,
            "server": call.server,
            "arguments": call.arguments,
            "status": call.status,
        }
    return out


def to_data(store: ChatStore, chat_id: str) -> dict[str, Any]:
    """The chat as plain data: what the JSON export holds."""
    chat = store.get_chat(chat_id)
    if chat is None:
        raise ExportError("That chat is gone; there is nothing to export.")
    messages: list[dict[str, Any]] = []
    versions = store.all_versions(chat_id)
    shown = store.messages(chat_id)
    calls = _tool_calls(store, chat_id, shown)
    for m in shown:
        item = _message(m, calls.get(m.seq))
        item["seq"] = m.seq
        others = [s for s in versions[m.seq].seqs if s != m.seq] if m.seq in versions else []
        kept = [store.message(chat_id, s) for s in others]
        if kept:
            # A regenerated answer: the versions not shown, oldest first, and where the shown
            # one stands among them (an import puts it back in its place).
            item["other_versions"] = [_message(v) for v in kept if v is not None]
            item["shown_at"] = versions[m.seq].seqs.index(m.seq)
        messages.append(item)
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported": _iso(time.time()),
        "title": chat.title,
        "created": _iso(chat.created),
        "model": chat.model_key,
        "folder": chat.folder,
        "pinned": chat.pinned,
        "messages": messages,
        "summaries": [
            {"before_message": seq, "model": model, "created": _iso(created), "text": text}
            for seq, text, model, created in _summaries(store, chat_id)
        ],
    }


def to_json(store: ChatStore, chat_id: str) -> str:
    return json.dumps(to_data(store, chat_id), ensure_ascii=False, indent=2) + "\n"


def export_chat(
    store: ChatStore,
    chat_id: str,
    path: Path,
    *,
    model_name: Callable[[str], str] = _default_name,
) -> Path:
    """Write the chat to ``path``, as JSON when it ends in ".json", else as Markdown, all or
    nothing. Raises ``ExportError`` with a sentence for the person."""
    text = (
        to_json(store, chat_id)
        if kind_of(path) == "json"
        else to_markdown(store, chat_id, model_name)
    )
    try:
        write_atomically(path, text.encode("utf-8"))
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ExportError(
            f"The chat could not be saved to {path.name} ({why}); choose another folder."
        ) from exc
    return path
