"""Opening Conch's SQLite files the same way, and what to do when one is damaged.

A file that is not a database, or whose pages are corrupt, is renamed aside (never deleted)
and a fresh one is started, so Conch still opens; the caller gets a sentence for the person
saying what happened and where the old file is. A busy or locked file is not damage and is
raised as it is.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

_DAMAGED = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}


@dataclass
class Opened:
    db: sqlite3.Connection
    problem: str = ""  # set when a damaged file was set aside


def _connect(path: Path, schema: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("PRAGMA busy_timeout=3000")
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(schema)
        db.execute("PRAGMA quick_check(1)").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    if name:
        return name in _DAMAGED
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


def open_database(path: Path, schema: str, *, what: str, synchronous: str = "NORMAL") -> Opened:
    """Open (or create) ``path`` with ``schema``; set a damaged file aside (see module doc).

    ``what`` names the file for the person: "chat log", "memories", "health notes".
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return Opened(_connect(path, schema, synchronous))
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
        path.rename(aside)
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                side.rename(aside.with_name(aside.name + suffix))
        problem = (
            f"Your {what} file could not be read ({exc}). Conch kept it as {aside.name} in "
            f"{path.parent} and started a new one; nothing was deleted."
        )
        return Opened(_connect(path, schema, synchronous), problem)
