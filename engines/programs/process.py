"""What the program engines share: a program's process and a chat's small session file.

A program runs as a child of Conch, started from its command line in the chat's own folder
(``start``); its last words on stderr are kept for a problem's details (``keep_stderr``), and
when Conch is done with it, it is stopped and reaped before the engine returns (``reap``).

The session file ``<state_dir>/<chat-id>.json`` (``"version": 1``, written atomically) keeps
the program's session id (Claude Code's session, Codex's thread, an ACP agent's session), how
full its context was, and for an ACP agent which program it is and the chat log's seq of the
last message the session was given.
A missing or damaged file means a new session, started with the handoff of the chat so far:
nothing is lost.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engines.base import TurnProblem
from engines.files import write_atomically
from engines.local.processes import death_signal_hook
from engines.local.processes import reap as _reap
from engines.programs import problems

STATE_VERSION = 1
IDLE_TIMEOUT = 600.0  # seconds without a word from a program before its turn is stopped
STDERR_LINES = 20  # the program's last words kept for a problem's details

__all__ = [
    "IDLE_TIMEOUT",
    "STATE_VERSION",
    "STDERR_LINES",
    "SessionFile",
    "SessionState",
    "keep_stderr",
    "last_words",
    "load_state",
    "reap",
    "save_state",
    "start",
]


# --- the process --------------------------------------------------------------------------------


async def start(
    program: str,
    command: Sequence[str],
    args: Sequence[str] = (),
    *,
    cwd: Path,
    env: Mapping[str, str],
    install: str,
    limit: int,
    stdin: bool = False,
) -> asyncio.subprocess.Process | TurnProblem:
    """Start ``command`` with ``args`` in ``cwd`` (made if missing), stdout and stderr piped,
    stdin piped only when asked; a command that cannot start is a problem saying why."""
    if not command:
        return problems.missing(program, ("",), install)
    os.makedirs(cwd, exist_ok=True)
    try:
        return await asyncio.create_subprocess_exec(
            *command,
            *args,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd),
            env={**os.environ, **env},
            limit=limit,
            # The program ends with Conch, even when Conch is killed (Linux); in a session of
            # its own, what it starts in turn is stopped with it (``reap``).
            preexec_fn=death_signal_hook(),
            start_new_session=True,
        )
    except FileNotFoundError:
        # Only the command is named: the arguments may carry the person's message.
        return problems.missing(program, command, install)
    except PermissionError:
        return problems.did_not_start(program, f"“{command[0]}” cannot be run (no permission).")
    except OSError as exc:  # not a program at all (a text file without "#!", a folder)
        return problems.did_not_start(
            program, f"“{command[0]}” cannot be run ({exc.strerror or exc})."
        )


async def reap(proc: asyncio.subprocess.Process, *, grace: float = 0.0) -> None:
    """Stop a program ``start`` started, with what it started, and wait until it is reaped
    (after ``grace`` seconds to end by itself)."""
    await _reap(proc, grace=grace, group=True)


def last_words() -> collections.deque[str]:
    return collections.deque(maxlen=STDERR_LINES)


async def keep_stderr(stream: asyncio.StreamReader, lines: collections.deque[str]) -> None:
    """Keep the newest lines the program writes on stderr, until it closes it."""
    with contextlib.suppress(OSError, ValueError):
        async for raw in stream:
            lines.append(raw.decode("utf-8", "replace").rstrip())


# --- the session file ---------------------------------------------------------------------------


@dataclass
class SessionState:
    session_id: str = ""
    used: int = 0  # input tokens of the latest request (the context meter)
    program: str = ""  # the program whose session it is ("" when not said)
    seq: int = -1  # the chat log's seq of the last message the session was given (-1: unknown)
    window: int = 0  # the window the program reported for its model (0: none reported)


def load_state(path: Path) -> SessionState:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return SessionState()
    if not isinstance(data, dict):
        return SessionState()
    sid = data.get("session_id")
    used = data.get("used")
    program = data.get("program")
    seq = data.get("seq")
    window = data.get("window")
    return SessionState(
        session_id=sid if isinstance(sid, str) else "",
        used=used if isinstance(used, int) else 0,
        program=program if isinstance(program, str) else "",
        seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else -1,
        window=window if isinstance(window, int) and not isinstance(window, bool) else 0,
    )


def save_state(path: Path, state: SessionState) -> None:
    """Write atomically; a failed write keeps the old file (the next turn tries again)."""
    data: dict[str, object] = {
        "version": STATE_VERSION,
        "session_id": state.session_id,
        "used": state.used,
    }
    if state.program:
        data["program"] = state.program
    if state.seq >= 0:
        data["seq"] = state.seq
    if state.window > 0:
        data["window"] = state.window
    with contextlib.suppress(OSError):
        write_atomically(path, json.dumps(data).encode("utf-8"))


class SessionFile:
    """One chat's session file, read once and written on every change (kept in memory only
    when there is no ``state_dir``)."""

    def __init__(self, state_dir: Path | None, chat_id: str) -> None:
        self.path = state_dir / f"{chat_id}.json" if state_dir is not None else None
        self._state = load_state(self.path) if self.path is not None else SessionState()

    def _save(self) -> None:
        if self.path is not None:
            save_state(self.path, self._state)

    @property
    def session_id(self) -> str:
        return self._state.session_id

    @property
    def used(self) -> int:
        return self._state.used

    @property
    def window(self) -> int:
        return self._state.window

    @property
    def program(self) -> str:
        return self._state.program

    @property
    def seq(self) -> int:
        return self._state.seq

    def remember(self, session_id: object, program: str = "") -> bool:
        """Keep the program's session id; True when it is a new one."""
        if not isinstance(session_id, str) or not session_id:
            return False
        if session_id == self._state.session_id and program == self._state.program:
            return False
        # The same program's new session runs the same model: its window still holds.
        self._state = SessionState(session_id, self._state.used, program, window=self._state.window)
        self._save()
        return True

    def given(self, seq: int) -> None:
        """The session was given the chat log's message ``seq``."""
        if seq != self._state.seq:
            self._state.seq = seq
            self._save()

    def forget(self) -> None:
        """The program no longer has the session: the next turn starts a new one."""
        self._state = SessionState()
        self._save()

    def set_window(self, window: int) -> None:
        if window > 0 and window != self._state.window:
            self._state.window = window
            self._save()

    def set_used(self, used: int) -> None:
        if used and used != self._state.used:
            self._state.used = used
            self._save()
