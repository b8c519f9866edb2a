"""Importing chats: Conch's own JSON export, ChatGPT's ``conversations.json`` and Open WebUI's
chat export (the shapes are described beside the fixtures in tests/data/imports).

A file is read and understood whole before anything is written; then each chat is written
hidden and shown only once all of it is in, so a failure leaves nothing half made. An imported
chat is a chat like any other: the engine rebuilds the model's copy from the chat log on first
use and folds it there when it is long. What it holds did not come from the person's typing
here, so learning from it waits for their OK (DESIGN §4).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from app.export import FORMAT
from app.store import ChatStore, StoreError
from app.trash import empty_trash
from app.trust import untrusted_message
from engines.base import Attachment, Picture

MAX_BYTES = 200 * 1024 * 1024  # larger files are refused before they are read
UNTITLED = "Imported chat"

Role = Literal["user", "assistant", "tool"]
Source = Literal["conch", "chatgpt", "open-webui"]


class ImportFailedError(Exception):
    """The file could not be imported; ``str()`` is one sentence saying why and what to do."""


class _UnreadableError(Exception):
    """Part of a file that looked right could not be read."""


@dataclass(frozen=True, slots=True)
class Version:
    text: str
    thinking: str = ""
    model_key: str = ""


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    role: Role
    text: str
    thinking: str = ""
    model_key: str = ""
    partial: bool = False
    attachments: tuple[Attachment, ...] = ()
    pictures: tuple[Picture, ...] = ()
    other_versions: tuple[Version, ...] = ()  # a regenerated answer's versions not shown


@dataclass(frozen=True, slots=True)
class ImportedChat:
    title: str
    messages: tuple[ImportedMessage, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Parsed:
    source: Source
    chats: tuple[ImportedChat, ...]
    skipped: int = 0  # conversations with no message to import


SOURCE_NAMES: dict[Source, str] = {
    "conch": "Conch",
    "chatgpt": "ChatGPT",
    "open-webui": "Open WebUI",
}

KNOWN = "Conch reads its own JSON export, ChatGPT's conversations.json and Open WebUI's export"


# --- reading a file ---------------------------------------------------------------------------


def read_file(path: Path, *, max_bytes: int = MAX_BYTES) -> Parsed:
    """Read and understand ``path``. Raises ``ImportFailedError`` with a sentence for the person."""
    name = path.name
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ImportFailedError(
                f"{name} is {_megabytes(size)}, more than the {_megabytes(max_bytes)} Conch "
                "imports at once; export fewer chats and try again."
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFailedError(
            f"{name} could not be read ({exc.strerror or exc}); check that the file is there "
            "and readable."
        ) from exc
    return parse_bytes(raw, name)


def parse_bytes(raw: bytes, name: str = "The file") -> Parsed:
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ImportFailedError(f"{name} is not a text file; {KNOWN}.") from exc
    except json.JSONDecodeError as exc:
        raise ImportFailedError(
            f"{name} is damaged or not JSON (line {exc.lineno}: {exc.msg.lower()}); "
            "export the chat again."
        ) from exc
    except RecursionError as exc:
        raise ImportFailedError(
            f"{name} is nested too deeply to be a chat export; {KNOWN}."
        ) from exc
    return parse(data, name)


def parse(data: Any, name: str = "The file") -> Parsed:
    """Chats from already-decoded JSON ``data``."""
    source = detect(data)
    if source is None:
        raise ImportFailedError(f"{name} is not a chat export Conch knows; {KNOWN}.")
    items = data if isinstance(data, list) else [data]
    reader: Callable[[Any], ImportedChat] = _READERS[source]
    chats: list[ImportedChat] = []
    try:
        for item in items:
            chats.append(reader(item))
    except (
        _UnreadableError,
        KeyError,
        TypeError,
        AttributeError,
        ValueError,
        ValidationError,
    ) as exc:
        raise ImportFailedError(
            f"{name} looks like {_article(source)} export but part of it could not be read; "
            "export it again, and check that it was not cut short."
        ) from exc
    kept = tuple(c for c in chats if c.messages)
    if not kept:
        raise ImportFailedError(f"{name} holds no messages to import.")
    return Parsed(source, kept, skipped=len(chats) - len(kept))


def detect(data: Any) -> Source | None:
    """Which app wrote ``data``, from its shape; None when it is none Conch knows."""
    first = data[0] if isinstance(data, list) and data else data
    if not isinstance(first, dict):
        return None
    if first.get("format") == FORMAT and isinstance(first.get("messages"), list):
        return "conch"
    if isinstance(first.get("mapping"), dict):
        return "chatgpt"
    chat = first.get("chat")
    body: dict[str, Any] = chat if isinstance(chat, dict) else first
    history = body.get("history")
    if (isinstance(history, dict) and isinstance(history.get("messages"), dict)) or (
        isinstance(body.get("messages"), list) and _has_roles(body["messages"])
    ):
        return "open-webui"
    return None


def _has_roles(messages: list[Any]) -> bool:
    return all(isinstance(m, dict) and "role" in m and "content" in m for m in messages[:5])


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):,.0f} MB"


def _article(source: Source) -> str:
    words = SOURCE_NAMES[source]
    return f"an {words}" if words[0] in "AEIOU" else f"a {words}"


def _title(value: Any) -> str:
    text = " ".join(str(value).split()) if isinstance(value, str) else ""
    return text[:200] or UNTITLED


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _UnreadableError("a message's text is not text")
    return value


# --- Conch's own export -----------------------------------------------------------------------


def _conch_message(item: dict[str, Any]) -> tuple[Role, str, str, str]:
    role = item["role"]
    if role not in ("user", "assistant", "tool"):
        raise _UnreadableError(f"unknown role {role!r}")
    return role, _text(item["text"]), _text(item.get("thinking", "")), str(item.get("model", ""))


def _read_conch(item: Any) -> ImportedChat:
    messages: list[ImportedMessage] = []
    for m in item["messages"]:
        role, text, thinking, model_key = _conch_message(m)
        others = tuple(
            Version(*_conch_message({"role": role, **v})[1:]) for v in m.get("other_versions", [])
        )
        messages.append(
            ImportedMessage(
                role,
                text,
                thinking,
                model_key,
                partial=bool(m.get("partial", False)),
                attachments=tuple(Attachment.model_validate(a) for a in m.get("attachments", [])),
                pictures=tuple(Picture.model_validate(p) for p in m.get("pictures", [])),
                other_versions=others,
            )
        )
    return ImportedChat(_title(item.get("title")), tuple(messages))


# --- ChatGPT ----------------------------------------------------------------------------------

# Content that is part of what was said; the rest (custom instructions, thinking summaries,
# browsing displays, tool output) is ChatGPT's own machinery.
_CHATGPT_SAID = {"text", "multimodal_text", "code"}


def _chatgpt_branch(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes from the root to ``current`` (the branch last shown); without a usable
    ``current_node``, the newest child at each step."""
    if not isinstance(current, str) or current not in mapping:
        roots = [k for k, n in mapping.items() if not n.get("parent")]
        if not roots:
            raise _UnreadableError("no root node")
        current = roots[0]
        seen = {current}
        while mapping[current].get("children"):
            current = mapping[current]["children"][-1]
            if current in seen or current not in mapping:
                break
            seen.add(current)
    branch: list[dict[str, Any]] = []
    seen = set()
    node_id: Any = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        branch.append(node)
        node_id = node.get("parent")
    branch.reverse()
    return branch


def _chatgpt_text(message: dict[str, Any]) -> str:
    content = message.get("content") or {}
    kind = content.get("content_type")
    if kind not in _CHATGPT_SAID:
        return ""
    if kind == "code":
        return ""  # a call to a tool (its recipient is not "all"): the answer follows it
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise _UnreadableError("parts is not a list")
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict) and "asset_pointer" in part:
            pieces.append("[A picture that was not part of the export]")
    return "\n\n".join(p for p in pieces if p.strip())


def _read_chatgpt(item: Any) -> ImportedChat:
    mapping = item["mapping"]
    if not isinstance(mapping, dict):
        raise _UnreadableError("mapping is not an object")
    said: list[ImportedMessage] = []
    for node in _chatgpt_branch(mapping, item.get("current_node")):
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        role = (message.get("author") or {}).get("role")
        metadata = message.get("metadata") or {}
        if role not in ("user", "assistant") or metadata.get(
            "is_visually_hidden_from_conversation"
        ):
            continue
        if message.get("recipient", "all") != "all":
            continue  # the model calling a tool, not speaking to the person
        text = _chatgpt_text(message)
        if text.strip():
            said.append(ImportedMessage(role, text))
    return ImportedChat(_title(item.get("title")), _joined(said))


def _joined(said: Sequence[ImportedMessage]) -> tuple[ImportedMessage, ...]:
    """One message per turn side: what the other app kept as pieces in a row (an answer split
    around a tool call) becomes one message, as Conch shows and sends it."""
    out: list[ImportedMessage] = []
    for m in said:
        if out and out[-1].role == m.role:
            last = out[-1]
            text = "\n\n".join(t for t in (last.text, m.text) if t)
            thinking = "\n\n".join(t for t in (last.thinking, m.thinking) if t)
            out[-1] = ImportedMessage(m.role, text, thinking, last.model_key or m.model_key)
        else:
            out.append(m)
    return tuple(out)


# --- Open WebUI -------------------------------------------------------------------------------

_REASONING = re.compile(
    r'<details\s+type="reasoning"[^>]*>\s*(?:<summary>.*?</summary>)?(.*?)</details>\s*',
    re.DOTALL | re.IGNORECASE,
)
_ENTITIES = {"&gt;": ">", "&lt;": "<", "&quot;": '"', "&#39;": "'", "&amp;": "&"}


def _open_webui_text(content: str) -> tuple[str, str]:
    """(the answer, its reasoning): Open WebUI keeps a model's reasoning in the answer's text
    inside a ``<details type="reasoning">`` block, quoted line by line."""
    thinking: list[str] = []

    def take(match: re.Match[str]) -> str:
        body = match.group(1)
        for entity, char in _ENTITIES.items():
            body = body.replace(entity, char)
        lines = [line[1:].lstrip() if line.startswith(">") else line for line in body.splitlines()]
        thinking.append("\n".join(lines).strip())
        return ""

    return _REASONING.sub(take, content).strip(), "\n\n".join(t for t in thinking if t)


def _open_webui_branch(body: dict[str, Any]) -> list[dict[str, Any]]:
    history = body.get("history")
    if isinstance(history, dict) and isinstance(history.get("messages"), dict):
        messages: dict[str, Any] = history["messages"]
        current = history.get("currentId")
        if not isinstance(current, str) or current not in messages:
            # No usable pointer: the newest message is where the person left off.
            current = max(messages, key=lambda k: messages[k].get("timestamp") or 0, default=None)
        branch: list[dict[str, Any]] = []
        seen: set[str] = set()
        while isinstance(current, str) and current in messages and current not in seen:
            seen.add(current)
            branch.append(messages[current])
            current = messages[current].get("parentId")
        branch.reverse()
        if branch:
            return branch
    listed = body.get("messages")
    if isinstance(listed, list):
        return [m for m in listed if isinstance(m, dict)]
    raise _UnreadableError("no messages")


def _open_webui_versions(body: dict[str, Any], message: dict[str, Any]) -> tuple[Version, ...]:
    """The other answers to the same question (a regenerated answer's earlier versions)."""
    history = body.get("history")
    everything = history.get("messages") if isinstance(history, dict) else None
    if not isinstance(everything, dict) or message.get("role") != "assistant":
        return ()
    parent = everything.get(message.get("parentId") or "")
    siblings = parent.get("childrenIds") or [] if isinstance(parent, dict) else []
    out: list[Version] = []
    for sibling_id in siblings:
        sibling = everything.get(sibling_id)
        if sibling_id == message.get("id") or not isinstance(sibling, dict):
            continue
        if sibling.get("role") == "assistant" and isinstance(sibling.get("content"), str):
            text, thinking = _open_webui_text(sibling["content"])
            if text:
                out.append(Version(text, thinking))
    return tuple(out)


def _read_open_webui(item: Any) -> ImportedChat:
    body = item["chat"] if isinstance(item.get("chat"), dict) else item
    said: list[ImportedMessage] = []
    for message in _open_webui_branch(body):
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        text, thinking = _open_webui_text(content if isinstance(content, str) else "")
        if text or thinking:
            versions = _open_webui_versions(body, message)
            said.append(ImportedMessage(role, text, thinking, other_versions=versions))
    title = item.get("title") or body.get("title")
    return ImportedChat(_title(title), _joined(said))


_READERS: dict[Source, Callable[[Any], ImportedChat]] = {
    "conch": _read_conch,
    "chatgpt": _read_chatgpt,
    "open-webui": _read_open_webui,
}


# --- writing to the chat log ------------------------------------------------------------------


def save(store: ChatStore, data_dir: Path, chats: Iterable[ImportedChat]) -> list[str]:
    """Write ``chats`` to the chat log; their ids, in the file's order (the first on top of
    the sidebar). All or nothing: on a failure what was written is removed again and
    ``ImportFailedError`` says why."""
    made: list[str] = []
    try:
        # Last first: an export lists the newest chat first, and the chat written last is the
        # one on top of the sidebar.
        for chat in reversed(list(chats)):
            made.append(store.create_chat(chat.title).id)
            _write(store, made[-1], chat)
        for chat_id in made:
            store.restore_chat(chat_id)  # shown only now that every chat is whole
    except StoreError as exc:
        # Should even that fail, they stay in the trash, where the person sees and empties them.
        with contextlib.suppress(StoreError):
            empty_trash(store, data_dir, made)
        raise ImportFailedError(f"The chats could not be saved: {exc}") from exc
    return made[::-1]


def _write(store: ChatStore, chat_id: str, chat: ImportedChat) -> None:
    store.delete_chat(chat_id)  # hidden (in the trash) until it is whole
    for m in chat.messages:
        stored = store.append_message(
            chat_id,
            m.role,
            m.text,
            thinking=m.thinking,
            pictures=m.pictures,
            attachments=m.attachments,
            partial=m.partial,
            model_key=m.model_key,
            untrusted=untrusted_message(m.role, m.text, imported=True),
        )
        for v in m.other_versions:
            other = store.append_message(
                chat_id,
                m.role,
                v.text,
                thinking=v.thinking,
                model_key=v.model_key,
                version_of=stored.seq,
            )
            store.set_shelved(chat_id, other.seq, True)
