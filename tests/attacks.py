"""The attack strings of tests/data/attack_strings.json, ready to feed to the app.

``markup`` gives text that does harm when a widget reads it as HTML; ``names`` gives names
whose direction controls make them look like something else. ``FifoTripwire`` is the named
pipe the "img-fifo" string points at: it notices a widget opening it (which is what a window
reading the string as HTML would do, and then hang) and lets that reader go at once, so a
regression fails an assertion instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.waits import HANG_SECONDS

DATA = Path(__file__).resolve().parent / "data" / "attack_strings.json"
FIFO_PLACEHOLDER = "FIFO_PATH"
CELLS_PLACEHOLDER = "CELLS"


@dataclass(frozen=True)
class Attack:
    name: str
    text: str
    harm: str
    # False for a string that, if it got through, would take the test's own process down
    # (reading /dev/zero as an image aborts it): feed it to a ``conch`` child process.
    in_process: bool = True


@dataclass(frozen=True)
class Name:
    name: str
    text: str
    looks_like: str
    harm: str


def _data() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DATA.read_text("utf-8"))
    return loaded


def markup(fifo: Path) -> list[Attack]:
    """Every markup attack, its pipe placeholder pointing at ``fifo``, its table filled in."""
    out: list[Attack] = []
    for row in _data()["markup"]:
        text = str(row["text"]).replace(FIFO_PLACEHOLDER, str(fifo))
        if CELLS_PLACEHOLDER in text:
            text = text.replace(CELLS_PLACEHOLDER, str(row["piece"]) * int(row["times"]))
        out.append(Attack(row["name"], text, row["harm"], bool(row.get("in_process", True))))
    return out


def names() -> list[Name]:
    return [Name(r["name"], r["text"], r["looks_like"], r["harm"]) for r in _data()["names"]]


# The pipe's other end, in its own process: a reader inside Qt can hold the interpreter's lock
# while it waits, so a thread of the test's own could never answer it.
_WRITER = """
import os, sys
fifo, seen, stop = sys.argv[1:]
while True:
    os.close(os.open(fifo, os.O_WRONLY))  # returns once a reader opens the pipe
    if os.path.exists(stop):
        break
    with open(seen, "a") as marks:
        marks.write("opened\\n")
"""


class FifoTripwire:
    """A named pipe at ``path`` that records whether anything opened it for reading.

    A child process waits to open it for writing (that returns only once a reader opens the
    other end), notes the reader, and closes at once: the reader sees the end of the file
    instead of waiting for ever. ``opened`` is known for sure once the block has ended.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = path.with_name(path.name + ".seen")
        self._stop = path.with_name(path.name + ".stop")
        self._writer: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> FifoTripwire:
        os.mkfifo(self.path)
        args = [str(self.path), str(self._seen), str(self._stop)]
        self._writer = subprocess.Popen([sys.executable, "-c", _WRITER, *args])
        return self

    @property
    def opened(self) -> bool:
        return self._seen.exists()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._writer is not None
        self._stop.touch()
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer go
        try:
            self._writer.wait(timeout=HANG_SECONDS)
        finally:
            os.close(reader)
