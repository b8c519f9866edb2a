"""``conch ask --allow-tools``: the tools of the MCP servers in Settings → Tools, headless, as
subprocesses against the fake Ollama and a real MCP server (tests/fakes/mcp_server.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store import ChatStore
from tests.app.test_cli import ROOT, conch, isolated
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, running_ollama

MODEL = "ollama/llama3.2:latest"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def with_servers(data_dir: Path, *servers: dict[str, Any]) -> None:
    """The isolated settings, plus these MCP servers in Settings → Tools."""
    isolated(data_dir)
    path = data_dir / "settings.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["tool_servers"] = list(servers)
    path.write_text(json.dumps(settings), encoding="utf-8")


def fake_server(control: Path) -> dict[str, Any]:
    return {
        "transport": "stdio",
        "id": "fake",
        "name": "Fake",
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server", "--control", str(control)],
        "cwd": str(ROOT),
    }


def calls_then_answers(
    tool: str, arguments: dict[str, Any]
) -> Callable[[dict[str, Any]], FakeReply]:
    """A model that calls ``tool`` when it is offered tools, and answers with what came back."""

    def respond(body: dict[str, Any]) -> FakeReply:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return FakeReply(text=f"The tool said: {last.get('content')}")
        if body.get("tools"):
            return FakeReply(text="", tool_calls=({"name": tool, "arguments": arguments},))
        return FakeReply(text="I have no tools.")

    return respond


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama([FakeModel("llama3.2", 131_072)]) as fake:
        yield fake


def ask(data_dir: Path, home: Path, ollama: FakeOllama, *extra: str) -> Any:
    return conch(
        "ask", "--model", MODEL, "--data-dir", str(data_dir), *extra, home=home, ollama=ollama.url
    )


def test_an_allowed_tool_runs_and_its_row_is_printed(
    ollama: FakeOllama, data_dir: Path, home: Path, tmp_path: Path
) -> None:
    with_servers(data_dir, fake_server(tmp_path / "control"))
    ollama.responder = calls_then_answers("echo", {"text": "hello from the tool"})

    done = ask(data_dir, home, ollama, "--allow-tools", "echo, add", "Say it through echo")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "The tool said: echo: hello from the tool\n"
    assert 'Tool echo (Fake) text="hello from the tool": done' in done.stderr
    assert "\n  echo: hello from the tool\n" in done.stderr
    chat_id = done.stderr.split("New chat: ", 1)[1].split()[0]
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.get_chat(chat_id)
    finally:
        store.close()
    assert chat is not None and chat.untrusted  # it read a tool result


def test_a_tool_not_allowed_is_declined_and_the_model_is_told_how(
    ollama: FakeOllama, data_dir: Path, home: Path, tmp_path: Path
) -> None:
    with_servers(data_dir, fake_server(tmp_path / "control"))
    ollama.responder = calls_then_answers("add", {"a": 1, "b": 2})

    done = ask(data_dir, home, ollama, "--allow-tools", "echo", "Add one and two")

    assert done.returncode == 0, done.stderr
    assert "Tool add (Fake) a=1, b=2: not allowed" in done.stderr
    assert "--allow-tools add" in done.stdout  # what the model was told, said back


def test_a_tool_name_no_server_offers_is_said_on_stderr(
    ollama: FakeOllama, data_dir: Path, home: Path, tmp_path: Path
) -> None:
    with_servers(data_dir, fake_server(tmp_path / "control"))
    ollama.responder = calls_then_answers("echo", {"text": "still works"})

    done = ask(data_dir, home, ollama, "--allow-tools", "echo, ecoh", "Say it through echo")

    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if "ecoh" in x)
    assert line.startswith("conch ask: no tool server in Settings → Tools offers")
    assert "“ecoh”" in line and "echo, add" in line and "“echo”" not in line
    assert done.stdout == "The tool said: echo: still works\n"


def test_without_allow_tools_no_tool_is_offered_and_no_server_starts(
    ollama: FakeOllama, data_dir: Path, home: Path, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    with_servers(data_dir, fake_server(control))
    ollama.responder = calls_then_answers("echo", {"text": "x"})

    done = ask(data_dir, home, ollama, "Hello")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "I have no tools.\n"
    assert "tools" not in ollama.chat_requests()[0]
    assert not (control / "starts").exists()


def test_allow_tools_needs_a_name(data_dir: Path, home: Path) -> None:
    done = conch("ask", "--allow-tools", " , ", "--data-dir", str(data_dir), "Hi", home=home)
    assert done.returncode == 2
    assert "name at least one tool" in done.stderr


def test_allow_tools_on_a_model_without_conchs_tools_says_it_is_ignored(
    data_dir: Path, home: Path
) -> None:
    done = conch(
        "ask", "--mock", "--allow-tools", "echo", "--data-dir", str(data_dir), "Hi", home=home
    )
    assert done.returncode == 0, done.stderr
    assert "--allow-tools is ignored" in done.stderr and done.stdout.strip()


def test_a_server_that_did_not_start_is_left_out_of_the_next_ask_at_once(
    ollama: FakeOllama, data_dir: Path, home: Path, tmp_path: Path
) -> None:
    # A server that ends before it answers (one that hangs is held the same way, after the
    # 30 s it is given): each start leaves a line in ``starts``.
    starts = tmp_path / "broken-starts"
    broken = {
        "transport": "stdio",
        "id": "broken",
        "name": "Broken",
        "command": sys.executable,
        "args": ["-c", f"open({str(starts)!r}, 'a').write('started\\n'); raise SystemExit(3)"],
    }
    with_servers(data_dir, fake_server(tmp_path / "control"), broken)
    ollama.responder = calls_then_answers("echo", {"text": "still works"})

    first = ask(data_dir, home, ollama, "--allow-tools", "echo", "Say it through echo")
    assert first.returncode == 0, first.stderr
    assert starts.read_text() == "started\n"
    assert "“Broken” is not available" in first.stderr

    # The next ``conch ask`` does not try it again: it says why it is left out, at once.
    second = ask(data_dir, home, ollama, "--allow-tools", "echo", "Say it again")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "The tool said: echo: still works\n"
    assert starts.read_text() == "started\n"
    line = next(x for x in second.stderr.splitlines() if "“Broken” is not available" in x)
    assert "when Conch last tried just now" in line and "Settings → Tools" in line
