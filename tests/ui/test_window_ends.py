"""Every way the window ends without the person closing it ends as closing it does: the real
``conch --mock`` in a process of its own, ended by a stop signal (SIGTERM, SIGHUP, Ctrl+C) or by
its X server going away. Each keeps what closing keeps (the window's place, an answer under way),
says at most one sentence on stderr and no traceback, and exits as ui/start.py says.

Each test waits for the window's "open" line in the log (or for the window on the X server)
before it ends it, and for the process to end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.logs import LOG_NAME
from app.store import ChatStore
from engines.base import CLOSED_TEXT, ProblemKind
from tests.processes import running, stop_with, wait_for
from tests.waits import HANG_SECONDS
from ui.start import DISPLAY_LOST_SENTENCE

ROOT = Path(__file__).resolve().parents[2]
OPEN_LINE = "the window is open"
CLOSED_LINE = "the window closed and everything behind it"  # after the engines let go
ASKED = "Tell me about the larch trees that grow on the hills north of the village"


def conch(data: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.main", "--mock", "--data-dir", str(data)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "WAYLAND_"))}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


def logged(data: Path) -> str:
    path = data / "logs" / LOG_NAME
    return path.read_text(encoding="utf-8") if path.exists() else ""


def kept_geometry(data: Path) -> str:
    settings = json.loads((data / "settings.json").read_text(encoding="utf-8"))
    return str(settings["window_geometry"])


def assert_ended_cleanly(data: Path, err: bytes) -> None:
    log_text = logged(data)
    assert "Traceback" not in err.decode(errors="replace") and "Traceback" not in log_text
    assert log_text.count(CLOSED_LINE) == 1  # turns stopped, engines and the model let go
    assert kept_geometry(data)  # only closing the window writes it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_ends_conch_as_closing_the_window_does(tmp_path: Path, signum: int) -> None:
    data = tmp_path / "data"
    with running(conch(data, clean_env(QT_QPA_PLATFORM="offscreen"))) as process:
        wait_for(lambda: OPEN_LINE in logged(data), "window")
        assert not kept_geometry(data)
        err = stop_with(process, signum)
    assert process.returncode == 128 + signum  # 143, 129, 130: stopped by that signal
    assert err == b""  # nothing to say: the person (or the session) asked for it
    assert_ended_cleanly(data, err)


def start_xvfb() -> tuple[subprocess.Popen[bytes], str]:
    """An X server on a free display (it writes the number when it is ready)."""
    read, write = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        number = pipe.readline().decode().strip()
    assert number.isdigit(), "Xvfb did not start"
    return xvfb, f":{number}"


def asked_in(data: Path) -> bool:
    """Whether the chat log has the person's message (saved before the answer starts)."""
    try:
        with sqlite3.connect(f"file:{data / 'conch.sqlite3'}?mode=ro", uri=True) as db:
            row = db.execute("SELECT 1 FROM messages WHERE text = ?", (ASKED,)).fetchone()
    except sqlite3.Error:
        return False  # being written: looked at again
    return row is not None


@pytest.mark.skipif(
    shutil.which("Xvfb") is None or shutil.which("xdotool") is None,
    reason="needs Xvfb and xdotool",
)
def test_the_x_server_ending_under_the_window_keeps_the_answer_and_says_one_sentence(
    tmp_path: Path,
) -> None:
    xvfb, display = start_xvfb()
    env = clean_env(DISPLAY=display, QT_QPA_PLATFORM="xcb")
    data = tmp_path / "data"
    with running(xvfb), running(conch(data, env)) as process:
        # Until the window is on the screen (xdotool waits for it), then a message into the
        # demo chat, whose answer is under way once the message is in the chat log.
        for command in (
            ["search", "--sync", "--onlyvisible", "--name", "Conch", "windowfocus", "--sync", "%1"],
            ["type", "--delay", "2", ASKED],  # type takes every word after it as text
            ["key", "Return"],
        ):
            done = subprocess.run(
                ["xdotool", *command], env=env, capture_output=True, timeout=HANG_SECONDS
            )
            assert done.returncode == 0, done.stderr
        wait_for(lambda: asked_in(data), "message in the chat log")
        xvfb.send_signal(signal.SIGTERM)
        xvfb.wait(timeout=HANG_SECONDS)
        _out, err = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 1
    assert err.decode(errors="replace").splitlines() == [f"conch: {DISPLAY_LOST_SENTENCE}"]
    assert_ended_cleanly(data, err)
    assert logged(data).count("the display went away") == 1  # with Qt's own words, once

    store = ChatStore.in_dir(data)
    try:
        (chat,) = [
            c for c in store.list_chats() if any(m.text == ASKED for m in store.messages(c.id))
        ]
        messages = store.messages(chat.id)
    finally:
        store.close()
    assert messages[-2].text == ASKED
    answer = messages[-1]
    assert answer.role == "assistant"
    # The answer was under way: saved as far as it got, as when the window is closed by hand.
    # (On a slow machine it may have finished first; then it is saved whole.)
    if answer.problem is not None:
        assert answer.problem.kind is ProblemKind.CANCELLED
        assert answer.problem.message == CLOSED_TEXT  # Conch closed; the person did not stop it
    else:
        assert answer.text.startswith("You said: ") and not answer.partial
