"""Program chats through the app: the chat log feeds the handoff, /compact says who keeps the
memory, and a program that is missing says how to install it without losing the message."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.services import build_services, history_messages, latest_fold
from app.store import ChatStore
from engines.base import Done, ModelInfo, Note, Problem, ProblemKind
from engines.mock import MockEngine
from engines.programs.acp import AcpEngine
from engines.programs.handoff import HANDOFF_CHARS

ROOT = Path(__file__).resolve().parents[3]
HANG_SECONDS = 60.0  # a hang guard only
AGENT = ModelInfo(provider="programs", id="fake", label="Fake agent", context=200_000)
LOCAL = ModelInfo(provider="mock", id="mock-model", label="Mock model", context=32_768, local=True)


def acp_engine(store: ChatStore, chat_id: str, tmp_path: Path) -> AcpEngine:
    record = tmp_path / "received.jsonl"
    return AcpEngine(
        program="Fake agent",
        command=[sys.executable, "-m", "tests.fakes.acp_agent", "--record", str(record)],
        cwd=tmp_path / "work",
        history=lambda: history_messages(store.messages(chat_id)),
        latest_fold=lambda: latest_fold(store, chat_id),
        env={"PYTHONPATH": str(ROOT)},
    )


async def drain(conv: Conversation, text: str) -> list[object]:
    async def go() -> list[object]:
        return [e async for e in conv.turn(text)]

    return await asyncio.wait_for(go(), HANG_SECONDS)


async def test_a_chat_moves_from_a_local_model_to_an_acp_agent_with_its_summary(
    tmp_path: Path,
) -> None:
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat()
    # On the local model the chat grows past the handoff and folds (the mock folds on cue).
    local = Conversation(
        chat.id, store=store, engine=MockEngine(fold_every=3, keep_turns=1, delay=0), model=LOCAL
    )
    for i in range(8):
        await drain(local, f"part {i}: " + "garden notes " * 800)  # about 10,000 characters
    fold = store.latest_compaction(chat.id)
    assert fold is not None and "part 0:" in fold.summary

    # The same chat on an ACP agent: the newest 60,000 characters and that summary.
    engine = acp_engine(store, chat.id, tmp_path)
    moved = Conversation(chat.id, store=store, engine=engine, model=AGENT)
    try:
        events = await drain(moved, "What did we plan?")
        compacted = [e async for e in moved.compact("keep the plan")]
    finally:
        await moved.aclose()
    assert any(isinstance(e, Done) for e in events)
    (got,) = [json.loads(line) for line in (tmp_path / "received.jsonl").read_text().splitlines()]
    handed = "\n".join(got["texts"])
    block = f"<earlier-in-this-chat>\n{fold.summary.strip()}\n</earlier-in-this-chat>\n\n"
    assert handed.startswith(block)
    assert len(handed) - len(block) <= HANDOFF_CHARS
    assert "part 7: " in handed and handed.endswith("What did we plan?")
    # The answer is in the chat log like any other.
    last = store.messages(chat.id)[-1]
    assert last.role == "assistant" and last.text.startswith("Heard ")
    # /compact on a program chat says plainly that the program keeps its own memory.
    notes = [e for e in compacted if isinstance(e, Note)]
    assert notes and "keeps its own memory" in notes[0].text
    assert store.latest_compaction(chat.id) == fold  # nothing folded by Conch


@pytest.mark.skipif(shutil.which("copilot") is not None, reason="Copilot CLI is installed here")
async def test_a_missing_program_says_how_to_install_it_and_keeps_the_message(
    tmp_path: Path,
) -> None:
    services = build_services(tmp_path / "data", mock=False, secrets=SessionSecrets())
    try:
        listed = {m.id: m for m in services.programs()}
        assert {"claude-code", "gemini", "copilot"} <= set(listed)
        copilot = listed["copilot"]
        assert not copilot.ready and "npm install -g @github/copilot" in copilot.status
        chat = services.store.create_chat(model_key=copilot.key)
        conv = services.conversation(chat.id)
        assert conv.model.key == "programs/copilot"
        events = await drain(conv, "Hello Copilot")
        await conv.aclose()
        (problem,) = [e for e in events if isinstance(e, Problem)]
        assert problem.problem.kind is ProblemKind.MODEL_MISSING
        assert "npm install -g @github/copilot" in problem.problem.message
        assert [m.text for m in services.store.messages(chat.id) if m.role == "user"] == [
            "Hello Copilot"
        ]
    finally:
        await services.aclose()


async def test_a_claude_code_chat_hands_compact_over_and_the_divider_is_recorded(
    tmp_path: Path,
) -> None:
    from engines.programs.catalogue import program_engine
    from tests.fakes.anthropic_server import ClaudeCodeServer

    home = tmp_path / "home"
    home.mkdir()
    store = ChatStore.in_dir(tmp_path / "data")
    chat = store.create_chat()
    model = ModelInfo(provider="programs", id="claude-code", label="Claude Code", context=200_000)
    with ClaudeCodeServer() as server:
        engine = program_engine(
            model,
            chat_id=chat.id,
            data_dir=tmp_path / "data",
            history=lambda: history_messages(store.messages(chat.id)),
            latest_fold=lambda: latest_fold(store, chat.id),
            env={
                "ANTHROPIC_BASE_URL": server.url,
                "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
                "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
                "HOME": str(home),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        conv = Conversation(chat.id, store=store, engine=engine, model=model)
        try:
            await drain(conv, "The plan: 24 beds of larch.")
            done = [e async for e in conv.compact("keep the plan")]
            await drain(conv, "Next step?")
        finally:
            await conv.aclose()
    assert server.focuses == ["keep the plan"]
    assert any(isinstance(e, Done) for e in done)
    fold = store.latest_compaction(chat.id)
    assert fold is not None
    assert fold.first_kept_seq == 2  # the divider sits after the two messages before /compact
    assert fold.model == "Claude Code"
    assert "The plan: 24 beds of larch." in fold.summary
    answers = [m.text for m in store.messages(chat.id) if m.role == "assistant"]
    assert answers == ["You said: The plan: 24 beds of larch.", "You said: Next step?"]
