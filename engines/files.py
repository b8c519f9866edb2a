"""Writing a file so that a reader sees the old contents or the new, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, prefix: str | None = None) -> None:
    """Temp file in the same folder (named ``prefix``..., by default after ``path``), fsync,
    rename over ``path``, fsync of the folder. A failure raises OSError and leaves no temp file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=prefix if prefix is not None else f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename is durable only once the folder entry is (POSIX); Windows cannot open a
    # folder this way and does not need it.
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def aside_name(path: Path) -> Path:
    """Where a damaged ``path`` is set aside: ``<name>.broken-<time>``, numbered when that
    name is taken (two damaged files in one second must not overwrite each other)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    return target


__all__ = ["aside_name", "write_atomically"]
