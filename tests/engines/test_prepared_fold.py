"""Prepared folds: the next fold's summary is written in the background before it is needed.

Real adapters and the real summariser against loopback servers on this computer's flavour
(llama-cpp-python), behind the server gate as the app wires them: the summary is written
between turns, the fold turn sends it without summarising, requests stay byte-identical between
folds, and a turn sent while a summary is being written stops it and is not held up.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench._scripted import Answer, ScriptedAdapter
from engines.base import Compacted, Done, Event, ModelInfo, Note, TurnInput
from engines.context.prepare import WARM_TOKENS
from engines.context.session import SUMMARY_OPEN, ApiSession, summary_block
from engines.context.summarise import ModelSummariser
from engines.local.gate import GatedAdapter, gated, reads_for_the_chat
from engines.providers.base import ChatRequest, ProviderAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.engines.test_session import FakeSummariser, ending, only
from tests.engines.test_session import run as run_scripted
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer

CHAT = "chat-prepared"
SYSTEM = "You are Conch, a helpful assistant."
WINDOW = 8_192
MODEL = ModelInfo(provider="local", id="fake-model", label="Fake", context=WINDOW, local=True)
HANG_GUARD = 60.0
# About 600 tokens a message: an 8K model folds after about ten turns.
NOTE = "the watering rota needs another look because the soil dries out fast. "


def is_summary(body: Any) -> bool:
    messages = body.get("messages") if isinstance(body, dict) else None
    users = [m.get("content") for m in messages or [] if m.get("role") == "user"]
    return bool(users) and str(users[0]).startswith("<summary-so-far>")


def is_warm(body: Any) -> bool:
    """A request sent ahead only so the server evaluates its prompt (a one-token answer)."""
    return isinstance(body, dict) and body.get("max_tokens") == WARM_TOKENS


def sse(text: str) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({'choices': [choice]})}\n\n"

    return [chunk({"role": "assistant", "content": text}), chunk({}, "stop"), "data: [DONE]\n\n"]


class SummaryWritingServer(OpenAIStyleServer):
    """llama-cpp-python's flavour, answering summary requests with a numbered summary."""

    def __init__(self) -> None:
        super().__init__("local")
        self.summaries: list[str] = []

    def _chat(self, request: Recorded) -> Reply:
        body = request.json or {}
        if not is_summary(body):
            return super()._chat(request)
        with self.lock:
            text = (
                f"Summary {len(self.summaries) + 1}: the person is sorting out the watering "
                "rota of the garden because the soil dries out fast."
            )
            self.summaries.append(text)
        return Reply.stream(sse(text))

    @property
    def summary_requests(self) -> list[Recorded]:
        return [r for r in self.chat_requests if is_summary(r.json)]

    @property
    def turn_requests(self) -> list[Recorded]:
        return [r for r in self.chat_requests if not is_summary(r.json) and not is_warm(r.json)]

    @property
    def warm_requests(self) -> list[Recorded]:
        return [r for r in self.chat_requests if is_warm(r.json)]


@pytest.fixture
def writer() -> Iterator[SummaryWritingServer]:
    server = SummaryWritingServer().start()
    yield server
    server.stop()


class SlotMarks(OpenAIAdapter):
    """The loopback adapter, noting for each request whether it was marked as reading the
    chat's own next prompt (the bundled runtime then sends it to the chat's slot)."""

    marked: list[tuple[list[str], bool]]

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.marked.append(([m.text for m in request.messages], reads_for_the_chat()))
        async for event in super().stream(request):
            yield event


def session_on(adapter: ProviderAdapter, data_dir: Path) -> ApiSession:
    adapters = {adapter.name: adapter}
    return ApiSession(
        chat_id=CHAT, data_dir=data_dir, adapters=adapters, summariser=ModelSummariser(adapters)
    )


async def run(session: ApiSession, seq: int, text: str) -> list[Event]:
    turn = TurnInput(chat_id=CHAT, seq=seq, text=text, model=MODEL, system=SYSTEM)
    return [e async for e in session.turn(turn)]


async def test_the_fold_sends_the_summary_written_before_it(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path
) -> None:
    adapter = gated(OpenAIAdapter(ROWS["local"], base_url=writer.base_url, client=client))
    session = session_on(adapter, data_dir)
    fold_turn: int | None = None
    during: list[int] = []  # summary requests the server got while each turn ran
    for i in range(14):
        before = len(writer.summary_requests)
        events = await run(session, 2 * i, f"Note {i}: " + NOTE * 33)
        during.append(len(writer.summary_requests) - before)
        assert isinstance(ending(events), Done)
        if only(events, Compacted) and fold_turn is None:
            fold_turn = i
            (compacted,) = only(events, Compacted)
            break
        # The person reads and types: the next fold's summary is written meanwhile.
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert fold_turn is not None, "the chat never folded"

    # The fold turn asked for no summary: it was written before the turn, between turns.
    assert during[fold_turn] == 0
    assert writer.summary_requests and sum(during) == 0
    assert compacted.summarised
    # The request sent at the fold carries exactly the summary last written ahead.
    latest = writer.summaries[-1]
    assert latest in compacted.summary  # the model's words, in the summary's four parts
    fold_request = writer.turn_requests[fold_turn].json
    first_user = next(m for m in fold_request["messages"] if m["role"] == "user")
    assert first_user["content"].startswith(summary_block(compacted.summary))
    assert first_user["content"].startswith(SUMMARY_OPEN) and latest in first_user["content"]

    # Until the fold, every request started with the same bytes as the one before: the
    # summary written ahead was held, not sent.
    turns = [r.json["messages"] for r in writer.turn_requests]
    for k in range(1, fold_turn):
        assert turns[k][: len(turns[k - 1])] == turns[k - 1], k
    assert not any(SUMMARY_OPEN in m["content"] for t in turns[:fold_turn] for m in t)
    await adapter.aclose()


async def test_the_request_the_fold_sends_is_read_by_the_server_before_the_fold(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path
) -> None:
    inner = SlotMarks(ROWS["local"], base_url=writer.base_url, client=client)
    inner.marked = []
    adapter = gated(inner)
    session = session_on(adapter, data_dir)
    fold_request: list[dict[str, Any]] | None = None
    for i in range(14):
        events = await run(session, 2 * i, f"Note {i}: " + NOTE * 33)
        assert isinstance(ending(events), Done)
        if only(events, Compacted):
            fold_request = writer.turn_requests[-1].json["messages"]
            break
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert fold_request is not None, "the chat never folded"
    # Between the summary written ahead and the fold, the server was sent the fold's request
    # without the person's next message: the fold turn's prompt starts with what it read.
    # (Two were sent: the fold that keeps the turns after the summary, and the fold that
    # drops those too and keeps only their facts.)
    ahead = [r.json["messages"] for r in writer.warm_requests]
    latest = writer.summaries[-1]

    def holds(m: list[dict[str, Any]]) -> bool:
        return str(m[1]["content"]).startswith(SUMMARY_OPEN) and latest in m[1]["content"]

    keeping = next(m for m in reversed(ahead) if len(m) > 2 and holds(m))
    # the system prompt and the summary, waiting for the next message
    alone = next(m for m in reversed(ahead) if len(m) == 2 and holds(m))
    # The last one read is the chat as it was, in the chat's slot (the bundled runtime's), so
    # a turn that does not fold finds its prefix there; just before it, in the same slot, the
    # fold keeping the turns after the summary, kept in the server's cache of prompts.
    assert not any(SUMMARY_OPEN in m["content"] for m in ahead[-1])
    assert ahead[-1][:-1] == writer.turn_requests[-2].json["messages"]
    assert ahead[-1][-1]["role"] == "assistant"
    assert ahead[-2] == keeping
    for_the_chat = [texts for texts, marked in inner.marked if marked]
    assert for_the_chat[-2:] == [[m["content"] for m in r][1:] for r in ahead[-2:]]
    # The fold keeping only the summary goes to the slot of background work.
    assert not any(marked for texts, marked in inner.marked if texts == [alone[1]["content"]])
    # The fold turn sends, byte for byte, the last request read in the chat's slot and the
    # person's new message after it.
    assert fold_request[:-1] == keeping
    await adapter.aclose()


async def test_no_prompt_is_read_ahead_when_that_is_turned_off(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path
) -> None:
    adapter = gated(OpenAIAdapter(ROWS["local"], base_url=writer.base_url, client=client))
    session = session_on(adapter, data_dir)
    session.warm_folds = False
    for i in range(14):
        events = await run(session, 2 * i, f"Note {i}: " + NOTE * 33)
        if only(events, Compacted):
            break
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert writer.summary_requests and not writer.warm_requests
    await adapter.aclose()


async def test_on_this_computer_the_fold_never_waits_for_what_the_summary_lacks(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path
) -> None:
    adapter = gated(OpenAIAdapter(ROWS["local"], base_url=writer.base_url, client=client))
    session = session_on(adapter, data_dir)
    i = 0
    while session.prepared is None:
        text = f"Note {i}: see https://example.org/note-{i} " + NOTE * 20
        assert isinstance(ending(await run(session, 2 * i, text)), Done)
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
        i += 1
        assert i < 30, "no summary was ever prepared"
    written = writer.summary_requests[-1].json["messages"][-1]["content"]
    covered = max(k for k in range(i) if f"Note {k}:" in written)
    # A pasted page, far bigger than anything before: the fold drops more than was foreseen.
    asked = len(writer.summary_requests)
    events = await run(session, 2 * i, "Please read this page:\n" + NOTE * 90)
    assert isinstance(ending(events), Done)
    (compacted,) = only(events, Compacted)
    assert len(writer.summary_requests) == asked  # no summary written inside the turn
    dropped = compacted.first_kept_seq // 2
    assert dropped > covered + 1
    # The summary written ahead, with the facts of the turns it lacks kept word for word.
    assert writer.summaries[-1] in compacted.summary
    for k in range(covered + 1, dropped):
        assert f"https://example.org/note-{k}" in compacted.summary
    # Those turns are summarised after the turn, in the background.
    await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    late = writer.summary_requests[-1].json["messages"][-1]["content"]
    assert len(writer.summary_requests) == asked + 1
    assert all(f"Note {k}:" in late for k in range(covered + 1, dropped))
    await adapter.aclose()


class HangingSummaryServer:
    """Answers turns at once and summary requests with one piece and then nothing until the
    client hangs up; writes down, in order, when each arrives and when a client hangs up."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.changed = asyncio.Condition()
        self._server: asyncio.Server | None = None

    async def note(self, what: str) -> None:
        async with self.changed:
            self.seen.append(what)
            self.changed.notify_all()

    async def until(self, what: str, times: int = 1) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.seen.count(what) >= times), HANG_GUARD
            )

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> HangingSummaryServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = 0
        for line in head.split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        raw = await reader.readexactly(length) if length else b""
        if "/chat/completions" not in head.split("\r\n", 1)[0]:
            writer.write(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            await writer.drain()
            writer.close()
            return
        body = json.loads(raw)
        ok = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        writer.write(ok)
        if is_summary(body):
            await self.note("summary arrived")
            writer.write(sse("Summary: the person")[0].encode())
            await writer.drain()
            await reader.read()  # b"" once the client hangs up
            await self.note("summary hung up")
        else:
            await self.note("turn arrived")
            writer.write("".join(sse("Here is my answer.")).encode())
            await writer.drain()
        writer.close()


async def test_a_turn_sent_while_a_summary_is_written_stops_it_and_is_not_held_up(
    client: httpx.AsyncClient, data_dir: Path
) -> None:
    async with HangingSummaryServer() as server:
        adapter = gated(OpenAIAdapter(ROWS["local"], base_url=server.url, client=client))
        assert isinstance(adapter, GatedAdapter)
        session = session_on(adapter, data_dir)
        seq = 0
        while not session.preparing:
            events = await run(session, seq, f"Note {seq}: " + NOTE * 33)
            assert isinstance(ending(events), Done)
            seq += 2
            assert seq < 40, "no summary was ever prepared"
        await server.until("summary arrived")

        # The person sends while the summary is being written (it would never finish).
        events = await asyncio.wait_for(run(session, seq, "A quick question."), HANG_GUARD)
        assert isinstance(ending(events), Done)
        assert "".join(getattr(e, "text", "") for e in events if e.kind == "text") == (
            "Here is my answer."
        )
        # The summary's request hung up before the turn's request reached the server.
        last_turn = len(server.seen) - 1 - server.seen[::-1].index("turn arrived")
        assert server.seen.index("summary hung up") < last_turn
        # After the turn the summary is begun again; closing the chat stops it, hung up too.
        assert session.preparing
        await server.until("summary arrived", 2)
        await session.aclose()
        assert not session.preparing
        await server.until("summary hung up", server.seen.count("summary arrived"))
        await adapter.aclose()


async def test_a_prepared_summary_that_no_longer_matches_is_thrown_away_and_health_hears(
    data_dir: Path,
) -> None:
    adapter = ScriptedAdapter(default=Answer("a" * 1_600))
    summariser = FakeSummariser()
    session = ApiSession(
        chat_id="chat-1", data_dir=data_dir, adapters={"openai": adapter}, summariser=summariser
    )
    i = 0
    while session.prepared is None:
        await run_scripted(session, 2 * i, f"Question {i}: " + "q" * 1_200)
        await session.wait_prepared()
        i += 1
    covered = summariser.calls[-1][0]
    assert covered[0].text.startswith("Question 0:")
    # The person edits their second message: the turns the summary covers are not the chat's.
    events = await run_scripted(session, 2, "Question 1, asked differently: " + "r" * 1_200)
    events += await run_scripted(session, 4, "Question 2: " + "q" * 1_200)
    notes = [n for n in only(events, Note) if n.topic == "summary-failed"]
    assert notes and "thrown away" in notes[0].text
    assert session.prepared is None


def _read_ahead_first(
    request: dict[str, Any], ahead: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The request sent ahead that ``request`` begins with (its last message may be the start
    of the request's message at that place: the summary before the next one), if any."""
    messages = request["messages"]
    for sent in ahead:
        before = sent["messages"]
        n = len(before)
        if n > len(messages) or messages[: n - 1] != before[: n - 1]:
            continue
        if messages[n - 1]["role"] == before[n - 1]["role"] and str(
            messages[n - 1]["content"]
        ).startswith(str(before[n - 1]["content"])):
            return sent
    return None


def _starts_with_one_read_ahead(request: dict[str, Any], ahead: list[dict[str, Any]]) -> bool:
    return _read_ahead_first(request, ahead) is not None


@pytest.mark.parametrize(
    "pages",
    [
        # Two pasted pages in a row: the fold the second brings goes deeper than the summary
        # written ahead foresaw for a message of the usual size.
        {4: 55, 5: 55},
        # A page, then a longer one: deeper even than a page as long as the last would take.
        {2: 50, 4: 70},
        # A page now and then: the next one comes after more turns than the few recent ones
        # the next message's size is taken from.
        {0: 60},
    ],
    ids=["same-size", "longer", "now-and-then"],
)
async def test_every_fold_even_after_a_pasted_page_was_read_ahead(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path, pages: dict[int, int]
) -> None:
    adapter = gated(OpenAIAdapter(ROWS["local"], base_url=writer.base_url, client=client))
    session = session_on(adapter, data_dir)
    folds: list[bool] = []
    for i in range(24):
        asked = len(writer.chat_requests)
        size = pages.get(i % 6, 20)  # now and then a pasted page
        text = f"Note {i}: see https://example.org/note-{i} " + NOTE * size
        events = await run(session, 2 * i, text)
        assert isinstance(ending(events), Done)
        if only(events, Compacted) and writer.summaries:
            fold = writer.turn_requests[-1].json
            ahead = [r.json for r in writer.warm_requests if writer.chat_requests.index(r) < asked]
            folds.append(_starts_with_one_read_ahead(fold, ahead[-3:]))
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert len(folds) >= 2
    assert all(folds), folds
    await adapter.aclose()


class FirstSummaryOffTopicServer(SummaryWritingServer):
    """A small model's way: its first ``off_topic`` summaries are about something else (turned
    down), the next ones are fine."""

    def __init__(self, off_topic: int = 1) -> None:
        super().__init__()
        self.off_topic = off_topic
        self.turned_down = 0

    def _chat(self, request: Recorded) -> Reply:
        if is_summary(request.json or {}) and self.turned_down < self.off_topic:
            with self.lock:
                self.turned_down += 1
            return Reply.stream(
                sse(
                    "Quantum chromodynamics describes quarks and gluons; asteroids orbit "
                    "Jupiter; medieval cathedrals used flying buttresses for support."
                )
            )
        return super()._chat(request)


async def _until_fold(
    session: ApiSession, server: FirstSummaryOffTopicServer
) -> tuple[Compacted, list[int], int]:
    """Notes sent until the chat folds, the person reading each answer: the fold, the summary
    requests sent during each turn, and how many requests the server had before the fold turn."""
    during: list[int] = []
    for i in range(14):
        before = len(server.summary_requests)
        asked = len(server.chat_requests)
        events = await run(session, 2 * i, f"Note {i}: " + NOTE * 33)
        during.append(len(server.summary_requests) - before)
        assert isinstance(ending(events), Done)
        if only(events, Compacted):
            (compacted,) = only(events, Compacted)
            return compacted, during, asked
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    raise AssertionError("the chat never folded")


async def test_a_summary_turned_down_while_written_ahead_is_written_again_before_the_fold(
    client: httpx.AsyncClient, data_dir: Path
) -> None:
    server = FirstSummaryOffTopicServer().start()
    try:
        adapter = gated(OpenAIAdapter(ROWS["local"], base_url=server.base_url, client=client))
        session = session_on(adapter, data_dir)
        compacted, during, _asked = await _until_fold(session, server)
        assert server.turned_down == 1
        # The fold turn did not write its summary while the person waited: the second try,
        # written ahead, is the one it sent.
        assert during[-1] == 0
        assert compacted.summarised
        assert server.summaries[-1] in compacted.summary
        await adapter.aclose()
    finally:
        server.stop()


async def test_the_first_fold_finds_its_summary_even_when_both_first_tries_were_turned_down(
    client: httpx.AsyncClient, data_dir: Path
) -> None:
    # Both tries of the first summary written ahead are turned down (SmolLM2 at 2,048 did
    # this before its first fold): a chat that keeps growing still gets one more try before
    # the fold, so the fold turn sends a model's summary whose request the server has read.
    server = FirstSummaryOffTopicServer(off_topic=2).start()
    try:
        adapter = gated(OpenAIAdapter(ROWS["local"], base_url=server.base_url, client=client))
        session = session_on(adapter, data_dir)
        compacted, during, asked = await _until_fold(session, server)
        assert server.turned_down == 2
        assert during[-1] == 0  # nothing written while the person waited
        assert compacted.summarised and not compacted.writing
        assert server.summaries[-1] in compacted.summary
        fold = server.turn_requests[-1].json
        ahead = [r.json for r in server.warm_requests if server.chat_requests.index(r) < asked]
        assert _starts_with_one_read_ahead(fold, ahead)
        await adapter.aclose()
    finally:
        server.stop()


def _same_but_the_answer(fold: dict[str, Any], ahead: dict[str, Any]) -> bool:
    """Whether ``fold`` is ``ahead`` with the person's next message added: the same bytes
    before it (``ahead`` asked for a one-token answer only)."""
    if fold["messages"][:-1] != ahead["messages"]:
        return False
    rest = ("messages", "max_tokens")
    return {k: v for k, v in fold.items() if k not in rest} == {
        k: v for k, v in ahead.items() if k not in rest
    }


async def test_a_fold_whose_summaries_were_all_turned_down_sends_a_request_read_ahead(
    client: httpx.AsyncClient, data_dir: Path
) -> None:
    # Every summary written ahead is turned down (a small model's copy of the chat, another
    # topic): the fold keeps the facts of what it drops on the summary before, and that
    # request too was read ahead, in the chat's slot, while the person read the last answer.
    server = FirstSummaryOffTopicServer(off_topic=1_000).start()
    try:
        inner = SlotMarks(ROWS["local"], base_url=server.base_url, client=client)
        inner.marked = []
        session = session_on(gated(inner), data_dir)
        compacted, during, asked = await _until_fold(session, server)
        assert server.turned_down >= 2 and not server.summaries
        assert during[-1] == 0  # nothing written while the person waited
        # No model summarised it: one is still written after the turn, as before.
        assert not compacted.summarised and compacted.writing
        fold = server.turn_requests[-1].json
        ahead = [r.json for r in server.warm_requests if server.chat_requests.index(r) < asked]
        (same,) = [a for a in ahead if _same_but_the_answer(fold, a)]
        first = fold["messages"][1]["content"]
        assert first.startswith(summary_block(compacted.summary))
        read_in_chat_slot = [texts for texts, marked in inner.marked if marked]
        assert [m["content"] for m in same["messages"]][1:] in read_in_chat_slot[-3:]
        await session.aclose()
    finally:
        server.stop()


async def test_at_2048_tokens_a_fold_that_keeps_nothing_was_read_ahead_even_with_no_summary(
    writer: SummaryWritingServer, client: httpx.AsyncClient, data_dir: Path
) -> None:
    # At 2,048 tokens a fold often drops every turn the chat has: right after another fold
    # (a message bigger than the one turn left), or before a summary was written ahead. Its
    # summary is the chat's with the facts of what it drops, known before the turn: so its
    # request is read ahead too, in the chat's slot.
    small = MODEL.model_copy(update={"context": 2_048})
    inner = SlotMarks(ROWS["local"], base_url=writer.base_url, client=client)
    inner.marked = []
    adapter = gated(inner)
    session = session_on(adapter, data_dir)
    sizes = [6, 6, 14, 6, 20, 6, 6, 22, 6, 14, 26, 6, 6, 24]
    folds: list[bool] = []
    for i, size in enumerate(sizes):
        asked = len(writer.chat_requests)
        text = f"Note {i}: see https://example.org/note-{i} " + NOTE * size
        turn = TurnInput(chat_id=CHAT, seq=2 * i, text=text, model=small, system=SYSTEM)
        events = [e async for e in session.turn(turn)]
        assert isinstance(ending(events), Done)
        if only(events, Compacted) and i > 0:
            fold = writer.turn_requests[-1].json
            ahead = [r.json for r in writer.warm_requests if writer.chat_requests.index(r) < asked]
            read = _read_ahead_first(fold, ahead[-3:])
            texts = [m["content"] for m in read["messages"]][1:] if read else None
            # ... read where the chat's own next prompt is read (its slot on the bundled runtime)
            folds.append(read is not None and (texts, True) in inner.marked)
        await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    assert len(folds) >= 4
    assert all(folds), folds
    await adapter.aclose()
