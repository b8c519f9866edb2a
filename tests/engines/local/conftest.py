"""What every local-runtime test leaves behind: no runtime it started unreaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.local import bundled


def zombie(pid: int) -> bool:
    """Whether ``pid`` ended and waits for its parent to collect its exit status (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][:1] == "Z"


@pytest.fixture(autouse=True)
def runtimes_are_reaped() -> Iterator[None]:
    """A shared runtime left running for the next Conch is this process's child: once a test
    ends it (or lets it end), it must be waited for, or it stays a zombie and its ``Popen``
    warns "still running" when the test session exits."""
    yield
    left = [proc.pid for proc in bundled._LEFT_RUNNING if zombie(proc.pid)]
    assert not left, f"runtimes that ended were never reaped: {left}"
