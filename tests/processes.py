"""Conch (or a server beside it) in a process of its own, for tests that end it from outside.

Such a test starts the process, waits for an event saying it got where the test wants it (a line
on its stdout, a line in its log file), ends it (a stop signal) and waits for it to exit. The
waits here are for those events; their deadlines are only hang guards.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.waits import HANG_SECONDS


@contextmanager
def running(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """``process`` for the block; killed after it if still running (an assertion failed before
    it ended), so no process outlives its test."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stop_with(process: subprocess.Popen[bytes], signum: int) -> bytes:
    """Send ``signum`` and wait for the process to exit; what it wrote on stderr."""
    process.send_signal(signum)
    _out, err = process.communicate(timeout=HANG_SECONDS)
    return err


def read_until(stream: int, wanted: bytes) -> bytes:
    """Read a pipe until ``wanted`` arrived; all that was read."""
    got = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        deadline = time.monotonic() + HANG_SECONDS
        while wanted not in got:
            left = deadline - time.monotonic()
            assert left > 0 and sel.select(left), f"only {got!r} arrived"
            chunk = os.read(stream, 4096)
            assert chunk, f"the stream ended after {got!r}"
            got += chunk
    return got


def wait_for(found: Callable[[], bool], what: str) -> None:
    """Until ``found()`` is true. The other process's log and chat log are files: there is no
    event to await, so they are looked at until it is there."""
    deadline = time.monotonic() + HANG_SECONDS
    while not found():
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.02)
