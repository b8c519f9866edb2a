"""A program chat's own small file: the program's session id and how full its context was.

``<state_dir>/<chat-id>.json``, ``"version": 1``; written atomically. A missing or damaged
file means a new session, started with the handoff of the chat so far: nothing is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

STATE_VERSION = 1


@dataclass
class SessionState:
    session_id: str = ""
    used: int = 0  # input tokens of the latest request (the context meter)


def load_state(path: Path) -> SessionState:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return SessionState()
    if not isinstance(data, dict):
        return SessionState()
    sid = data.get("session_id")
    used = data.get("used")
    return SessionState(
        session_id=sid if isinstance(sid, str) else "",
        used=used if isinstance(used, int) else 0,
    )


def save_state(path: Path, state: SessionState) -> None:
    """Write atomically; a failed write keeps the old file (the next turn tries again)."""
    data = {"version": STATE_VERSION, "session_id": state.session_id, "used": state.used}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
