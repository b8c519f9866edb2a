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
    shown_at: int = 0  # where the shown text stands among all versions, oldest first

    @property
    def shown_index(self) -> int:
        return max(0, min(self.shown_at, len(self.other_versions)))

    def in_order(self) -> list[Version]:
        """Every version, oldest first, the shown one at ``shown_index``."""
        shown = Version(self.text, self.thinking, self.model_key)
        at = self.shown_index
        return [*self.other_versions[:at], shown, *self.other_versions[at:]]


@dataclass(frozen=True, slots=True)
class ImportedChat:
    title: str
    messages: tuple[ImportedMessage, ...] = field(default_factory=tuple)
    folder: str = ""  # the sidebar folder it was in (Conch's own export)
    pinned: bool = False


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
        # json's words point at the place it names apart ("Unterminated string starting
        # at"): the place is said here, so they end without a dangling "at".
        what = re.sub(r"\s+(?:starting\s+)?at$", "", exc.msg).lower()
        raise ImportFailedError(
            f"{name} is damaged or not JSON (line {exc.lineno}, column {exc.colno}: {what}); "
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
                # Files from before "shown_at": the shown version was the newest.
                shown_at=int(m.get("shown_at", len(others))),
            )
        )
    folder = item.get("folder", "")
    return ImportedChat(
        _title(item.get("title")),
        tuple(messages),
        folder=folder if isinstance(folder, str) else "",
        pinned=item.get("pinned") is True,
    )


# --- ChatGPT ----------------------------------------------------------------------------------

# Content that is part of what was said; the rest (custom instructions, browsing displays,
# tool output) is ChatGPT's own machinery. "thoughts" is a reasoning model's thinking.
_CHATGPT_SAID = {"text", "multimodal_text", "thoughts"}
_UNEXPORTED = "that was not part of the export"


def _chatgpt_branch(mapping: dict[str, Any], current: Any) -> list[str]:
    """The node ids from the root to ``current`` (the branch last shown); without a usable
    ``current_node``, the newest child at each step."""
    if not isinstance(current, str) or current not in mapping:
        roots = [k for k, n in mapping.items() if not n.get("parent")]
        if not roots:
            raise _UnreadableError("no root node")
        current = _chatgpt_newest_leaf(mapping, roots[0])
    branch: list[str] = []
    seen: set[str] = set()
    node_id: Any = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        branch.append(node_id)
        node_id = mapping[node_id].get("parent")
    branch.reverse()
    return branch


def _chatgpt_newest_leaf(mapping: dict[str, Any], node_id: str) -> str:
    seen = {node_id}
    while True:
        children = [c for c in mapping[node_id].get("children") or [] if c in mapping]
        if not children or children[-1] in seen:
            return node_id
        node_id = children[-1]
        seen.add(node_id)


def _picture_line(part: dict[str, Any], names: dict[str, str]) -> str:
    """A picture the export names but does not hold: what it was, never silently nothing."""
    pointer = str(part.get("asset_pointer", ""))
    dalle = (part.get("metadata") or {}).get("dalle") or {}
    prompt = " ".join(str(dalle.get("prompt") or "").split())
    if prompt:
        return f"[A picture DALL·E made from “{prompt}”, not part of the export]"
    name = names.get(pointer.rsplit("/", 1)[-1], "")
    return f"[A picture, {name}, {_UNEXPORTED}]" if name else f"[A picture {_UNEXPORTED}]"


def _chatgpt_said(message: dict[str, Any]) -> tuple[str, str]:
    """(what was said, thinking) of one ChatGPT message: voice turns by their transcript,
    pictures named, a reasoning model's thoughts as thinking."""
    content = message.get("content") or {}
    kind = content.get("content_type")
    if kind not in _CHATGPT_SAID:
        return "", ""
    if kind == "thoughts":
        thoughts = content.get("thoughts") or []
        said = [
            str(t.get("content") or t.get("summary") or "").strip()
            for t in thoughts
            if isinstance(t, dict)
        ]
        return "", "\n\n".join(t for t in said if t)
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise _UnreadableError("parts is not a list")
    attachments = (message.get("metadata") or {}).get("attachments") or []
    names = {
        str(a.get("id")): " ".join(str(a.get("name") or "").split())
        for a in attachments
        if isinstance(a, dict) and a.get("id")
    }
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
        elif not isinstance(part, dict):
            continue
        elif part.get("content_type") == "audio_transcription":
            pieces.append(str(part.get("text") or ""))  # a voice turn: its words
        elif part.get("content_type") == "image_asset_pointer":
            pieces.append(_picture_line(part, names))
        # Audio and video recordings of a voice turn: its words are the transcription.
    return "\n\n".join(p for p in pieces if p.strip()), ""


def _chatgpt_piece(node: dict[str, Any]) -> ImportedMessage | None:
    """One node as what the person or the assistant said (None: ChatGPT's machinery)."""
    message = node.get("message")
    if not isinstance(message, dict):
        return None
    author = message.get("author") or {}
    role = author.get("role")
    metadata = message.get("metadata") or {}
    if metadata.get("is_visually_hidden_from_conversation"):
        return None
    if role == "tool":
        # A tool's output is ChatGPT's machinery, except the pictures DALL·E made.
        text, _ = _chatgpt_said(message)
        pictures = [p for p in text.split("\n\n") if p.startswith("[A picture")]
        if not pictures:
            return None
        return ImportedMessage("assistant", "\n\n".join(pictures))
    if role not in ("user", "assistant"):
        return None
    if message.get("recipient", "all") != "all":
        return None  # the model calling a tool, not speaking to the person
    text, thinking = _chatgpt_said(message)
    if not text.strip() and not thinking.strip():
        return None
    slug = str(metadata.get("model_slug") or "") if role == "assistant" else ""
    return ImportedMessage(role, text, thinking, f"chatgpt/{slug}" if slug else "")


def _chatgpt_run(mapping: dict[str, Any], node_id: str) -> tuple[list[ImportedMessage], str]:
    """What one side said from ``node_id`` on, following the newest child while the same
    side speaks (or ChatGPT's machinery sits between); and the node where the other side
    starts ("" when the branch ends)."""
    side = ""
    run: list[ImportedMessage] = []
    seen: set[str] = set()
    current: str = node_id
    while current in mapping and current not in seen:
        seen.add(current)
        piece = _chatgpt_piece(mapping[current])
        if piece is not None:
            if side and piece.role != side:
                return run, current
            side = piece.role
            run.append(piece)
        children = [c for c in mapping[current].get("children") or [] if c in mapping]
        if not children:
            break
        current = children[-1]
    return run, ""


def _chatgpt_versions(
    mapping: dict[str, Any], start: str, role: str, on_branch: set[str]
) -> tuple[list[Version], int, list[tuple[int, Version]]]:
    """The other versions of the message that starts at ``start`` (a regenerated answer's
    siblings, an edited question's), oldest first; where the shown one stands among them; and
    for an edited question, each other branch's answer by the branch's place."""
    parent = mapping[start].get("parent")
    siblings = [
        c
        for c in (mapping.get(parent) or {}).get("children") or []
        if c in mapping and (c == start or c not in on_branch)
    ]
    others: list[Version] = []
    at = 0
    answers: list[tuple[int, Version]] = []
    for sibling in siblings:
        if sibling == start:
            at = len(others)
            continue
        run, after = _chatgpt_run(mapping, sibling)
        if not run or run[0].role != role:
            continue
        joined = _joined(run)[0]
        others.append(Version(joined.text, joined.thinking, joined.model_key))
        if role == "user" and after:
            reply, _ = _chatgpt_run(mapping, after)
            if reply:
                answer = _joined(reply)[0]
                answers.append((len(others) - 1, Version(answer.text, answer.thinking)))
    return others, at, answers


def _read_chatgpt(item: Any) -> ImportedChat:
    mapping = item["mapping"]
    if not isinstance(mapping, dict):
        raise _UnreadableError("mapping is not an object")
    branch = _chatgpt_branch(mapping, item.get("current_node"))
    on_branch = set(branch)
    # Consecutive pieces of one side are one message; its first node is where a regenerated
    # answer or an edited question branches off.
    runs: list[tuple[str, list[ImportedMessage]]] = []
    for node_id in branch:
        piece = _chatgpt_piece(mapping[node_id])
        if piece is None:
            continue
        if runs and runs[-1][1][0].role == piece.role:
            runs[-1][1].append(piece)
        else:
            runs.append((node_id, [piece]))
    said: list[ImportedMessage] = []
    # An edited question's other branches: their answers, by the branch's place among the
    # question's versions, wait for the answer shown beside the question.
    pending: list[tuple[int, Version]] = []
    question_at = 0
    for start, pieces in runs:
        shown = _joined(pieces)[0]
        others, at, follow = _chatgpt_versions(mapping, start, shown.role, on_branch)
        if shown.role == "assistant":
            if not others and pending:
                others = [v for _, v in pending]
                at = sum(1 for i, _ in pending if i < question_at)
            pending = []
        else:
            pending, question_at = follow, at
        said.append(
            ImportedMessage(
                shown.role,
                shown.text,
                shown.thinking,
                shown.model_key,
                other_versions=tuple(others),
                shown_at=at,
            )
        )
    return ImportedChat(_title(item.get("title")), tuple(said))


def _joined(said: Sequence[ImportedMessage]) -> tuple[ImportedMessage, ...]:
    """One message per turn side: what the other app kept as pieces in a row (an answer split
    around a tool call) becomes one message, as Conch shows and sends it."""
    out: list[ImportedMessage] = []
    for m in said:
        if out and out[-1].role == m.role:
            last = out[-1]
            text = "\n\n".join(t for t in (last.text, m.text) if t)
            thinking = "\n\n".join(t for t in (last.thinking, m.thinking) if t)
            out[-1] = ImportedMessage(
                m.role,
                text,
                thinking,
                last.model_key or m.model_key,
                partial=last.partial or m.partial,
                attachments=last.attachments + m.attachments,
                pictures=last.pictures + m.pictures,
                other_versions=last.other_versions or m.other_versions,
                shown_at=last.shown_at if last.other_versions else m.shown_at,
            )
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


def _stamp(message: Any) -> float:
    """A message's timestamp for ordering; one that is missing or not a number (a damaged or
    hand-edited export) counts as the oldest instead of failing the whole import."""
    value = message.get("timestamp") if isinstance(message, dict) else None
    try:
        return float(value) if value is not None and not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        return 0.0


def _open_webui_branch(body: dict[str, Any]) -> list[dict[str, Any]]:
    history = body.get("history")
    if isinstance(history, dict) and isinstance(history.get("messages"), dict):
        messages: dict[str, Any] = history["messages"]
        current = history.get("currentId")
        if not isinstance(current, str) or current not in messages:
            # No usable pointer: the newest message is where the person left off.
            current = max(messages, key=lambda k: _stamp(messages[k]), default=None)
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


def _open_webui_versions(
    body: dict[str, Any], message: dict[str, Any]
) -> tuple[tuple[Version, ...], int]:
    """The other answers to the same question (a regenerated answer's versions), oldest
    first, and where the shown one stands among them."""
    history = body.get("history")
    everything = history.get("messages") if isinstance(history, dict) else None
    if not isinstance(everything, dict) or message.get("role") != "assistant":
        return (), 0
    parent = everything.get(message.get("parentId") or "")
    siblings = parent.get("childrenIds") or [] if isinstance(parent, dict) else []
    out: list[Version] = []
    at = 0
    for sibling_id in siblings:
        sibling = everything.get(sibling_id)
        if sibling_id == message.get("id"):
            at = len(out)
            continue
        if not isinstance(sibling, dict):
            continue
        if sibling.get("role") == "assistant" and isinstance(sibling.get("content"), str):
            text, thinking = _open_webui_text(sibling["content"])
            if text:
                out.append(Version(text, thinking, _open_webui_model(sibling)))
    return tuple(out), at


def _open_webui_model(message: dict[str, Any]) -> str:
    model = message.get("model")
    return f"open-webui/{model}" if isinstance(model, str) and model.strip() else ""


_DATA_URL = re.compile(r"data:(image/[\w.+-]+);base64,([A-Za-z0-9+/=\s]+)\Z")


def _open_webui_pictures(message: dict[str, Any]) -> tuple[tuple[Picture, ...], list[str]]:
    """Pictures sent with a message: those the export holds (data URLs) as pictures, the
    others named, so no picture goes without a word."""
    pictures: list[Picture] = []
    named: list[str] = []
    for n, item in enumerate(message.get("files") or []):
        if not isinstance(item, dict) or item.get("type") != "image":
            continue
        name = " ".join(str(item.get("name") or "").split()) or f"picture {n + 1}"
        found = _DATA_URL.match(str(item.get("url") or ""))
        if found:
            data = "".join(found.group(2).split())
            pictures.append(Picture(name=name, mime=found.group(1), data=data))
        else:
            named.append(f"[A picture, {name}, {_UNEXPORTED}]")
    return tuple(pictures), named


def _read_open_webui(item: Any) -> ImportedChat:
    body = item["chat"] if isinstance(item.get("chat"), dict) else item
    said: list[ImportedMessage] = []
    for message in _open_webui_branch(body):
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        text, thinking = _open_webui_text(content if isinstance(content, str) else "")
        pictures, named = _open_webui_pictures(message)
        text = "\n\n".join(t for t in (*named, text) if t)
        if text or thinking or pictures:
            versions, at = _open_webui_versions(body, message)
            said.append(
                ImportedMessage(
                    role,
                    text,
                    thinking,
                    _open_webui_model(message) if role == "assistant" else "",
                    pictures=pictures,
                    other_versions=versions,
                    shown_at=at,
                )
            )
    title = item.get("title") or body.get("title")
    return ImportedChat(_title(title), _joined(said))


_READERS: dict[Source, Callable[[Any], ImportedChat]] = {
    "conch": _read_conch,
    "chatgpt": _read_chatgpt,
    "open-webui": _read_open_webui,
}


# --- writing to the chat log ------------------------------------------------------------------


Progress = Callable[[int, int], None]
"""Told (messages written, messages in all) after each chat an import writes."""


def save(
    store: ChatStore,
    data_dir: Path,
    chats: Iterable[ImportedChat],
    progress: Progress | None = None,
) -> list[str]:
    """Write ``chats`` to the chat log; their ids, in the file's order (the first on top of
    the sidebar). All or nothing: on a failure what was written is removed again and
    ``ImportFailedError`` says why. ``progress`` hears how far it has got, chat by chat."""
    made: list[str] = []
    listed = list(chats)
    total = sum(len(c.messages) for c in listed)
    done = 0
    try:
        # Last first: an export lists the newest chat first, and the chat written last is the
        # one on top of the sidebar.
        for chat in reversed(listed):
            made.append(store.create_chat(chat.title).id)
            _write(store, made[-1], chat)
            if chat.folder:
                store.set_folder(made[-1], chat.folder)
            if chat.pinned:
                store.set_pinned(made[-1], True)
            done += len(chat.messages)
            if progress is not None:
                progress(done, total)
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
        # Every version in its own order, oldest first (as a regenerated answer's are in
        # Conch), the shown one with the message's pictures and files, the others shelved.
        root: int | None = None
        for n, v in enumerate(m.in_order()):
            shown = n == m.shown_index
            stored = store.append_message(
                chat_id,
                m.role,
                v.text,
                thinking=v.thinking,
                pictures=m.pictures if shown else (),
                attachments=m.attachments if shown else (),
                partial=m.partial if shown else False,
                model_key=v.model_key,
                version_of=root,
                # Marked on the message too, so it stays known wherever the words go (a fork,
                # the turns typed here after it).
                imported=True,
            )
            if root is None:
                root = stored.seq
            if not shown:
                store.set_shelved(chat_id, stored.seq, True)
