"""Continue after Stop, on the wire: the model goes on from the stopped answer's last word and
the transcript keeps one answer, the stopped words and the rest.

Real adapters against the loopback fakes. Ollama and Anthropic continue a final assistant
message, so the request ends with the stopped words; an OpenAI-style server gets a hidden
request to go on, which the transcript never keeps; a Claude model that refuses a final
assistant message is asked the same way at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.base import Done, Event, ModelInfo, Problem, TextDelta, TurnInput
from engines.context.continuation import CONTINUE_REQUEST
from engines.context.session import ApiSession
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.anthropic_server import AnthropicServer, ClaudeScript
from tests.fakes.http import Recorded, Reply
from tests.fakes.ollama_server import FakeModel, FakeReply, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, Script

CHAT = "chat-continue"
QUESTION = "Tell me about the garden."
WHOLE = "The garden has twelve beds. Larch lasts ten years. Water them at dawn."
STOPPED = "The garden has twelve beds. "  # what had arrived when the person pressed Stop


def session_for(adapter: ProviderAdapter, data_dir: Path) -> ApiSession:
    return ApiSession(chat_id=CHAT, data_dir=data_dir, adapters={adapter.name: adapter})


async def stopped_turn(session: ApiSession, model: ModelInfo) -> str:
    """The first turn, stopped (the consumer hangs up) once some words have arrived."""
    turn = TurnInput(chat_id=CHAT, seq=0, text=QUESTION, model=model)
    got = ""
    events = session.turn(turn)
    async for event in events:
        if isinstance(event, TextDelta):
            got += event.text
            if len(got) >= len(STOPPED):
                break
    await events.aclose()  # type: ignore[attr-defined]  # an async generator, as Stop closes it
    return got


async def run(session: ApiSession, turn: TurnInput) -> list[Event]:
    return [event async for event in session.turn(turn)]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def continued(model: ModelInfo, partial: str) -> TurnInput:
    return TurnInput(chat_id=CHAT, seq=0, text=QUESTION, model=model, continue_from=partial)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as c:
        yield c


async def test_ollama_continues_the_stopped_answer_from_its_last_word(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    def answer(body: dict[str, Any]) -> FakeReply:
        # As Ollama's template does: a final assistant message is written on, not answered.
        last = body["messages"][-1]
        if last["role"] == "assistant":
            return FakeReply(text=WHOLE[len(last["content"]) :], chunk=len(STOPPED))
        return FakeReply(text=WHOLE, chunk=len(STOPPED))

    with running_ollama([FakeModel("llama3.2", 131_072)], responder=answer) as fake:
        adapter = OllamaAdapter(base_url=fake.url, client=client)
        model = ModelInfo(provider="ollama", id="llama3.2:latest", context=32_768, local=True)
        session = session_for(adapter, data_dir)
        partial = await stopped_turn(session, model)
        assert partial == STOPPED
        events = await run(session, continued(model, partial))
        after = await run(
            session, TurnInput(chat_id=CHAT, seq=2, text="And the soil?", model=model)
        )
        sent = fake.chat_requests()
    assert isinstance(events[-1], Done), events
    # The model wrote on from "beds." (the space it starts with is the one the request left out).
    assert text_of(events) == " Larch lasts ten years. Water them at dawn."
    # The request ended with the stopped words (no trailing space: Anthropic refuses one).
    assert sent[1]["messages"][-1] == {"role": "assistant", "content": STOPPED.rstrip()}
    assert all(m["content"] != CONTINUE_REQUEST for m in sent[1]["messages"])
    # One answer in the model's memory: what was stopped and what followed.
    assert isinstance(after[-1], Done)
    said = [m["content"] for m in sent[2]["messages"] if m["role"] == "assistant"]
    assert said == [WHOLE]
    assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]


async def test_an_openai_style_server_is_asked_to_go_on_and_the_request_is_not_kept(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    server = OpenAIStyleServer("openai").start()
    try:
        server.script = Script(text=["The garden has twelve beds. ", "Larch lasts ten years."])
        adapter = OpenAIAdapter(
            ROWS["openai"], base_url=server.base_url, client=client, api_key="k"
        )
        model = ModelInfo(provider="openai", id="fake-model", context=128_000)
        session = session_for(adapter, data_dir)
        partial = await stopped_turn(session, model)
        server.script = Script(text=["Larch lasts ", "ten years."])
        events = await run(session, continued(model, partial))
        server.script = Script(text=["Loam."])
        await run(session, TurnInput(chat_id=CHAT, seq=2, text="And the soil?", model=model))
        sent = server.chat_requests
    finally:
        server.stop()
    assert isinstance(events[-1], Done), events
    assert text_of(events) == "Larch lasts ten years."
    tail = sent[1].json["messages"][-2:]
    assert tail == [
        {"role": "assistant", "content": STOPPED},
        {"role": "user", "content": CONTINUE_REQUEST},
    ]
    later = sent[2].json["messages"]
    assert all(m["content"] != CONTINUE_REQUEST for m in later)
    assert [m["content"] for m in later if m["role"] == "assistant"] == [
        STOPPED + "Larch lasts ten years."
    ]


class NoPrefillClaude(AnthropicServer):
    """A Claude model that refuses a request ending with its own words (newer models do)."""

    def _messages(self, request: Recorded) -> Reply:
        body = request.json or {}
        if body.get("messages", [{}])[-1].get("role") == "assistant":
            return Reply.json(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "This model does not support assistant message prefill. "
                        "The conversation must end with a user message.",
                    },
                },
                status=400,
            )
        return super()._messages(request)


async def test_a_claude_model_that_refuses_to_be_continued_is_asked_to_go_on_instead(
    data_dir: Path, client: httpx.AsyncClient
) -> None:
    server = NoPrefillClaude(script=ClaudeScript(text=["The garden has twelve beds. ", "Larch"]))
    server.start()
    try:
        adapter = AnthropicAdapter(api_key="k", base_url=server.base_url, client=client)
        model = ModelInfo(provider="anthropic", id="claude-fake-1", context=200_000)
        session = session_for(adapter, data_dir)
        partial = await stopped_turn(session, model)
        server.script = ClaudeScript(text=["Larch lasts ten years."])
        events = await run(session, continued(model, partial))
        sent = server.message_requests
    finally:
        server.stop()
    assert not [e for e in events if isinstance(e, Problem)]
    assert text_of(events) == "Larch lasts ten years."
    refused, asked = sent[1].json, sent[2].json
    assert refused["messages"][-1]["role"] == "assistant"
    assert refused["messages"][-1]["content"][0]["text"] == STOPPED.rstrip()
    assert asked["messages"][-1]["content"] == CONTINUE_REQUEST
    assert session.messages[-1].text == STOPPED + "Larch lasts ten years."
