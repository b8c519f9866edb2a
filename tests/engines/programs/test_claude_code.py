"""The Claude Code engine driving the real ``claude`` CLI (the one the Claude Agent SDK carries)
against the Anthropic fake on loopback.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from app.conversation import Conversation
from app.export import to_markdown
from app.search import search
from app.services import history_messages, latest_fold
from app.store import ChatStore
from app.tool_calls import tool_call_book
from engines.base import (
    Approval,
    Compacted,
    ContextEngine,
    Done,
    Event,
    HandedOff,
    Message,
    ModelInfo,
    Note,
    PermissionAsk,
    Problem,
    ProblemKind,
    TextDelta,
    ToolCall,
    ToolStarted,
    TurnInput,
)
from engines.programs.claude_code import (
    ClaudeCodeEngine,
    bundled_cli,
    login_command,
    summary_from,
)
from tests.engines.programs.shared_tools import (
    SECRET,
    assert_no_secret_on_a_command_line,
    fake_server,
    launches,
    source,
)
from tests.fakes.anthropic_server import ECHOED, ClaudeCodeServer

HANG_SECONDS = 120.0  # a hang guard only: the CLI answers the loopback fake in seconds
MODEL = ModelInfo(provider="claude-code", id="default", label="Claude Code", context=200_000)
PROGRAM_MODEL = ModelInfo(
    provider="programs", id="claude-code", label="Claude Code", context=200_000
)
CLI_WINDOW = 1_000_000  # the window the CLI in claude-agent-sdk 0.2.189 reports for its model


class Chat:
    def __init__(self) -> None:
        self.log: list[tuple[int, Message]] = []
        self.fold: tuple[int, str] | None = None

    def history(self) -> Sequence[tuple[int, Message]]:
        return list(self.log)

    def latest_fold(self) -> tuple[int, str] | None:
        return self.fold

    def add(self, role: str, text: str) -> int:
        seq = len(self.log)
        self.log.append((seq, Message(role=role, text=text)))
        return seq


@pytest.fixture
def server() -> Iterator[ClaudeCodeServer]:
    with ClaudeCodeServer() as srv:
        yield srv


def make_engine(
    tmp_path: Path, server: ClaudeCodeServer, chat: Chat, **kw: object
) -> ClaudeCodeEngine:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
        "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return ClaudeCodeEngine(
        chat_id="chat-1",
        state_dir=tmp_path / "programs",
        cwd=tmp_path / "work",
        history=chat.history,
        latest_fold=chat.latest_fold,
        env=env,
        **kw,  # type: ignore[arg-type]
    )


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    async def go() -> list[Event]:
        return [e async for e in events]

    return await asyncio.wait_for(go(), HANG_SECONDS)


async def run_turn(engine: ClaudeCodeEngine, chat: Chat, text: str) -> list[Event]:
    seq = chat.add("user", text)
    events = await collect(
        engine.turn(TurnInput(chat_id="chat-1", seq=seq, text=text, model=MODEL))
    )
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    if answer:
        chat.add("assistant", answer)
    return events


def answer_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def said_to_model(server: ClaudeCodeServer) -> list[str]:
    """Every person text in the newest request the CLI sent, oldest first."""
    body = server.message_requests[-1].json
    out: list[str] = []
    for m in body["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out.extend(b.get("text", "") for b in blocks if b.get("type") == "text")
    return out


async def test_an_answer_streams_and_the_chat_is_one_session(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    first = await run_turn(engine, chat, "My name is Ada.")
    assert isinstance(first[-1], Done)
    assert answer_of(first) == "You said: My name is Ada."
    assert sum(isinstance(e, TextDelta) for e in first) >= 2  # streamed, not in one piece
    session = engine.session_id
    assert session
    state = json.loads((tmp_path / "programs" / "chat-1.json").read_text("utf-8"))
    assert state["session_id"] == session

    # After a restart (a new engine on the same data) the chat resumes the same session.
    again = make_engine(tmp_path, server, chat)
    second = await run_turn(again, chat, "What is my name?")
    assert answer_of(second) == "You said: What is my name?"
    assert again.session_id == session
    texts = said_to_model(server)
    assert "My name is Ada." in texts and texts[-1] == "What is my name?"


async def test_compact_is_handed_over_and_its_boundary_becomes_the_divider(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    assert isinstance(engine, ContextEngine)
    await run_turn(engine, chat, "We plan 24 raised beds of larch.")
    events = await collect(engine.compact("keep the plan", model=MODEL))
    assert server.focuses == ["keep the plan"]  # Claude Code's own /compact, with the focus
    (compacted,) = [e for e in events if isinstance(e, Compacted)]
    assert compacted.first_kept_seq == 2  # after the two messages of the chat so far
    assert compacted.model == "Claude Code"
    assert "We plan 24 raised beds of larch." in compacted.summary
    assert "Kept as asked: keep the plan" in compacted.summary
    assert "<analysis>" not in compacted.summary and "system-reminder" not in compacted.summary
    assert isinstance(events[-1], Done)
    # The chat carries on in the compacted session.
    after = await run_turn(engine, chat, "And now?")
    assert answer_of(after) == "You said: And now?"


async def test_a_chat_moved_here_starts_its_session_with_the_handoff(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    chat.add("user", "The bundled model heard this first.")
    chat.add("assistant", "Noted.")
    engine = make_engine(tmp_path, server, chat)
    events = await run_turn(engine, chat, "Do you know what I said?")
    assert isinstance(events[-1], Done)
    sent = said_to_model(server)[-1]
    assert "Person: The bundled model heard this first." in sent
    assert sent.endswith("Do you know what I said?")
    (handed,) = [e for e in events if isinstance(e, HandedOff)]
    assert handed.first_seq == 0 and handed.program == "Claude Code"
    later = await run_turn(engine, chat, "And now?")  # the session resumed: no new handoff
    assert isinstance(later[-1], Done) and not any(isinstance(e, HandedOff) for e in later)


async def test_a_session_claude_code_lost_starts_again_with_the_handoff(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    chat.add("user", "Remember the larch.")
    chat.add("assistant", "Larch it is.")
    state = tmp_path / "programs" / "chat-1.json"
    state.parent.mkdir(parents=True)
    lost = "00000000-0000-4000-8000-000000000000"
    state.write_text(json.dumps({"version": 1, "session_id": lost}), "utf-8")
    engine = make_engine(tmp_path, server, chat)
    events = await run_turn(engine, chat, "Which wood?")
    assert isinstance(events[-1], Done), events
    assert engine.session_id and engine.session_id != lost
    assert "Person: Remember the larch." in said_to_model(server)[-1]


async def test_a_tool_the_person_declines_does_not_run(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    asked: list[PermissionAsk] = []

    async def decline(ask: PermissionAsk) -> Approval:
        asked.append(ask)
        return Approval.DENY

    chat = Chat()
    engine = make_engine(tmp_path, server, chat, approve=decline)
    events = await run_turn(engine, chat, "make the file [[bash]]")
    assert [a.kind for a in asked] == ["Bash"]
    assert "touch ran.txt" in asked[0].title or "Make a file" in asked[0].title
    assert any(isinstance(e, ToolCall) for e in events)
    assert not (tmp_path / "work" / "ran.txt").exists()
    assert isinstance(events[-1], Done)  # Claude Code answered in words after the refusal
    # ... and the refusal is said, in the answer and on ``conch ask``'s stderr.
    (note,) = [e for e in events if isinstance(e, Note)]
    assert note.topic == "tools" and "Claude Code asked to use Bash" in note.text
    assert "not allowed" in note.text


async def test_a_tool_the_person_allows_runs(tmp_path: Path, server: ClaudeCodeServer) -> None:
    async def allow(ask: PermissionAsk) -> Approval:
        return Approval.ONCE

    chat = Chat()
    engine = make_engine(tmp_path, server, chat, approve=allow)
    events = await run_turn(engine, chat, "make the file [[bash]]")
    assert isinstance(events[-1], Done)
    assert (tmp_path / "work" / "ran.txt").exists()
    # Its two messages of the turn (before and after the tool) read as two paragraphs.
    assert answer_of(events) == "Let me run it.\n\nUnderstood; that step is done or was declined."


async def test_a_missing_cli_says_how_to_install_it(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, cli_path=str(tmp_path / "no" / "claude"))
    events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.MODEL_MISSING
    assert "npm install -g @anthropic-ai/claude-code" in problem.problem.message


async def test_a_key_the_server_refuses_says_claude_code_is_not_logged_in(
    tmp_path: Path,
) -> None:
    with ClaudeCodeServer(api_key="the-right-key") as srv:
        chat = Chat()
        engine = make_engine(tmp_path, srv, chat)
        events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.AUTH
    # The key in the environment is what was refused: that is where to look first.
    message = problem.problem.message
    assert "the key in ANTHROPIC_API_KEY" in message
    assert message.endswith(f"run “{login_command(None)}” in a terminal, then try again.")


async def test_without_a_claude_on_the_path_the_login_names_the_cli_that_ran(
    tmp_path: Path, server: ClaudeCodeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundled = bundled_cli()
    if bundled is None:
        pytest.skip("the Claude Agent SDK here carries no CLI")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ``claude`` to run in a terminal
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert login_command(None) == f"{bundled} /login"
    assert login_command("/opt/my claude/claude") == "'/opt/my claude/claude' /login"
    with ClaudeCodeServer(api_key="the-right-key") as srv:
        chat = Chat()
        engine = make_engine(tmp_path, srv, chat)
        engine._env.pop("ANTHROPIC_API_KEY")  # neither a key nor a login
        events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.AUTH
    assert f"Run “{bundled} /login” in a terminal" in problem.problem.message


def test_the_summary_is_read_out_of_claude_codes_continuation_message() -> None:
    text = (
        "This session is being continued from a previous conversation that ran out of "
        "context. The summary below covers the earlier portion of the conversation.\n\n"
        "<system-reminder>\n<tools-used-before-summary>Bash</tools-used-before-summary>\n"
        "</system-reminder>\nSummary:\n1. Primary Request: beds of larch\n\n"
        "If you need specific details from before compaction, read the full transcript at: "
        "/somewhere.jsonl\nContinue the conversation from where it left off."
    )
    assert summary_from(text) == "1. Primary Request: beds of larch"


async def test_an_automatic_compaction_shows_the_divider_before_the_answer(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    server.reported_input = 995_000  # the chat looks nearly full to Claude Code
    await run_turn(engine, chat, "We chose larch for the beds.")
    events = await run_turn(engine, chat, "And the soil?")
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("Compacted") < kinds.index("TextDelta")
    (compacted,) = [e for e in events if isinstance(e, Compacted)]
    assert compacted.first_kept_seq == 2  # the message being answered is kept word for word
    assert "We chose larch for the beds." in compacted.summary
    assert server.focuses == [""]  # Claude Code compacted on its own, with no focus
    assert answer_of(events) == "You said: And the soil?"


@pytest.mark.allow_log("claude_agent_sdk", level="ERROR")  # the SDK logs the exit
async def test_a_cli_that_dies_says_so_with_its_last_words(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    # A stand-in for the CLI that answers the SDK's version check, then fails at once.
    script = tmp_path / "claude"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if '--version' in sys.argv:\n"
        "    print('2.1.332 (Claude Code)')\n"
        "    sys.exit(0)\n"
        "sys.stderr.write('fatal: out of cheese\\n')\n"
        "sys.exit(5)\n",
        "utf-8",
    )
    script.chmod(0o755)
    chat = Chat()
    engine = make_engine(tmp_path, server, chat, cli_path=str(script))
    events = await run_turn(engine, chat, "hello")
    (problem,) = [e for e in events if isinstance(e, Problem)]
    assert problem.problem.kind is ProblemKind.BROKEN_STREAM
    assert "exit code 5" in problem.problem.message
    assert "out of cheese" in problem.problem.detail
    assert problem.problem.next_step is not None and problem.problem.next_step.kind == "retry"


# --- tool calls in the chat log, and the meter ------------------------------------------------


def conversation(
    tmp_path: Path, server: ClaudeCodeServer, store: ChatStore, chat_id: str, **kw: object
) -> Conversation:
    """A chat on Claude Code as the app drives it: its turns saved in ``store``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    engine = ClaudeCodeEngine(
        chat_id=chat_id,
        state_dir=tmp_path / "programs",
        cwd=tmp_path / "work",
        history=lambda: history_messages(store.messages(chat_id)),
        latest_fold=lambda: latest_fold(store, chat_id),
        env={
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
            "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
            "HOME": str(home),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
        **kw,  # type: ignore[arg-type]
    )
    return Conversation(chat_id, store=store, engine=engine, model=PROGRAM_MODEL)


async def say(conv: Conversation, text: str) -> list[object]:
    async def go() -> list[object]:
        return [e async for e in conv.turn(text)]

    return await asyncio.wait_for(go(), HANG_SECONDS)


async def allow(ask: PermissionAsk) -> Approval:
    return Approval.ONCE


async def test_claude_codes_tool_calls_are_kept_in_the_chat_log_as_untrusted_rows(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key=PROGRAM_MODEL.key)
    conv = conversation(tmp_path, server, store, chat.id, approve=allow)
    events = await say(conv, "say it [[echo]]")
    await conv.aclose()
    assert any(isinstance(e, Done) for e in events)
    # The row showed running, then how it ended, while the turn went on.
    (started,) = [e for e in events if isinstance(e, ToolStarted)]
    assert started.tool == "Bash" and started.server == "Claude Code"

    # After a restart (the chat log opened again) the call is there: its result as a "tool"
    # message between the question and the answer, and how it went beside it.
    store.close()
    again = ChatStore.in_dir(tmp_path / "data")
    roles = [m.role for m in again.messages(chat.id)]
    assert roles == ["user", "tool", "assistant"]
    result = again.messages(chat.id)[1]
    assert result.text.strip() == ECHOED
    book = tool_call_book(again)
    assert book is not None
    (call,) = book.between(chat.id, result.seq, result.seq).values()
    assert (call.tool, call.server, call.status) == ("Bash", "Claude Code", "done")
    assert call.arguments["command"] == f"echo {ECHOED}"
    # What the command printed came from outside the person: the chat is untrusted now.
    saved = again.get_chat(chat.id)
    assert saved is not None and saved.untrusted
    # It counts in search and in an export.
    (hit,) = search(again, ECHOED)
    assert hit.chat_id == chat.id and hit.role == "tool"
    assert ECHOED in to_markdown(again, chat.id)
    # The answer shows it with its tool row (the answer's tool results).
    assert again.tool_results(chat.id, 2) == [1]


async def test_a_declined_tool_call_is_kept_but_leaves_the_chat_trusted(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    async def decline(ask: PermissionAsk) -> Approval:
        return Approval.DENY

    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key=PROGRAM_MODEL.key)
    conv = conversation(tmp_path, server, store, chat.id, approve=decline)
    await say(conv, "make the file [[bash]]")
    await conv.aclose()
    assert not (tmp_path / "work" / "ran.txt").exists()
    result = next(m for m in store.messages(chat.id) if m.role == "tool")
    book = tool_call_book(store)
    assert book is not None
    (call,) = book.between(chat.id, result.seq, result.seq).values()
    assert (call.tool, call.status) == ("Bash", "denied")
    saved = store.get_chat(chat.id)
    assert saved is not None and not saved.untrusted  # nothing from outside was read


async def test_the_meter_shows_the_last_requests_usage_against_the_window_claude_code_reports(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    # The turn's two requests (the tool call, then the answer to its result) each read the
    # whole session; the meter is the second one, not their sum.
    server.reported_input = 60_000
    server.after_tool_input = 61_000
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key=PROGRAM_MODEL.key)
    conv = conversation(tmp_path, server, store, chat.id, approve=allow)
    assert conv.context_usage() == (0, PROGRAM_MODEL.context)  # nothing reported yet
    await say(conv, "say it [[echo]]")
    await conv.aclose()
    answers = [r for r in server.message_requests if (r.json or {}).get("stream")]
    assert len(answers) >= 2
    # The window this CLI reports for its model (its result's modelUsage.contextWindow), not
    # the 200,000 the picker lists for programs.
    assert conv.context_usage() == (61_000, CLI_WINDOW)
    # A restart reads both back from the chat's session file.
    after = conversation(tmp_path, server, store, chat.id)
    assert after.context_usage() == (61_000, CLI_WINDOW)


# --- the chat's permission mode and model -----------------------------------------------------


async def test_accept_edits_set_for_the_chat_lets_claude_code_write_without_asking(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    asked: list[str] = []

    async def decline(ask: PermissionAsk) -> Approval:
        asked.append(ask.kind)
        return Approval.DENY

    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key=PROGRAM_MODEL.key)
    conv = conversation(tmp_path, server, store, chat.id, approve=decline)
    # Asked first (the default), the person says no: nothing is written.
    await say(conv, "note it [[write]]")
    assert asked == ["Write"] and not (tmp_path / "work" / "notes.txt").exists()
    # With "accept edits" chosen for the chat, the next edit goes ahead without a question.
    store.update_chat_settings(chat.id, program_mode="accept-edits")
    await say(conv, "note it again [[write]]")
    await conv.aclose()
    assert asked == ["Write"]
    assert (tmp_path / "work" / "notes.txt").read_text("utf-8") == "beds of larch\n"


async def test_plan_mode_and_the_model_chosen_for_the_chat_reach_claude_code(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat(model_key=PROGRAM_MODEL.key)
    store.update_chat_settings(chat.id, program_mode="plan", program_model="claude-haiku-4-5")
    conv = conversation(tmp_path, server, store, chat.id)
    events = await say(conv, "How would we lay out the beds?")
    await conv.aclose()
    assert any(isinstance(e, Done) for e in events)
    sent = server.message_requests[-1].json or {}
    assert sent["model"] == "claude-haiku-4-5"
    assert "Plan mode is active" in json.dumps(sent)  # Claude Code's own plan-mode words


async def test_after_compact_the_meter_shows_the_summary_not_the_chat_it_replaced(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    server.reported_input = 150_000  # every request reads this much: the chat is long
    await run_turn(engine, chat, "We plan 24 raised beds of larch.")
    assert engine.context_usage(MODEL)[0] == 150_000
    events = await collect(engine.compact("keep the plan", model=MODEL))
    assert any(isinstance(e, Compacted) for e in events)
    # The session now holds the summary Claude Code wrote, about a few hundred tokens.
    assert 0 < engine.context_usage(MODEL)[0] < 5_000


async def test_conchs_servers_reach_claude_code_only_when_allowed_with_no_secret_on_a_command_line(
    tmp_path: Path, server: ClaudeCodeServer
) -> None:
    control = tmp_path / "mcp"
    for allowed in (False, True):
        chat = Chat()
        # What Settings → Programs gives the engine: the servers when ticked, else none.
        tools = source([fake_server(control)] if allowed else [])
        (tmp_path / f"run-{allowed}").mkdir()
        engine = make_engine(tmp_path / f"run-{allowed}", server, chat, tools=tools)
        events = await run_turn(engine, chat, "Hello")
        assert isinstance(events[-1], Done), events
        if not allowed:
            # Claude Code connects to its servers before its first answer: none was started.
            assert launches(control) == []
            continue
        [launch] = launches(control)
        assert launch["token"] == SECRET  # the secret reached the server ...
        assert_no_secret_on_a_command_line(launch)  # ... and no command line showed it
        cli = launch["parents"][0]  # type: ignore[index]
        assert "--mcp-config" in cli and "Fake tools" in " ".join(cli)
