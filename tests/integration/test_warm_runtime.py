"""Two ``conch ask`` commands in a row use one warm bundled runtime (no second model load, the
chat's start read from llama.cpp's cache), which then ends by itself when idle.

The real ``conch`` as subprocesses, with the real runtime (llama.cpp's server) and SmolLM2 GGUF.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.local import serve
from engines.local.bundled import (
    EXITS_NAME,
    IDLE_ENV,
    PID_NAME,
    SHARED_LOG_NAME,
    SHARED_NAME,
    find_gguf,
    free_port,
)
from engines.local.processes import alive as _alive
from tests.app.test_cli import closed_port
from tests.integration.conftest import needs_bundled

pytestmark = [
    pytest.mark.bundled,
    needs_bundled,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

ROOT = Path(__file__).resolve().parents[2]
IDLE = 45  # seconds the runtime stays warm here: far more than the gap between two commands
GUARD = 600  # seconds: a hang guard for one command on a busy two-core machine


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def folder(data_dir: Path) -> Iterator[Path]:
    """A data folder where only the bundled model can answer; its runtime is gone afterwards."""
    closed = f"http://127.0.0.1:{closed_port()}"
    settings = {
        "lmstudio_url": closed,
        "llamacpp_url": closed,
        "vllm_url": closed,
        "bundled_model": True,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    yield data_dir
    record = data_dir / SHARED_NAME
    if record.exists():
        pid = int(json.loads(record.read_text())["pid"])
        if _alive(pid):  # the test failed early: do not leave it warm for minutes
            os.killpg(pid, signal.SIGKILL)


def ask(folder: Path, home: Path, text: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "XDG_"))}
    env.update(
        HOME=str(home),
        OLLAMA_HOST=f"127.0.0.1:{closed_port()}",
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
    )
    env[IDLE_ENV] = str(IDLE)
    args = ["ask", "--data-dir", str(folder), "--chat", "warm", text]
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=False,
    )


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_two_commands_share_one_warm_runtime_that_then_ends_by_itself(
    folder: Path, home: Path
) -> None:
    first = ask(folder, home, "Name a colour.")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip()
    pid = int(json.loads((folder / SHARED_NAME).read_text())["pid"])
    assert _alive(pid)  # still running after the command ended
    assert not (folder / PID_NAME).exists()  # not a server that dies with its Conch

    second = ask(folder, home, "Name another one.")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip()
    assert int(json.loads((folder / SHARED_NAME).read_text())["pid"]) == pid

    log = (folder / SHARED_LOG_NAME).read_text(errors="replace")
    assert log.count("load_model: loading model") == 1  # the model loaded once
    # The second command's prompt begins with the whole of the first one, so the chat's slot
    # reads only what is new: llama.cpp's own counts of the last request, the tokens it
    # evaluated against the tokens the slot holds afterwards.
    read = [int(n) for n in re.findall(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", log)]
    held = [int(n) for n in re.findall(r"stop processing: n_tokens = (\d+)", log)]
    assert read and held and read[-1] < 0.5 * held[-1], log[-2_000:]

    assert wait_gone(pid, IDLE + GUARD), "the warm runtime did not end by itself"
    assert serve.recorded_exit(folder / EXITS_NAME, pid) == 0
    assert "nobody holds the server: ending" in (folder / SHARED_LOG_NAME).read_text(
        errors="replace"
    )


def test_conch_itself_runs_the_model_server_as_a_frozen_build_does(data_dir: Path) -> None:
    # A frozen build has no Python: BundledRuntime runs `<conch> -m engines.local.serve …`.
    gguf = find_gguf()
    assert gguf is not None
    exits = data_dir / EXITS_NAME
    args = ["-m", serve.MODULE, "--model", str(gguf), "--model_alias", "m", "--n_ctx", "512"]
    args += ["--host", "127.0.0.1", "--port", str(free_port())]
    args += ["--idle-exit", "0.5", "--exits", str(exits)]
    done = subprocess.run(
        [sys.executable, "-m", "app.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2_000:]
    assert "Uvicorn running on http://127.0.0.1" in done.stderr  # the launcher's layer served
    assert "nobody holds the server: ending" in done.stdout
    assert len(exits.read_text().splitlines()) == 1
