"""The ACP engine against a real ACP agent process (tests/fakes/acp_agent.py).

Every test drives the real child process over stdio; what the agent was handed is read from
the file it writes before it answers.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path

import pytest

from engines.base import (
    Approval,
    ContextEngine,
    Done,
    Event,
    HandedOff,
    Message,
    ModelInfo,
    PermissionAsk,
    Problem,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    TurnInput,
)
from engines.local.processes import alive
from engines.programs.acp import AcpEngine, option_for
from engines.programs.handoff import HANDOFF_CHARS

ROOT = Path(__file__).resolve().parents[3]
HANG_SECONDS = 60.0  # a hang guard only: every wait below ends on an event long before
MODEL = ModelInfo(provider="acp", id="fake", label="Fake agent", context=128_000)
SUMMARY = "The person is planning a community garden; Marta coordinates; budget €2,500."


class Chat:
    """A chat log as the engine reads it: (seq, Message) pairs and the latest fold."""

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


def agent_command(record: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.fakes.acp_agent", "--record", str(record), *extra]


def make_engine(tmp_path: Path, chat: Chat, *extra: str, **kw: object) -> AcpEngine:
    return AcpEngine(
        program="Fake agent",
        command=agent_command(tmp_path / "received.jsonl", *extra),
        cwd=tmp_path / "work",
        history=chat.history,
        latest_fold=chat.latest_fold,
        env={"PYTHONPATH": str(ROOT)},
        **kw,  # type: ignore[arg-type]
    )


def received(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "received.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


async def run_turn(engine: AcpEngine, chat: Chat, text: str) -> list[Event]:
    seq = chat.add("user", text)
    turn = TurnInput(chat_id="c1", seq=seq, text=text, model=MODEL)

    async def collect(events: AsyncIterator[Event]) -> list[Event]:
        return [e async for e in events]

    events = await asyncio.wait_for(collect(engine.turn(turn)), HANG_SECONDS)
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    if answer:
        chat.add("assistant", answer)
    return events


def problem_of(events: list[Event]) -> Problem:
    found = [e for e in events if isinstance(e, Problem)]
    assert len(found) == 1, events
    assert not any(isinstance(e, Done) for e in events)
    return found[0]


@pytest.fixture
def chat() -> Chat:
    return Chat()


async def test_an_answer_streams_with_its_thinking(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "Hello")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Thinking it over."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Heard 5 characters."
    assert [r["texts"] for r in received(tmp_path)] == [["Hello"]]
    assert not any(isinstance(e, HandedOff) for e in events)  # nothing before it to hand over


async def test_the_engine_does_not_declare_the_context_capability(
    tmp_path: Path, chat: Chat
) -> None:
    # The program manages its own context, so /compact must not pretend to fold it.
    assert not isinstance(make_engine(tmp_path, chat), ContextEngine)


def prompts(tmp_path: Path) -> list[dict[str, object]]:
    return [r for r in received(tmp_path) if "texts" in r]


def moved_here(chat: Chat) -> None:
    """Two messages from the model the chat was on before it moved to the program."""
    chat.add("user", "My name is Ada.")
    chat.add("assistant", "Hello Ada.")


async def test_a_chat_keeps_one_session_and_later_prompts_carry_only_the_new_message(
    tmp_path: Path, chat: Chat
) -> None:
    moved_here(chat)
    engine = make_engine(tmp_path, chat)
    try:
        first = await run_turn(engine, chat, "I like larch.")
        second = await run_turn(engine, chat, "What is my name?")
    finally:
        await engine.aclose()
    assert isinstance(second[-1], Done)
    one, two = prompts(tmp_path)
    assert one["session"] == two["session"]  # one ACP session for the chat
    handed = "\n".join(one["texts"])  # type: ignore[arg-type]
    assert "Person: My name is Ada." in handed and "Assistant: Hello Ada." in handed
    assert handed.endswith("I like larch.")
    assert two["texts"] == ["What is my name?"]  # the session has the rest already
    assert [e.first_seq for e in first if isinstance(e, HandedOff)] == [0]
    assert not any(isinstance(e, HandedOff) for e in second)


async def test_after_a_restart_the_session_is_loaded_and_not_handed_the_chat_again(
    tmp_path: Path, chat: Chat
) -> None:
    moved_here(chat)
    sessions = tmp_path / "sessions"
    engine = make_engine(tmp_path, chat, "--load", chat_id="c1", state_dir=sessions)
    try:
        await run_turn(engine, chat, "I like larch.")
    finally:
        await engine.aclose()  # Conch quits: the program ends with it
    # Conch starts again: a new engine, a new process of the program.
    again = make_engine(tmp_path, chat, "--load", chat_id="c1", state_dir=sessions)
    try:
        events = await run_turn(again, chat, "What is my name?")
        more = await run_turn(again, chat, "And what do I like?")
    finally:
        await again.aclose()
    assert isinstance(events[-1], Done) and isinstance(more[-1], Done)
    lines = received(tmp_path)
    (new,) = [r["new"] for r in lines if "new" in r]
    assert [r for r in lines if "load" in r] == [{"load": new, "found": True}]  # loaded once
    one, two, three = prompts(tmp_path)
    assert one["session"] == two["session"] == three["session"] == new
    assert two["texts"] == ["What is my name?"] and three["texts"] == ["And what do I like?"]
    assert not any(isinstance(e, HandedOff) for e in events + more)
    # What the agent replayed while loading is not taken for this turn's answer.
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert answer == "Heard 16 characters."


async def test_a_session_the_agent_no_longer_has_is_replaced_and_handed_the_chat(
    tmp_path: Path, chat: Chat
) -> None:
    moved_here(chat)
    sessions = tmp_path / "sessions"
    engine = make_engine(tmp_path, chat, "--load", chat_id="c1", state_dir=sessions)
    try:
        await run_turn(engine, chat, "I like larch.")
    finally:
        await engine.aclose()
    for kept in (tmp_path / "received.jsonl.sessions").iterdir():
        kept.unlink()  # the agent's own store of its sessions was cleared
    again = make_engine(tmp_path, chat, "--load", chat_id="c1", state_dir=sessions)
    try:
        events = await run_turn(again, chat, "What is my name?")
    finally:
        await again.aclose()
    assert isinstance(events[-1], Done)
    lines = received(tmp_path)
    old, fresh = [r["new"] for r in lines if "new" in r]
    assert {"load": old, "found": False} in lines
    last = prompts(tmp_path)[-1]
    assert last["session"] == fresh
    handed = "\n".join(last["texts"])  # type: ignore[arg-type]
    assert "Person: My name is Ada." in handed and "Person: I like larch." in handed
    assert handed.endswith("What is my name?")
    assert any(isinstance(e, HandedOff) for e in events)


async def test_an_agent_that_cannot_load_is_handed_the_chat_after_a_restart(
    tmp_path: Path, chat: Chat
) -> None:
    sessions = tmp_path / "sessions"
    engine = make_engine(tmp_path, chat, chat_id="c1", state_dir=sessions)
    try:
        await run_turn(engine, chat, "My name is Ada.")
    finally:
        await engine.aclose()
    again = make_engine(tmp_path, chat, chat_id="c1", state_dir=sessions)
    try:
        await run_turn(again, chat, "What is my name?")
    finally:
        await again.aclose()
    one, two = prompts(tmp_path)
    assert one["session"] != two["session"]
    handed = "\n".join(two["texts"])  # type: ignore[arg-type]
    assert "Person: My name is Ada." in handed and handed.endswith("What is my name?")


async def test_a_session_that_missed_part_of_the_chat_is_replaced_and_handed_it(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat, "--load", chat_id="c1", state_dir=tmp_path / "s")
    try:
        await run_turn(engine, chat, "My name is Ada.")
        # The person went to another model for a turn, then came back to the program.
        chat.add("user", "I like larch.")
        chat.add("assistant", "Larch lasts.")
        events = await run_turn(engine, chat, "What do I like?")
    finally:
        await engine.aclose()
    one, two = prompts(tmp_path)
    assert one["session"] != two["session"]
    handed = "\n".join(two["texts"])  # type: ignore[arg-type]
    assert "Person: I like larch." in handed and handed.endswith("What do I like?")
    assert any(isinstance(e, HandedOff) for e in events)


async def test_asking_again_starts_a_session_without_the_answer_it_replaces(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat, chat_id="c1", state_dir=tmp_path / "s")
    try:
        await run_turn(engine, chat, "My name is Ada.")
        await run_turn(engine, chat, "Pick a wood.")
        # The person asks for another answer to the same message.
        chat.log.pop()
        seq = chat.log[-1][0]
        turn = TurnInput(chat_id="c1", seq=seq, text="Pick a wood.", model=MODEL)
        events = [e async for e in engine.turn(turn)]
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    sessions = [r["session"] for r in prompts(tmp_path)]
    assert sessions[0] == sessions[1] != sessions[2]
    handed = "\n".join(prompts(tmp_path)[-1]["texts"])  # type: ignore[arg-type]
    assert "Person: My name is Ada." in handed and "Heard 12" not in handed


async def test_a_chat_longer_than_the_handoff_sends_the_summary_and_every_message_after_it(
    tmp_path: Path, chat: Chat
) -> None:
    for i in range(80):
        chat.add("user", f"question {i}: " + "q" * 1_000)
        chat.add("assistant", f"answer {i}: " + "a" * 1_000)
    chat.fold = (110, SUMMARY)
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "So what did we decide?")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    (got,) = received(tmp_path)
    handed = "\n".join(got["texts"])  # type: ignore[arg-type]
    block = f"<earlier-in-this-chat>\n{SUMMARY}\n</earlier-in-this-chat>\n\n"
    assert handed.startswith(block)
    assert len(handed) - len(block) <= HANDOFF_CHARS
    # Every message from the fold point to the newest, word for word and in order; none the
    # summary covers.
    after = [m.text for seq, m in chat.log[:-1] if seq >= 110]
    assert [handed.index(text) for text in after] == sorted(handed.index(t) for t in after)
    assert not any(m.text[:20] in handed for seq, m in chat.log if seq < 110)
    assert handed.endswith("So what did we decide?")
    # The divider sits at the fold point, and says what went.
    (handed_off,) = [e for e in events if isinstance(e, HandedOff)]
    assert handed_off.first_seq == 110 and handed_off.summary == SUMMARY
    assert handed_off.text.startswith("Fake agent starts from here, with a handoff of ")
    assert handed_off.text.endswith("characters: a summary and the 50 messages after it")


async def test_a_missing_program_says_so_with_where_to_set_it(tmp_path: Path, chat: Chat) -> None:
    engine = AcpEngine(
        program="Gemini CLI",
        command=["conch-no-such-program-here", "--experimental-acp"],
        cwd=tmp_path / "work",
        history=chat.history,
        latest_fold=chat.latest_fold,
        install="npm install -g @google/gemini-cli",
    )
    events = await run_turn(engine, chat, "Hello")
    p = problem_of(events).problem
    assert p.kind is ProblemKind.MODEL_MISSING
    assert "conch-no-such-program-here" in p.message
    assert "npm install -g @google/gemini-cli" in p.message
    assert p.next_step is not None and p.next_step.kind == "open-settings"


async def test_a_program_that_prints_a_banner_is_not_taken_for_acp(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat, "--banner")
    try:
        events = await run_turn(engine, chat, "Hello")
    finally:
        await engine.aclose()
    p = problem_of(events).problem
    assert p.kind is ProblemKind.BROKEN_STREAM
    assert "Welcome to the fake agent!" in p.message
    assert "ACP mode" in p.message
    assert p.next_step is not None and p.next_step.kind == "open-settings"


async def test_text_that_is_not_json_mid_turn_stops_the_turn_and_the_next_one_works(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        bad = await run_turn(engine, chat, "please [[garbage]]")
        good = await run_turn(engine, chat, "again")
    finally:
        await engine.aclose()
    p = problem_of(bad).problem
    assert p.kind is ProblemKind.BROKEN_STREAM
    assert "Oops: this is not JSON" in p.message
    assert isinstance(good[-1], Done)


async def test_a_program_that_exits_mid_turn_keeps_what_it_wrote_and_starts_again(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        broken = await run_turn(engine, chat, "go [[exit]]")
        again = await run_turn(engine, chat, "are you back?")
    finally:
        await engine.aclose()
    assert "".join(e.text for e in broken if isinstance(e, TextDelta)) == "Heard 11"
    p = problem_of(broken).problem
    assert p.kind is ProblemKind.BROKEN_STREAM
    assert p.partial
    assert "exit code 3" in p.message
    assert p.next_step is not None and p.next_step.kind == "retry"
    assert isinstance(again[-1], Done)
    # The restarted program was handed the part answer too: nothing the chat held is lost.
    assert "Assistant: Heard 11" in "\n".join(received(tmp_path)[-1]["texts"])  # type: ignore[arg-type]


async def test_a_permission_the_person_declines_ends_the_turn_with_a_clear_problem(
    tmp_path: Path, chat: Chat
) -> None:
    asked: list[PermissionAsk] = []

    async def decline(ask: PermissionAsk) -> Approval:
        asked.append(ask)
        return Approval.DENY

    engine = make_engine(tmp_path, chat, approve=decline)
    try:
        events = await run_turn(engine, chat, "clean up [[permission]]")
    finally:
        await engine.aclose()
    assert [a.title for a in asked] == ["Run rm -rf build"]
    assert any(isinstance(e, ToolCall) for e in events)
    p = problem_of(events).problem
    assert p.kind is ProblemKind.REFUSED
    assert "You did not allow it" in p.message and "Run rm -rf build" in p.message
    assert p.next_step is not None and p.next_step.kind == "retry"


async def test_a_permission_the_person_allows_lets_the_program_carry_on(
    tmp_path: Path, chat: Chat
) -> None:
    async def allow(ask: PermissionAsk) -> Approval:
        return Approval.ONCE

    engine = make_engine(tmp_path, chat, approve=allow)
    try:
        events = await run_turn(engine, chat, "clean up [[permission]]")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).startswith("Removed build.")


ALL_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


@pytest.mark.parametrize(
    "order",
    [
        ("allow_always", "allow_once", "reject_once", "reject_always"),
        ("reject_always", "reject_once", "allow_always", "allow_once"),
        ("allow_once", "reject_once", "allow_always", "reject_always"),
    ],
)
@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        (Approval.ONCE, "allow_once"),
        (Approval.ALWAYS, "allow_always"),
        (Approval.DENY, "reject_once"),
    ],
)
async def test_the_option_sent_is_the_kind_the_person_chose_in_any_order(
    tmp_path: Path, chat: Chat, order: tuple[str, ...], choice: Approval, sent: str
) -> None:
    async def answer(ask: PermissionAsk) -> Approval:
        return choice

    engine = make_engine(tmp_path, chat, approve=answer)
    try:
        await run_turn(engine, chat, f"clean up [[permission:{','.join(order)}]]")
    finally:
        await engine.aclose()
    answers = [r for r in received(tmp_path) if "permission" in r]
    assert [r["option"] for r in answers] == [sent]


async def test_allow_once_is_never_sent_as_always_when_only_always_is_offered(
    tmp_path: Path, chat: Chat
) -> None:
    async def once(ask: PermissionAsk) -> Approval:
        return Approval.ONCE

    engine = make_engine(tmp_path, chat, approve=once)
    try:
        events = await run_turn(engine, chat, "clean up [[permission:allow_always,reject_once]]")
    finally:
        await engine.aclose()
    assert [r.get("option") for r in received(tmp_path) if "permission" in r] == [None]
    p = problem_of(events).problem
    assert "offers only to allow that always" in p.message
    assert p.next_step is not None and "Always" in p.next_step.label


def test_always_falls_back_to_once_and_deny_to_reject_always() -> None:
    from acp.schema import PermissionOption

    def offered(*kinds: str) -> list[PermissionOption]:
        return [PermissionOption(option_id=k, name=k, kind=k) for k in kinds]

    once = option_for(Approval.ALWAYS, offered("reject_once", "allow_once"))
    assert once is not None and once.kind == "allow_once"
    reject = option_for(Approval.DENY, offered("allow_always", "reject_always"))
    assert reject is not None and reject.kind == "reject_always"
    assert option_for(Approval.DENY, offered("allow_once")) is None
    assert set(ALL_KINDS) == {o.kind for o in offered(*ALL_KINDS)}


async def test_without_a_way_to_ask_a_permission_is_declined_and_says_why(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "clean up [[permission]]")
    finally:
        await engine.aclose()
    p = problem_of(events).problem
    assert p.kind is ProblemKind.REFUSED
    assert "cannot ask you" in p.message


async def test_a_program_that_hangs_is_stopped_after_its_silence(
    tmp_path: Path, chat: Chat
) -> None:
    # The agent never answers this one, so the idle limit is what ends the turn.
    engine = make_engine(tmp_path, chat, idle_timeout=1.0)
    try:
        events = await run_turn(engine, chat, "think forever [[hang]]")
        again = await run_turn(engine, chat, "hello?")
    finally:
        await engine.aclose()
    p = problem_of(events).problem
    assert p.kind is ProblemKind.TIMEOUT
    assert "sent nothing for 1 seconds" in p.message
    assert isinstance(again[-1], Done)


async def test_an_error_of_the_agent_shows_its_own_words(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "Hello [[fail]]")
    finally:
        await engine.aclose()
    problem = problem_of(events).problem
    assert problem.kind is ProblemKind.SERVER_ERROR
    assert "model “gpt-9” does not exist" in problem.message  # not just "Internal error"


async def test_a_refusal_is_a_problem_not_an_empty_answer(tmp_path: Path, chat: Chat) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        events = await run_turn(engine, chat, "do something bad [[refuse]]")
    finally:
        await engine.aclose()
    p = problem_of(events).problem
    assert p.kind is ProblemKind.REFUSED
    assert "declined to answer" in p.message


async def test_stopping_a_turn_tells_the_program_to_stop_and_the_chat_goes_on(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat)
    try:
        seq = chat.add("user", "take your time [[slow]]")
        turn = TurnInput(chat_id="c1", seq=seq, text="take your time [[slow]]", model=MODEL)
        events = engine.turn(turn)
        assert isinstance(events, AsyncGenerator)  # so it can be closed, as the app closes it
        first = await asyncio.wait_for(anext(events), HANG_SECONDS)
        assert isinstance(first, ThinkingDelta)  # the program is working on it
        await events.aclose()  # the person pressed Stop
        after = await run_turn(engine, chat, "never mind, hello")
    finally:
        await engine.aclose()
    assert isinstance(after[-1], Done)
    lines = received(tmp_path)
    slow_session = lines[0]["session"]
    assert {"cancelled": slow_session} in lines  # the program heard the Stop
    assert lines[-1]["texts"][-1].endswith("never mind, hello")  # type: ignore[index]


async def test_a_stop_that_comes_as_the_program_speaks_still_stops_the_turn(
    tmp_path: Path, chat: Chat
) -> None:
    """Python 3.11's ``asyncio.wait_for`` drops a cancel that meets its result in the same
    moment: the Stop was lost and the turn waited for a program that was waiting for it."""
    engine = make_engine(tmp_path, chat)
    working = asyncio.Event()

    async def answer() -> None:  # as the window's bridge runs a turn
        seq = chat.add("user", "take your time [[slow]]")
        turn = TurnInput(chat_id="c1", seq=seq, text="take your time [[slow]]", model=MODEL)
        async for event in engine.turn(turn):
            if isinstance(event, ThinkingDelta):
                working.set()

    task = asyncio.create_task(answer())
    try:
        await asyncio.wait_for(working.wait(), HANG_SECONDS)
        process = engine._process  # the only way to time the program's word
        assert process is not None and process.client.queue is not None
        # The program's next word and the person's Stop arrive together.
        process.client.queue.put_nowait(ThinkingDelta(text=" Still thinking."))
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=HANG_SECONDS)
        assert task in done and task.cancelled(), "the Stop was lost"
        after = await run_turn(engine, chat, "never mind, hello")
    finally:
        task.cancel()
        await engine.aclose()
    assert isinstance(after[-1], Done)
    lines = received(tmp_path)
    assert {"cancelled": lines[0]["session"]} in lines  # the program heard the Stop


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the processes in /proc")
async def test_closing_stops_the_program_and_what_it_started_before_it_returns(
    tmp_path: Path, chat: Chat
) -> None:
    engine = make_engine(tmp_path, chat, "--grandchild")
    try:
        events = await run_turn(engine, chat, "Hello")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done)
    (pids,) = [r for r in received(tmp_path) if "pid" in r]
    agent, helper = int(pids["pid"]), int(pids["grandchild"])  # type: ignore[call-overload]
    assert not Path(f"/proc/{agent}").exists()  # ended and reaped, not left for later
    assert not alive(helper)  # a helper holding its pipes did not outlive it
