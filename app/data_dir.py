"""Checking the data folder before anything opens a file in it.

A data folder Conch cannot use (a file in its place, a folder it may not read or write, a
file inside it that is read-only) is named in one sentence that says what to do, before the
chat log is opened: otherwise the first write fails half-way through a turn.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class DataDirError(Exception):
    """The data folder cannot be used; the message is one sentence for the person."""


_ELSEWHERE = "or start Conch with --data-dir naming another folder"


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _check_writable(folder: Path) -> None:
    """Create and remove a file in ``folder``: a real write, unlike os.access, which answers
    for the real user id and knows nothing of a read-only mount."""
    handle, probe = tempfile.mkstemp(prefix=".conch-write-check-", dir=folder)
    os.close(handle)
    os.unlink(probe)


def prepare_data_dir(path: Path) -> Path:
    """Create ``path`` when missing and check Conch can read and write what is in it."""
    if path.exists() and not path.is_dir():
        raise DataDirError(
            f"The data folder {path} is a file, not a folder; start Conch with --data-dir "
            "naming a folder (Conch creates it when it is missing)."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(
            f"Conch cannot create the data folder {path} ({_reason(exc)}); create it yourself "
            f"{_ELSEWHERE}."
        ) from exc
    try:
        entries = sorted(path.iterdir())
        _check_writable(path)
    except OSError as exc:
        raise DataDirError(
            f"Conch cannot read and write in the data folder {path} ({_reason(exc)}); let "
            f"your user write there {_ELSEWHERE}."
        ) from exc
    for entry in entries:
        try:
            if entry.is_dir():
                _check_writable(entry)
            elif entry.is_file():
                with entry.open("ab"):  # appends nothing; fails when the file is read-only
                    pass
        except OSError as exc:
            raise DataDirError(
                f"Conch cannot write to {entry} ({_reason(exc)}); make it writable for your "
                f"user {_ELSEWHERE}."
            ) from exc
    return path
