"""``conch ask --model programs/<name>`` and ``conch models --all`` with programs: the real CLI
in a subprocess, the ACP program a real fake agent process set as Gemini CLI's path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.store import ChatStore
from tests.app.test_cli import ROOT, conch, isolated
from tests.fakes.anthropic_server import ClaudeCodeServer


def agent_script(tmp_path: Path, record: Path) -> Path:
    script = tmp_path / "fake-agent"
    script.write_text(
        f"#!{sys.executable}\n"
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"sys.argv = ['acp_agent', '--record', {str(record)!r}]\n"
        "runpy.run_module('tests.fakes.acp_agent', run_name='__main__')\n",
        "utf-8",
    )
    script.chmod(0o755)
    return script


def with_agent(tmp_path: Path, data_dir: Path) -> Path:
    record = tmp_path / "agent.jsonl"
    isolated(data_dir)
    settings = json.loads((data_dir / "settings.json").read_text("utf-8"))
    settings["program_paths"] = {"gemini": str(agent_script(tmp_path, record))}
    (data_dir / "settings.json").write_text(json.dumps(settings), "utf-8")
    return record


def test_ask_answers_on_a_program_named_with_model(tmp_path: Path, data_dir: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    record = with_agent(tmp_path, data_dir)

    result = conch(
        "ask", "--model", "programs/gemini", "--data-dir", str(data_dir), "Hello agent", home=home
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Heard 11 characters."
    prompts = [json.loads(line) for line in record.read_text("utf-8").splitlines()]
    assert [p["texts"] for p in prompts if "texts" in p] == [["Hello agent"]]


def test_models_all_lists_programs_ready_or_not(tmp_path: Path, data_dir: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with_agent(tmp_path, data_dir)

    ready = conch("models", "--json", "--data-dir", str(data_dir), home=home)
    every = conch("models", "--json", "--all", "--data-dir", str(data_dir), home=home)

    assert ready.returncode == 0 and every.returncode == 0, every.stderr
    # Plain ``conch models`` stays the list of models a chat sends to; --all adds programs.
    assert not [r for r in json.loads(ready.stdout) if r["provider"] == "programs"]
    programs = {
        r["id"]: r["ready"] for r in json.loads(every.stdout) if r["provider"] == "programs"
    }
    assert programs["gemini"] is True and programs["copilot"] is False


def test_a_program_that_is_not_installed_is_refused_in_a_sentence(
    tmp_path: Path, data_dir: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with_agent(tmp_path, data_dir)

    result = conch(
        "ask", "--model", "programs/copilot", "--data-dir", str(data_dir), "Hi", home=home
    )

    assert result.returncode == 1
    assert "no ready model called 'programs/copilot'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_program_chat_never_starts_the_bundled_model(tmp_path: Path, data_dir: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with_agent(tmp_path, data_dir)
    settings = json.loads((data_dir / "settings.json").read_text("utf-8"))
    settings["bundled_model"] = True  # nothing else answers: a plain ask would start it
    (data_dir / "settings.json").write_text(json.dumps(settings), "utf-8")

    result = conch(
        "ask", "--model", "programs/gemini", "--data-dir", str(data_dir), "Hi", home=home
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Heard 2 characters."
    # The runtime writes its log and where it listens beside the chat log when it starts.
    assert not (data_dir / "local-model.log").exists()
    assert not (data_dir / "local-model-shared.json").exists()


def test_a_claude_code_tool_call_is_printed_and_kept_in_the_chat_log(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Claude Agent SDK is an optional extra (``programs``).
    claude_code = pytest.importorskip("engines.programs.claude_code")
    if claude_code.bundled_cli() is None:
        pytest.skip("the Claude Agent SDK here carries no CLI")
    home = tmp_path / "home"
    home.mkdir()
    isolated(data_dir)
    with ClaudeCodeServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
        monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        result = conch(
            "ask",
            "--model",
            "programs/claude-code",
            "--data-dir",
            str(data_dir),
            "make the file [[bash]]",
            home=home,
        )
    assert result.returncode == 0, result.stderr
    # Nobody can be asked in a terminal: the call is declined, and the row says so.
    row = next(x for x in result.stderr.splitlines() if x.startswith("Tool Bash (Claude Code)"))
    assert "touch ran.txt" in row and row.endswith("not allowed")
    store = ChatStore.in_dir(data_dir)
    try:
        (chat,) = store.list_chats()
        assert [m.role for m in store.messages(chat.id)] == ["user", "tool", "assistant"]
    finally:
        store.close()
