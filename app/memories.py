"""Memories: short things Conch learned about the person, with where each came from.

One SQLite file, ``<data_dir>/memories.sqlite3``, holds the memories, the learning runs that made
them (each run is a card in the chat with Undo) and a little bookkeeping (the last tidy-up).
A memory is ``kept`` (it goes into the system prompt), ``waiting`` (for the person's OK),
``undone`` (Undo on its run's card) or ``discarded`` (the person said no to a waiting one).
Nothing the person turned down is ever learned again: de-duplication looks at every status.

Two rules hold here, whoever adds a memory: every text is scrubbed of secrets before it is
saved (and again on its way into a system prompt, for files written before that rule), and a
learned memory that reads like an order to the assistant waits for the person's OK even when
its run would keep the others.

Each memory also carries where it may be used (``reach``). One learned in a chat whose model
runs on this computer is ``local``: it goes only into the prompts of chats on this computer,
until the person marks it ``everywhere`` on the Memories page. One the person typed there
themselves is their own choice to share and is ``everywhere`` from the start (they can narrow
it). Whether a chat is local is the chat log's to say, not this file's: the book asks a
``ReachOf`` the services hand in, and without one a learned memory stays local.
"""

from __future__ import annotations

import builtins
import logging
import re
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.sqlite import StorageError, open_database
from app.trust import reads_like_instruction
from engines.scrub import MARKER, scrub

log = logging.getLogger("conch.memories")

Status = Literal["kept", "waiting", "undone", "discarded"]
Source = Literal["fold", "tidy"]
Reach = Literal["local", "everywhere"]
REACHES: tuple[Reach, ...] = ("local", "everywhere")
# Where a memory learned in a chat between two seqs may be used (module doc).
ReachOf = Callable[[str, int, int], Reach]
STATUSES: tuple[Status, ...] = ("kept", "waiting", "undone", "discarded")
MAX_MEMORY_CHARS = 400  # a memory is a sentence; anything longer is not one

# The memories file's schema as steps, oldest first (app/sqlite.py): a change is a new step, a
# step that has shipped never changes. Step 1 is the schema from before files had a version.
_STEPS = (
    """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id TEXT NOT NULL,
    created REAL NOT NULL,
    waiting INTEGER NOT NULL,
    source TEXT NOT NULL,
    seq_from INTEGER NOT NULL,
    seq_to INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    norm TEXT NOT NULL,
    chat_id TEXT NOT NULL DEFAULT '',
    seq_from INTEGER NOT NULL DEFAULT -1,
    seq_to INTEGER NOT NULL DEFAULT -1,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    run_id INTEGER REFERENCES runs(id)
);
CREATE INDEX IF NOT EXISTS memories_run ON memories(run_id);
CREATE INDEX IF NOT EXISTS memories_norm ON memories(norm);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
""",
    # Where each memory may be used (module doc). '' is "not marked yet": a memory from before
    # this step, or one an older Conch added. It counts as local until the book marks it from
    # the chat it came from when the file is opened (``_mark_unmarked``).
    """
ALTER TABLE memories ADD COLUMN reach TEXT NOT NULL DEFAULT '';
""",
)

_MEM_COLS = "id, text, chat_id, seq_from, seq_to, status, created, updated, run_id, reach"


class MemoryBookError(Exception):
    """A memory operation that cannot be done (unknown id, empty text)."""


@dataclass(frozen=True, slots=True)
class Memory:
    id: int
    text: str
    chat_id: str
    seq_from: int
    seq_to: int
    status: Status
    created: float
    updated: float
    run_id: int | None
    reach: Reach = "local"

    @property
    def everywhere(self) -> bool:
        """Whether chats with a model API get it too, not only chats on this computer."""
        return self.reach == "everywhere"


@dataclass(frozen=True, slots=True)
class LearningRun:
    """One look at a chat that produced memories: the card the window shows, with Undo."""

    id: int
    chat_id: str
    created: float
    memories: tuple[Memory, ...]
    waiting: bool  # the memories wait for the person's OK
    source: Source
    seq_from: int = -1
    seq_to: int = -1

    @property
    def undone(self) -> bool:
        return bool(self.memories) and all(m.status == "undone" for m in self.memories)

    @property
    def learned(self) -> int:
        """How many memories this run found (kept or waiting when it was made)."""
        return len(self.memories)

    @property
    def waiting_count(self) -> int:
        """How many of them still wait for the person's OK."""
        return sum(m.status == "waiting" for m in self.memories)


_PUNCT = re.compile(r"[^\w\s]")
_WORDS = re.compile(r"\w")
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """The form two memories are compared in: case, accents' forms, punctuation, spacing."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _PUNCT.sub(" ", t)
    return _SPACE.sub(" ", t).strip()


def clean_text(text: str) -> str:
    """One line, trimmed, without secrets, at most ``MAX_MEMORY_CHARS`` characters.

    Empty when nothing but a left-out secret would remain.
    """
    line = _SPACE.sub(" ", scrub(text[: MAX_MEMORY_CHARS * 4])).strip()
    if len(line) > MAX_MEMORY_CHARS:
        line = line[: MAX_MEMORY_CHARS - 1].rstrip() + "…"
    if not _WORDS.search(line.replace(MARKER, "")):
        return ""
    return line


def _usable(text: str) -> str:
    """``clean_text(text)``, or a ``MemoryBookError`` saying why nothing is left."""
    line = clean_text(text)
    if line:
        return line
    if text.strip():
        raise MemoryBookError(
            "That memory would hold only a secret, and Conch keeps no secrets in memories. "
            "Write what to remember without the password or key."
        )
    raise MemoryBookError("A memory needs some text.")


def _memory(row: Sequence[Any]) -> Memory:
    return Memory(
        id=int(row[0]),
        text=str(row[1]),
        chat_id=str(row[2]),
        seq_from=int(row[3]),
        seq_to=int(row[4]),
        status=row[5],
        created=float(row[6]),
        updated=float(row[7]),
        run_id=None if row[8] is None else int(row[8]),
        reach="everywhere" if row[9] == "everywhere" else "local",
    )


class MemoryBook:
    """The memories file. Every call is short; safe from the GUI thread and the event loop."""

    FILE_NAME = "memories.sqlite3"

    def __init__(self, path: Path, *, reach_of: ReachOf | None = None) -> None:
        self.path = path
        opened = open_database(path, _STEPS, what="memories")
        self._db = opened.db
        self.problem = opened.problem
        self._lock = threading.RLock()
        self.reach_of = reach_of
        self._hold_old_rows()
        self._mark_unmarked()

    @classmethod
    def in_dir(cls, data_dir: Path, *, reach_of: ReachOf | None = None) -> MemoryBook:
        return cls(data_dir / cls.FILE_NAME, reach_of=reach_of)

    def _reach(self, chat_id: str, seq_from: int, seq_to: int) -> Reach:
        """Where a memory from ``chat_id`` may be used: everywhere when the person typed it,
        else as ``reach_of`` says, and local when nothing can say (module doc)."""
        if not chat_id:
            return "everywhere"
        if self.reach_of is None:
            return "local"
        try:
            said = self.reach_of(chat_id, seq_from, seq_to)
        except Exception:  # the chat log could not say: the safe side
            return "local"
        return said if said in REACHES else "local"

    def _mark_unmarked(self) -> None:
        """Give every memory not marked yet (from before marks, or an older Conch's) the mark
        of the chat it came from. A file a newer Conch wrote is only read, never marked."""
        if self.reach_of is None or self._db.read_only:
            return
        with self._lock:
            rows = self._db.execute(
                "SELECT id, chat_id, seq_from, seq_to FROM memories WHERE reach = ''"
            ).fetchall()
            # A run's memories share their chat and seqs: the chat log is asked once for them.
            known: dict[tuple[str, int, int], Reach] = {}
            for _, chat_id, seq_from, seq_to in rows:
                where = (str(chat_id), int(seq_from), int(seq_to))
                if where not in known:
                    known[where] = self._reach(*where)
            if not rows:
                return
            try:
                self._db.execute("BEGIN IMMEDIATE")  # one write for them all
                try:
                    self._db.executemany(
                        "UPDATE memories SET reach = ? WHERE id = ? AND reach = ''",
                        [(known[(str(c), int(f), int(t))], mid) for mid, c, f, t in rows],
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, StorageError) as exc:
                # Unmarked memories count as local, and are marked at the next start: a busy or
                # full disk must not keep Conch from starting.
                log.warning("memories were not marked this time: %s", exc)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _hold_old_rows(self) -> None:
        """Bring a file written before the two rules (module doc) under them: scrub every text,
        and let a learned order the person never confirmed wait for their OK after all."""
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT id, text, status, run_id, created, updated FROM memories"
            ).fetchall()
            for mid, text, status, run_id, created, updated in rows:
                clean = clean_text(str(text))
                if clean and clean != text:
                    self._db.execute(
                        "UPDATE memories SET text = ?, norm = ? WHERE id = ?",
                        (clean, normalise(clean), mid),
                    )
                elif not clean:
                    self._db.execute("DELETE FROM memories WHERE id = ?", (mid,))
                    continue
                # Kept by a run, never touched since: nobody said yes to it.
                unconfirmed = status == "kept" and run_id is not None and updated == created
                if unconfirmed and reads_like_instruction(clean):
                    self._db.execute(
                        "UPDATE memories SET status = 'waiting', updated = ? WHERE id = ?",
                        (now, mid),
                    )
                    self._db.execute("UPDATE runs SET waiting = 1 WHERE id = ?", (run_id,))

    # --- adding -----------------------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        chat_id: str = "",
        seq_from: int = -1,
        seq_to: int = -1,
        status: Status = "kept",
        run_id: int | None = None,
        reach: Reach | None = None,
    ) -> Memory:
        """Add one memory (the person typed it, or a run found it). ``reach``: where it may be
        used; by default everywhere for one the person typed (no ``chat_id``), else as its
        chat says (module doc)."""
        line = _usable(text)
        if status not in STATUSES:
            raise MemoryBookError(f"Unknown memory status: {status}")
        if reach is None:
            reach = self._reach(chat_id, seq_from, seq_to)
        elif reach not in REACHES:
            raise MemoryBookError(f"Unknown memory reach: {reach}")
        now = time.time()
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO memories (text, norm, chat_id, seq_from, seq_to, status, created, "
                "updated, run_id, reach) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (line, normalise(line), chat_id, seq_from, seq_to, status, now, now, run_id, reach),
            )
            mid = cur.lastrowid
        memory = self.get(int(mid or 0))
        assert memory is not None
        return memory

    def add_run(
        self,
        chat_id: str,
        texts: Iterable[str],
        *,
        seq_from: int,
        seq_to: int,
        waiting: bool,
        source: Source,
        held: Iterable[str] = (),
    ) -> LearningRun | None:
        """Record one learning run and its memories in one transaction.

        Texts already known (in any status, this batch included) are skipped; a run that adds
        nothing new is not recorded and ``None`` comes back. With ``waiting`` every memory waits
        for the person's OK; without it, those that read like an order to the assistant still
        do, and so do the texts in ``held`` (kept word for word, not by a model); the run counts
        as waiting when any of its memories does.
        """
        hold = {normalise(clean_text(t)) for t in held}
        now = time.time()
        with self._lock:
            known = {r[0] for r in self._db.execute("SELECT norm FROM memories")}
            fresh: list[tuple[str, str, Status]] = []
            for text in texts:
                line = clean_text(text)
                norm = normalise(line)
                if not norm or norm in known:
                    continue
                known.add(norm)
                waits = waiting or norm in hold or reads_like_instruction(line)
                fresh.append((line, norm, "waiting" if waits else "kept"))
            if not fresh:
                return None
            run_waits = any(status == "waiting" for _, _, status in fresh)
            reach = self._reach(chat_id, seq_from, seq_to)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(
                    "INSERT INTO runs (chat_id, created, waiting, source, seq_from, seq_to) "
                    "VALUES (?,?,?,?,?,?)",
                    (chat_id, now, int(run_waits), source, seq_from, seq_to),
                )
                run_id = int(cur.lastrowid or 0)
                self._db.executemany(
                    "INSERT INTO memories (text, norm, chat_id, seq_from, seq_to, status, "
                    "created, updated, run_id, reach) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (line, norm, chat_id, seq_from, seq_to, status, now, now, run_id, reach)
                        for line, norm, status in fresh
                    ],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.run(run_id)

    # --- changing ---------------------------------------------------------------------------

    def _move(
        self,
        where: Literal["id", "run_id"],
        key: int,
        status: Status,
        only_from: tuple[Status, ...],
    ) -> int:
        """Give ``status`` to the memories whose ``where`` is ``key`` and whose status is one of
        ``only_from``; how many changed."""
        marks = ",".join("?" * len(only_from))
        with self._lock:
            cur = self._db.execute(
                "UPDATE memories SET status = ?, updated = ? "
                f"WHERE {where} = ? AND status IN ({marks})",
                (status, time.time(), key, *only_from),
            )
            return cur.rowcount

    def _set_status(self, memory_id: int, status: Status, *, only_from: tuple[Status, ...]) -> None:
        with self._lock:
            if self._move("id", memory_id, status, only_from) == 0 and self.get(memory_id) is None:
                raise MemoryBookError(f"There is no memory {memory_id}.")

    def keep(self, memory_id: int) -> None:
        """The person's OK for a waiting memory (or taking back an Undo)."""
        self._set_status(memory_id, "kept", only_from=("waiting", "undone", "discarded"))

    def discard(self, memory_id: int) -> None:
        """The person said no to a waiting memory."""
        self._set_status(memory_id, "discarded", only_from=("waiting", "kept"))

    def undo(self, memory_id: int) -> None:
        self._set_status(memory_id, "undone", only_from=("kept", "waiting"))

    def undo_run(self, run_id: int) -> LearningRun | None:
        """Undo on a run's card: every memory it kept or left waiting is undone."""
        self._move("run_id", run_id, "undone", ("kept", "waiting"))
        return self.run(run_id)

    def keep_run(self, run_id: int) -> LearningRun | None:
        """OK on a waiting run's card: every waiting memory of it is kept."""
        self._move("run_id", run_id, "kept", ("waiting",))
        return self.run(run_id)

    def edit(self, memory_id: int, text: str) -> Memory:
        line = _usable(text)
        with self._lock:
            cur = self._db.execute(
                "UPDATE memories SET text = ?, norm = ?, updated = ? WHERE id = ?",
                (line, normalise(line), time.time(), memory_id),
            )
            if cur.rowcount == 0:
                raise MemoryBookError(f"There is no memory {memory_id}.")
        memory = self.get(memory_id)
        assert memory is not None
        return memory

    def set_reach(self, memory_id: int, reach: Reach) -> Memory:
        """The person's mark: ``everywhere`` (every chat's prompt) or ``local`` (only chats
        whose model runs on this computer)."""
        if reach not in REACHES:
            raise MemoryBookError(f"Unknown memory reach: {reach}")
        with self._lock:
            cur = self._db.execute(
                "UPDATE memories SET reach = ?, updated = ? WHERE id = ?",
                (reach, time.time(), memory_id),
            )
            if cur.rowcount == 0:
                raise MemoryBookError(f"There is no memory {memory_id}.")
        memory = self.get(memory_id)
        assert memory is not None
        return memory

    def delete(self, memory_id: int) -> None:
        """Forget a memory entirely (the person asked to)."""
        with self._lock:
            self._db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))

    # --- reading ----------------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_MEM_COLS} FROM memories WHERE id = ?", (memory_id,)
            ).fetchone()
        return _memory(row) if row else None

    def list(self, status: Status | None = None) -> list[Memory]:
        """Memories, oldest first; only those with ``status`` when one is given."""
        with self._lock:
            if status is None:
                rows = self._db.execute(f"SELECT {_MEM_COLS} FROM memories ORDER BY id")
            else:
                rows = self._db.execute(
                    f"SELECT {_MEM_COLS} FROM memories WHERE status = ? ORDER BY id", (status,)
                )
            return [_memory(r) for r in rows.fetchall()]

    def run(self, run_id: int) -> LearningRun | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, chat_id, created, waiting, source, seq_from, seq_to FROM runs "
                "WHERE id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                return None
            mems = self._db.execute(
                f"SELECT {_MEM_COLS} FROM memories WHERE run_id = ? ORDER BY id", (run_id,)
            ).fetchall()
        return LearningRun(
            id=int(row[0]),
            chat_id=str(row[1]),
            created=float(row[2]),
            memories=tuple(_memory(m) for m in mems),
            waiting=bool(row[3]),
            source=row[4],
            seq_from=int(row[5]),
            seq_to=int(row[6]),
        )

    def runs(self, chat_id: str | None = None) -> builtins.list[LearningRun]:
        """Learning runs, oldest first (all, or one chat's for its cards)."""
        with self._lock:
            if chat_id is None:
                ids = self._db.execute("SELECT id FROM runs ORDER BY id").fetchall()
            else:
                ids = self._db.execute(
                    "SELECT id FROM runs WHERE chat_id = ? ORDER BY id", (chat_id,)
                ).fetchall()
        found = (self.run(int(r[0])) for r in ids)
        return [r for r in found if r is not None]

    def kept_for_prompt(self, limit_chars: int, *, local: bool = True) -> str:
        """Kept memories as a block for the system prompt, at most ``limit_chars`` long.

        ``local``: the prompt is for a model on this computer, which gets every kept memory;
        any other gets only those marked for everywhere. When they do not all fit, the most
        recently confirmed ones win (they are likelier to be current); the block lists them
        oldest first either way. Empty when none fit.
        """
        if limit_chars <= 0:
            return ""
        head = "What you know about the person from earlier chats (they can edit this list):"
        if len(head) + 3 >= limit_chars:
            return ""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, text FROM memories WHERE status = 'kept' "
                + ("" if local else "AND reach = 'everywhere' ")
                + "ORDER BY updated DESC, id DESC"
            ).fetchall()
        used = len(head)
        chosen: list[tuple[int, str]] = []
        for mid, text in rows:
            # Scrubbed again: a file from before memories were scrubbed may hold a secret.
            clean = scrub(str(text))
            if not _WORDS.search(clean.replace(MARKER, "")):
                continue
            line = f"\n- {clean}"
            if used + len(line) > limit_chars:
                continue  # a shorter, older memory may still fit
            chosen.append((int(mid), line))
            used += len(line)
        if not chosen:
            return ""
        chosen.sort()
        return head + "".join(line for _, line in chosen)

    # --- bookkeeping ------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    @property
    def last_tidy(self) -> float | None:
        raw = self.get_meta("last_tidy")
        try:
            return None if raw is None else float(raw)
        except ValueError:
            return None

    @last_tidy.setter
    def last_tidy(self, when: float) -> None:
        self.set_meta("last_tidy", repr(float(when)))
