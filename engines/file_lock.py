"""One advisory lock on a file between processes: flock, or msvcrt on Windows.

The system drops the lock when its process dies, so a crash never leaves anything locked. On a
file system without locks every try succeeds: nothing better can be done than going on
unlocked. Callers hold the file open and decide how long to wait (the transcript polls for a
moment, the bundled runtime's start waits without blocking the event loop).
"""

from __future__ import annotations

import contextlib
import os
import sys

if sys.platform == "win32":
    import msvcrt

    def try_lock(fd: int) -> bool:
        """Take the lock on ``fd``'s file if no other process holds it; True when taken."""
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def unlock(fd: int) -> None:
        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks from the file's position
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def try_lock(fd: int) -> bool:
        """Take the lock on ``fd``'s file if no other process holds it; True when taken."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            return True  # a file system without locks
        return True

    def unlock(fd: int) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
