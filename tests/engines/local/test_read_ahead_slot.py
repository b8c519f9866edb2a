"""A turn whose prompt was read ahead in the bundled runtime's chat slot keeps what was read.

Before a chat's turn the adapter asks the runtime to put the chat's saved state in the chat's
slot (``/conch/chat-slot``). After Conch has read that chat's next prompt ahead there, the
runtime holds more than any saved state (in the slot, or in llama.cpp's RAM cache of prompt
states), and putting an older saved state in the slot would make the turn read again all that
came after it. Against a stand-in runtime that notes every request it gets.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engines.base import Message
from engines.local.bundled import MODEL_ID, bundled_adapter
from engines.local.gate import background, for_the_chat
from engines.local.slot_states import PREPARE_PATH
from engines.providers.base import ChatRequest, ProviderAdapter
from tests.engines.local.test_runtime_crashes import fake_runtime

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

CHAT = (
    Message(role="user", text="Name three colours."),
    Message(role="assistant", text="Red, green and blue."),
)


def ask(*messages: Message, answer: int = 64) -> ChatRequest:
    return ChatRequest(model=MODEL_ID, messages=messages, max_output_tokens=answer)


async def drain(adapter: ProviderAdapter, request: ChatRequest) -> None:
    async for _event in adapter.stream(request):
        pass


NOTE_ONLY = f"{PREPARE_PATH}?restore=0"


def posts(data_dir: Path) -> list[str]:
    lines = (data_dir / "fake-runtime-posts.jsonl").read_text().splitlines()
    return [str(json.loads(line)["path"]).rstrip("/") for line in lines]


async def test_a_turn_read_ahead_in_the_chats_slot_has_no_saved_state_put_there(
    data_dir: Path,
) -> None:
    runtime = fake_runtime(data_dir)
    adapter = bundled_adapter(runtime)
    try:
        await drain(adapter, ask(CHAT[0]))  # a turn: the saved state, if any, is put in place
        before = len(posts(data_dir))
        with background(), for_the_chat():
            await drain(adapter, ask(*CHAT, answer=1))  # the chat as it is, read ahead
        # Announced without a restore: the runtime only notes what its slot now holds.
        assert posts(data_dir)[before:] == [NOTE_ONLY, "/v1/chat/completions"]
        before = len(posts(data_dir))
        await drain(adapter, ask(*CHAT, Message(role="user", text="And two more?")))
        # The turn goes on from what was read ahead: nothing restored over it either.
        assert posts(data_dir)[before:] == [NOTE_ONLY, "/v1/chat/completions"]

        # Another chat's turn (nothing of it read ahead) has its saved state put in place.
        before = len(posts(data_dir))
        await drain(adapter, ask(Message(role="user", text="What is a lemon?")))
        assert posts(data_dir)[before:] == [PREPARE_PATH, "/v1/chat/completions"]
    finally:
        await adapter.aclose()
        await runtime.stop()
