"""A chat that read a tool result is untrusted for learning; one whose call was denied is not."""

from __future__ import annotations

import sys
from pathlib import Path

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.services import history_messages, latest_fold, logged_history
from app.settings import SettingsStore
from app.store import ChatStore
from app.tools import ChatToolHost, ToolSettings
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Approval, ModelInfo, Note, TextDelta, ToolAsk, ToolCallData
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.context.transcript import transcript_path
from engines.tools.rules import tool_list_tokens
from tests.app.test_cli import ROOT
from tests.engines.tools.test_loop import Runner, notes_file

MODEL = ModelInfo(provider="openai", id="gpt-wide", label="GPT Wide", context=128_000)


async def chat_with_a_tool(data_dir: Path, answer: Approval) -> tuple[ChatStore, str, str]:
    async def person(_ask: ToolAsk) -> Approval:
        return answer

    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    call = ToolCallData(id="c1", name="read_file", arguments={"path": "list.txt"})
    adapter = ScriptedAdapter([Answer(text="", tool_calls=(call,)), Answer(text="Eggs.")])
    engine = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        tools=ToolHost(Runner({"read_file": notes_file}), person),
    )
    conv = Conversation(chat.id, store=store, engine=engine, model=MODEL)
    events = [e async for e in conv.turn("What do I buy?")]
    said = "".join(e.text for e in events if isinstance(e, TextDelta))
    await conv.aclose()
    return store, chat.id, said


async def test_reading_a_tool_result_makes_the_chat_untrusted(data_dir: Path) -> None:
    store, chat_id, said = await chat_with_a_tool(data_dir, Approval.ONCE)
    assert said == "Eggs."
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.untrusted


async def test_a_denied_call_read_nothing_and_leaves_the_chat_trusted(data_dir: Path) -> None:
    store, chat_id, said = await chat_with_a_tool(data_dir, Approval.DENY)
    assert said == "Eggs."
    chat = store.get_chat(chat_id)
    assert chat is not None and not chat.untrusted


async def test_a_chat_meter_counts_the_tools_of_its_running_servers_before_it_starts(
    data_dir: Path, tmp_path: Path
) -> None:
    tools = ToolSettings(SettingsStore.in_dir(data_dir), SessionSecrets())
    env = {"PYTHONPATH": str(ROOT)}
    args = ["-m", "tests.fakes.mcp_server", "--control", str(tmp_path / "control")]
    added = tools.add_stdio("Helpers", sys.executable, args, env)
    try:
        listed = await tools.catalogue()  # another chat started the server
        assert len(listed)
        chosen: list[str] | None = None
        host = ChatToolHost(tools, chosen=lambda: chosen)
        fresh = ApiSession(chat_id="fresh", data_dir=None, adapters={}, tools=host)
        plain = ApiSession(chat_id="plain", data_dir=None, adapters={})
        _, without = plain.context_usage(MODEL)
        _, with_tools = fresh.context_usage(MODEL)
        assert without - with_tools == tool_list_tokens(listed.specs())
        chosen = [s for s in tools.usable() if s != added.id]  # the chat turned it off
        assert fresh.context_usage(MODEL)[1] == without
    finally:
        await tools.stop()


async def test_the_next_turn_agrees_with_the_chat_log_and_keeps_the_tool_pair(
    data_dir: Path,
) -> None:
    async def person(_ask: ToolAsk) -> Approval:
        return Approval.ONCE

    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    call = ToolCallData(id="c1", name="read_file", arguments={"path": "list.txt"})
    adapter = ScriptedAdapter(
        [Answer(text="Let me look. ", tool_calls=(call,)), Answer(text="Eggs."), Answer("Sure.")]
    )
    engine = ApiSession(
        chat_id=chat.id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        history=lambda: history_messages(store.messages(chat.id)),
        latest_fold=lambda: latest_fold(store, chat.id),
        tools=ToolHost(Runner({"read_file": notes_file}), person),
    )
    conv = Conversation(chat.id, store=store, engine=engine, model=MODEL)
    [e async for e in conv.turn("What do I buy?")]
    second = [e async for e in conv.turn("Thanks!")]
    await conv.aclose()

    assert not [e for e in second if isinstance(e, Note) and e.topic == "transcript-recovered"]
    sent = adapter.requests[-1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[2].text == "Shopping: eggs, flour, 2 lemons."


async def test_a_chat_rebuilt_from_its_log_still_reads_the_tool_result_with_its_call(
    data_dir: Path,
) -> None:
    # The transcript file is gone (deleted, or set aside as damaged): the chat log's tool
    # result goes back to the model paired with a call under the tool's own name.
    store, chat_id, _said = await chat_with_a_tool(data_dir, Approval.ONCE)
    saved = transcript_path(data_dir, chat_id)
    assert saved.is_file()
    saved.unlink()
    adapter = ScriptedAdapter([Answer("Sure."), Answer("Again.")])
    engine = ApiSession(
        chat_id=chat_id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        history=lambda: logged_history(store, chat_id),
        latest_fold=lambda: latest_fold(store, chat_id),
    )
    conv = Conversation(chat_id, store=store, engine=engine, model=MODEL)
    [e async for e in conv.turn("Thanks!")]
    second = [e async for e in conv.turn("And tomorrow?")]
    await conv.aclose()

    sent = adapter.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[1].tool_calls[0].name == "read_file"
    assert sent[2].tool_call_id == sent[1].tool_calls[0].id
    assert sent[2].text == "Shopping: eggs, flour, 2 lemons." and sent[2].untrusted
    # Rebuilt once, then the transcript and the log agree: no rebuild on every turn.
    assert not [e for e in second if isinstance(e, Note) and e.topic == "transcript-recovered"]
