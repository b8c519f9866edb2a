"""Learning on a server on this computer asks the server to hold the answer to a JSON list.

SmolLM2 and other small models rarely write the list they are asked for, so no memory was
ever learned from them; the servers' constrained output makes the shape certain.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.learning import parse_memories
from engines.base import Done, Message, TextDelta
from engines.local.bundled import BundledRuntime, available, bundled_adapter
from engines.providers.base import ChatRequest
from engines.providers.structured import LIST_OF_STRINGS, constrained_output
from tests.fakes.ollama_server import FakeModel
from tests.loopback_chat import ollama_services

LEARNED = "The person keeps bees on the allotment."


async def test_ollama_learning_requests_carry_the_list_schema(data_dir: Path) -> None:
    llama = [FakeModel("llama3.2", 131_072)]
    async with ollama_services(data_dir, json.dumps([LEARNED]), llama) as (ollama, services):
        chat = services.store.create_chat(title="Bees", model_key="ollama/llama3.2:latest")
        services.store.append_message(chat.id, "user", "I keep bees on my allotment.")
        services.store.append_message(chat.id, "assistant", "Lovely.")
        run = await services.learner.review(chat.id, before_seq=2)
        assert run is not None
        assert [m.text for m in run.memories] == [LEARNED]
        learning = [b for b in ollama.chat_requests() if "format" in b]
        assert learning, "the learning request asked for no shape"
        assert learning[0]["format"] == LIST_OF_STRINGS


def test_only_servers_with_a_trusted_switch_are_constrained() -> None:
    assert constrained_output("ollama", LIST_OF_STRINGS) == {"format": LIST_OF_STRINGS}
    local = constrained_output("local", LIST_OF_STRINGS)["response_format"]
    assert local == {"type": "json_object", "schema": LIST_OF_STRINGS}
    assert constrained_output("llamacpp", LIST_OF_STRINGS) == {"response_format": local}
    # LM Studio and vLLM read OpenAI's json_schema form, whose root must be an object.
    for row in ("lmstudio", "vllm"):
        form = constrained_output(row, LIST_OF_STRINGS)["response_format"]
        assert form["type"] == "json_schema"
        assert form["json_schema"]["schema"]["properties"]["memories"] == LIST_OF_STRINGS
    assert parse_memories('{"memories": ["The person keeps bees."]}') == ["The person keeps bees."]
    assert constrained_output("openai", LIST_OF_STRINGS) == {}
    assert constrained_output("anthropic", LIST_OF_STRINGS) == {}


@pytest.mark.bundled
@pytest.mark.skipif(not available(), reason="the bundled model is not installed here")
async def test_the_bundled_model_writes_a_list_when_held_to_it(tmp_path: Path) -> None:
    runtime = BundledRuntime(tmp_path, n_ctx=2_048)
    adapter = bundled_adapter(runtime)
    request = ChatRequest(
        model="smollm2-135m-instruct",
        system="List what the person said about themselves as a JSON array of strings.",
        messages=(Message(role="user", text="Person: I keep bees. My sister is called Ana."),),
        max_output_tokens=96,
        window=2_048,
        extra=constrained_output("local", LIST_OF_STRINGS),
    )
    parts: list[str] = []
    try:
        async with asyncio.timeout(600):  # a hang guard: one short answer on a loaded CPU
            async for event in adapter.stream(request):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Done):
                    break
    finally:
        await adapter.aclose()
        await runtime.stop()
    answer = "".join(parts).strip()
    if not answer.endswith("]"):  # cut off at max tokens: the grammar still opened a list
        assert answer.startswith("["), answer
        return
    value = json.loads(answer)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), answer
