"""One local server, one piece of work at a time: learning never cuts a turn short.

The server here is a real HTTP server on 127.0.0.1 that writes down, in order, when each
request arrives, when a streamed answer is finished and when a client hangs up, so the tests
assert the order the server saw, not timings.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from engines.base import Done, Message, TextDelta
from engines.local.gate import GatedAdapter, GaveWayError, background, gated
from engines.providers.base import ChatRequest
from engines.providers.openai import ROWS, OpenAIAdapter

HANG_GUARD = 60.0  # far beyond what any step here needs on a loaded machine


def _sse(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return f"data: {json.dumps({'choices': [choice]})}\n\n".encode()


class RecordingServer:
    """Answers "BG" requests with one piece and then nothing until the client hangs up, and
    other requests with a whole short answer once ``release`` is set."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.changed = asyncio.Condition()
        self.release = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def note(self, what: str) -> None:
        async with self.changed:
            self.seen.append(what)
            self.changed.notify_all()

    async def until(self, what: str) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: what in self.seen), HANG_GUARD)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> RecordingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.release.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode().split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        body = json.loads(await reader.readexactly(length))
        who = "BG" if "BG" in json.dumps(body["messages"]) else "FG"
        await self.note(f"{who} arrived")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        if who == "BG":
            writer.write(_sse("thinking about memories"))
            await writer.drain()
            await reader.read()  # b"" once the client hangs up
            await self.note("BG hung up")
        else:
            writer.write(_sse("Hello"))
            await writer.drain()
            await self.release.wait()
            writer.write(_sse(" there", finish="stop") + b"data: [DONE]\n\n")
            await writer.drain()
            await self.note("FG finished")
        writer.close()


def _request(text: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message(role="user", text=text),), window=8192)


async def _collect(adapter: GatedAdapter, text: str) -> str:
    parts: list[str] = []
    async for event in adapter.stream(_request(text)):
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, Done):
            break
    return "".join(parts)


@pytest.fixture
async def server() -> AsyncIterator[RecordingServer]:
    async with RecordingServer() as s:
        yield s


def _adapter(server: RecordingServer) -> GatedAdapter:
    inner = OpenAIAdapter(ROWS["local"], base_url=server.url)
    adapter = gated(inner)
    assert isinstance(adapter, GatedAdapter)
    return adapter


async def test_a_turn_stops_background_work_before_its_request_reaches_the_server(
    server: RecordingServer,
) -> None:
    adapter = _adapter(server)

    async def learn() -> str:
        with background():
            return await _collect(adapter, "BG: what should be remembered?")

    learning = asyncio.create_task(learn())
    await server.until("BG arrived")
    turn = asyncio.create_task(_collect(adapter, "FG: hello"))
    await server.until("FG arrived")
    server.release.set()
    assert await asyncio.wait_for(turn, HANG_GUARD) == "Hello there"
    with pytest.raises(GaveWayError):
        await asyncio.wait_for(learning, HANG_GUARD)
    # The server was free when the turn's request came: the learning request had hung up.
    assert server.seen.index("BG hung up") < server.seen.index("FG arrived")
    assert adapter.gate.gave_way == 1
    await adapter.aclose()


async def test_background_work_waits_until_the_turn_has_finished(server: RecordingServer) -> None:
    adapter = _adapter(server)
    turn = asyncio.create_task(_collect(adapter, "FG: hello"))
    await server.until("FG arrived")

    async def title() -> str:
        with background():
            return await _collect(adapter, "FG-shaped title request")

    titling = asyncio.create_task(title())
    # The title request is queued behind the turn: the server sees only the turn until it ends.
    assert adapter.gate.busy
    server.release.set()
    assert await asyncio.wait_for(turn, HANG_GUARD) == "Hello there"
    assert await asyncio.wait_for(titling, HANG_GUARD) == "Hello there"
    assert server.seen == ["FG arrived", "FG finished", "FG arrived", "FG finished"]
    await adapter.aclose()


async def test_two_background_requests_take_turns(server: RecordingServer) -> None:
    adapter = _adapter(server)
    server.release.set()

    async def ask() -> str:
        with background():
            return await _collect(adapter, "FG-shaped")

    answers = await asyncio.wait_for(asyncio.gather(ask(), ask()), HANG_GUARD)
    assert list(answers) == ["Hello there", "Hello there"]
    assert server.seen == ["FG arrived", "FG finished", "FG arrived", "FG finished"]
    await adapter.aclose()


def test_a_company_api_is_not_gated() -> None:
    inner = OpenAIAdapter(ROWS["openai"], api_key="sk-test")
    assert gated(inner) is inner
    local = gated(OpenAIAdapter(ROWS["local"], base_url="http://127.0.0.1:9/v1"))
    assert isinstance(local, GatedAdapter) and gated(local) is local


async def test_background_work_its_caller_cancels_hangs_up(server: RecordingServer) -> None:
    adapter = _adapter(server)
    first_words = asyncio.Event()

    async def summarise() -> None:
        with background():
            async for event in adapter.stream(_request("BG: a summary written ahead")):
                if isinstance(event, TextDelta):
                    first_words.set()  # then it waits for more, which never comes

    writing = asyncio.create_task(summarise())
    await asyncio.wait_for(first_words.wait(), HANG_GUARD)
    writing.cancel()  # the chat closed, or the person sent: the caller stops waiting
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(writing, HANG_GUARD)
    await server.until("BG hung up")
    await adapter.aclose()
