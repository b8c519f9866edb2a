"""The bundled runtime's slots on the real model (SmolLM2-135M on llama.cpp's server).

- Background work (a summary written ahead, learning) runs in a slot of its own, so the chat's
  next turn finds its prompt where it left it and the model reads only the new message.
- The chat's state is saved when the runtime ends and restored when the chat goes on after a
  restart: the model reads only what is new, and the answer is the same (fixed seed).
- A damaged saved state, or a file Conch did not write, is not used: one Health note each.

How much the model read comes from the server's own counts (its usage: prompt tokens and the
cached part of them), never from a clock. Each test prints one JSON line of figures.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from bench.slots import measure
from engines.base import Message
from engines.local import serve
from engines.local.bundled import MODEL_ID, BundledRuntime, bundled_adapter
from engines.local.gate import for_the_chat, gated
from engines.local.slot_states import STATE_SUFFIX
from engines.providers.base import ChatRequest
from tests.integration.conftest import LiveChat, Recorder, bundled_model, needs_bundled
from tests.waits import HANG_SECONDS

pytestmark = [
    pytest.mark.bundled,
    needs_bundled,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

SEED = 7
SYSTEM = "You are a helpful assistant. Answer in a few words."
TOPICS = ("garden", "lemons", "bicycle", "invoice", "violin", "chess", "bakery", "river")
# A few dozen tokens: the new message, its framing, and the previous answer as the chat
# template writes it (llama.cpp keeps the answer it generated; the template may differ by a
# token or two where the answer ended).
NEW_MESSAGE_ROOM = 60


def chat_so_far() -> list[Message]:
    """Eight exchanges, about 600 tokens: a chat worth keeping, quick to read once."""
    messages: list[Message] = []
    for index, topic in enumerate(TOPICS):
        messages.append(
            Message(
                role="user",
                text=f"Note {index + 1}: my {topic} needs attention this week, "
                f"the {topic} is the first thing on my list after work on day {index + 2}.",
            )
        )
        messages.append(Message(role="assistant", text=f"Noted about the {topic}."))
    return messages


def request(messages: list[Message], max_tokens: int = 8) -> ChatRequest:
    return ChatRequest(
        model=MODEL_ID,
        system=SYSTEM,
        messages=tuple(messages),
        max_output_tokens=max_tokens,
        temperature=0.0,
        extra={"seed": SEED},
    )


def follow_up(messages: list[Message], said: str, text: str) -> list[Message]:
    return [*messages, Message(role="assistant", text=said), Message(role="user", text=text)]


async def test_background_work_between_two_turns_leaves_the_chat_its_prompt(
    data_dir: Path,
) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(runtime))
    try:
        chat = [*chat_so_far(), Message(role="user", text="What is first on my list?")]
        first = await measure(adapter, request(chat))
        assert first.read > 300  # the whole chat, read once

        # A summary written ahead: a prompt of its own, longer than the chat's new message.
        piece = "\n".join(m.text for m in chat_so_far())
        summary = request([Message(role="user", text=f"Summarise this chat:\n{piece}")], 16)
        work = await measure(adapter, summary, behind=True)
        assert work.read > 200

        second = await measure(adapter, request(follow_up(chat, first.text, "And then?")))
        assert second.read <= NEW_MESSAGE_ROOM, second
        assert second.cached >= first.read  # the chat's prompt, as the first turn left it
    finally:
        await adapter.aclose()
        await runtime.stop()
    print(
        json.dumps(
            {
                "figure": "turn after background work",
                "chat_read": first.read,
                "background_read": work.read,
                "next_turn_read": second.read,
                "next_turn_cached": second.cached,
            }
        )
    )


async def test_a_chats_state_outlives_the_runtime_and_gives_the_same_answer(
    data_dir: Path,
) -> None:
    chat = [*chat_so_far(), Message(role="user", text="What is first on my list?")]
    runtime = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(runtime))
    try:
        assert (await runtime.start()).phase == "ready"
        cold = await measure(adapter, request(chat))
        turn = request(follow_up(chat, cold.text, "Which day was the violin?"))
        warm = await measure(adapter, turn)
        assert warm.read <= NEW_MESSAGE_ROOM
    finally:
        await adapter.aclose()
        await runtime.stop()  # the runtime ends: the chat's state is saved
    states = sorted(p.name for p in runtime.states_path.glob(f"*{STATE_SUFFIX}"))
    assert len(states) == 1

    again = BundledRuntime(data_dir)  # Conch started again: a new runtime, nothing in memory
    adapter = gated(bundled_adapter(again))
    try:
        assert (await again.start()).phase == "ready"  # as the window starts it, before a turn
        reopened = await measure(adapter, turn)
        later = await measure(adapter, request(follow_up(list(turn.messages), reopened.text, "OK")))
    finally:
        await adapter.aclose()
        await again.stop()
    assert reopened.notes == [] and later.notes == []
    assert reopened.text == warm.text  # the same bytes sent, the same answer
    assert reopened.read <= 2 and reopened.cached >= warm.read + warm.cached - 2
    assert later.read <= NEW_MESSAGE_ROOM  # the chat goes on from its restored state
    print(
        json.dumps(
            {
                "figure": "reopen after restart",
                "chat_tokens": warm.read + warm.cached,
                "cold_read": cold.read,
                "cold_first_word_s": cold.first_word_s,
                "warm_read": warm.read,
                "warm_first_word_s": warm.first_word_s,
                "reopened_read": reopened.read,
                "reopened_first_word_s": reopened.first_word_s,
                "next_turn_read": later.read,
                "next_turn_first_word_s": later.first_word_s,
            }
        )
    )


async def test_a_chat_read_ahead_before_its_turn_is_still_saved_when_the_runtime_ends(
    data_dir: Path,
) -> None:
    # Near a fold Conch reads the chat's next prompt ahead after every turn, and the turn then
    # goes on from what was read. The runtime must still know what the chat's slot holds, or
    # the chat would be read again from its first token after a restart.
    chat = [*chat_so_far(), Message(role="user", text="What is first on my list?")]
    runtime = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(runtime))
    try:
        first = await measure(adapter, request(chat))
        so_far = [*chat, Message(role="assistant", text=first.text)]
        with for_the_chat():
            ahead = await measure(adapter, request(so_far, 1), behind=True)
        turn = request([*so_far, Message(role="user", text="Which day was the violin?")])
        went_on = await measure(adapter, turn)
    finally:
        await adapter.aclose()
        await runtime.stop()  # the runtime ends: the chat's state is saved
    assert ahead.read > 0 and went_on.read <= NEW_MESSAGE_ROOM  # it went on from the read-ahead
    assert len(list(runtime.states_path.glob(f"*{STATE_SUFFIX}"))) == 1

    again = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(again))
    try:
        reopened = await measure(adapter, turn)
    finally:
        await adapter.aclose()
        await again.stop()
    assert reopened.text == went_on.text  # the same bytes sent, the same answer
    assert reopened.read <= 2, reopened


async def test_a_damaged_or_foreign_state_is_not_used_and_health_says_so_once(
    data_dir: Path,
) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = Recorder(gated(bundled_adapter(runtime)), answer_tokens=8)
    live = LiveChat(data_dir, adapter, bundled_model(8_192), system=SYSTEM)
    try:
        for message in chat_so_far()[::2][:4]:
            await live.send(message.text)
        await runtime.stop()  # saved
        (state,) = runtime.states_path.glob(f"*{STATE_SUFFIX}")
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one byte changed, the size the same
        state.write_bytes(bytes(data))
        (runtime.states_path / "slot0.bin").write_bytes(b"a state some other program left")

        await live.send("What is first on my list?")  # the runtime starts again for it
        await live.send("And then?")
        notes = [n.text for n in live.health.notes() if "state" in n.text]
        answered = live.store.messages(live.chat_id)
    finally:
        await live.close()
        await runtime.stop()
    assert len(notes) == 2, notes  # one for each file, not one for each turn
    assert any("damaged" in text for text in notes)
    assert any("slot0.bin" in text for text in notes)
    assert not state.exists() and not (runtime.states_path / "slot0.bin").exists()
    assert [m.role for m in answered[-2:]] == ["user", "assistant"] and answered[-1].text


async def test_a_chat_left_idle_is_saved_while_the_runtime_runs(data_dir: Path) -> None:
    # Saved after a short idle time here (a minute in Conch): a crash of Conch, which takes
    # the runtime with it before it can save anything, then loses nothing already idle.
    idle = (sys.executable, "-m", serve.MODULE, "--save_after", "0.5")
    runtime = BundledRuntime(data_dir, server=idle)
    adapter = gated(bundled_adapter(runtime))
    try:
        chat = [*chat_so_far(), Message(role="user", text="What is first on my list?")]
        first = await measure(adapter, request(chat))
        deadline = time.monotonic() + HANG_SECONDS  # a hang guard only
        while not list(runtime.states_path.glob(f"*{STATE_SUFFIX}")):
            assert time.monotonic() < deadline, "the idle chat was never saved"
            await asyncio.sleep(0.05)
        assert runtime.running()  # saved while it runs, not only when it ends
    finally:
        await adapter.aclose()
        await runtime.stop()
    assert first.read > 300
    (state,) = runtime.states_path.glob(f"*{STATE_SUFFIX}")  # and not saved twice
    assert state.with_suffix(".json").exists()


async def test_the_exact_prompt_count_is_what_the_server_reads(data_dir: Path) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = bundled_adapter(runtime)
    try:
        assert (await runtime.start()).phase == "ready"
        sent = request([*chat_so_far(), Message(role="user", text="What is first on my list?")])
        counted = await adapter.prompt_tokens(sent)  # type: ignore[attr-defined]
        read = await measure(adapter, sent)
    finally:
        await adapter.aclose()
        await runtime.stop()
    assert counted == read.read + read.cached
