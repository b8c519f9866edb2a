"""The transcript file of one chat: ``api-sessions/<chat-id>.json``, version 1.

It holds what the model is sent word for word (``messages``), the summary of what was folded,
each kept turn's position in the chat log (``seqs``), the chat's estimate ``factor`` and the
windows refusals named. Older files without the newer fields load with defaults; unknown
fields are ignored. A file that cannot be read (corrupt, not UTF-8, a future version) is moved
aside, never deleted: the chat log still has every message, so the session rebuilds from it.
Writes are atomic: a temporary file in the same folder, fsync, rename, fsync of the folder.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engines.base import Message

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
    windows: dict[str, int] = Field(default_factory=dict)  # "provider/model id" -> tokens

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


@dataclass(frozen=True)
class Loaded:
    """A loaded transcript. ``recovered`` says a broken file was set aside (at ``moved_to``)."""

    transcript: TranscriptFile
    existed: bool = False
    recovered: bool = False
    moved_to: Path | None = None
    note: str = ""


def check_chat_id(chat_id: str) -> str:
    """The chat id if it is safe as a file name (no separators, no dot-dot); else an error."""
    if not isinstance(chat_id, str) or not _CHAT_ID.fullmatch(chat_id):
        raise TranscriptError(f"{chat_id!r} is not a usable chat id")
    return chat_id


def transcript_path(data_dir: Path, chat_id: str) -> Path:
    return Path(data_dir) / FOLDER / f"{check_chat_id(chat_id)}.json"


def load_transcript(data_dir: Path, chat_id: str) -> Loaded:
    """Read the chat's transcript; a missing file gives a fresh one.

    Raises only ``TranscriptError``: for an unusable chat id, or a broken file that could not
    be moved aside (then saving would overwrite it, so the caller must not save).
    """
    path = transcript_path(data_dir, chat_id)
    _sweep_temp_files(path)
    try:
        data = path.read_bytes()
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
    return Loaded(parsed.model_copy(update={"version": VERSION}), existed=True)


def _sweep_temp_files(path: Path) -> None:
    """Remove temp files a write killed before its rename left behind (the file is whole)."""
    try:
        leftovers = list(path.parent.glob(f".{path.name}.*.tmp"))
    except OSError:
        return
    for tmp in leftovers:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _is_json_error(exc: ValidationError) -> bool:
    return any(e.get("type") == "json_invalid" for e in exc.errors())


def _set_aside(path: Path, reason: str) -> Loaded:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.broken-{stamp}-{n}")
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


def save_transcript(data_dir: Path, chat_id: str, transcript: TranscriptFile) -> Path:
    """Write the transcript atomically; the old file stays intact if anything fails."""
    return write_bytes(data_dir, chat_id, encode(transcript))


def encode(transcript: TranscriptFile) -> bytes:
    return transcript.model_dump_json(exclude_defaults=False).encode("utf-8")


def write_bytes(data_dir: Path, chat_id: str, data: bytes) -> Path:
    """Atomically replace the chat's transcript file with ``data``."""
    path = transcript_path(data_dir, chat_id)
    with _WRITE_LOCK:
        tmp_name: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp_name, path)
            tmp_name = None
            _fsync_dir(path.parent)
        except OSError as exc:
            raise TranscriptError(
                f"Could not save the transcript {path.name}: {exc.strerror or exc}"
            ) from exc
        finally:
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)
    return path


def _fsync_dir(folder: Path) -> None:
    # The rename itself is durable only once the folder is synced (POSIX); Windows cannot open
    # a folder this way and does not need it.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
