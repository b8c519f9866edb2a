"""Opening Conch's SQLite files one way, and what to do when one is damaged or the disk is full.

Damage (a file that is not a database, damaged pages, a truncated file) is found when a file is
opened (``PRAGMA quick_check`` must answer "ok") or by any later statement. Either way the file
is renamed aside with a timestamp (never deleted), a fresh one is started, and every row that
can still be read from the old file is copied into it. At opening, ``Opened.problem`` holds one
sentence for the person; later, the statement that met the damage raises ``DamagedFileError`` with
that sentence and the next one runs on the fresh file, so damage never fails every turn.

A full disk raises ``DiskFullError``, whose text says so in plain words, instead of SQLite's "disk
I/O error". A busy or locked file is neither and is raised as it is.

Versions. A file's schema is an ordered list of steps (SQL scripts): step N takes a file from
version N-1 to N, and ``PRAGMA user_version`` says how many steps a file has had. Step 1 is the
schema from before files had a version, written with ``IF NOT EXISTS``, so such a file (version
0 with tables in it) is version 1 once step 1 has run again and changed nothing. Opening an
older file copies it to ``<name>.before-v<N>`` (N: the version it is brought to), then runs the
missing steps and sets the version in one transaction; a failure rolls back, leaves the file as
it was and raises ``StorageError`` with one sentence. A file from a newer Conch is opened
read-only: ``Opened.problem`` says so, and a write raises ``NewerFileError`` instead of changing
a file this Conch does not fully know. So that such an older Conch still reads what it knows
(as the transcript's version rule has it), a step only adds: tables, indexes, columns with a
default. Recovery copies rows by column name into a file at the newest version, which is one
more reason for a step never to rename a column or move its data.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from engines.files import aside_name

log = logging.getLogger("conch.sqlite")

# An I/O error with less free space than this is taken for a full disk: SQLite reports a full
# disk as "disk I/O error" when it cannot grow its shared-memory file, and it cannot say why.
_NEARLY_FULL = 8 * 1024 * 1024
_MIN_ROWID, _MAX_ROWID = -(2**63), 2**63 - 1
_MAX_SKIPS = 10_000  # damaged stretches skipped per table before recovery gives up on it
_SINGLE_ROWS = 64  # rows read one at a time after a failed read, before reading on in bulk

Params = Sequence[Any] | Mapping[str, Any]
Steps = Sequence[str]  # a file's schema, one SQL script per version (module doc)


class StorageError(Exception):
    """A file Conch keeps could not be opened or written; the text is for the person."""


class DiskFullError(StorageError, sqlite3.OperationalError):
    """The disk that holds the data folder is full."""


class DamagedFileError(StorageError, sqlite3.DatabaseError):
    """A statement met a damaged file; the text says where the old file was kept."""


class NewerFileError(StorageError, sqlite3.OperationalError):
    """A write to a file that a newer Conch wrote; it is open read-only."""


class _NotUpdatedError(Exception):
    """Bringing an existing file to this version failed; it was left as it was."""


class _FailedCheck(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found damage that no statement had run into yet."""


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    if isinstance(exc, _FailedCheck):
        return True
    if isinstance(exc, StorageError):
        return False
    name = getattr(exc, "sqlite_errorname", "")
    if name:
        return name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT")
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


def is_disk_full(exc: BaseException, folder: Path) -> bool:
    if isinstance(exc, DiskFullError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    name = getattr(exc, "sqlite_errorname", "")
    if name == "SQLITE_FULL":
        return True
    if name.startswith("SQLITE_IOERR"):
        try:
            return shutil.disk_usage(folder).free < _NEARLY_FULL
        except OSError:
            return False
    return False


def _full(what: str, folder: Path, *, opening: bool) -> DiskFullError:
    doing = f"open your {what}" if opening else f"save to your {what}"
    again = "start Conch again" if opening else "try again"
    return DiskFullError(
        f"The disk that holds {folder} is full, so Conch could not {doing}. "
        f"Free some space and {again}."
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plain_connect(path: Path, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("PRAGMA busy_timeout=3000")
        db.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        db.close()
        raise
    return db


def _read_only_connect(path: Path) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}?mode=ro"
    db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout=3000")
        db.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        db.close()
        raise
    return db


def _connect(path: Path, steps: Steps, synchronous: str) -> tuple[sqlite3.Connection, bool]:
    """The open file, brought to the newest of ``steps``; True with it when it is newer than
    that and so open read-only."""
    newer = _written_by_newer(path, len(steps))
    db = _read_only_connect(path) if newer else _plain_connect(path, synchronous)
    try:
        row = db.execute("PRAGMA quick_check(1)").fetchone()
        if row is None or row[0] != "ok":
            raise _FailedCheck("SQLite's check found damaged pages")
        if not newer and 0 <= _user_version(db) < len(steps):
            existed = _has_tables(db)
            try:
                _bring_up_to_date(db, path, steps)
            except sqlite3.DatabaseError as exc:
                if not existed or is_damage(exc) or is_disk_full(exc, path.parent):
                    raise
                raise _NotUpdatedError(str(exc)) from exc
        if not newer and not 0 <= _user_version(db) <= len(steps):
            # A newer Conch wrote it since the look above.
            db.close()
            db, newer = _read_only_connect(path), True
    except BaseException:
        db.close()
        raise
    return db, newer


# --- versions ---------------------------------------------------------------------------------


def _written_by_newer(path: Path, newest: int) -> bool:
    """Whether ``path`` has a version above ``newest``, looked at before a connection that would
    write (``journal_mode``) opens it."""
    if str(path) == ":memory:" or not path.exists():
        return False
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return not 0 <= _user_version(db) <= newest
    finally:
        db.close()


def _user_version(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def _has_tables(db: sqlite3.Connection) -> bool:
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' LIMIT 1"
    ).fetchone()
    return row is not None


def _statements(script: str) -> Iterator[str]:
    """The statements of ``script`` one at a time: ``executescript`` would commit the upgrade's
    transaction before it ran them."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending
            pending = ""
    if pending.strip(" \t\r\n;"):
        yield pending  # incomplete: SQLite says what is wrong with it


def _remove(path: Path) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            path.with_name(path.name + suffix).unlink(missing_ok=True)


def _copy_before(path: Path, version: int) -> Path:
    """Copy ``path`` as it was to ``<name>.before-v<version>`` (a name not yet taken)."""
    copy = path.with_name(f"{path.name}.before-v{version}")
    n = 1
    while copy.exists():
        n += 1
        copy = path.with_name(f"{path.name}.before-v{version}-{n}")
    # Read through a connection of its own: a backup from the connection that holds the write
    # lock never finishes, and this one sees the file as last committed, which the lock keeps.
    source = _read_only_connect(path)
    try:
        target = sqlite3.connect(copy, isolation_level=None)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # one file that holds it all
        finally:
            target.close()
    except BaseException:
        _remove(copy)
        raise
    finally:
        source.close()
    return copy


def _bring_up_to_date(db: sqlite3.Connection, path: Path, steps: Steps) -> None:
    """Run the steps the file has not had and set its version, all in one transaction, after
    copying a file that holds anything worth keeping aside."""
    newest = len(steps)
    db.execute("BEGIN IMMEDIATE")
    copy: Path | None = None
    try:
        # Again under the write lock: another Conch may have brought it up to date meanwhile.
        done = _user_version(db)
        if done >= newest:
            db.execute("COMMIT")
            return
        # A file from before versions only has step 1 run again, which changes nothing.
        if _has_tables(db) and max(done, 1) < newest:
            copy = _copy_before(path, newest)
        for step in steps[done:]:
            for statement in _statements(step):
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {newest:d}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        if copy is not None:
            _remove(copy)  # the file is as it was: the copy would only take room
        raise
    if copy is not None:
        log.info("%s brought to version %d; the file as it was is %s", path, newest, copy)


# --- recovery ---------------------------------------------------------------------------------


def _open_old(aside: Path) -> sqlite3.Connection | None:
    """The set-aside file, read-only when SQLite allows it (it then stays exactly as it was)."""
    for uri in (f"{aside.resolve().as_uri()}?mode=ro", f"{aside.resolve().as_uri()}?mode=rw"):
        try:
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        except sqlite3.Error:
            continue
        try:
            db.execute("PRAGMA cell_size_check=ON")  # find more damage instead of reading it
            # A file cut short says it has more pages than it has; SQLite then refuses to read
            # any of it unless the schema is "writable" (nothing is written: read-only).
            db.execute("PRAGMA writable_schema=ON")
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.Error:
            db.close()
            continue
        return db
    return None


def _seek_ok(old: sqlite3.Connection, table: str, start: int) -> bool:
    try:
        old.execute(
            f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (start,)
        ).fetchall()
    except sqlite3.DatabaseError:
        return False
    return True


def _next_readable(old: sqlite3.Connection, table: str, bad: int) -> int | None:
    """The lowest rowid above ``bad`` from which the table reads again; None when none does.

    Gallops past the damaged stretch, then narrows back so the rows just after it are kept.
    """
    step = 1
    while True:
        probe = bad + step
        if probe > _MAX_ROWID:
            return None
        if _seek_ok(old, table, probe):
            break
        step *= 2
    lo, hi = bad, probe  # reading from lo fails, from hi works
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _seek_ok(old, table, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _readable_rows(old: sqlite3.Connection, table: str, cols: str) -> Iterator[tuple[Any, ...]]:
    """Every row of ``table`` that SQLite can still read, skipping damaged stretches."""
    sql = f"SELECT rowid, {cols} FROM {table} WHERE rowid >= ? ORDER BY rowid"
    start: int | None = _MIN_ROWID
    skips = 0
    while start is not None:
        try:
            for row in old.execute(sql, (start,)):
                if row[0] < start:
                    continue  # a damaged cell read out of order: not a row
                yield tuple(row[1:])
                if row[0] >= _MAX_ROWID:
                    return
                start = row[0] + 1
            return
        except sqlite3.DatabaseError:
            skips += 1
            if skips > _MAX_SKIPS:
                return
        # A read that fails also loses the row before the failure (the cursor reads one row
        # ahead), so the rows after the damage are read one at a time for a while.
        for _ in range(_SINGLE_ROWS):
            try:
                row = old.execute(f"{sql} LIMIT 1", (start,)).fetchone()
            except sqlite3.DatabaseError:
                start = _next_readable(old, table, start)
                break
            if row is None:
                return
            yield tuple(row[1:])
            if row[0] >= _MAX_ROWID:
                return
            start = row[0] + 1


def _page_size(path: Path) -> int:
    """The page size the file's header names; 0 when the header does not name a valid one."""
    try:
        with path.open("rb") as f:
            header = f.read(100)
    except OSError:
        return 0
    if len(header) < 18:
        return 0
    size = int.from_bytes(header[16:18], "big")
    size = 65_536 if size == 1 else size
    return size if 512 <= size <= 65_536 and size & (size - 1) == 0 else 0


@contextlib.contextmanager
def _filled_copy(aside: Path) -> Iterator[sqlite3.Connection | None]:
    """For a file cut short in the middle of a page: a copy whose missing bytes are 0x01.

    SQLite reads the missing part of a cut page as zeros, and a row that lay across the cut
    then reads back with zeros in place of its end, as if nothing were wrong. The same row read
    from this copy differs, so a row that reads the same from both lies wholly before the cut.
    None when the file ends on a page boundary (nothing is read that is not there).
    """
    size = _page_size(aside)
    try:
        length = aside.stat().st_size
    except OSError:
        length = 0
    if not size or not length % size:
        yield None
        return
    try:
        temporary = tempfile.TemporaryDirectory(prefix="conch-recovery-")
    except OSError:
        log.warning("no room to check the last page of %s", aside.name, exc_info=True)
        yield None
        return
    with temporary as folder:
        copy = Path(folder) / aside.name
        try:
            shutil.copyfile(aside, copy)
            with copy.open("ab") as f:
                f.write(b"\x01" * (size - length % size))
            wal = aside.with_name(aside.name + "-wal")
            if wal.exists():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        except OSError:
            log.warning("could not copy %s to check its last page", aside.name, exc_info=True)
            yield None
            return
        other = _open_old(copy)
        try:
            yield other
        finally:
            if other is not None:
                other.close()


def _whole_rows(
    old: sqlite3.Connection, other: sqlite3.Connection | None, table: str, cols: str
) -> Iterator[tuple[Any, ...]]:
    """``_readable_rows``, less the rows that read differently from ``other`` (``_filled_copy``)."""
    if other is None:
        yield from _readable_rows(old, table, cols)
        return
    # Hashes, not rows: a chat log's rows can be large. Both sides hash their rowid too.
    steady = {hash(row) for row in _readable_rows(other, table, f"rowid, {cols}")}
    for row in _readable_rows(old, table, f"rowid, {cols}"):
        if hash(row) in steady:
            yield row[1:]


def _copy_readable(aside: Path, fresh: sqlite3.Connection, after: str) -> dict[str, int]:
    """Copy what can be read from ``aside`` into ``fresh``; rows copied per table."""
    old = _open_old(aside)
    if old is not None:
        with _filled_copy(aside) as other:
            return _copy_rows(old, other, fresh, after, aside.name)
    # SQLite reads nothing of a file whose first 100 bytes (its header) are damaged, though
    # every page after them may be whole: read it again under a header written anew.
    with _reheaded_copy(aside) as old:
        if old is None:
            return {}
        return _copy_rows(old, None, fresh, after, aside.name)


_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)
_TABLE_PAGES = (0x05, 0x0D)  # the first byte of an interior or a leaf page of a table b-tree


def _header(page_size: int, pages: int, wal: bool) -> bytes:
    """A plain database header (SQLite's file format, section 1.3) for ``pages`` pages."""
    h = bytearray(100)
    h[0:16] = _MAGIC
    h[16:18] = (1 if page_size == 65_536 else page_size).to_bytes(2, "big")
    h[18] = h[19] = 2 if wal else 1  # file format versions: WAL or rollback journal
    h[21:24] = bytes((64, 32, 32))  # payload fractions, fixed by the format
    h[24:28] = (1).to_bytes(4, "big")  # change counter
    h[28:32] = pages.to_bytes(4, "big")  # size in pages, valid while [92:96] matches [24:28]
    h[40:44] = (1).to_bytes(4, "big")  # schema cookie
    h[44:48] = (4).to_bytes(4, "big")  # schema format
    h[56:60] = (1).to_bytes(4, "big")  # text encoding: UTF-8, all Conch writes
    h[92:96] = (1).to_bytes(4, "big")
    h[96:100] = (3_045_000).to_bytes(4, "big")
    return bytes(h)


@contextlib.contextmanager
def _reheaded_copy(aside: Path) -> Iterator[sqlite3.Connection | None]:
    """A copy of ``aside`` with its header written anew, for each page size the file can
    have, open on the first whose schema reads; None when none does (or no room for a copy)."""
    try:
        length = aside.stat().st_size
        with aside.open("rb") as f:
            start = f.read(101)
    except OSError:
        yield None
        return
    if len(start) < 101 or start[100] not in _TABLE_PAGES:
        yield None  # page 1 itself is gone: nothing to read the schema from
        return
    wal = aside.with_name(aside.name + "-wal")
    try:
        temporary = tempfile.TemporaryDirectory(prefix="conch-recovery-")
    except OSError:
        log.warning("no room to read %s under a new header", aside.name, exc_info=True)
        yield None
        return
    with temporary as folder:
        copy = Path(folder) / aside.name
        for size in _PAGE_SIZES:
            if length < size or length % size:
                continue
            try:
                shutil.copyfile(aside, copy)
                with copy.open("r+b") as f:
                    f.write(_header(size, length // size, wal.exists()))
                if wal.exists():
                    shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
            except OSError:
                log.warning("could not copy %s to read it", aside.name, exc_info=True)
                break
            old = _open_old(copy)
            if old is None:
                continue
            try:
                tables = old.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            except sqlite3.DatabaseError:
                tables = 0
            if tables:
                try:
                    yield old
                finally:
                    old.close()
                return
            old.close()
        yield None


def _copy_rows(
    old: sqlite3.Connection,
    other: sqlite3.Connection | None,
    fresh: sqlite3.Connection,
    after: str,
    aside: str,
) -> dict[str, int]:
    counts: dict[str, int] = {}
    tables = [
        str(r[0])
        for r in fresh.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY rowid"
        )
    ]
    # Rows whose parent row was lost are still worth keeping; ``after`` gives them one.
    fresh.execute("PRAGMA foreign_keys=OFF")
    try:
        for name in tables:
            table = _quote(name)
            try:
                had = {str(r[1]) for r in old.execute(f"PRAGMA table_info({table})")}
            except sqlite3.DatabaseError:
                continue
            wanted = [str(r[1]) for r in fresh.execute(f"PRAGMA table_info({table})")]
            cols = [c for c in wanted if c in had]
            if not cols:
                continue
            listed = ", ".join(_quote(c) for c in cols)
            insert = (
                f"INSERT OR IGNORE INTO {table} ({listed}) VALUES ({', '.join('?' * len(cols))})"
            )
            n = 0
            fresh.execute("BEGIN")
            try:
                for row in _whole_rows(old, other, table, listed):
                    n += fresh.execute(insert, row).rowcount
                fresh.execute("COMMIT")
            except BaseException:
                if fresh.in_transaction:
                    fresh.execute("ROLLBACK")
                raise
            counts[name] = n
        if after and any(counts.values()):
            fresh.executescript(after)
    except sqlite3.Error:
        # A fresh file that cannot take the rows (a full disk): what was copied stays, the
        # rest is still in the file set aside.
        log.warning("recovery of %s stopped early", aside, exc_info=True)
    finally:
        old.close()
        with contextlib.suppress(sqlite3.Error):
            fresh.execute("PRAGMA foreign_keys=ON")
    return counts


def _set_aside(path: Path) -> Path:
    """Rename ``path`` (and its -wal/-shm) to ``<name>.broken-<time>``; return the new name."""
    aside = aside_name(path)
    path.rename(aside)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            # SQLite finds the set-aside file's recent writes under its own name + "-wal".
            side.rename(aside.with_name(aside.name + suffix))
    return aside


def _drop_empty_log(aside: Path) -> None:
    """Remove an empty -wal (no data in it) and its -shm (an index SQLite rebuilds) beside the
    set-aside file, so only files that hold something are left there."""
    wal = aside.with_name(aside.name + "-wal")
    with contextlib.suppress(OSError):
        if wal.stat().st_size == 0:
            wal.unlink()
            aside.with_name(aside.name + "-shm").unlink(missing_ok=True)


def _put_back(aside: Path, path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            side = aside.with_name(aside.name + suffix)
            if side.exists():
                side.rename(path.with_name(path.name + suffix))
        aside.rename(path)


# --- the connection ---------------------------------------------------------------------------


class _Cursor(sqlite3.Cursor):
    """A cursor whose failures go through its ``Database`` (damage, a full disk)."""

    owner: Database

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as exc:
            self.owner.reraise(exc)

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        try:
            return super().fetchmany(size)
        except sqlite3.Error as exc:
            self.owner.reraise(exc)

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as exc:
            self.owner.reraise(exc)

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.Error as exc:
            self.owner.reraise(exc)


class Database:
    """One SQLite file, opened with ``schema``; repairs itself when damage shows up.

    ``schema`` is the file's list of steps (module doc), or one script for a file that has a
    single version. ``what`` names the file for the person ("chat log", "memories", "health notes");
    ``counted`` is (table, one, many) for the sentence after a recovery ("messages", "message",
    "messages"); ``after_recovery`` is SQL run on the fresh file once rows were copied into it
    (to give rows whose parent was lost a parent again).
    """

    def __init__(
        self,
        path: Path,
        schema: str | Steps,
        *,
        what: str,
        synchronous: str = "NORMAL",
        counted: tuple[str, str, str] | None = None,
        after_recovery: str = "",
    ) -> None:
        self.path = path
        self.what = what
        self._steps: tuple[str, ...] = (schema,) if isinstance(schema, str) else tuple(schema)
        self._synchronous = synchronous
        self._counted = counted
        self._after = after_recovery
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection
        self.read_only = False  # a newer Conch wrote the file
        self.problem = self._open()

    # -- opening and repair --

    def _open(self) -> str:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._conn, self.read_only = _connect(self.path, self._steps, self._synchronous)
        except _NotUpdatedError as exc:
            raise StorageError(
                f"Conch could not update your {self.what} file for this version ({exc}) and "
                "left it as it was; close any other Conch and start Conch again."
            ) from exc
        except sqlite3.DatabaseError as exc:
            if is_disk_full(exc, folder):
                raise _full(self.what, folder, opening=True) from exc
            if not is_damage(exc):
                raise
            return self._replace(str(exc))
        except OSError as exc:
            if is_disk_full(exc, folder):
                raise _full(self.what, folder, opening=True) from exc
            raise
        if self.read_only:
            log.warning("%s was written by a newer Conch; opened read-only", self.path)
            return (
                f"Your {self.what} file was written by a newer Conch; it is open read-only. "
                "Update Conch to write to it."
            )
        return ""

    def _reconnect(self) -> sqlite3.Connection:
        if self.read_only:
            return _read_only_connect(self.path)
        return _plain_connect(self.path, self._synchronous)

    def _replace(self, detail: str) -> str:
        """Set the damaged file aside, start a fresh one with what can be read; the sentence."""
        folder = self.path.parent
        try:
            aside = _set_aside(self.path)
        except OSError as exc:
            raise StorageError(
                f"Your {self.what} file is damaged ({detail}) and Conch could not move it aside "
                f"({exc.strerror or type(exc).__name__}). Move {self.path} to another folder "
                "and start Conch again."
            ) from exc
        try:
            fresh, _ = _connect(self.path, self._steps, self._synchronous)
        except (sqlite3.Error, OSError) as exc:
            _put_back(aside, self.path)
            if is_disk_full(exc, folder):
                raise _full(self.what, folder, opening=True) from exc
            raise StorageError(
                f"Your {self.what} file is damaged ({detail}) and Conch could not start a new "
                f"one ({exc}). Check that {folder} is writable and start Conch again."
            ) from exc
        counts = _copy_readable(aside, fresh, self._after)
        _drop_empty_log(aside)
        self._conn = fresh
        self.read_only = False
        log.warning(
            "%s was damaged (%s); set aside as %s, copied %s", self.path, detail, aside, counts
        )
        kept = f"Conch kept it as {aside.name} in {folder} and started a new one"
        n = counts.get(self._counted[0], 0) if self._counted else 0
        if n and self._counted:
            noun = self._counted[1] if n == 1 else self._counted[2]
            return (
                f"Your {self.what} file was damaged ({detail}). {kept} with the {n:,} {noun} "
                "it could still read; nothing was deleted."
            )
        if any(counts.values()):
            return (
                f"Your {self.what} file was damaged ({detail}). {kept} with what it could still "
                "read; nothing was deleted."
            )
        return f"Your {self.what} file could not be read ({detail}). {kept}; nothing was deleted."

    def failure(self, exc: sqlite3.Error) -> Exception:
        """What to raise for ``exc``: a full disk and damage get their sentence (damage is
        repaired first, so the next statement runs on a fresh file); anything else as it is."""
        with self._lock:
            folder = self.path.parent
            if isinstance(exc, StorageError):
                return exc
            if self.read_only and getattr(exc, "sqlite_errorname", "").startswith(
                "SQLITE_READONLY"
            ):
                return NewerFileError(
                    f"Conch did not save this: your {self.what} file was written by a newer "
                    "Conch and is open read-only. Update Conch to write to it."
                )
            if is_disk_full(exc, folder):
                return _full(self.what, folder, opening=False)
            if not isinstance(exc, sqlite3.DatabaseError) or not is_damage(exc):
                return exc
            # Closing rolls back a transaction under way; the caller's ROLLBACK is then a no-op.
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            try:
                return DamagedFileError(self._replace(str(exc)))
            except StorageError as failed:
                # Not set aside: go on with the damaged file, whose undamaged rows still read.
                try:
                    self._conn = self._reconnect()
                except sqlite3.Error:
                    log.exception("could not reopen %s", self.path)
                return DamagedFileError(str(failed))

    def reraise(self, exc: sqlite3.Error) -> NoReturn:
        failure = self.failure(exc)
        if failure is exc:
            raise exc
        raise failure from exc

    # -- what the stores call --

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, parameters: Params = ()) -> sqlite3.Cursor:
        with self._lock:
            cur = self._conn.cursor(_Cursor)
            cur.owner = self
            if not self._conn.in_transaction and sql.strip().upper() == "ROLLBACK":
                # SQLite already rolled back (a full disk, damage); a second ROLLBACK would
                # only raise "no transaction is active" over the real error.
                return cur
            try:
                return cur.execute(sql, parameters)
            except sqlite3.Error as exc:
                self.reraise(exc)

    def executemany(self, sql: str, rows: Sequence[Params]) -> sqlite3.Cursor:
        with self._lock:
            cur = self._conn.cursor(_Cursor)
            cur.owner = self
            try:
                return cur.executemany(sql, rows)
            except sqlite3.Error as exc:
                self.reraise(exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass
class Opened:
    db: Database
    problem: str = ""  # set when a damaged file was set aside or a newer Conch wrote it


def open_database(
    path: Path,
    schema: str | Steps,
    *,
    what: str,
    synchronous: str = "NORMAL",
    counted: tuple[str, str, str] | None = None,
    after_recovery: str = "",
) -> Opened:
    """Open (or create) ``path`` with ``schema``, brought to its newest version; a damaged file
    is set aside, and one from a newer Conch is opened read-only (module doc).

    Raises ``DiskFullError`` or ``StorageError`` (a sentence for the person) when the file cannot be
    opened at all, and ``sqlite3.Error``/``OSError`` for anything else (a busy file).
    """
    db = Database(
        path,
        schema,
        what=what,
        synchronous=synchronous,
        counted=counted,
        after_recovery=after_recovery,
    )
    return Opened(db, db.problem)
