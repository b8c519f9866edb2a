"""Every way a server can fail, for each wire protocol, driven through the real chat.

Each case runs one turn through ``Conversation`` → ``ApiSession`` → the real adapter → a real
loopback server that misbehaves in one way. Whatever the fault, the person must see one clear
problem with a next step, keep whatever answer had arrived (marked partial in the chat log),
and never lose what they wrote: it is in the chat log, in the transcript file, and it reaches
the model on the next turn once the server is well again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.conversation import Conversation, MessageSaved
from app.health import HealthLog
from app.store import ChatStore
from engines.base import Done, ModelInfo, Problem, ProblemKind, TextDelta, TurnProblem
from engines.context.session import ApiSession
from engines.context.transcript import load_transcript
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.http import LoopbackServer, Recorded, Reply, free_port
from tests.waits import HANG_SECONDS

PROTOCOLS = ("ollama", "openai", "anthropic")
FIRST = "Please explain how tides work, in two sentences."
SECOND = "And why are there two a day?"
PARTIAL = "Tides are "  # what the server streams before it fails part-way
HUGE = 50 * 1024 * 1024  # one line of fifty megabytes
HUGE_CAP = 16 * 1024 * 1024  # a sane reader gives up long before this
# How long the client waits for a silent server, in the cases about silence. The fake's first
# bytes come within milliseconds even on a loaded machine; after them it says nothing until
# the test ends, so whatever this is, the read times out.
SILENT_READ = 2.0
STALL = 3600.0  # "until the test ends": the server's stop() cuts the wait short
GIB = 1024**3


# --- the wire formats -------------------------------------------------------------------------


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


@dataclass(frozen=True)
class Wire:
    """What one protocol's streamed answer looks like on the wire."""

    name: str
    chat_path: str
    content_type: str

    def prelude(self) -> list[str]:
        if self.name == "anthropic":
            return [
                _sse(
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_1",
                            "type": "message",
                            "role": "assistant",
                            "content": [],
                            "usage": {"input_tokens": 12, "output_tokens": 1},
                        },
                    },
                    "message_start",
                ),
                _sse(
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                    "content_block_start",
                ),
            ]
        return []

    def text(self, piece: str) -> str:
        if self.name == "ollama":
            line = {
                "model": "fault-model:latest",
                "message": {"role": "assistant", "content": piece},
                "done": False,
            }
            return json.dumps(line) + "\n"
        if self.name == "openai":
            chunk = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            return _sse(chunk)
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": piece},
        }
        return _sse(delta, "content_block_delta")

    def ending(self) -> list[str]:
        """Everything that says "the answer is complete"."""
        if self.name == "ollama":
            final = {
                "model": "fault-model:latest",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 30,
                "eval_count": 9,
            }
            return [json.dumps(final) + "\n"]
        if self.name == "openai":
            last = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 9},
            }
            return [_sse(last), "data: [DONE]\n\n"]
        return [
            _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 9},
                },
                "message_delta",
            ),
            _sse({"type": "message_stop"}, "message_stop"),
        ]

    def malformed(self) -> str:
        if self.name == "ollama":
            return '{"model": "fault-model:latest", "message": {\n'
        return "data: {this is not json\n\n"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        if self.name == "ollama":
            return {"error": message}
        if self.name == "anthropic":
            kinds = {429: "rate_limit_error", 401: "authentication_error", 404: "not_found_error"}
            return {
                "type": "error",
                "error": {"type": kinds.get(status, "api_error"), "message": message},
            }
        return {"error": {"message": message, "type": "server_error", "code": None}}


WIRES = {
    "ollama": Wire("ollama", "/api/chat", "application/x-ndjson"),
    "openai": Wire("openai", "/v1/chat/completions", "text/event-stream"),
    "anthropic": Wire("anthropic", "/v1/messages", "text/event-stream"),
}

_HTML = (
    "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head>"
    "<body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>"
)


class _Counted:
    """Chunks handed to the server one at a time, counting how many bytes went out."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self.handed = 0
        self.finished = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.handed += len(chunk)
            yield chunk
        self.finished = True


def _huge_chunks(wire: Wire) -> Iterator[bytes]:
    yield "".join([*wire.prelude(), wire.text(PARTIAL)]).encode()
    # The line is sent in pieces as it is made: building fifty megabytes first would keep the
    # server silent long enough, on a busy machine, for the client to see a stalled server.
    before, after = wire.text("@").encode().split(b"@")
    yield before
    block = b"A" * (1024 * 1024)
    for _ in range(HUGE // len(block)):
        yield block
    yield after + "".join(wire.ending()).encode()


# --- the misbehaving server -------------------------------------------------------------------


class FaultServer(LoopbackServer):
    """Speaks one protocol; ``fault`` decides how its chat answers go wrong (None: well)."""

    def __init__(self, wire: Wire) -> None:
        super().__init__()
        self.wire = wire
        self.fault: str | None = None
        self.huge: _Counted | None = None
        self._guard = threading.Lock()

    @property
    def chat_requests(self) -> list[Recorded]:
        return self.requests_to(self.wire.chat_path)

    def handle(self, request: Recorded) -> Reply:
        path = request.path
        if self.wire.name == "ollama":
            if path == "/api/version":
                return Reply.json({"version": "0.12.6"})
            if path == "/api/ps":
                return Reply.json({"models": []})
            if path == "/api/show":
                return Reply.json(
                    {
                        "model_info": {
                            "general.architecture": "llama",
                            "llama.context_length": 8192,
                        },
                        "capabilities": ["completion"],
                    }
                )
        if request.method == "POST" and path == self.wire.chat_path:
            return self._chat()
        return super().handle(request)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        return Reply.json(self.wire.error_body(status, message), status=status, headers=headers)

    def _stream(self, pieces: list[str]) -> Reply:
        return Reply.stream(pieces, content_type=self.wire.content_type)

    def _chat(self) -> Reply:
        wire = self.wire
        fault = self.fault
        whole = [
            *wire.prelude(),
            wire.text(PARTIAL),
            wire.text("pulled by the Moon."),
            *wire.ending(),
        ]
        if fault is None:
            return self._stream(whole)
        if fault == "timeout-head":
            reply = self._stream(whole)
            reply.head_delay = STALL
            return reply
        if fault == "timeout-mid":
            # The first chunk carries the start of the answer; then the server goes quiet.
            reply = self._stream(["".join([*wire.prelude(), wire.text(PARTIAL)]), *wire.ending()])
            reply.chunk_delay = STALL
            return reply
        if fault == "429":
            return self._error(429, "Rate limit reached for requests", {"retry-after": "7"})
        if fault in ("500", "502", "503", "529"):
            return self._error(int(fault), "The server had an error while processing the request.")
        if fault == "401":
            return self._error(401, "invalid api key")
        if fault == "404":
            return self._error(404, "model 'fault-model' not found")
        if fault == "html-502":
            return Reply.text(_HTML, 502, "text/html")
        if fault == "html-200":
            return Reply.text(_HTML, 200, "text/html; charset=utf-8")
        if fault == "malformed":
            return self._stream(
                [*wire.prelude(), wire.text(PARTIAL), wire.malformed(), *wire.ending()]
            )
        if fault == "disconnect":
            reply = self._stream([*wire.prelude(), wire.text(PARTIAL), *wire.ending()])
            reply.cut_after = len(wire.prelude()) + 1
            return reply
        if fault == "deep-json":
            # JSON nested far past the interpreter's recursion limit, mid-answer.
            deep = "[" * 100_000
            line = deep + "\n" if wire.name == "ollama" else f"data: {deep}\n\n"
            return self._stream([*wire.prelude(), wire.text(PARTIAL), line, *wire.ending()])
        if fault == "empty-200":
            return self._stream([])
        if fault == "no-done":
            return self._stream([*wire.prelude(), wire.text(PARTIAL), wire.text("pulled")])
        if fault == "huge-line":
            counted = _Counted(_huge_chunks(wire))
            with self._guard:
                self.huge = counted
            return Reply(
                headers={"content-type": wire.content_type},
                chunks=counted,  # type: ignore[arg-type]  # iterated once, like a list
            )
        raise AssertionError(f"unknown fault {fault!r}")


# --- the expected outcome of each fault -------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    kinds: tuple[ProblemKind, ...]
    step: str  # NextStep.kind
    partial: bool = False  # some answer text arrived first
    server: bool = True  # a server exists to recover on the next turn


_RETRY = "retry"
EXPECT: dict[str, Expect] = {
    "refused": Expect((ProblemKind.UNREACHABLE,), "open-settings", server=False),
    "dns": Expect((ProblemKind.UNREACHABLE,), "open-settings", server=False),
    "timeout-head": Expect((ProblemKind.TIMEOUT,), _RETRY),
    "timeout-mid": Expect((ProblemKind.TIMEOUT,), _RETRY, partial=True),
    "429": Expect((ProblemKind.RATE_LIMITED,), "wait"),
    "500": Expect((ProblemKind.SERVER_ERROR,), _RETRY),
    "502": Expect((ProblemKind.SERVER_ERROR,), _RETRY),
    "503": Expect((ProblemKind.SERVER_ERROR,), _RETRY),
    "529": Expect((ProblemKind.SERVER_ERROR,), _RETRY),
    "401": Expect((ProblemKind.AUTH,), "open-settings"),
    "404": Expect((ProblemKind.MODEL_MISSING,), "open-settings"),
    "html-502": Expect((ProblemKind.SERVER_ERROR,), _RETRY),
    "html-200": Expect((ProblemKind.BROKEN_STREAM,), _RETRY),
    "malformed": Expect((ProblemKind.BROKEN_STREAM,), _RETRY, partial=True),
    "disconnect": Expect((ProblemKind.BROKEN_STREAM,), _RETRY, partial=True),
    "empty-200": Expect((ProblemKind.BROKEN_STREAM,), _RETRY),
    "no-done": Expect((ProblemKind.BROKEN_STREAM,), _RETRY, partial=True),
    "deep-json": Expect((ProblemKind.BROKEN_STREAM,), _RETRY, partial=True),
    "huge-line": Expect((ProblemKind.BROKEN_STREAM, ProblemKind.REFUSED), _RETRY, partial=True),
}
FAULTS = tuple(f for f in EXPECT if f != "huge-line")

# Known gaps, each reported with a reproduction; strict, so a fix turns them into failures
# that ask for the mark to go.
KNOWN: dict[tuple[str, str], str] = {}
CASES = [
    pytest.param(
        protocol,
        fault,
        id=f"{protocol}-{fault}",
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN[(protocol, fault)])]
        if (protocol, fault) in KNOWN
        else [],
    )
    for protocol in PROTOCOLS
    for fault in FAULTS
]


# --- one chat on one adapter ------------------------------------------------------------------


def make_adapter(protocol: str, base: str, read_timeout: float) -> ProviderAdapter:
    timeout = httpx.Timeout(read_timeout, connect=HANG_SECONDS)
    if protocol == "ollama":
        return OllamaAdapter(
            base, read_timeout=read_timeout, meta_timeout=HANG_SECONDS, memory=16 * GIB
        )
    if protocol == "openai":
        return OpenAIAdapter(
            ROWS["openai"], base_url=base + "/v1", api_key="sk-fault-test-key", timeout=timeout
        )
    return AnthropicAdapter(api_key="sk-ant-fault-test-key", base_url=base, timeout=timeout)


@dataclass
class Chat:
    data_dir: Path
    store: ChatStore
    health: HealthLog
    adapter: ProviderAdapter
    conversation: Conversation
    chat_id: str
    model: ModelInfo

    async def send(self, text: str) -> list[Any]:
        events: list[Any] = []
        async with asyncio.timeout(HANG_SECONDS):
            async for event in self.conversation.turn(text):
                events.append(event)
        return events

    def person_texts_in_transcript(self) -> str:
        loaded = load_transcript(self.data_dir, self.chat_id)
        return "\n".join(m.text for m in loaded.transcript.messages if m.role == "user")


@pytest.fixture
async def open_chat(data_dir: Path) -> AsyncIterator[Any]:
    opened: list[Chat] = []

    def start(protocol: str, base: str, read_timeout: float = HANG_SECONDS) -> Chat:
        store = ChatStore.in_dir(data_dir)
        health = HealthLog.in_dir(data_dir)
        adapter = make_adapter(protocol, base, read_timeout)
        model = ModelInfo(
            provider=adapter.name, id="fault-model", context=8192, local=protocol == "ollama"
        )
        chat = store.create_chat(model_key=model.key)
        session = ApiSession(chat_id=chat.id, data_dir=data_dir, adapters={adapter.name: adapter})
        conversation = Conversation(
            chat.id,
            store=store,
            engine=session,
            model=model,
            health=health,
            system_prompt=lambda _m: "You are Conch, a helpful assistant.",
        )
        opened.append(Chat(data_dir, store, health, adapter, conversation, chat.id, model))
        return opened[-1]

    yield start
    for chat in opened:
        await chat.conversation.aclose()
        await chat.adapter.aclose()
        chat.store.close()
        chat.health.close()


@pytest.fixture
def fault_server() -> Iterator[Any]:
    started: list[FaultServer] = []

    def start(protocol: str) -> FaultServer:
        server = FaultServer(WIRES[protocol]).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _base_for(fault: str, server: FaultServer | None) -> str:
    if fault == "refused":
        return f"http://127.0.0.1:{free_port()}"
    if fault == "dns":
        # .invalid never resolves (RFC 6761): the lookup fails here and nothing leaves.
        return "http://conch-no-such-host.invalid"
    assert server is not None
    return server.url


def _check_problem_turn(chat: Chat, events: list[Any], expect: Expect) -> TurnProblem:
    problems = [e for e in events if isinstance(e, Problem)]
    assert len(problems) == 1, f"expected one problem, got {problems}"
    assert not any(isinstance(e, Done) for e in events), "a failed turn must not also be done"
    problem = problems[0].problem
    assert problem.kind in expect.kinds, (problem.kind, problem.detail)
    assert problem.message  # a sentence for the person
    assert problem.next_step is not None, f"{problem.kind} came without a next step"
    assert problem.next_step.kind == expect.step, problem.next_step
    assert problem.next_step.label

    # The person's message was saved first, and it is still there, word for word.
    saved = [e for e in events if isinstance(e, MessageSaved)]
    assert saved and saved[0] == MessageSaved(0, "user")
    person = chat.store.message(chat.chat_id, 0)
    assert person is not None and person.role == "user" and person.text == FIRST
    assert FIRST in chat.person_texts_in_transcript()

    # What arrived is kept, marked, with the problem on it.
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    answer = chat.store.message(chat.chat_id, 1)
    assert answer is not None and answer.role == "assistant"
    assert answer.problem is not None and answer.problem.kind is problem.kind
    assert answer.text == streamed
    if expect.partial:
        assert streamed.startswith(PARTIAL)
        assert answer.partial and problem.partial
    else:
        assert streamed == ""
        assert not answer.partial
    assert MessageSaved(1, "assistant") in events
    return problem


@pytest.mark.parametrize(("protocol", "fault"), CASES)
async def test_a_fault_ends_in_a_clear_problem_and_loses_nothing(
    protocol: str,
    fault: str,
    open_chat: Any,
    fault_server: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    expect = EXPECT[fault]
    server = fault_server(protocol) if expect.server else None
    if server is not None:
        server.fault = fault
    silent = ProblemKind.TIMEOUT in expect.kinds
    chat = open_chat(protocol, _base_for(fault, server), SILENT_READ if silent else HANG_SECONDS)
    caplog.set_level(logging.WARNING)

    events = await chat.send(FIRST)
    problem = _check_problem_turn(chat, events, expect)

    if problem.kind is ProblemKind.RATE_LIMITED:
        assert problem.next_step is not None and problem.next_step.seconds == pytest.approx(7)
    if fault.startswith("html"):
        assert "<html" not in problem.detail.lower()  # a web page is described, not dumped
    # An engine that raised instead of reporting would be logged as "engine failed".
    assert not [r for r in caplog.records if r.name == "conch.conversation"], caplog.text

    if server is None:
        return
    # The server is well again: the next turn is answered, and the model reads the message
    # the failed turn could not deliver.
    server.fault = None
    before = len(server.chat_requests)
    events = await chat.send(SECOND)
    assert any(isinstance(e, Done) for e in events), events
    assert not any(isinstance(e, Problem) for e in events)
    sent = server.chat_requests[before:]
    assert len(sent) == 1
    body = sent[0].body.decode()
    assert json.dumps(FIRST)[1:-1] in body and json.dumps(SECOND)[1:-1] in body
    texts = [m.text for m in chat.store.messages(chat.chat_id)]
    assert texts[0] == FIRST and SECOND in texts


@pytest.mark.parametrize(
    "protocol",
    [
        "ollama",
        pytest.param("openai"),
        pytest.param("anthropic"),
    ],
)
async def test_a_fifty_megabyte_line_is_cut_off_not_buffered(
    protocol: str, open_chat: Any, fault_server: Any
) -> None:
    server = fault_server(protocol)
    server.fault = "huge-line"
    chat = open_chat(protocol, server.url)
    try:
        events = await chat.send(FIRST)
    except TimeoutError:
        handed = server.huge.handed if server.huge else 0
        pytest.fail(
            f"the turn was still reading after {HANG_SECONDS:.0f} s; the server had sent "
            f"{handed / 2**20:.0f} MB of one line"
        )
    _check_problem_turn(chat, events, EXPECT["huge-line"])
    answer = chat.store.message(chat.chat_id, 1)
    assert answer is not None and len(answer.text) < HUGE_CAP
    assert server.huge is not None and not server.huge.finished, (
        f"the client read the whole {server.huge.handed / 2**20:.0f} MB line"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stop_mid_answer_keeps_the_start_and_the_message(
    protocol: str, open_chat: Any, fault_server: Any
) -> None:
    server = fault_server(protocol)
    server.fault = "timeout-mid"
    chat = open_chat(protocol, server.url)
    arrived = asyncio.Event()
    seen: list[Any] = []

    async def consume() -> None:
        async for event in chat.conversation.turn(FIRST):
            seen.append(event)
            if isinstance(event, TextDelta):
                arrived.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(arrived.wait(), HANG_SECONDS)
    task.cancel()  # what the window's Stop button does
    with pytest.raises(asyncio.CancelledError):
        await task

    person = chat.store.message(chat.chat_id, 0)
    answer = chat.store.message(chat.chat_id, 1)
    assert person is not None and person.text == FIRST
    assert answer is not None and answer.text == PARTIAL and answer.partial
    assert answer.problem is not None and answer.problem.kind is ProblemKind.CANCELLED
    assert FIRST in chat.person_texts_in_transcript()

    server.fault = None
    events = await chat.send(SECOND)
    assert any(isinstance(e, Done) for e in events)
    assert json.dumps(FIRST)[1:-1] in server.chat_requests[-1].body.decode()


class _BuggyAdapter:
    """An adapter with a bug: it raises something that is not a ProviderError mid-answer."""

    name = "buggy"
    label = "Buggy"
    local = True

    async def list_models(self) -> list[ModelInfo]:
        return []

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        yield TextDelta(text=PARTIAL)
        raise KeyError("choices")

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


@pytest.mark.allow_error_log  # the engine's bug is logged with its traceback
async def test_an_adapter_bug_still_ends_in_a_problem_with_a_next_step(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    adapter = _BuggyAdapter()
    model = ModelInfo(provider="buggy", id="m", context=8192, local=True)
    chat = store.create_chat(model_key=model.key)
    session = ApiSession(chat_id=chat.id, data_dir=data_dir, adapters={"buggy": adapter})
    conversation = Conversation(chat.id, store=store, engine=session, model=model)
    try:
        events = [e async for e in conversation.turn(FIRST)]
    finally:
        await conversation.aclose()
    problems = [e.problem for e in events if isinstance(e, Problem)]
    saved = store.messages(chat.id)
    store.close()
    assert len(problems) == 1 and problems[0].kind is ProblemKind.BROKEN_STREAM
    assert saved[0].text == FIRST
    assert saved[1].text == PARTIAL and saved[1].partial
    assert problems[0].next_step is not None and problems[0].next_step.kind == "retry"
