"""The Codex engine driving the real ``codex`` CLI (npm ``@openai/codex``) against the
Responses API fake on loopback. Skipped where no ``codex`` is installed: set ``CONCH_CODEX``
or install it with ``npm install --prefix ~/.cache/conch/npm @openai/codex``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from app.conversation import Conversation
from app.store import ChatStore
from app.tool_calls import tool_call_book
from engines.base import (
    ContextEngine,
    Done,
    Event,
    HandedOff,
    Message,
    ModelInfo,
    Problem,
    ProblemKind,
    TextDelta,
    TurnInput,
)
from engines.programs.codex import CodexEngine
from tests.engines.programs.shared_tools import SECRET, fake_server, source
from tests.fakes.openai_server import CODEX_ECHOED, ResponsesServer

HANG_SECONDS = 120.0  # a hang guard only: the CLI answers the loopback fake in seconds
MODEL = ModelInfo(provider="programs", id="codex", label="Codex", context=200_000)


def _codex() -> str | None:
    for candidate in (
        os.environ.get("CONCH_CODEX", ""),
        # Where scripts/setup.sh installs it for the dev extra.
        str(
            Path(os.environ.get("CONCH_NPM_CACHE", Path.home() / ".cache/conch/npm"))
            / "node_modules/.bin/codex"
        ),
        shutil.which("codex") or "",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


CODEX = _codex()
needs_codex = pytest.mark.skipif(CODEX is None, reason="the codex CLI is not installed here")


class Chat:
    def __init__(self) -> None:
        self.log: list[tuple[int, Message]] = []

    def history(self) -> Sequence[tuple[int, Message]]:
        return list(self.log)

    def latest_fold(self) -> tuple[int, str] | None:
        return None

    def add(self, role: str, text: str) -> int:
        seq = len(self.log)
        self.log.append((seq, Message(role=role, text=text)))
        return seq


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer() as srv:
        yield srv


def make_engine(tmp_path: Path, server: ResponsesServer, chat: Chat, **kw: object) -> CodexEngine:
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    fields = f'name="Fake", base_url="{server.url}/v1", wire_api="responses"'
    provider = f'model_providers.fake={{{fields}, env_key="FAKE_OPENAI_KEY"}}'
    options: dict[str, object] = {
        "command": (CODEX or "codex",),
        "model": "gpt-fake",
        "config": (provider, "model_provider=fake"),
        "env": {"CODEX_HOME": str(home), "FAKE_OPENAI_KEY": "sk-test-dummy"},
    }
    options.update(kw)
    return CodexEngine(
        chat_id="chat-1",
        state_dir=tmp_path / "programs",
        cwd=tmp_path / "work",
        history=chat.history,
        latest_fold=chat.latest_fold,
        **options,  # type: ignore[arg-type]
    )


async def run_turn(engine: CodexEngine, chat: Chat, text: str) -> list[Event]:
    seq = chat.add("user", text)

    async def go(events: AsyncIterator[Event]) -> list[Event]:
        return [e async for e in events]

    turn = TurnInput(chat_id="chat-1", seq=seq, text=text, model=MODEL)
    events = await asyncio.wait_for(go(engine.turn(turn)), HANG_SECONDS)
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    if answer:
        chat.add("assistant", answer)
    return events


def said(server: ResponsesServer) -> str:
    return json.dumps(server.responses_requests[-1].json)


@needs_codex
async def test_an_answer_arrives_and_the_chat_is_one_codex_thread(
    tmp_path: Path, server: ResponsesServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    assert not isinstance(engine, ContextEngine)  # Codex compacts its thread by itself
    first = await run_turn(engine, chat, "My name is Ada.")
    assert isinstance(first[-1], Done)
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "You said: My name is Ada."
    thread = engine.thread_id
    assert thread
    # After a restart the chat resumes the same thread, which still holds the first message.
    again = make_engine(tmp_path, server, chat)
    second = await run_turn(again, chat, "What is my name?")
    assert isinstance(second[-1], Done)
    assert again.thread_id == thread
    assert "My name is Ada." in said(server) and "What is my name?" in said(server)


@needs_codex
async def test_a_chat_moved_to_codex_starts_its_thread_with_the_handoff(
    tmp_path: Path, server: ResponsesServer
) -> None:
    chat = Chat()
    chat.add("user", "The bundled model heard this first.")
    chat.add("assistant", "Noted.")
    engine = make_engine(tmp_path, server, chat)
    events = await run_turn(engine, chat, "Do you know what I said?")
    assert isinstance(events[-1], Done)
    assert "Person: The bundled model heard this first." in said(server)
    # Codex's memory of the chat starts at its first message; later turns resume the thread.
    (handed,) = [e for e in events if isinstance(e, HandedOff)]
    assert handed.first_seq == 0 and handed.program == "Codex"
    later = await run_turn(engine, chat, "And now?")
    assert isinstance(later[-1], Done) and not any(isinstance(e, HandedOff) for e in later)


@needs_codex
async def test_a_thread_codex_lost_starts_again_with_the_handoff(
    tmp_path: Path, server: ResponsesServer
) -> None:
    chat = Chat()
    chat.add("user", "Remember the larch.")
    chat.add("assistant", "Larch it is.")
    state = tmp_path / "programs" / "chat-1.json"
    state.parent.mkdir(parents=True)
    lost = "01a22c86-0000-7000-8000-000000000000"
    state.write_text(json.dumps({"version": 1, "session_id": lost}), "utf-8")
    engine = make_engine(tmp_path, server, chat)
    events = await run_turn(engine, chat, "Which wood?")
    assert isinstance(events[-1], Done), events
    assert engine.thread_id and engine.thread_id != lost
    assert "Person: Remember the larch." in said(server)


async def test_a_missing_codex_says_how_to_install_it(
    tmp_path: Path, server: ResponsesServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, command=(str(tmp_path / "no" / "codex"),))
    events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.MODEL_MISSING
    assert "npm install -g @openai/codex" in problem.problem.message


async def test_a_program_that_prints_text_is_not_taken_for_codex(
    tmp_path: Path, server: ResponsesServer
) -> None:
    # A stand-in that prints a banner where JSON lines belong (a wrong command).
    script = tmp_path / "not-codex.py"
    script.write_text("print('Welcome to something else')\n", "utf-8")
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, command=(sys.executable, str(script)))
    events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.BROKEN_STREAM
    assert "Welcome to something else" in problem.problem.message


async def test_a_program_that_exits_mid_turn_says_so_and_keeps_what_it_wrote(
    tmp_path: Path, server: ResponsesServer
) -> None:
    script = tmp_path / "dies.py"
    script.write_text(
        "import json, sys\n"
        "print(json.dumps({'type': 'thread.started', 'thread_id': 't-1'}), flush=True)\n"
        "print(json.dumps({'type': 'item.completed', 'item': {'id': 'i', "
        "'type': 'agent_message', 'text': 'Half an answer'}}), flush=True)\n"
        "sys.stderr.write('panic: out of cheese\\n')\n"
        "sys.exit(7)\n",
        "utf-8",
    )
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, command=(sys.executable, str(script)))
    events = await run_turn(engine, chat, "hello")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Half an answer"
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.BROKEN_STREAM
    assert problem.problem.partial
    assert "exit code 7" in problem.problem.message
    assert "out of cheese" in problem.problem.detail


@needs_codex
async def test_a_prompt_of_200000_characters_reaches_codex_and_never_its_command_line(
    tmp_path: Path, server: ResponsesServer
) -> None:
    # A command-line argument is capped at 128 KiB, and ``ps`` shows it to every user: the
    # prompt goes on stdin. The wrapper writes down the arguments Codex was started with.
    argv_file = tmp_path / "argv.txt"
    wrapper = (
        "/bin/sh",
        "-c",
        f'printf "%s\\n" "$@" >> "{argv_file}"; exec "{CODEX}" "$@"',
        "codex",
    )
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, command=wrapper)
    first = await run_turn(engine, chat, "Here comes my diary.")
    assert isinstance(first[-1], Done), first
    # On the thread Codex keeps, the next message goes whole, however long.
    secret_line = "My diary, private: the larch by the gate."
    paste = secret_line + " " + "x" * 200_000
    events = await run_turn(engine, chat, paste)
    assert isinstance(events[-1], Done), events
    assert secret_line in said(server) and "x" * 200_000 in said(server)
    started_with = argv_file.read_text("utf-8")
    assert started_with.count("exec") == 2 and "resume" in started_with
    assert "diary" not in started_with


@needs_codex
async def test_codexs_commands_are_kept_as_tool_rows_and_the_meter_is_the_newest_request(
    tmp_path: Path, server: ResponsesServer
) -> None:
    # The turn's two requests (the command, then the answer to its output) each read the
    # whole thread: the meter is the second, not the sum Codex reports for the turn.
    server.input_tokens = 60_000
    server.after_tool_input = 61_000
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key="programs/codex")
    engine = make_engine(tmp_path, server, Chat())  # a new chat: nothing to hand over
    conv = Conversation(chat.id, store=store, engine=engine, model=MODEL)
    events = [e async for e in conv.turn("list the beds [[echo]]")]
    await conv.aclose()
    assert any(isinstance(e, Done) for e in events)
    assert [m.role for m in store.messages(chat.id)] == ["user", "tool", "assistant"]
    result = store.messages(chat.id)[1]
    assert CODEX_ECHOED in result.text
    book = tool_call_book(store)
    assert book is not None
    (call,) = book.between(chat.id, result.seq, result.seq).values()
    assert (call.tool, call.server, call.status) == ("shell", "Codex", "done")
    assert f"echo {CODEX_ECHOED}" in call.arguments["command"]
    saved = store.get_chat(chat.id)
    assert saved is not None and saved.untrusted  # a command's output came from outside
    used, window = conv.context_usage() or (0, 0)
    assert used == 61_000
    assert window > 0 and window != MODEL.context  # the window Codex reported for its model


@needs_codex
async def test_conchs_servers_reach_codex_only_when_allowed_and_no_secret_is_on_a_command_line(
    tmp_path: Path, server: ResponsesServer
) -> None:
    # Codex 0.169's ``exec`` started no MCP server against this fake (even when its model ran
    # a command), so what Codex was given is read where it starts: a wrapper writes down its
    # command line and environment, then runs the real codex. That codex reads these
    # overrides as its servers is test_mcp_forms' check.
    control = tmp_path / "mcp"
    for allowed in (False, True):
        chat = Chat()
        where = tmp_path / f"run-{allowed}"
        where.mkdir()
        wrapper = where / "codex"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "$@" > "{where}/argv"\n'
            f'env > "{where}/environ"\n'
            f'exec "{CODEX}" "$@"\n',
            "utf-8",
        )
        wrapper.chmod(0o755)
        # What Settings → Programs gives the engine: the servers when ticked, else none.
        tools = source([fake_server(control)] if allowed else [])
        engine = make_engine(where, server, chat, tools=tools, command=(str(wrapper),))
        events = await run_turn(engine, chat, "Hello")
        assert isinstance(events[-1], Done), events
        argv = (where / "argv").read_text("utf-8").splitlines()
        environ = (where / "environ").read_text("utf-8").splitlines()
        given = [a for a in argv if a.startswith("mcp_servers.fake.")]
        if not allowed:
            assert given == [] and f"FAKE_TOKEN={SECRET}" not in environ
            continue
        assert 'mcp_servers.fake.env_vars=["FAKE_TOKEN"]' in given
        assert any(a.startswith("mcp_servers.fake.command=") for a in given)
        assert f"FAKE_TOKEN={SECRET}" in environ  # the secret goes in its environment ...
        assert not any(SECRET in a for a in argv)  # ... never on its command line
