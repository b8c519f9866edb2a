"""Health notes: what Conch fixed or noticed quietly (a healed refusal, a server it could not
reach, a summary that failed), shown in Settings → Health.

A table in its own SQLite file, ``<data_dir>/health.sqlite3``: appends from the window and a
``conch ask`` at the same time are safe. Every text is scrubbed of secrets before it is stored,
and the log keeps only the newest ``KEEP`` notes.

The same file remembers which servers were last found unreachable, so a server that stays down
is noted once, not again by every ``conch ask`` (each a new process) or every look.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from app.sqlite import StorageError, open_database
from engines.base import Healed, Note, Problem
from engines.scrub import scrub


class Notes(Protocol):
    """Where a note for the person goes (``HealthLog`` is one): the one shape every part that
    writes to Health asks for."""

    def add(self, topic: str, text: str, model: str = "", window: int | None = None) -> object: ...


@runtime_checkable
class StandingNotes(Notes, Protocol):
    """Notes that can also say a standing condition (no keyring on this computer) once, not
    once for every start while it lasts."""

    def add_standing(self, topic: str, text: str) -> object: ...


KEEP = 2000
_TEXT_LIMIT = 2000

# The health notes file's schema as steps, oldest first (app/sqlite.py): a change is a new step, a
# step that has shipped never changes. Step 1 is the schema from before files had a version.
_STEPS = (
    """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    topic TEXT NOT NULL,
    text TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    window INTEGER
);
CREATE TABLE IF NOT EXISTS unreachable_servers (
    server TEXT PRIMARY KEY,
    since REAL NOT NULL
);
""",
)


@dataclass(frozen=True, slots=True)
class HealthNote:
    time: float
    topic: str  # "healed", "unreachable", "summary-failed", "too-long", "learning", ...
    text: str
    model: str = ""
    window: int | None = None


def _clean(text: str, limit: int = _TEXT_LIMIT) -> str:
    text = scrub(text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class HealthLog:
    """Append-only notes, newest kept. ``add`` never raises: a note must not break a turn."""

    FILE_NAME = "health.sqlite3"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            opened = open_database(
                path, _STEPS, what="health notes", counted=("notes", "note", "notes")
            )
        except (StorageError, sqlite3.Error, OSError) as exc:
            # Notes are a help, never a reason not to start (a full disk, a read-only folder):
            # they are kept in memory until Conch closes.
            opened = open_database(Path(":memory:"), _STEPS, what="health notes")
            opened.problem = (
                f"{exc} Until then, health notes are kept only while Conch is open."
                if isinstance(exc, StorageError)
                else f"Conch could not open its health notes ({exc}); until it can, they are "
                "kept only while Conch is open."
            )
        self._db = opened.db
        self.problem = opened.problem
        self._lock = threading.RLock()
        self._adds = 0

    @classmethod
    def in_dir(cls, data_dir: Path) -> HealthLog:
        return cls(data_dir / cls.FILE_NAME)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(
        self, topic: str, text: str, model: str = "", window: int | None = None
    ) -> HealthNote | None:
        note = HealthNote(
            time=time.time(),
            topic=_clean(topic, 64) or "other",
            text=_clean(text),
            model=_clean(model, 200),
            window=window if window is None or window > 0 else None,
        )
        try:
            with self._lock:
                self._db.execute(
                    "INSERT INTO notes (time, topic, text, model, window) VALUES (?,?,?,?,?)",
                    (note.time, note.topic, note.text, note.model, note.window),
                )
                self._adds += 1
                if self._adds % 100 == 0:
                    self._db.execute(
                        "DELETE FROM notes WHERE id <= (SELECT MAX(id) FROM notes) - ?", (KEEP,)
                    )
        except sqlite3.Error:
            return None  # a full disk must not turn a healed turn into a failed one
        return note

    def add_standing(self, topic: str, text: str) -> HealthNote | None:
        """Add a note about a condition that lasts from start to start, unless the newest note
        of its topic already says it (so Health does not fill with one per start)."""
        newest = self.notes(limit=1, topic=_clean(topic, 64) or "other")
        if newest and newest[0].text == _clean(text):
            return None
        return self.add(topic, text)

    def add_event(self, event: Healed | Note | Problem, model: str = "") -> HealthNote | None:
        """A note for an engine event worth one (the conversation's helper)."""
        if isinstance(event, Healed):
            return self.add("healed", event.what, model=event.model or model, window=event.window)
        if isinstance(event, Note):
            return self.add(event.topic, event.text, model=model)
        p = event.problem
        # A problem whose own sentence is its detail (a redirect, a deadline) says it once.
        text = p.message if p.detail in p.message else f"{p.message} {p.detail}"
        return self.add(p.kind.value, text.strip(), model=model)

    def mark_unreachable(self, server: str) -> bool:
        """Remember ``server`` as unreachable; True when it was not already (by this or any
        other Conch on the data dir): the moment to write a note."""
        try:
            with self._lock:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO unreachable_servers (server, since) VALUES (?, ?)",
                    (server, time.time()),
                )
                return cur.rowcount > 0
        except (sqlite3.Error, StorageError):
            return True  # unsure: a note too many beats a server going down unheard

    def mark_reachable(self, server: str) -> bool:
        """Forget that ``server`` was unreachable; True when it had been."""
        try:
            with self._lock:
                cur = self._db.execute(
                    "DELETE FROM unreachable_servers WHERE server = ?", (server,)
                )
                return cur.rowcount > 0
        except (sqlite3.Error, StorageError):
            return False

    def notes(self, limit: int | None = None, topic: str | None = None) -> list[HealthNote]:
        """Notes, newest first."""
        sql = "SELECT time, topic, text, model, window FROM notes"
        args: list[object] = []
        if topic is not None:
            sql += " WHERE topic = ?"
            args.append(topic)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(-1 if limit is None else max(0, limit))
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [HealthNote(float(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4]) for r in rows]

    def clear(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM notes")
