"""Which programs the picker lists, and the engine each one gets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engines.base import ContextEngine, Done, ModelInfo, TextDelta, TurnInput
from engines.programs.acp import AcpEngine
from engines.programs.catalogue import PROVIDER, program_engine, program_models


def test_every_program_is_listed_and_a_missing_one_says_how_to_install_it() -> None:
    listed = {m.id: m for m in program_models({"gemini": ["conch-no-such-gemini"]})}
    assert {"claude-code", "codex", "codex-ollama", "codex-lmstudio", "gemini", "copilot"} <= set(
        listed
    )
    gemini = listed["gemini"]
    assert gemini.provider == PROVIDER and gemini.label == "Gemini CLI"
    assert not gemini.ready and gemini.status == "not installed: npm install -g @google/gemini-cli"


def test_a_command_set_by_the_person_is_found() -> None:
    listed = {m.id: m for m in program_models({"copilot": [sys.executable, "--acp"]})}
    assert listed["copilot"].ready and listed["copilot"].status == ""


def test_codex_on_a_local_server_counts_as_a_local_model() -> None:
    listed = {m.id: m for m in program_models()}
    assert listed["codex-ollama"].local and listed["codex-lmstudio"].local
    assert not listed["codex"].local and not listed["claude-code"].local


async def test_codex_on_ollama_is_started_with_its_oss_flags(tmp_path: Path) -> None:
    # A stand-in for codex that writes down how it was started and answers one message.
    argv_file = tmp_path / "argv.json"
    script = tmp_path / "codex.py"
    script.write_text(
        "import json, sys\n"
        f"open({str(argv_file)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "for event in ({'type': 'thread.started', 'thread_id': 't-1'},\n"
        "              {'type': 'item.completed', 'item': {'id': 'i', 'type': 'agent_message',\n"
        "                                                  'text': 'Local answer'}},\n"
        "              {'type': 'turn.completed', 'usage': {'input_tokens': 3}}):\n"
        "    print(json.dumps(event), flush=True)\n",
        "utf-8",
    )
    model = ModelInfo(provider=PROVIDER, id="codex-ollama", context=200_000, local=True)
    engine = program_engine(
        model,
        chat_id="c1",
        data_dir=tmp_path / "data",
        history=lambda: [],
        latest_fold=lambda: None,
        commands={"codex-ollama": [sys.executable, str(script)]},
    )
    assert not isinstance(engine, ContextEngine)
    turn = TurnInput(chat_id="c1", seq=0, text="hello", model=model)
    events = [e async for e in engine.turn(turn)]
    assert isinstance(events[-1], Done)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Local answer"
    argv = json.loads(argv_file.read_text("utf-8"))
    assert argv[:2] == ["exec", "--json"]
    assert "--oss" in argv and argv[argv.index("--local-provider") + 1] == "ollama"
    assert argv[-2:] == ["--", "hello"]
    # The chat works in its own folder inside the data dir; the thread id is kept there too.
    assert (tmp_path / "data" / "programs" / "work" / "c1").is_dir()
    assert (
        json.loads((tmp_path / "data" / "programs" / "sessions" / "c1.json").read_text())[
            "session_id"
        ]
        == "t-1"
    )


def test_an_acp_program_gets_the_acp_engine_with_its_command(tmp_path: Path) -> None:
    model = ModelInfo(provider=PROVIDER, id="gemini", context=200_000)
    engine = program_engine(
        model, chat_id="c1", data_dir=tmp_path, history=lambda: [], latest_fold=lambda: None
    )
    assert isinstance(engine, AcpEngine)
    assert engine.command == ("gemini", "--acp")
    assert not isinstance(engine, ContextEngine)
