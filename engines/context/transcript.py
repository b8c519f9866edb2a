"""The transcript file of one chat: ``api-sessions/<chat-id>.json``, version 1.

It holds what the model is sent word for word (``messages``), the summary of what was folded,
each kept turn's position in the chat log (``seqs``, and ``joined`` for person messages that
went into the unanswered one before them), the chat's estimate ``factor``, the windows
refusals named (with when), and the turns a fold dropped whose summary is still to be written
(``late``, on ``late_base``). Older files without the newer fields load with defaults; unknown
fields are ignored. A file that cannot be read (corrupt, not UTF-8, a future version) is moved
aside, never deleted: the chat log still has every message, so the session rebuilds from it.

Writes are atomic: a temporary file in the same folder, fsync, rename, fsync of the folder.
Several Conch processes may open one chat (the window and ``conch ask``), so a write holds the
chat's lock file (``.<chat-id>.json.lock``) and only replaces the file this writer last saw
(``save_if_unchanged``); temp files carry their writer's process id, and only a dead writer's
are swept.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engines.base import Message
from engines.file_lock import try_lock, unlock
from engines.files import aside_name, write_atomically

VERSION = 1
FOLDER = "api-sessions"
_CHAT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

RECOVERED_TEXT = (
    "The model's copy of this chat could not be read, so Conch set it aside and rebuilt it "
    "from the chat log. Nothing was lost; the chat log still has every message."
)


class TranscriptError(Exception):
    """The transcript could not be loaded or saved; ``str()`` says why in words."""


class TranscriptFile(BaseModel):
    """The file's contents. Missing fields take their defaults; unknown ones are ignored."""

    model_config = ConfigDict(extra="ignore")

    version: int = VERSION
    messages: list[Message] = Field(default_factory=list)
    summary: str = ""
    seqs: list[int] = Field(default_factory=list)
    factor: float = 1.0
    joined: list[int] = Field(default_factory=list)  # seqs joined onto the message before
    windows: dict[str, int] = Field(default_factory=dict)  # "provider/model id" -> tokens
    windows_learned: dict[str, float] = Field(default_factory=dict)  # same keys -> Unix time
    # Turns a fold dropped whose summary was still to be written when the file was saved, and
    # the summary it extends: a session that opens the file writes it then.
    late: list[Message] = Field(default_factory=list)
    late_base: str = ""

    @field_validator("factor", mode="before")
    @classmethod
    def _sane_factor(cls, value: object) -> float:
        # A hand-edited or half-migrated file must not make every estimate absurd.
        if isinstance(value, int | float) and not isinstance(value, bool):
            f = float(value)
            if math.isfinite(f) and f >= 1.0:
                return min(f, 4.0)
        return 1.0

    @field_validator("windows", mode="before")
    @classmethod
    def _sane_windows(cls, value: object) -> dict[str, int]:
        if not isinstance(value, dict):
            return {}
        return {
            str(k): v
            for k, v in value.items()
            if isinstance(v, int) and not isinstance(v, bool) and v > 0
        }

    @field_validator("windows_learned", mode="before")
    @classmethod
    def _sane_times(cls, value: object) -> dict[str, float]:
        if not isinstance(value, dict):
            return {}
        return {
            str(k): float(v)
            for k, v in value.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }

    @field_validator("joined", mode="before")
    @classmethod
    def _sane_joined(cls, value: object) -> list[int]:
        if not isinstance(value, list):
            return []
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


Signature = tuple[int, int, int]  # (inode, size, mtime in ns): which version of the file


@dataclass(frozen=True)
class Loaded:
    """A loaded transcript. ``recovered`` says a broken file was set aside (at ``moved_to``).

    ``signature`` names the version read (None: no file), for ``save_if_unchanged``.
    """

    transcript: TranscriptFile
    existed: bool = False
    recovered: bool = False
    moved_to: Path | None = None
    note: str = ""
    signature: Signature | None = None


def check_chat_id(chat_id: str) -> str:
    """The chat id if it is safe as a file name (no separators, no dot-dot); else an error."""
    if not isinstance(chat_id, str) or not _CHAT_ID.fullmatch(chat_id):
        raise TranscriptError(f"{chat_id!r} is not a usable chat id")
    return chat_id


def transcript_path(data_dir: Path, chat_id: str) -> Path:
    return Path(data_dir) / FOLDER / f"{check_chat_id(chat_id)}.json"


def signature_of(st: os.stat_result) -> Signature:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def file_signature(data_dir: Path, chat_id: str) -> Signature | None:
    """Which version of the transcript file is there now (None: there is none)."""
    try:
        return signature_of(os.stat(transcript_path(data_dir, chat_id)))
    except OSError:
        return None


def load_transcript(data_dir: Path, chat_id: str) -> Loaded:
    """Read the chat's transcript; a missing file gives a fresh one.

    Raises only ``TranscriptError``: for an unusable chat id, or a broken file that could not
    be moved aside (then saving would overwrite it, so the caller must not save).
    """
    path = transcript_path(data_dir, chat_id)
    _sweep_temp_files(path)
    try:
        with open(path, "rb") as fh:
            # The signature of the very file read (a rename may land between stat and open).
            sig = signature_of(os.fstat(fh.fileno()))
            data = fh.read()
    except FileNotFoundError:
        return Loaded(TranscriptFile())
    except OSError as exc:
        return _set_aside(path, f"it could not be read ({exc.strerror or exc})")
    try:
        parsed = TranscriptFile.model_validate_json(data)
    except ValidationError as exc:
        reason = "it is not valid JSON" if _is_json_error(exc) else "its contents are not valid"
        return _set_aside(path, reason)
    except (ValueError, RecursionError):
        return _set_aside(path, "it is not valid JSON")
    if parsed.version > VERSION:
        return _set_aside(path, f"it was written by a newer Conch (version {parsed.version})")
    return Loaded(parsed.model_copy(update={"version": VERSION}), existed=True, signature=sig)


def peek_transcript(data_dir: Path, chat_id: str) -> TranscriptFile | None:
    """The chat's transcript as its file holds it, or None (no file, an unusable chat id, a
    file that cannot be read or that a newer Conch wrote). It only reads: a broken file is left
    for the chat's own session to set aside."""
    peeked = peek_signed(data_dir, chat_id)
    return peeked[0] if peeked is not None else None


def peek_signed(data_dir: Path, chat_id: str) -> tuple[TranscriptFile, Signature] | None:
    """``peek_transcript`` with the signature of the very file read."""
    try:
        with open(transcript_path(data_dir, chat_id), "rb") as fh:
            sig = signature_of(os.fstat(fh.fileno()))
            parsed = TranscriptFile.model_validate_json(fh.read())
    except (TranscriptError, OSError, ValueError, RecursionError):
        return None
    return (parsed, sig) if parsed.version <= VERSION else None


TEMP_MAX_AGE = 24 * 3600.0  # seconds; a temp file this old is a leftover whoever wrote it


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":
        # Windows' os.kill would end the process: only a temp file's age counts there.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # it exists, owned by someone else (or is no process id at all)
    return True


def _sweep_temp_files(path: Path) -> None:
    """Remove temp files a write killed before its rename left behind (the file is whole).

    Another process may be writing its temp file right now: only a dead writer's files (the
    process id is in the name) or very old ones are removed.
    """
    try:
        leftovers = list(path.parent.glob(f".{path.name}.*.tmp"))
    except OSError:
        return
    now = time.time()
    for tmp in leftovers:
        pid_part = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        try:
            old = now - tmp.stat().st_mtime > TEMP_MAX_AGE
        except OSError:
            continue
        dead = pid_part.isdigit() and not _writer_alive(int(pid_part))
        if dead or old:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _is_json_error(exc: ValidationError) -> bool:
    return any(e.get("type") == "json_invalid" for e in exc.errors())


def _set_aside(path: Path, reason: str) -> Loaded:
    target = aside_name(path)
    try:
        os.replace(path, target)
    except OSError as exc:
        raise TranscriptError(
            f"The transcript {path.name} is unreadable ({reason}) and could not be moved aside: "
            f"{exc.strerror or exc}"
        ) from exc
    return Loaded(
        TranscriptFile(),
        existed=True,
        recovered=True,
        moved_to=target,
        note=f"{RECOVERED_TEXT} (The old file: {reason}; kept as {target.name}.)",
    )


_WRITE_LOCK = threading.Lock()  # saves run in worker threads; one rename at a time
LOCK_WAIT = 10.0  # seconds a save waits for another process's save of the same chat


def save_transcript(data_dir: Path, chat_id: str, transcript: TranscriptFile) -> Path:
    """Write the transcript atomically; the old file stays intact if anything fails."""
    return write_bytes(data_dir, chat_id, encode(transcript))


def encode(transcript: TranscriptFile) -> bytes:
    return transcript.model_dump_json(exclude_defaults=False).encode("utf-8")


def write_bytes(data_dir: Path, chat_id: str, data: bytes) -> Path:
    """Atomically replace the chat's transcript file with ``data``."""
    path = transcript_path(data_dir, chat_id)
    with _WRITE_LOCK:
        try:
            _replace(path, data)
        except OSError as exc:
            raise TranscriptError(_save_problem(path, exc.strerror or str(exc))) from exc
    return path


@dataclass(frozen=True)
class Saved:
    """What ``save_if_unchanged`` did. ``signature``: the file as this writer now knows it.

    ``written`` False and ``problem`` "": another process changed the file since this writer
    last saw it, so it was left alone. ``problem``: the save failed, in words; the old file was
    removed when it could be (``cleared``), so the next start rebuilds from the chat log.
    """

    written: bool
    signature: Signature | None
    problem: str = ""
    cleared: bool = False


def save_if_unchanged(
    data_dir: Path,
    chat_id: str,
    data: bytes,
    expected: Signature | None,
    *,
    wait: float = LOCK_WAIT,
) -> Saved:
    """Replace the transcript with ``data`` if it is still the version ``expected``.

    Holds the chat's lock file while it checks and writes, so two processes never interleave
    a save. Never raises for a file-system problem: ``Saved.problem`` says what went wrong.
    """
    path = transcript_path(data_dir, chat_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Saved(False, expected, problem=_save_problem(path, exc.strerror or str(exc)))
    with _WRITE_LOCK, chat_lock(path, wait) as held:
        if not held:
            return Saved(
                False,
                expected,
                problem=_save_problem(path, "another Conch process kept it locked"),
            )
        current = _signature(path)
        if current != expected:
            return Saved(False, expected)
        try:
            _replace(path, data)
        except OSError as exc:
            cleared = _clear_stale(path, current)
            return Saved(
                False,
                None if cleared else current,
                problem=_save_problem(path, exc.strerror or str(exc)),
                cleared=cleared,
            )
        return Saved(True, _signature(path))


def _signature(path: Path) -> Signature | None:
    try:
        return signature_of(os.stat(path))
    except OSError:
        return None


def _save_problem(path: Path, why: str) -> str:
    return (
        f"Could not save the model's copy of this chat ({path.name}): {why}. Nothing is lost: "
        "the chat log has every message, and Conch rebuilds the copy from it."
    )


def _clear_stale(path: Path, current: Signature | None) -> bool:
    """Remove the old transcript after a failed save: it lacks what the chat now holds, and a
    missing file is rebuilt from the chat log at the next start (an old one might be trusted)."""
    if current is None:
        return True
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _replace(path: Path, data: bytes) -> None:
    """Temp file (named for this process), fsync, rename, fsync of the folder; OSError out."""
    write_atomically(path, data, prefix=_temp_prefix(path))


# --- the chat's lock file ---------------------------------------------------------------------


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def chat_lock(path: Path, wait: float = LOCK_WAIT) -> Iterator[bool]:
    """Hold the transcript's lock file (yields False if another process kept it ``wait`` s).

    An advisory lock (engines/file_lock.py) that the system drops when its process dies, so a
    crash never leaves a chat locked. The lock file itself is never deleted: removing it
    while another process waits on it would let two writers in.
    """
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        # No lock file (a read-only folder): no save will succeed anyway; let it say why.
        yield True
        return
    try:
        held = _acquire(fd, wait)
        try:
            yield held
        finally:
            if held:
                unlock(fd)
    finally:
        os.close(fd)


def _acquire(fd: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    pause = 0.002
    while True:
        if try_lock(fd):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)  # a save takes milliseconds; poll gently
        pause = min(pause * 2, 0.05)
