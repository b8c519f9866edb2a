"""When the X server ends before the window closes, Conch ends with one line saying so, not a
traceback: the real ``conch --mock`` in a process of its own, on an Xvfb of the test's own
that the test ends once the window shows."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waits import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("Xvfb") is None or shutil.which("xdotool") is None,
    reason="needs Xvfb and xdotool",
)


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


def test_the_x_server_ending_under_the_window_ends_conch_with_one_line(tmp_path: Path) -> None:
    xvfb, display = start_xvfb()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "WAYLAND_"))}
    env.update(DISPLAY=display, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="xcb")
    conch = subprocess.Popen(
        [sys.executable, "-m", "app.main", "--mock", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Until the window is on the screen (xdotool waits for it itself).
        found = subprocess.run(
            ["xdotool", "search", "--sync", "--onlyvisible", "--name", "Conch"],
            env=env,
            capture_output=True,
            timeout=HANG_SECONDS,
        )
        assert found.returncode == 0 and found.stdout.strip(), found.stderr
        xvfb.send_signal(signal.SIGTERM)
        xvfb.wait(timeout=HANG_SECONDS)
        _out, err = conch.communicate(timeout=HANG_SECONDS)
    finally:
        for process in (conch, xvfb):
            if process.poll() is None:
                process.kill()
                process.wait()
    text = err.decode(errors="replace")
    assert "Traceback" not in text
    lines = text.splitlines()
    assert len(lines) == 1 and "the display went away before the window closed" in lines[0]
    assert conch.returncode == 1
    logged = (tmp_path / "data" / "logs" / "conch.log").read_text(encoding="utf-8")
    assert "Traceback" not in logged and logged.count("the display went away") == 1
