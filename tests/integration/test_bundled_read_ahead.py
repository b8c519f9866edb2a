"""Reading the next turn's prompt ahead on the real bundled model (SmolLM2-135M on llama.cpp).

When a fold is near, Conch reads two prompts ahead in the chat's slot while the person reads:
the fold's request (the summary and the turns it keeps), then the chat as it is. The second
stays in the slot; the first is kept in llama.cpp's RAM cache of prompt states when the second
comes. Whichever the next turn sends, the model then reads only the new message (the server's
own counts, never a clock).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.slots import measure
from engines.base import Message
from engines.context.prepare import WARM_TOKENS
from engines.context.state import summary_block
from engines.local.bundled import BundledRuntime, bundled_adapter
from engines.local.gate import background, for_the_chat, gated
from tests.integration.conftest import needs_bundled
from tests.integration.test_bundled_slots import NEW_MESSAGE_ROOM, chat_so_far, request

pytestmark = [
    pytest.mark.bundled,
    needs_bundled,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

KEPT = 4  # messages the fold keeps (two exchanges)
EARLIER = 8  # messages of the chat before (four exchanges: quick to read once)
SUMMARY = "The person keeps a list of chores for the week, one note a day, each after work."


async def test_a_turn_finds_either_prompt_read_ahead_in_the_chats_slot(data_dir: Path) -> None:
    runtime = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(runtime))
    figures: dict[str, int] = {}
    try:
        chat = [*chat_so_far()[:EARLIER], Message(role="user", text="What is first on my list?")]
        answer = await measure(adapter, request(chat))
        as_it_is = [*chat, Message(role="assistant", text=answer.text)]
        kept = as_it_is[-KEPT:]
        folded = [
            kept[0].model_copy(update={"text": summary_block(SUMMARY) + kept[0].text}),
            *kept[1:],
        ]

        async def read_ahead() -> None:
            with background(), for_the_chat():
                for messages in (folded, as_it_is):  # the chat's last: it stays in the slot
                    await measure(adapter, request(messages, WARM_TOKENS))

        await read_ahead()
        new = Message(role="user", text="And what comes after that?")
        normal = await measure(adapter, request([*as_it_is, new]))
        assert normal.read <= NEW_MESSAGE_ROOM, normal  # found in the chat's slot
        figures["normal_turn_read"] = normal.read

        as_it_is = [*as_it_is, new, Message(role="assistant", text=normal.text)]
        kept = as_it_is[-KEPT:]
        folded = [
            kept[0].model_copy(update={"text": summary_block(SUMMARY) + kept[0].text}),
            *kept[1:],
        ]
        await read_ahead()
        fold = await measure(adapter, request([*folded, new]))
        assert fold.read <= NEW_MESSAGE_ROOM, fold  # found in the cache of prompt states
        figures["fold_turn_read"] = fold.read
    finally:
        await adapter.aclose()
        await runtime.stop()
    print(json.dumps({"figure": "turns after reading ahead", **figures}))
