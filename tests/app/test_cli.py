"""``conch models`` and ``conch ask`` end to end, as subprocesses, against loopback fakes."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.store import ChatStore
from engines.local import bundled
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, Fault, running_ollama

ROOT = Path(__file__).resolve().parents[2]
LEARNED = "The person grows tomatoes on a balcony in Ghent."


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home for the subprocess: Conch must write nothing there."""
    h = tmp_path / "home"
    h.mkdir()
    return h


def isolated(data_dir: Path) -> None:
    """Settings that keep the run to the fake servers: other local servers on closed ports."""
    settings = {
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "llamacpp_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")


def conch(
    *args: str, home: Path, ollama: str | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
    )
    if ollama is not None:
        env["OLLAMA_HOST"] = ollama
    else:
        env["OLLAMA_HOST"] = f"127.0.0.1:{closed_port()}"
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def learn_or_reply(body: dict[str, Any]) -> FakeReply:
    """Answer the learning prompt with a memory, anything else like a chat model."""
    system = " ".join(
        str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "system"
    )
    if "JSON array of strings" in system:
        return FakeReply(text=json.dumps([LEARNED]))
    if system.startswith("You are the assistant in Conch"):
        return FakeReply(text="Water them in the morning.")
    return FakeReply(text="The person is growing tomatoes and asked about watering.")  # summary


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama(
        [FakeModel("llama3.2", 131_072), FakeModel("tiny", 4_096)], responder=learn_or_reply
    ) as fake:
        yield fake


def test_models_json_lists_ready_models(ollama: FakeOllama, data_dir: Path, home: Path) -> None:
    isolated(data_dir)
    result = conch("models", "--json", "--data-dir", str(data_dir), home=home, ollama=ollama.url)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["provider"], r["id"]) for r in rows] == [
        ("ollama", "llama3.2:latest"),
        ("ollama", "tiny:latest"),
    ]
    for row in rows:
        assert set(row) == {"provider", "id", "context", "local", "ready"}
        assert row["local"] is True and row["ready"] is True and row["context"] > 0
    assert next(r for r in rows if r["id"] == "tiny:latest")["context"] <= 4_096
    assert list(home.rglob("*")) == []  # nothing written outside the data dir


def test_models_text_names_a_server_it_could_not_reach(data_dir: Path, home: Path) -> None:
    isolated(data_dir)
    result = conch("models", "--data-dir", str(data_dir), home=home)
    assert result.returncode == 0
    assert "LM Studio could not be reached" in result.stderr
    assert "No model is ready" in result.stderr


def test_models_mock(data_dir: Path, home: Path) -> None:
    result = conch("--mock", "models", "--json", "--data-dir", str(data_dir), home=home)
    assert result.returncode == 0, result.stderr
    listed = [r["id"] for r in json.loads(result.stdout)]
    assert listed == ["mock-model", "mock-small", "mock-large"]


def test_ask_streams_the_answer_and_continues_a_chat(
    ollama: FakeOllama, data_dir: Path, home: Path
) -> None:
    isolated(data_dir)
    first = conch(
        "ask",
        "--model",
        "ollama/llama3.2:latest",
        "--data-dir",
        str(data_dir),
        "How do I grow tomatoes?",
        home=home,
        ollama=ollama.url,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Water them in the morning.\n"
    chat_id = first.stderr.split("New chat: ", 1)[1].split()[0]

    second = conch(
        "ask",
        "--chat",
        chat_id,
        "--data-dir",
        str(data_dir),
        "-",
        home=home,
        ollama=ollama.url,
        stdin="And how often?\n",
    )
    assert second.returncode == 0, second.stderr
    assert "New chat" not in second.stderr
    last = ollama.chat_requests()[-1]
    contents = [m["content"] for m in last["messages"] if m["role"] != "system"]
    assert contents == ["How do I grow tomatoes?", "Water them in the morning.", "And how often?\n"]

    store = ChatStore.in_dir(data_dir)
    try:
        texts = [m.text for m in store.messages(chat_id)]
        chat = store.get_chat(chat_id)
    finally:
        store.close()
    assert texts == [
        "How do I grow tomatoes?",
        "Water them in the morning.",
        "And how often?\n",
        "Water them in the morning.",
    ]
    assert chat is not None and chat.model_key == "ollama/llama3.2:latest"
    assert list(home.rglob("*")) == []


def test_ask_makes_a_chat_under_a_given_id(ollama: FakeOllama, data_dir: Path, home: Path) -> None:
    isolated(data_dir)
    result = conch(
        "ask", "--chat", "my-chat", "--data-dir", str(data_dir), "Hi", home=home, ollama=ollama.url
    )
    assert result.returncode == 0, result.stderr
    store = ChatStore.in_dir(data_dir)
    try:
        assert store.message_count("my-chat") == 2
    finally:
        store.close()


def test_ask_fails_with_one_line_on_a_turn_problem(
    ollama: FakeOllama, data_dir: Path, home: Path
) -> None:
    isolated(data_dir)
    ollama.fault = Fault.OUT_OF_MEMORY
    result = conch("ask", "--data-dir", str(data_dir), "Hello", home=home, ollama=ollama.url)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if not line.startswith("New chat")]
    assert len(lines) == 1
    assert "memory" in lines[0] or "server" in lines[0]
    assert result.stdout == ""


def test_ask_without_any_model_says_so(data_dir: Path, home: Path) -> None:
    isolated(data_dir)
    result = conch("ask", "--data-dir", str(data_dir), "Hello", home=home)
    assert result.returncode == 1
    assert "No model is ready" in result.stderr


def test_ask_with_an_unknown_model_says_so(ollama: FakeOllama, data_dir: Path, home: Path) -> None:
    isolated(data_dir)
    result = conch(
        "ask", "--model", "ollama/nope", "--data-dir", str(data_dir), "Hi", home=home,
        ollama=ollama.url,
    )  # fmt: skip
    assert result.returncode == 1
    assert "conch models" in result.stderr


def test_a_long_chat_folds_learns_and_says_so(
    ollama: FakeOllama, data_dir: Path, home: Path
) -> None:
    isolated(data_dir)
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.create_chat(title="Tomatoes", model_key="ollama/tiny:latest", chat_id="long")
        for i in range(14):
            store.append_message(
                chat.id, "user", f"I grow tomatoes on my balcony in Ghent, note {i}. " * 12
            )
            store.append_message(chat.id, "assistant", f"Answer {i}: keep the soil moist. " * 10)
    finally:
        store.close()

    result = conch(
        "ask", "--chat", "long", "--data-dir", str(data_dir), "What now?", home=home,
        ollama=ollama.url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Earlier messages are summarised for tiny" in result.stderr
    assert "Conch learned 1 thing from this chat" in result.stderr
    assert result.stdout == "Water them in the morning.\n"
    # The answer did not wait for the summary: it was asked for after the answer, and the
    # process waited for it (saying so) before it ended, so the chat log keeps it.
    assert "Summarising the start of this chat…" in result.stderr
    asked = [str(r["messages"][-1].get("content", "")) for r in ollama.chat_requests()]
    answer_at = next(i for i, text in enumerate(asked) if text == "What now?")
    summary_at = next(i for i, text in enumerate(asked) if "<next-part-of-the-chat>" in text)
    assert answer_at < summary_at
    store = ChatStore.in_dir(data_dir)
    try:
        fold = store.latest_compaction("long")
    finally:
        store.close()
    assert fold is not None
    assert "The person is growing tomatoes and asked about watering." in fold.summary

    db = sqlite3.connect(data_dir / "memories.sqlite3")
    try:
        rows = db.execute("SELECT text, status, chat_id FROM memories").fetchall()
    finally:
        db.close()
    assert rows == [(LEARNED, "kept", "long")]
    # The learning request carried only the person's words.
    learn = [
        r
        for r in ollama.chat_requests()
        if "JSON array of strings" in str(r["messages"][0].get("content", ""))
    ]
    assert len(learn) == 1
    assert "keep the soil moist" not in json.dumps(learn[0]["messages"])
    assert "note 0." in json.dumps(learn[0]["messages"])


def test_ask_mock_answers_and_keeps_the_demo(data_dir: Path, home: Path) -> None:
    result = conch("--mock", "ask", "--data-dir", str(data_dir), "Hello mock", home=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("You said: Hello mock")
    store = ChatStore.in_dir(data_dir)
    try:
        titles = sorted(c.title for c in store.list_chats())
    finally:
        store.close()
    assert titles == ["Community garden", "Hello mock"]


def test_usage_errors_exit_2(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--chat", "../escape", "--data-dir", str(data_dir), "hi"]) == 2
    assert "not a usable chat id" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert main(["ask", "--data-dir", str(data_dir), "   "]) == 2


@pytest.mark.bundled
@pytest.mark.skipif(not bundled.available(), reason="the bundled model is not installed here")
def test_with_nothing_else_reachable_the_bundled_model_answers(
    data_dir: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0: the runtime stops with each command (staying warm: tests/integration/test_warm_runtime.py).
    monkeypatch.setenv(bundled.IDLE_ENV, "0")
    isolated(data_dir)
    settings = json.loads((data_dir / "settings.json").read_text(encoding="utf-8"))
    settings["bundled_model"] = True
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")

    # Listing follows the window's rule: with nothing else ready, the bundled model starts.
    listed = conch("models", "--json", "--data-dir", str(data_dir), home=home)
    rows = json.loads(listed.stdout)
    assert [(r["provider"], r["id"], r["context"]) for r in rows] == [
        ("local", bundled.MODEL_ID, 8_192)
    ]
    assert not (data_dir / bundled.PID_NAME).exists()  # and it stopped again

    result = conch("ask", "--data-dir", str(data_dir), "Say hello.", home=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    store = ChatStore.in_dir(data_dir)
    try:
        (chat,) = store.list_chats()
    finally:
        store.close()
    assert chat.model_key == f"local/{bundled.MODEL_ID}"
    # The server it started is gone with the command (its pidfile too).
    assert not (data_dir / bundled.PID_NAME).exists()
    assert list(home.rglob("*")) == []


def test_ask_says_when_it_sent_only_part_of_the_message(
    ollama: FakeOllama, data_dir: Path, home: Path
) -> None:
    isolated(data_dir)
    paste = "HEAD " + "The rota for watering changes every week. " * 1_500 + " TAIL"
    result = conch(
        "ask", "--data-dir", str(data_dir), "--model", "ollama/tiny:latest", "-",
        home=home, ollama=ollama.url, stdin=paste,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "first and last" in line]
    assert len(said) == 1, result.stderr
    assert "llama3.2" in said[0]  # the ready model that reads all of it, and how to pick it
    sent = ollama.chat_requests()[-1]["messages"][-1]["content"]
    assert "HEAD" in sent and "TAIL" in sent and len(sent) < len(paste) // 2
