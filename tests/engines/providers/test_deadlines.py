"""Deadlines of a streamed answer and redirects, for every adapter, against loopback servers.

A server that keeps the connection alive with bytes that are not an answer (SSE comments,
blank lines, pings, empty deltas) must not hold a turn open forever; a slow answer that keeps
arriving must not be cut; a redirect is a wrong address, said in one sentence.

Tests that end in a timeout use a tiny deadline on the real clock: a slow machine only makes
the timeout later. The test that must *not* time out uses a clock that ticks once each time
it is read, so it does not depend on how fast anything runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from engines.base import Done, Event, Message, ProblemKind, TextDelta
from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from engines.providers.deadlines import (
    FIRST_EVENT,
    SLOWEST_TOKENS_PER_SECOND,
    WHOLE_ANSWER,
    Clock,
    Deadlines,
    deadlines_for,
)
from engines.providers.http import API_TIMEOUT, LOCAL_TIMEOUT
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes import streams
from tests.fakes.keepalive_server import PARTIAL, PIECE, PROTOCOLS, KeepAliveServer

HANG_GUARD = 30.0  # seconds; every test here ends in well under one
NEVER = 1e9
GIB = 1024**3
TINY = 0.2  # a deadline the tests wait out; a slow machine only makes it end later


class TickingClock:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)


@pytest.fixture
def server() -> Iterator[dict[str, KeepAliveServer]]:
    started: dict[str, KeepAliveServer] = {}
    yield started
    for one in started.values():
        one.stop()


def start(started: dict[str, KeepAliveServer], protocol: str) -> KeepAliveServer:
    one = KeepAliveServer(protocol).start()
    started[protocol] = one
    return one


@pytest.fixture
async def adapters() -> AsyncIterator[list[ProviderAdapter]]:
    made: list[ProviderAdapter] = []
    yield made
    for adapter in made:
        await adapter.aclose()


def make(
    made: list[ProviderAdapter],
    protocol: str,
    base: str,
    deadlines: Deadlines | None = None,
    clock: Clock = time.monotonic,
) -> ProviderAdapter:
    # Reads time out far later than any deadline here: a timeout seen is the deadline's.
    timeout = httpx.Timeout(HANG_GUARD, connect=5.0)
    adapter: ProviderAdapter
    if protocol == "ollama":
        adapter = OllamaAdapter(
            base,
            read_timeout=HANG_GUARD,
            meta_timeout=5.0,
            memory=16 * GIB,
            deadlines=deadlines,
            clock=clock,
        )
    elif protocol == "openai":
        adapter = OpenAIAdapter(
            ROWS["openai"],
            base_url=base,
            api_key="sk-test-deadline-key",
            timeout=timeout,
            deadlines=deadlines,
            clock=clock,
        )
    else:
        adapter = AnthropicAdapter(
            api_key="sk-ant-test-deadline-key",
            base_url=base,
            timeout=timeout,
            deadlines=deadlines,
            clock=clock,
        )
    made.append(adapter)
    return adapter


REQUEST = ChatRequest(
    model="slow-model", messages=(Message(role="user", text="How do tides work?"),), window=8192
)


async def failure(adapter: ProviderAdapter) -> tuple[ProviderError, str]:
    """The error a stream ends with, and the text shown before it."""
    async with asyncio.timeout(HANG_GUARD):
        return await streams.failure(adapter, REQUEST)


async def answer(adapter: ProviderAdapter) -> list[Event]:
    async with asyncio.timeout(HANG_GUARD):
        return await streams.collect(adapter, REQUEST)


# --- keep-alives do not keep a turn open ------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_after_some_text_end_in_a_timeout_that_keeps_the_text(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "keep-alive"
    deadlines = Deadlines(first_event=NEVER, between_events=TINY, whole_answer=NEVER)
    adapter = make(adapters, protocol, fake.base_url, deadlines)

    err, shown = await failure(adapter)

    assert err.kind is ProblemKind.TIMEOUT, err.detail
    assert shown == PARTIAL
    assert err.partial
    assert fake.beats >= 1  # the server was still sending when the turn ended
    problem = err.to_problem()
    assert "sent nothing new for 0.2 seconds" in problem.message
    assert problem.next_step is not None and problem.next_step.kind == "retry"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_before_any_text_end_in_a_timeout(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "silent-start"
    deadlines = Deadlines(first_event=TINY, between_events=NEVER, whole_answer=NEVER)
    adapter = make(adapters, protocol, fake.base_url, deadlines)

    err, shown = await failure(adapter)

    assert err.kind is ProblemKind.TIMEOUT, err.detail
    assert shown == "" and not err.partial
    assert "sent no answer for 0.2 seconds" in err.to_problem().message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_answer_that_never_ends_is_stopped_by_the_whole_answer_deadline(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "endless"
    deadlines = Deadlines(first_event=NEVER, between_events=NEVER, whole_answer=TINY)
    adapter = make(adapters, protocol, fake.base_url, deadlines)

    err, shown = await failure(adapter)

    assert err.kind is ProblemKind.TIMEOUT, err.detail
    assert shown.startswith(PARTIAL) and err.partial
    assert "still going after 0.2 seconds" in err.to_problem().message


# --- a slow answer that keeps arriving is not cut ---------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_each_piece_of_text_starts_the_between_events_clock_again(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "paced"
    fake.paced_pieces = 30
    clock = TickingClock()
    # Each piece is followed by two keep-alives: a few reads of the clock between pieces, far
    # fewer than the deadline, while the whole answer takes many times the deadline.
    between = 12
    deadlines = Deadlines(first_event=between, between_events=between, whole_answer=NEVER)
    adapter = make(adapters, protocol, fake.base_url, deadlines, clock)

    events = await answer(adapter)

    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == PARTIAL + PIECE * fake.paced_pieces
    assert isinstance(events[-1], Done)
    # The clock was read on every keep-alive: the answer as a whole took far longer than the
    # between-events deadline, so only a clock restarted by each piece lets it finish.
    assert clock.reads > 4 * between


# --- the values ---------------------------------------------------------------------------------


def test_the_deadlines_are_generous_and_grow_with_a_long_answer() -> None:
    short = deadlines_for(1024)
    assert short.first_event == FIRST_EVENT >= 600  # a CPU reading a long prompt
    assert short.between_events < short.first_event
    assert short.whole_answer == WHOLE_ANSWER >= 1800
    long = deadlines_for(16_384)
    assert long.whole_answer >= 16_384 / SLOWEST_TOKENS_PER_SECOND
    # Silence is timed by the read timeout, which must not cut a first word the deadlines allow.
    assert LOCAL_TIMEOUT.read is not None and LOCAL_TIMEOUT.read <= FIRST_EVENT
    assert API_TIMEOUT.read is not None and API_TIMEOUT.read <= FIRST_EVENT


# --- redirects ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_redirect_is_one_sentence_about_the_address(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "redirect"
    adapter = make(adapters, protocol, fake.base_url)

    err, shown = await failure(adapter)

    problem = err.to_problem()
    assert shown == ""
    assert problem.message == (
        f"The server at {fake.url} answered with a redirect to https://login.example.net/sso; "
        "check the server address in Settings."
    )
    assert err.detail == problem.message  # what the Settings test and Health show
    assert "abc123" not in problem.message  # a query may carry a ticket or a token
    assert problem.next_step is not None and problem.next_step.kind == "open-settings"
    assert "address" in problem.next_step.label
    # Redirects are never followed.
    assert len(fake.requests_to(fake.chat_path)) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_redirect_while_listing_models_says_the_same(
    protocol: str, server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, protocol)
    fake.mode = "redirect"
    fake.redirect_status = 301
    fake.redirect_to = "/somewhere/else"
    adapter = make(adapters, protocol, fake.base_url)

    with pytest.raises(ProviderError) as caught:
        await asyncio.wait_for(adapter.list_models(), HANG_GUARD)

    assert caught.value.to_problem().message == (
        f"The server at {fake.url} answered with a redirect to {fake.url}/somewhere/else; "
        "check the server address in Settings."
    )


async def test_a_redirect_that_names_no_place_still_says_what_happened(
    server: dict[str, KeepAliveServer], adapters: list[ProviderAdapter]
) -> None:
    fake = start(server, "ollama")
    fake.mode = "redirect"
    fake.redirect_to = None
    adapter = make(adapters, "ollama", fake.base_url)

    err, _ = await failure(adapter)

    assert err.to_problem().message == (
        f"The server at {fake.url} answered with a redirect (HTTP 302) without saying where "
        "to; check the server address in Settings."
    )
