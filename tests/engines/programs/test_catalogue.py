"""Which programs the picker lists, and the engine each one gets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engines.base import ContextEngine, Done, ModelInfo, Problem, TextDelta, TurnInput
from engines.programs.acp import AcpEngine
from engines.programs.catalogue import PROVIDER, program_engine, program_models

ROOT = Path(__file__).resolve().parents[3]


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
        f"open({str(argv_file)!r}, 'w').write(json.dumps([sys.argv[1:], sys.stdin.read()]))\n"
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
    argv, stdin = json.loads(argv_file.read_text("utf-8"))
    assert argv[:2] == ["exec", "--json"]
    assert "--oss" in argv and argv[argv.index("--local-provider") + 1] == "ollama"
    # The message goes on stdin ("-"), never on the command line.
    assert argv[-1] == "-" and "hello" not in argv and stdin == "hello"
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


def older_gemini(tmp_path: Path) -> Path:
    """A stand-in for a Gemini CLI from before ``--acp``: it refuses that flag the way a
    command-line parser does, and runs the ACP fake agent under ``--experimental-acp``."""
    script = tmp_path / "gemini"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, runpy, sys\n"
        f"with open({str(tmp_path / 'launches.jsonl')!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if '--experimental-acp' not in sys.argv[1:]:\n"
        "    sys.stderr.write('Unknown argument: acp\\n')\n"
        "    sys.exit(1)\n"
        f"sys.argv = ['acp_agent', '--record', {str(tmp_path / 'received.jsonl')!r}]\n"
        "runpy.run_module('tests.fakes.acp_agent', run_name='__main__')\n",
        "utf-8",
    )
    script.chmod(0o755)
    return script


async def test_gemini_cli_is_started_in_acp_mode_and_an_older_one_with_its_older_flag(
    tmp_path: Path,
) -> None:
    script = older_gemini(tmp_path)
    model = ModelInfo(provider=PROVIDER, id="gemini", label="Gemini CLI", context=200_000)
    engine = program_engine(
        model,
        chat_id="c1",
        data_dir=tmp_path / "data",
        history=lambda: [],
        latest_fold=lambda: None,
        commands={"gemini": [str(script), "--acp"]},  # the path set in Settings → Programs
        env={"PYTHONPATH": str(ROOT)},
    )
    assert isinstance(engine, AcpEngine)
    try:
        first = [
            e async for e in engine.turn(TurnInput(chat_id="c1", seq=0, text="Hello", model=model))
        ]
        await engine.aclose()  # the next turn starts the program again
        second = [
            e async for e in engine.turn(TurnInput(chat_id="c1", seq=2, text="Again", model=model))
        ]
    finally:
        await engine.aclose()
    assert isinstance(first[-1], Done) and isinstance(second[-1], Done)
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "Heard 5 characters."
    launches = [json.loads(line) for line in (tmp_path / "launches.jsonl").read_text().splitlines()]
    # Tried as the current Gemini CLI once, then always with the flag it knows.
    assert launches == [["--acp"], ["--experimental-acp"], ["--experimental-acp"]]


async def test_a_gemini_cli_that_refuses_both_flags_says_it_ended_with_its_words(
    tmp_path: Path,
) -> None:
    script = tmp_path / "gemini"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stderr.write('no ACP here\\n')\nsys.exit(2)\n"
    )
    script.chmod(0o755)
    model = ModelInfo(provider=PROVIDER, id="gemini", label="Gemini CLI", context=200_000)
    engine = program_engine(
        model,
        chat_id="c1",
        data_dir=tmp_path / "data",
        history=lambda: [],
        latest_fold=lambda: None,
        commands={"gemini": [str(script), "--acp"]},
    )
    events = [
        e async for e in engine.turn(TurnInput(chat_id="c1", seq=0, text="Hello", model=model))
    ]
    await engine.aclose()
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert "Gemini CLI" in problem.problem.message and "exit code 2" in problem.problem.message
    assert "no ACP here" in problem.problem.detail
