"""A server that holds an answer open, or points elsewhere, driven through the real chat.

Each case runs turns through ``Conversation`` → ``ApiSession`` → the real adapter → a loopback
server. A stream kept open by keep-alives ends in one clear problem, the text that arrived is
kept in the chat log (marked partial), what the person wrote is kept, and the next turn works
once the server is well. A redirect says, in one sentence, that the address is wrong.

The deadline in the keep-alive case is tiny on purpose: the server sends keep-alives forever,
so a slow machine can only make the timeout come later, never make the test pass or fail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.conversation import Conversation
from app.health import HealthLog
from app.store import ChatStore
from engines.base import Done, ModelInfo, Problem, ProblemKind, TextDelta
from engines.context.session import ApiSession
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.deadlines import Deadlines
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.keepalive_server import PARTIAL, PROTOCOLS, KeepAliveServer

FIRST = "Please explain how tides work, in two sentences."
SECOND = "And why are there two a day?"
HANG_GUARD = 30.0  # seconds for a whole turn; each ends in well under one
GIB = 1024**3
# Only the between-events deadline is small: the first word and the whole answer get all the
# time a loaded machine could need.
DEADLINES = Deadlines(first_event=HANG_GUARD, between_events=0.2, whole_answer=1e9)


def make_adapter(protocol: str, base: str) -> ProviderAdapter:
    timeout = httpx.Timeout(HANG_GUARD, connect=5.0)
    if protocol == "ollama":
        return OllamaAdapter(
            base, read_timeout=HANG_GUARD, meta_timeout=5.0, memory=16 * GIB, deadlines=DEADLINES
        )
    if protocol == "openai":
        return OpenAIAdapter(
            ROWS["openai"],
            base_url=base,
            api_key="sk-stream-deadline-key",
            timeout=timeout,
            deadlines=DEADLINES,
        )
    return AnthropicAdapter(
        api_key="sk-ant-stream-deadline-key", base_url=base, timeout=timeout, deadlines=DEADLINES
    )


@dataclass
class Chat:
    store: ChatStore
    health: HealthLog
    adapter: ProviderAdapter
    conversation: Conversation
    chat_id: str

    async def send(self, text: str) -> list[Any]:
        async with asyncio.timeout(HANG_GUARD):
            return [event async for event in self.conversation.turn(text)]


@pytest.fixture
def servers() -> Iterator[list[KeepAliveServer]]:
    started: list[KeepAliveServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
async def chats() -> AsyncIterator[list[Chat]]:
    opened: list[Chat] = []
    yield opened
    for chat in opened:
        await chat.conversation.aclose()
        await chat.adapter.aclose()
        chat.store.close()
        chat.health.close()


def open_chat(
    data_dir: Path, opened: list[Chat], started: list[KeepAliveServer], protocol: str
) -> tuple[Chat, KeepAliveServer]:
    server = KeepAliveServer(protocol).start()
    started.append(server)
    store = ChatStore.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    adapter = make_adapter(protocol, server.base_url)
    model = ModelInfo(
        provider=adapter.name, id="slow-model", context=8192, local=protocol == "ollama"
    )
    record = store.create_chat(model_key=model.key)
    session = ApiSession(chat_id=record.id, data_dir=data_dir, adapters={adapter.name: adapter})
    conversation = Conversation(
        record.id,
        store=store,
        engine=session,
        model=model,
        health=health,
        system_prompt=lambda _m: "You are Conch, a helpful assistant.",
    )
    opened.append(Chat(store, health, adapter, conversation, record.id))
    return opened[-1], server


def only_problem(events: list[Any]) -> Problem:
    problems = [e for e in events if isinstance(e, Problem)]
    assert len(problems) == 1, problems
    assert not any(isinstance(e, Done) for e in events)
    return problems[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_end_the_turn_and_the_start_of_the_answer_is_kept(
    protocol: str, data_dir: Path, chats: list[Chat], servers: list[KeepAliveServer]
) -> None:
    chat, server = open_chat(data_dir, chats, servers, protocol)
    server.mode = "keep-alive"

    events = await chat.send(FIRST)

    problem = only_problem(events).problem
    assert problem.kind is ProblemKind.TIMEOUT
    assert "sent nothing new" in problem.message
    assert problem.next_step is not None and problem.next_step.kind == "retry"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == PARTIAL
    person = chat.store.message(chat.chat_id, 0)
    answer = chat.store.message(chat.chat_id, 1)
    assert person is not None and person.text == FIRST
    assert answer is not None and answer.text == PARTIAL and answer.partial
    assert answer.problem is not None and answer.problem.kind is ProblemKind.TIMEOUT

    # The server is well again: the next turn is answered, and the model reads both messages.
    server.mode = None
    before = len(server.requests_to(server.chat_path))
    events = await chat.send(SECOND)
    assert any(isinstance(e, Done) for e in events), events
    sent = server.requests_to(server.chat_path)[before:]
    assert len(sent) == 1
    body = sent[0].body.decode()
    assert json.dumps(FIRST)[1:-1] in body and json.dumps(SECOND)[1:-1] in body


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_redirect_says_the_address_is_wrong_and_keeps_the_message(
    protocol: str, data_dir: Path, chats: list[Chat], servers: list[KeepAliveServer]
) -> None:
    chat, server = open_chat(data_dir, chats, servers, protocol)
    server.mode = "redirect"

    events = await chat.send(FIRST)

    problem = only_problem(events).problem
    sentence = (
        f"The server at {server.url} answered with a redirect to https://login.example.net/sso; "
        "check the server address in Settings."
    )
    assert problem.kind is ProblemKind.UNREACHABLE
    assert problem.message == sentence
    assert problem.next_step is not None and problem.next_step.kind == "open-settings"
    person = chat.store.message(chat.chat_id, 0)
    assert person is not None and person.text == FIRST
    answer = chat.store.message(chat.chat_id, 1)
    assert answer is not None and answer.problem is not None
    assert answer.problem.message == sentence
    assert any(note.text == sentence for note in chat.health.notes(topic="unreachable"))
