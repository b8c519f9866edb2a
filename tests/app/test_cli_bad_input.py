"""``conch`` given bad input at its edges: one clear sentence, an exit code, nothing lost.

Every test runs the real entry point in a subprocess against a data folder of its own: binary
stdin, a data folder that is a file or that Conch may not write, a terminal that shows only
ASCII, a reader that goes away, and SIGTERM or SIGHUP in the middle of an answer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.store import ChatStore
from engines.base import CLOSED_TEXT, HUMAN_TEXT, ProblemKind
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.processes import read_until, running, stop_with

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 60.0  # seconds; a passing test never gets near it


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
        OLLAMA_HOST=f"127.0.0.1:{closed_port()}",
        QT_QPA_PLATFORM="offscreen",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def as_a_plain_user() -> list[str]:
    """A command prefix under which file permissions apply: root ignores them, so as root
    the process runs without the two capabilities that override them."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def conch(
    *args: str | bytes,
    home: Path,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
    module: str = "app.main",
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", module, *args],
        cwd=home,
        env=env or environment(home),
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=120,
        check=False,
    )


def saved(data_dir: Path, chat_id: str = "t1") -> list[tuple[str, str]]:
    """(role, text) of every message in the chat."""
    store = ChatStore.in_dir(data_dir)
    try:
        return [(m.role, m.text) for m in store.messages(chat_id)]
    finally:
        store.close()


def one_sentence(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


# --- the command line -------------------------------------------------------------------------


def test_a_data_dir_called_models_opens_the_window_there(home: Path) -> None:
    done = conch("--data-dir", "models", "--mock", "--quit-after", "0.2", home=home)
    assert done.returncode == 0, done.stderr.decode()
    assert (home / "models" / "conch.sqlite3").is_file()


def test_cli_flags_before_or_after_the_command(home: Path) -> None:
    first = conch("models", "--mock", "--data-dir", "D", "--json", home=home)
    second = conch("--mock", "--data-dir", "D", "models", "--json", home=home)
    for done in (first, second):
        assert done.returncode == 0, done.stderr.decode()
        assert json.loads(done.stdout)[0]["id"] == "mock-model"


# --- binary input -----------------------------------------------------------------------------


def test_binary_stdin_is_sent_with_replacement_characters_and_saved(
    home: Path, data_dir: Path
) -> None:
    raw = b"caf\xe9 \xff\xfe\x00 tail"
    done = conch(
        "ask", "--mock", "--chat", "t1", "--data-dir", str(data_dir), "-", home=home, stdin=raw
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"not UTF-8 text" in done.stderr and b"Traceback" not in done.stderr
    text = raw.decode("utf-8", "replace")
    assert done.stdout.decode().startswith(f"You said: {text}")
    assert saved(data_dir)[0] == ("user", text)
    assert saved(data_dir)[1][1].startswith(f"You said: {text}")


def test_an_argument_that_is_not_utf8_is_sent_with_replacement_characters(
    home: Path, data_dir: Path
) -> None:
    done = conch(
        "ask", "--mock", "--chat", "t1", "--data-dir", str(data_dir), b"na\xefve question",
        home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert saved(data_dir)[0] == ("user", "na\ufffdve question")


# --- the data folder --------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["ask", "hi"], ["models"]])
def test_a_data_dir_that_is_a_file_is_named(command: list[str], home: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me", encoding="utf-8")
    done = conch(*command, "--mock", "--data-dir", str(a_file), home=home)
    assert done.returncode == 1
    assert "is a file, not a folder" in one_sentence(done.stderr)
    assert a_file.read_text(encoding="utf-8") == "keep me"


def test_the_window_names_a_data_dir_that_is_a_file(home: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me", encoding="utf-8")
    done = conch("--mock", "--data-dir", str(a_file), "--quit-after", "0.2", home=home)
    assert done.returncode == 1
    assert b"is a file, not a folder" in done.stderr and b"Traceback" not in done.stderr
    assert a_file.read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize(
    ("mode", "said"),
    [(0o500, "cannot read and write in the data folder"), (0o000, "permission denied")],
)
def test_a_data_dir_conch_may_not_write_is_named(
    mode: int, said: str, home: Path, data_dir: Path
) -> None:
    prefix = as_a_plain_user()
    data_dir.chmod(mode)
    try:
        done = conch("ask", "--mock", "--data-dir", str(data_dir), "hi", home=home, prefix=prefix)
    finally:
        data_dir.chmod(0o700)
    assert done.returncode == 1
    line = one_sentence(done.stderr)
    assert said in line and str(data_dir) in line
    assert list(data_dir.iterdir()) == []


def test_a_read_only_chat_log_is_named_and_kept(home: Path, data_dir: Path) -> None:
    prefix = as_a_plain_user()
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat(title="Garden", chat_id="t1")
    store.append_message(chat.id, "user", "The beds are larch.")
    store.close()
    log = data_dir / ChatStore.FILE_NAME
    log.chmod(stat.S_IRUSR)
    try:
        done = conch(
            "ask", "--mock", "--chat", "t1", "--data-dir", str(data_dir), "And the paths?",
            home=home, prefix=prefix,
        )  # fmt: skip
    finally:
        log.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert done.returncode == 1
    line = one_sentence(done.stderr)
    assert "cannot write to" in line and ChatStore.FILE_NAME in line
    assert saved(data_dir) == [("user", "The beds are larch.")]


# --- the answer's terminal --------------------------------------------------------------------


def test_an_ascii_terminal_gets_question_marks_and_the_chat_keeps_the_answer(
    home: Path, data_dir: Path
) -> None:
    env = environment(home, PYTHONIOENCODING="ascii")
    done = conch(
        "ask", "--mock", "--chat", "t1", "--data-dir", str(data_dir), "Grüße ☀", home=home,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.startswith(b"You said: Gr??e ?")
    assert b"cannot show some characters" in done.stderr and b"Traceback" not in done.stderr
    answer = saved(data_dir)[1]
    assert answer[0] == "assistant" and answer[1].startswith("You said: Grüße ☀")


def test_a_reader_that_went_away_does_not_lose_the_answer(home: Path, data_dir: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with a broken pipe
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.main",
                "ask",
                "--mock",
                "--chat",
                "t1",
                "--data-dir",
                str(data_dir),
                "Hi",
            ],
            cwd=home,
            env=environment(home),
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr
    assert saved(data_dir)[0] == ("user", "Hi")
    assert saved(data_dir)[1][1].startswith("You said: Hi")


def test_no_model_ready_leaves_no_empty_chat(home: Path, data_dir: Path) -> None:
    settings = {
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "llamacpp_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    done = conch("ask", "--data-dir", str(data_dir), "Hello", home=home)
    assert done.returncode == 1
    assert "No model is ready" in one_sentence(done.stderr)
    store = ChatStore.in_dir(data_dir)
    try:
        assert store.list_chats() == []
    finally:
        store.close()


# --- signals in the middle of an answer -------------------------------------------------------


class HangingServer(OpenAIStyleServer):
    """A llama.cpp server that streams the first words of its answer, then waits until the
    test ends (an event that never comes while the command runs)."""

    def _chat(self, request: Recorded) -> Reply:
        reply = super()._chat(request)
        if reply.chunks:
            # The role chunk and the first two pieces of text at once, then nothing more.
            reply.chunks = [b"".join(reply.chunks[:3]), *reply.chunks[3:]]
            reply.chunk_delay = HANG_GUARD * 10  # waits on the server's stop event
        return reply


@pytest.fixture
def hanging() -> Iterator[HangingServer]:
    server = HangingServer("llamacpp", script=Script(text=["The first ", "words", " and more"]))
    with server:
        yield server


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_answer_saves_what_arrived(
    signum: int, hanging: HangingServer, home: Path, data_dir: Path
) -> None:
    settings = {
        "llamacpp_url": hanging.url,
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "ask", "--chat", "t1", "--data-dir", str(data_dir),
         "Tell me about larch"],
        cwd=home,
        env=environment(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    with running(proc):
        assert proc.stdout is not None
        read_until(proc.stdout.fileno(), b"The first words")
        err = stop_with(proc, signum)
    assert proc.returncode == 128 + signum
    line = one_sentence(err)
    assert signal.Signals(signum).name in line and "saved in chat t1" in line

    store = ChatStore.in_dir(data_dir)
    try:
        messages = store.messages("t1")
    finally:
        store.close()
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Tell me about larch"),
        ("assistant", "The first words"),
    ]
    answer = messages[1]
    assert answer.partial
    assert answer.problem is not None and answer.problem.kind is ProblemKind.CANCELLED
    # Ctrl+C is the person at the terminal stopping it; a kill or a closed terminal is Conch
    # being closed around it, said as the window says it (both go on with Continue).
    if signum == signal.SIGINT:
        assert answer.problem.message == HUMAN_TEXT[ProblemKind.CANCELLED]
    else:
        assert answer.problem.message == CLOSED_TEXT
