"""The chat log: every chat and every message with its seq, in one SQLite file.

Folding never deletes anything here: the engine's transcript is the model's memory, this is the
person's. Deleting a chat is soft (``deleted_at``) so the window can offer Undo.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from app.sqlite import StorageError, open_database
from app.trust import untrusted_message
from engines.base import PROGRAM_MODES, Attachment, Picture, ProgramMode, TurnProblem

Role = Literal["user", "assistant", "tool"]

# What a chat not yet named (stored with an empty title) is called until its first message.
UNTITLED_TITLE = "New chat"

# The chat log's schema as steps, oldest first (app/sqlite.py): a change is a new step, a
# step that has shipped never changes. Step 1 is the schema from before files had a version.
_STEPS = (
    """
CREATE TABLE IF NOT EXISTS chats (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    model_key TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    deleted_at REAL,
    untrusted INTEGER NOT NULL DEFAULT 0,
    others INTEGER NOT NULL DEFAULT 0,
    routine INTEGER NOT NULL DEFAULT 0,
    read_until INTEGER NOT NULL DEFAULT -1,
    learned_at REAL
);
CREATE TABLE IF NOT EXISTS messages (
    chat_id TEXT NOT NULL REFERENCES chats(id),
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    thinking TEXT NOT NULL DEFAULT '',
    pictures TEXT NOT NULL DEFAULT '[]',
    attachments TEXT NOT NULL DEFAULT '[]',
    partial INTEGER NOT NULL DEFAULT 0,
    problem TEXT,
    model_key TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    PRIMARY KEY (chat_id, seq)
);
CREATE TABLE IF NOT EXISTS compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id TEXT NOT NULL REFERENCES chats(id),
    first_kept_seq INTEGER NOT NULL,
    summary TEXT NOT NULL,
    model TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS compactions_chat ON compactions(chat_id, id);
""",
    # Step 2: one message deleted (soft, for Undo), and the versions of a regenerated answer:
    # ``version_of`` is the seq of the answer's first version, ``shelved`` a version not shown.
    """
ALTER TABLE messages ADD COLUMN deleted_at REAL;
ALTER TABLE messages ADD COLUMN version_of INTEGER;
ALTER TABLE messages ADD COLUMN shelved INTEGER NOT NULL DEFAULT 0;
""",
    # Step 3: how each answer went (app/answer_stats.py reads and writes it).
    """
CREATE TABLE IF NOT EXISTS answer_stats (
    chat_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    first_token_s REAL,
    tokens_per_s REAL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (chat_id, seq)
);
""",
    # Step 4: what the person set for one chat (``ChatSettings``); no row, or NULL in a
    # column, is the default. ``tool_servers`` is a JSON list of server ids.
    """
CREATE TABLE IF NOT EXISTS chat_settings (
    chat_id TEXT PRIMARY KEY,
    system_prompt TEXT,
    temperature REAL,
    max_answer_tokens INTEGER,
    tool_servers TEXT
);
""",
    # Step 5: how each tool call went, beside its result's "tool" message (app/tool_calls.py
    # reads and writes it): the tool, its server and arguments, status, time, shortened or not.
    """
CREATE TABLE IF NOT EXISTS tool_calls (
    chat_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    call TEXT NOT NULL,
    PRIMARY KEY (chat_id, seq)
);
""",
    # Step 6: a chat not yet named has an empty title. Earlier files stored the words shown
    # for it, which a chat named so on purpose could not be told apart from.
    """
UPDATE chats SET title = '' WHERE title = 'New chat';
""",
    # Step 7: the sidebar's order and groups (pinned to the top; a folder's name, "" for
    # none), and where a forked chat came from (JSON: app/forks.py).
    """
ALTER TABLE chats ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN folder TEXT NOT NULL DEFAULT '';
ALTER TABLE chats ADD COLUMN forked_from TEXT;
""",
    # Step 8: how a program chat's program may act, and its model (``ChatSettings``).
    """
ALTER TABLE chat_settings ADD COLUMN program_mode TEXT;
ALTER TABLE chat_settings ADD COLUMN program_model TEXT;
""",
    # Step 9: a message that came from another app's export (app/importers.py), marked on the
    # message itself: its words were not typed here, whatever chat it ends up in (a fork
    # keeps the mark). Rows from before this step read as typed here; an imported chat of
    # theirs keeps its chat's untrusted mark, so what is learned from it still waits.
    """
ALTER TABLE messages ADD COLUMN imported INTEGER NOT NULL DEFAULT 0;
""",
    # Step 10: a chat's unsent words (app/drafts.py reads and writes it): one JSON row a chat.
    """
CREATE TABLE IF NOT EXISTS drafts (
    chat_id TEXT PRIMARY KEY,
    draft TEXT NOT NULL,
    saved REAL NOT NULL
);
""",
)

FOLDER_NAME_MAX = 80  # characters of a folder's name (the sidebar elides what it cannot show)


def folder_name(name: str) -> str:
    """A folder's name as kept: one line, trimmed, not overlong."""
    return " ".join(name.split())[:FOLDER_NAME_MAX]


# What the chat shows, and what the model reads: neither deleted nor a shelved version.
_SHOWN = "deleted_at IS NULL AND shelved = 0"

# After a damaged chat log was recovered: messages whose chat row was lost get a chat again,
# so everything the person wrote shows in the sidebar.
_REPARENT = """
INSERT OR IGNORE INTO chats (id, title, created, updated)
SELECT chat_id, 'Recovered chat', MIN(created), MAX(created) FROM messages
WHERE chat_id NOT IN (SELECT id FROM chats) GROUP BY chat_id;
INSERT OR IGNORE INTO chats (id, title, created, updated)
SELECT chat_id, 'Recovered chat', MIN(created), MAX(created) FROM compactions
WHERE chat_id NOT IN (SELECT id FROM chats) GROUP BY chat_id;
"""

# The chat log could not be opened or written; the message says what to do. One class for
# every file Conch keeps, so the window and the CLI catch them all by this name.
StoreError = StorageError


@dataclass(frozen=True, slots=True)
class Chat:
    id: str
    title: str
    model_key: str
    created: float
    updated: float
    deleted_at: float | None = None
    untrusted: bool = False
    others: bool = False
    routine: bool = False
    read_until: int = -1
    learned_at: float | None = None
    untitled: bool = False  # named after its first message when it is sent (``title`` shows)
    pinned: bool = False  # shown at the top of the sidebar
    folder: str = ""  # the sidebar folder it is in ("" for none)
    forked_from: ForkLink | None = None  # the chat and message it was made from


@dataclass(frozen=True, slots=True)
class ForkLink:
    """Where a chat was made from: ``chat_id``'s messages up to ``seq`` ("fork"), or its latest
    summary and the messages after it ("summary")."""

    chat_id: str
    seq: int
    kind: Literal["fork", "summary"]
    title: str  # the chat's title when the copy was made (it may be renamed or deleted since)

    def dumps(self) -> str:
        return json.dumps(
            {"chat_id": self.chat_id, "seq": self.seq, "kind": self.kind, "title": self.title}
        )

    @classmethod
    def loads(cls, raw: Any) -> ForkLink | None:
        """The link a column or an export holds; None for anything unreadable."""
        try:
            data = json.loads(raw) if isinstance(raw, str) else raw
            kind = data["kind"]
            if kind not in ("fork", "summary"):
                return None
            return cls(str(data["chat_id"]), int(data["seq"]), kind, str(data.get("title", "")))
        except (ValueError, TypeError, KeyError):
            return None


# The limits of what a chat's settings may hold; the settings panel offers the same range.
TEMPERATURE_MAX = 2.0  # what OpenAI-style APIs accept; Anthropic's 1.0 is the adapter's cap
ANSWER_TOKENS_MIN = 16
ANSWER_TOKENS_MAX = 65_536


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """What the person set for one chat. ``None`` anywhere means "the default":

    - ``system_prompt``: None follows the person's default (Settings → Chat); "" is none for
      this chat. The person's own words, so trusted; sent and counted on every turn.
    - ``temperature``: None lets the model's server choose.
    - ``max_answer_tokens``: None keeps Conch's own room for the answer (a share of the
      window); a number is sent as the answer's limit and reserved in the budget.
    - ``tool_servers``: the ids of the MCP servers (Settings → Tools) this chat may use; None
      follows the default there.
    - ``program_mode``: on a program that acts by itself (Claude Code), how it may act
      (``engines.base.ProgramMode``); None leaves its own default (it asks).
    - ``program_model``: that program's model, as the program names it ("sonnet"); None
      leaves its own choice.
    """

    system_prompt: str | None = None
    temperature: float | None = None
    max_answer_tokens: int | None = None
    tool_servers: tuple[str, ...] | None = None
    program_mode: ProgramMode | None = None
    program_model: str | None = None

    def checked(self) -> ChatSettings:
        """The same settings with values out of range brought into it (a hand-edited file,
        a newer Conch's wider range), so every reader sees sensible ones."""
        temperature = self.temperature
        if temperature is not None:
            temperature = (
                None
                if temperature != temperature
                else min(TEMPERATURE_MAX, max(0.0, float(temperature)))
            )
        answer = self.max_answer_tokens
        if answer is not None:
            answer = min(ANSWER_TOKENS_MAX, max(ANSWER_TOKENS_MIN, int(answer)))
        servers = self.tool_servers
        if servers is not None:
            servers = tuple(dict.fromkeys(str(s) for s in servers if str(s)))
        mode = self.program_mode if self.program_mode in PROGRAM_MODES else None
        program_model = " ".join(str(self.program_model or "").split()) or None
        return ChatSettings(self.system_prompt, temperature, answer, servers, mode, program_model)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    chat_id: str
    seq: int
    role: Role
    text: str
    thinking: str = ""
    pictures: tuple[Picture, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    partial: bool = False
    problem: TurnProblem | None = None
    model_key: str = ""
    created: float = 0.0
    version_of: int | None = None  # a regenerated answer: the seq of its first version
    imported: bool = False  # from another app's export, not typed in this one


@dataclass(frozen=True, slots=True)
class Versions:
    """The versions of one answer, oldest first, and which one shows (its index)."""

    seqs: tuple[int, ...]
    shown: int

    @property
    def label(self) -> str:
        return f"{self.shown + 1}/{len(self.seqs)}"


@dataclass(frozen=True, slots=True)
class Compaction:
    chat_id: str
    first_kept_seq: int
    summary: str
    model: str
    created: float


_CHAT_COLS = (
    "id, title, model_key, created, updated, deleted_at, untrusted, others, routine, "
    "read_until, learned_at, pinned, folder, forked_from"
)
_MSG_COLS = (
    "chat_id, seq, role, text, thinking, pictures, attachments, partial, problem, "
    "model_key, created, version_of, imported"
)


def _chat(row: Sequence[Any]) -> Chat:
    return Chat(
        id=row[0],
        title=row[1] or UNTITLED_TITLE,
        model_key=row[2],
        created=row[3],
        updated=row[4],
        deleted_at=row[5],
        untrusted=bool(row[6]),
        others=bool(row[7]),
        routine=bool(row[8]),
        read_until=row[9],
        learned_at=row[10],
        untitled=not row[1],
        pinned=bool(row[11]),
        folder=row[12] or "",
        forked_from=ForkLink.loads(row[13]) if row[13] else None,
    )


def _load_list(raw: str, cls: type[Picture] | type[Attachment]) -> tuple[Any, ...]:
    if not raw or raw == "[]":  # most messages: no JSON to parse (a long chat opens faster)
        return ()
    try:
        items = json.loads(raw)
        return tuple(cls.model_validate(i) for i in items)
    except (ValueError, TypeError, ValidationError):
        return ()


def _load_ids(raw: Any) -> tuple[str, ...] | None:
    if not isinstance(raw, str):
        return None
    try:
        items = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    return tuple(i for i in items if isinstance(i, str))


def _problem(raw: str | None) -> TurnProblem | None:
    if not raw:
        return None
    try:
        return TurnProblem.model_validate_json(raw)
    except ValidationError:
        return None


def _message(row: Sequence[Any]) -> StoredMessage:
    return StoredMessage(
        chat_id=row[0],
        seq=row[1],
        role=row[2],
        text=row[3],
        thinking=row[4],
        pictures=_load_list(row[5], Picture),
        attachments=_load_list(row[6], Attachment),
        partial=bool(row[7]),
        problem=_problem(row[8]),
        model_key=row[9],
        created=row[10],
        version_of=row[11],
        imported=bool(row[12]),
    )


def _dump(items: Iterable[Picture | Attachment]) -> str:
    return json.dumps([i.model_dump() for i in items])


class ChatStore:
    """One SQLite file (WAL). Safe to call from the GUI thread: every call is short."""

    FILE_NAME = "conch.sqlite3"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            # FULL: a message the window showed as sent survives a power cut or a SIGKILL.
            opened = open_database(
                path,
                _STEPS,
                what="chat log",
                synchronous="FULL",
                counted=("messages", "message", "messages"),
                after_recovery=_REPARENT,
            )
        except StorageError:
            raise
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StoreError(
                f"The chat log at {path} could not be opened ({exc}). "
                "Check that the folder is writable and no other program holds the file."
            ) from exc
        self._db = opened.db
        self.problem = opened.problem
        self._lock = threading.RLock()

    @property
    def read_only(self) -> bool:
        """Whether a newer Conch wrote the file, so nothing may be written to it."""
        return self._db.read_only

    @classmethod
    def in_dir(cls, data_dir: Path) -> ChatStore:
        return cls(data_dir / cls.FILE_NAME)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- chats ----------------------------------------------------------------------------

    def create_chat(self, title: str = "", model_key: str = "", chat_id: str | None = None) -> Chat:
        cid = chat_id or uuid.uuid4().hex[:12]
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT INTO chats (id, title, model_key, created, updated) VALUES (?,?,?,?,?)",
                (cid, title, model_key, now, now),
            )
        chat = self.get_chat(cid)
        assert chat is not None
        return chat

    def get_chat(self, chat_id: str) -> Chat | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_CHAT_COLS} FROM chats WHERE id = ?", (chat_id,)
            ).fetchone()
        return _chat(row) if row else None

    def list_chats(self) -> list[Chat]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CHAT_COLS} FROM chats WHERE deleted_at IS NULL ORDER BY updated DESC"
            ).fetchall()
        return [_chat(r) for r in rows]

    def rename_chat(self, chat_id: str, title: str) -> None:
        self._exec("UPDATE chats SET title = ? WHERE id = ?", (title.strip() or "Chat", chat_id))

    def set_pinned(self, chat_id: str, pinned: bool) -> None:
        self._exec("UPDATE chats SET pinned = ? WHERE id = ?", (int(pinned), chat_id))

    def set_folder(self, chat_id: str, folder: str) -> None:
        """Put the chat in ``folder`` ("" takes it out of any)."""
        self._exec("UPDATE chats SET folder = ? WHERE id = ?", (folder_name(folder), chat_id))

    def rename_folder(self, old: str, new: str) -> None:
        """Rename a folder (every chat in it, the trash's too, so a restored chat finds it);
        "" empties it, leaving its chats outside any folder."""
        self._exec("UPDATE chats SET folder = ? WHERE folder = ?", (folder_name(new), old))

    def folders(self) -> list[str]:
        """The folders that hold a chat not deleted, by name."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT folder FROM chats WHERE deleted_at IS NULL AND folder != '' "
                "ORDER BY folder COLLATE NOCASE"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def copy_chat(
        self,
        source: str,
        *,
        title: str,
        seqs: tuple[int, float],
        link: ForkLink,
        fold: Compaction | None = None,
    ) -> Chat:
        """A new chat holding ``source``'s messages with seq in ``[seqs[0], seqs[1])`` (each
        with its seq, versions, tool calls and answer figures), its settings and its marks,
        and ``fold`` as its summary; in one transaction, so a failure leaves no half copy.
        What the copy holds was read for learning in the source: it is marked read."""
        cid = uuid.uuid4().hex[:12]
        now = time.time()
        first, limit = seqs
        end = -1 if limit == float("inf") else int(limit)
        span = "chat_id = ? AND seq >= ? AND (? < 0 OR seq < ?)"
        args = (source, first, end, end)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO chats (id, title, model_key, created, updated, untrusted, "
                    "others, routine, read_until, learned_at, pinned, folder, forked_from) "
                    "SELECT ?, ?, model_key, ?, ?, untrusted, others, routine, "
                    "(SELECT COALESCE(MAX(seq), -1) FROM messages WHERE " + span + "), "
                    "learned_at, 0, folder, ? FROM chats WHERE id = ?",
                    (cid, title, now, now, *args, link.dumps(), source),
                )
                self._db.execute(
                    f"INSERT INTO messages ({_MSG_COLS}, deleted_at, shelved) "
                    f"SELECT ?, {_MSG_COLS.split(', ', 1)[1]}, deleted_at, shelved "
                    f"FROM messages WHERE {span} AND deleted_at IS NULL",
                    (cid, *args),
                )
                for table, cols in (
                    ("tool_calls", "seq, call"),
                    (
                        "answer_stats",
                        "seq, first_token_s, tokens_per_s, input_tokens, output_tokens, estimated",
                    ),
                ):
                    self._db.execute(
                        f"INSERT INTO {table} (chat_id, {cols}) SELECT ?, {cols} FROM {table} "
                        f"WHERE {span}",
                        (cid, *args),
                    )
                self._db.execute(
                    "INSERT INTO chat_settings (chat_id, system_prompt, temperature, "
                    "max_answer_tokens, tool_servers, program_mode, program_model) "
                    "SELECT ?, system_prompt, temperature, max_answer_tokens, tool_servers, "
                    "program_mode, program_model FROM chat_settings WHERE chat_id = ?",
                    (cid, source),
                )
                if fold is not None:
                    self._db.execute(
                        "INSERT INTO compactions (chat_id, first_kept_seq, summary, model, "
                        "created) VALUES (?,?,?,?,?)",
                        (cid, fold.first_kept_seq, fold.summary, fold.model, now),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        chat = self.get_chat(cid)
        assert chat is not None
        return chat

    def set_model(self, chat_id: str, model_key: str) -> None:
        self._exec("UPDATE chats SET model_key = ? WHERE id = ?", (model_key, chat_id))

    def mark_chat(
        self,
        chat_id: str,
        *,
        untrusted: bool | None = None,
        others: bool | None = None,
        routine: bool | None = None,
    ) -> None:
        for col, val in (("untrusted", untrusted), ("others", others), ("routine", routine)):
            if val is not None:
                self._exec(f"UPDATE chats SET {col} = ? WHERE id = ?", (int(val), chat_id))

    def set_read_until(self, chat_id: str, seq: int, learned_at: float | None = None) -> None:
        """Advance the learning mark; it never moves backwards."""
        self._exec(
            "UPDATE chats SET read_until = MAX(read_until, ?), learned_at = ? WHERE id = ?",
            (seq, learned_at if learned_at is not None else time.time(), chat_id),
        )

    def delete_chat(self, chat_id: str) -> None:
        self._exec("UPDATE chats SET deleted_at = ? WHERE id = ?", (time.time(), chat_id))

    def restore_chat(self, chat_id: str) -> None:
        self._exec("UPDATE chats SET deleted_at = NULL WHERE id = ?", (chat_id,))

    def deleted_chats(self) -> list[Chat]:
        """The chats in the trash, the most recently deleted first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CHAT_COLS} FROM chats WHERE deleted_at IS NOT NULL "
                "ORDER BY deleted_at DESC"
            ).fetchall()
        return [_chat(r) for r in rows]

    def purge_chats(self, chat_ids: Iterable[str]) -> None:
        """Delete chats in the trash for good, with every row keyed by them (messages,
        summaries, answer figures, settings, the unsent draft), in one transaction. A chat
        restored meanwhile is left alone."""
        ids = [(cid,) for cid in chat_ids]
        gone = "SELECT id FROM chats WHERE id = ? AND deleted_at IS NOT NULL"
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in (
                    "messages",
                    "compactions",
                    "answer_stats",
                    "chat_settings",
                    "tool_calls",
                    "drafts",
                ):
                    self._db.executemany(f"DELETE FROM {table} WHERE chat_id IN ({gone})", ids)
                self._db.executemany(f"DELETE FROM chats WHERE id IN ({gone})", ids)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query, for a feature that keeps its SQL beside it
        (app/search.py)."""
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, tuple(args)).fetchall()]

    def write(self, sql: str, args: Sequence[Any] = ()) -> None:
        """One statement writing a feature's table beside the messages (app/chat_log_tables.py),
        under the store's lock, so that it never lands inside one of the store's transactions.
        Raises ``sqlite3.Error`` (a full disk or damage with its sentence, app/sqlite.py)."""
        with self._lock:
            self._db.execute(sql, tuple(args))

    def search_chats(self, query: str) -> list[Chat]:
        q = query.strip()
        if not q:
            return self.list_chats()
        like = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CHAT_COLS} FROM chats c WHERE deleted_at IS NULL AND ("
                "title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m "
                "WHERE m.chat_id = c.id AND m.deleted_at IS NULL AND m.text LIKE ? ESCAPE '\\')) "
                "ORDER BY updated DESC",
                (like, like),
            ).fetchall()
        return [_chat(r) for r in rows]

    # --- messages -------------------------------------------------------------------------

    def append_message(
        self,
        chat_id: str,
        role: Role,
        text: str,
        *,
        thinking: str = "",
        pictures: Sequence[Picture] = (),
        attachments: Sequence[Attachment] = (),
        partial: bool = False,
        problem: TurnProblem | None = None,
        model_key: str = "",
        version_of: int | None = None,
        untrusted: bool | None = None,
        imported: bool = False,
    ) -> StoredMessage:
        """Add a message at the end of the chat. ``untrusted``: whether it makes the chat
        untrusted, as ``app.trust.untrusted_message`` decided with what the caller knows (a
        paste, a tool's origin); None lets it decide from the message alone. The mark is
        recorded with the message, so a chat is never left holding one without the other.
        ``imported``: the message came from another app's export (the message keeps the
        mark)."""
        if untrusted is None:
            untrusted = untrusted_message(
                role, text, attachments=bool(attachments), imported=imported
            )
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (seq,) = self._db.execute(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE chat_id = ?",
                    (chat_id,),
                ).fetchone()
                self._db.execute(
                    f"INSERT INTO messages ({_MSG_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        chat_id,
                        seq,
                        role,
                        text,
                        thinking,
                        _dump(pictures),
                        _dump(attachments),
                        int(partial),
                        problem.model_dump_json() if problem else None,
                        model_key,
                        now,
                        version_of,
                        int(imported),
                    ),
                )
                self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
                if untrusted:
                    # Not the person's own word: learning from this chat now waits for an OK.
                    self._db.execute("UPDATE chats SET untrusted = 1 WHERE id = ?", (chat_id,))
                self._db.execute("COMMIT")
            except BaseException:
                # A full disk or damage has already rolled back; ROLLBACK would hide why.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return StoredMessage(
            chat_id=chat_id,
            seq=seq,
            role=role,
            text=text,
            thinking=thinking,
            pictures=tuple(pictures),
            attachments=tuple(attachments),
            partial=partial,
            problem=problem,
            model_key=model_key,
            created=now,
            version_of=version_of,
            imported=imported,
        )

    _UNSET: Any = object()

    def update_message(
        self,
        chat_id: str,
        seq: int,
        *,
        text: str | None = None,
        thinking: str | None = None,
        partial: bool | None = None,
        problem: Any = _UNSET,
    ) -> None:
        sets: list[str] = []
        args: list[Any] = []
        if text is not None:
            sets.append("text = ?")
            args.append(text)
        if thinking is not None:
            sets.append("thinking = ?")
            args.append(thinking)
        if partial is not None:
            sets.append("partial = ?")
            args.append(int(partial))
        if problem is not self._UNSET:
            sets.append("problem = ?")
            args.append(problem.model_dump_json() if isinstance(problem, TurnProblem) else None)
        if not sets:
            return
        self._exec(
            f"UPDATE messages SET {', '.join(sets)} WHERE chat_id = ? AND seq = ?",
            (*args, chat_id, seq),
        )

    def messages(
        self, chat_id: str, start: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_MSG_COLS} FROM messages WHERE chat_id = ? AND seq >= ? "
                f"AND {_SHOWN} ORDER BY seq LIMIT ?",
                (chat_id, start, -1 if limit is None else limit),
            ).fetchall()
        return [_message(r) for r in rows]

    def message(self, chat_id: str, seq: int) -> StoredMessage | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_MSG_COLS} FROM messages WHERE chat_id = ? AND seq = ?",
                (chat_id, seq),
            ).fetchone()
        return _message(row) if row else None

    def asked_before(self, chat_id: str, seq: int) -> StoredMessage | None:
        """The person's message an answer at ``seq`` replies to: the last one shown before it
        (a deleted message or a shelved version does not count)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_MSG_COLS} FROM messages WHERE chat_id = ? AND seq < ? "
                f"AND role = 'user' AND {_SHOWN} ORDER BY seq DESC LIMIT 1",
                (chat_id, seq),
            ).fetchone()
        return _message(row) if row else None

    def delete_messages(self, chat_id: str, seqs: Iterable[int]) -> float:
        """Delete messages (soft: ``restore_messages`` with the returned stamp undoes it)."""
        stamp = time.time()
        with self._lock:
            self._db.executemany(
                "UPDATE messages SET deleted_at = ? WHERE chat_id = ? AND seq = ? "
                "AND deleted_at IS NULL",
                [(stamp, chat_id, s) for s in seqs],
            )
        return stamp

    def restore_messages(self, chat_id: str, stamp: float) -> None:
        """Undo one ``delete_messages`` (the messages it deleted show again)."""
        self._exec(
            "UPDATE messages SET deleted_at = NULL WHERE chat_id = ? AND deleted_at = ?",
            (chat_id, stamp),
        )

    def versions(self, chat_id: str, seq: int) -> Versions:
        """The versions of the answer at ``seq`` (one when it was never regenerated)."""
        with self._lock:
            row = self._db.execute(
                "SELECT COALESCE(version_of, seq) FROM messages WHERE chat_id = ? AND seq = ?",
                (chat_id, seq),
            ).fetchone()
            if row is None:
                return Versions((seq,), 0)
            rows = self._db.execute(
                "SELECT seq, shelved FROM messages WHERE chat_id = ? AND deleted_at IS NULL "
                "AND (seq = ? OR version_of = ?) ORDER BY seq",
                (chat_id, row[0], row[0]),
            ).fetchall()
        seqs = tuple(int(r[0]) for r in rows) or (seq,)
        shown = next((i for i, r in enumerate(rows) if not r[1]), len(seqs) - 1)
        return Versions(seqs, shown)

    def all_versions(self, chat_id: str, start: int = 0) -> dict[int, Versions]:
        """The answers from seq ``start`` on that have more than one version, by each
        version's seq (read by key range: a page of a long chat stays quick)."""
        with self._lock:
            later = self._db.execute(
                "SELECT version_of, seq, shelved FROM messages WHERE chat_id = ? AND seq >= ? "
                "AND deleted_at IS NULL AND version_of IS NOT NULL ORDER BY seq",
                (chat_id, start),
            ).fetchall()
            roots = sorted({int(r[0]) for r in later})
            marks = ",".join("?" * len(roots))
            firsts = self._db.execute(
                f"SELECT seq, seq, shelved FROM messages WHERE chat_id = ? AND seq IN ({marks}) "
                "AND deleted_at IS NULL",
                (chat_id, *roots),
            ).fetchall()
        groups: dict[int, list[tuple[int, bool]]] = {}
        for root, seq, shelved in sorted(firsts + later, key=lambda r: int(r[1])):
            groups.setdefault(int(root), []).append((int(seq), bool(shelved)))
        out: dict[int, Versions] = {}
        for members in groups.values():
            seqs = tuple(s for s, _ in members)
            shown = next((i for i, (_, off) in enumerate(members) if not off), len(seqs) - 1)
            for s in seqs:
                out[s] = Versions(seqs, shown)
        return out

    def set_shelved(self, chat_id: str, seq: int, shelved: bool) -> None:
        self._exec(
            "UPDATE messages SET shelved = ? WHERE chat_id = ? AND seq = ?",
            (int(shelved), chat_id, seq),
        )

    def show_version(self, chat_id: str, seq: int) -> None:
        """Show the version at ``seq`` of its answer, with the tool results it used, and shelve
        the other versions with theirs (the model reads the shown one from the next turn)."""
        rows = [
            (int(s != seq), chat_id, m)
            for s in self.versions(chat_id, seq).seqs
            for m in (*self.tool_results(chat_id, s), s)
        ]
        with self._lock:
            self._db.executemany(
                "UPDATE messages SET shelved = ? WHERE chat_id = ? AND seq = ?", rows
            )

    def tool_results(self, chat_id: str, seq: int, *, after: bool = False) -> list[int]:
        """The "tool" messages the answer at ``seq`` used: those right before it in the chat
        log, back to the message before them (shelved or not). ``after``: those right after
        it (a try that saved no answer)."""
        near, side = ("MIN", ">") if after else ("MAX", "<")
        [(edge,)] = self.query(  # the nearest message that is not a tool's
            f"SELECT {near}(seq) FROM messages WHERE chat_id = ? AND seq {side} ? "
            "AND role != 'tool' AND deleted_at IS NULL",
            (chat_id, seq),
        )
        low, high = (seq, edge) if after else (edge, seq)
        rows = self.query(
            "SELECT seq FROM messages WHERE chat_id = ? AND seq > ? AND seq < ? "
            "AND role = 'tool' AND deleted_at IS NULL ORDER BY seq",
            (chat_id, -1 if low is None else low, 1 << 62 if high is None else high),
        )
        return [int(r[0]) for r in rows]

    def withdraw_fold(self, chat_id: str) -> None:
        """The latest fold no longer holds (a message before it was edited or deleted): record
        that there is none, so the model's memory is rebuilt from the log and folded anew."""
        self.add_compaction(chat_id, 0, "", "")

    def message_count(self, chat_id: str) -> int:
        with self._lock:
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM messages WHERE chat_id = ?", (chat_id,)
            ).fetchone()
        return int(n)

    # --- per-chat settings ----------------------------------------------------------------

    def chat_settings(self, chat_id: str) -> ChatSettings:
        """What the person set for the chat; every field None (the defaults) when nothing."""
        with self._lock:
            row = self._db.execute(
                "SELECT system_prompt, temperature, max_answer_tokens, tool_servers, "
                "program_mode, program_model FROM chat_settings WHERE chat_id = ?",
                (chat_id,),
            ).fetchone()
        if row is None:
            return ChatSettings()
        system_prompt, temperature, answer, servers, mode, program_model = row
        return ChatSettings(
            system_prompt=system_prompt if isinstance(system_prompt, str) else None,
            temperature=float(temperature) if isinstance(temperature, int | float) else None,
            max_answer_tokens=int(answer) if isinstance(answer, int) else None,
            tool_servers=_load_ids(servers),
            program_mode=mode if mode in PROGRAM_MODES else None,
            program_model=program_model if isinstance(program_model, str) else None,
        ).checked()

    def set_chat_settings(self, chat_id: str, settings: ChatSettings) -> ChatSettings:
        """Keep ``settings`` for the chat (all of them: a None goes back to the default)."""
        new = settings.checked()
        servers = None if new.tool_servers is None else json.dumps(list(new.tool_servers))
        self._exec(
            "INSERT INTO chat_settings (chat_id, system_prompt, temperature, "
            "max_answer_tokens, tool_servers, program_mode, program_model) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(chat_id) DO UPDATE SET "
            "system_prompt = excluded.system_prompt, temperature = excluded.temperature, "
            "max_answer_tokens = excluded.max_answer_tokens, "
            "tool_servers = excluded.tool_servers, program_mode = excluded.program_mode, "
            "program_model = excluded.program_model",
            (
                chat_id,
                new.system_prompt,
                new.temperature,
                new.max_answer_tokens,
                servers,
                new.program_mode,
                new.program_model,
            ),
        )
        return new

    def update_chat_settings(self, chat_id: str, **changes: Any) -> ChatSettings:
        """Change some of the chat's settings (``tool_servers=("files",)``), keep the rest."""
        return self.set_chat_settings(chat_id, replace(self.chat_settings(chat_id), **changes))

    # --- compactions ----------------------------------------------------------------------

    def add_compaction(
        self, chat_id: str, first_kept_seq: int, summary: str, model: str
    ) -> Compaction:
        now = time.time()
        self._exec(
            "INSERT INTO compactions (chat_id, first_kept_seq, summary, model, created) "
            "VALUES (?,?,?,?,?)",
            (chat_id, first_kept_seq, summary, model, now),
        )
        return Compaction(chat_id, first_kept_seq, summary, model, now)

    def latest_compaction(self, chat_id: str) -> Compaction | None:
        with self._lock:
            row = self._db.execute(
                "SELECT chat_id, first_kept_seq, summary, model, created FROM compactions "
                "WHERE chat_id = ? ORDER BY id DESC LIMIT 1",
                (chat_id,),
            ).fetchone()
        # An empty summary is a withdrawn fold (``withdraw_fold``): there is none now.
        return Compaction(*row) if row and row[2] else None

    # --- internals ------------------------------------------------------------------------

    def _exec(self, sql: str, args: Sequence[Any]) -> None:
        with self._lock:
            self._db.execute(sql, tuple(args))
