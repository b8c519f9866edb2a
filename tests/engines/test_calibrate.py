"""When the estimate is corrected by counting, and what the correction does to a chat.

The rule (engines.context.calibrate): count once per fold, and whenever text not yet counted could
bring the transcript within 10% of the budget. The count feeds the same never-downward factor
as usage does; on a llama-cpp-python server (which streams no usage) that is what keeps a
paste the estimate under-counts from being sent over the window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from engines.base import Done, Message, ProblemKind
from engines.context.calibrate import (
    MIN_SAMPLE,
    Calibrated,
    count_request,
    needs_calibration,
)
from engines.providers.base import ChatRequest, ProviderError
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.window import (
    FACTOR_CAP,
    budget,
    estimate_message,
    estimate_tokens,
    shorten_text,
    update_factor,
)
from tests.fakes.http import free_port
from tests.fakes.openai_server import OpenAIStyleServer

StartServer = Callable[..., OpenAIStyleServer]

WINDOW = 8_192
B = budget(WINDOW)  # 6,143 tokens of transcript
# A status board pasted as emoji (410 lines, 18 KB): about 4,400 tokens by the estimate (a token
# a character), about four times that by a byte-level tokenizer that has not learned them (the
# fake server's ``byte_tokens``). A table of numbers no longer needs this: the estimate counts
# its digits.
BOARD = "\n".join("🟩🟩🟥🟩🟨🟩🟦🟩🟩🟥" for _ in range(410))


@pytest.fixture
def openai_server() -> Iterator[StartServer]:
    started: list[OpenAIStyleServer] = []

    def start(flavour: str, **options: Any) -> OpenAIStyleServer:
        server = OpenAIStyleServer(flavour, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
async def loopback_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(30.0)) as client:
        yield client


def prose(words: int) -> str:
    return " ".join(["the garden needs water before the summer heat arrives"] * (words // 9))


# --- when to count ------------------------------------------------------------------------------


def test_a_new_short_chat_is_not_counted() -> None:
    # "Hi" says nothing about the tokenizer and a round trip for it is waste.
    assert not needs_calibration(40, B, 1.0, fold=0, last=None)
    assert not needs_calibration(MIN_SAMPLE - 1, B, 1.0, fold=0, last=None)


def test_the_first_transcript_that_says_something_is_counted_once_per_fold() -> None:
    assert needs_calibration(MIN_SAMPLE, B, 1.0, fold=0, last=None)
    counted = Calibrated(fold=0, transcript=MIN_SAMPLE)
    # A few more ordinary turns, far from the budget: no new count.
    assert not needs_calibration(MIN_SAMPLE + 300, B, 1.1, fold=0, last=counted)
    # After a fold (the kept transcript starts elsewhere) it is counted again, once.
    assert needs_calibration(B // 2, B, 1.1, fold=7, last=counted)
    assert not needs_calibration(B // 2 + 50, B, 1.1, fold=7, last=Calibrated(7, B // 2))


def test_a_large_paste_is_counted_before_it_is_sent() -> None:
    counted = Calibrated(fold=0, transcript=300)
    transcript = 300 + estimate_tokens(BOARD)
    # By the estimate it fits with room to spare; at four times the estimate it would not.
    assert transcript < 0.9 * B
    assert needs_calibration(transcript, B, 1.0, fold=0, last=counted)


def test_near_the_budget_every_turn_is_counted() -> None:
    near = int(0.9 * B / 1.2) + 1  # within 10% once the factor of 1.2 is applied
    counted = Calibrated(fold=0, transcript=near - 10)
    assert needs_calibration(near, B, 1.2, fold=0, last=counted)
    assert needs_calibration(near + 5, B, 1.2, fold=0, last=Calibrated(0, near))
    # Further away, the same small step needs no count.
    assert not needs_calibration(2_000, B, 1.2, fold=0, last=Calibrated(0, 1_990))


def test_in_a_small_window_even_a_short_transcript_is_counted() -> None:
    small = budget(2_048)  # llama-cpp-python's default window
    assert small < MIN_SAMPLE * FACTOR_CAP
    transcript = int(0.9 * small / FACTOR_CAP) + 1
    assert transcript < MIN_SAMPLE
    assert needs_calibration(transcript, small, 1.0, fold=0, last=None)


def test_a_transcript_that_shrank_in_the_same_fold_needs_no_count() -> None:
    # An edit of an earlier message replaced the end of the chat with something shorter.
    assert not needs_calibration(2_000, B, 1.3, fold=0, last=Calibrated(0, 3_000))


# --- counting and correcting ---------------------------------------------------------------------


def chat(*texts: str) -> ChatRequest:
    roles = ("user", "assistant")
    return ChatRequest(
        model="fake-model",
        system="You are a helpful assistant.",
        messages=tuple(Message(role=roles[i % 2], text=t) for i, t in enumerate(texts)),
        window=WINDOW,
    )


def sent_estimate(request: ChatRequest) -> int:
    return estimate_tokens(request.system) + sum(estimate_message(m) for m in request.messages)


async def test_a_count_corrects_the_factor_upward_only(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("local")
    server.byte_tokens = True
    adapter = OpenAIAdapter(ROWS["local"], base_url=server.base_url, client=loopback_client)

    pasted = chat(prose(300), "Noted.", "Here is the board:\n" + BOARD)
    real = await count_request(adapter, pasted)
    assert real is not None
    factor = update_factor(1.0, real, sent_estimate(pasted))
    assert 3.0 < factor <= FACTOR_CAP
    # Estimate x factor now covers what the server counts, within 10%.
    assert real <= sent_estimate(pasted) * factor <= 1.1 * real

    # A later count of plain prose is lower, and leaves the factor where it was.
    words = chat(prose(3_000))
    real_words = await count_request(adapter, words)
    assert real_words is not None and real_words < 1.5 * sent_estimate(words)
    assert update_factor(factor, real_words, sent_estimate(words)) == factor


async def test_adapters_that_report_usage_are_not_counted(
    openai_server: StartServer, loopback_client: httpx.AsyncClient
) -> None:
    server = openai_server("openai")
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, api_key="sk-test", client=loopback_client
    )
    assert await count_request(adapter, chat(BOARD)) is None
    assert server.requests == []
    # Ollama reports prompt_eval_count; it is never asked to count.
    ollama = OllamaAdapter(f"http://127.0.0.1:{free_port()}")
    try:
        assert await count_request(ollama, chat(BOARD)) is None
    finally:
        await ollama.aclose()


class _Broken:
    """An adapter whose count fails the way a provider fails."""

    async def count_tokens(self, request: ChatRequest) -> int | None:
        raise ProviderError(ProblemKind.SERVER_ERROR, "the tokenizer failed")


async def test_a_failed_count_is_no_count() -> None:
    assert await count_request(_Broken(), chat(BOARD)) is None


# --- the chat, end to end on the wire -----------------------------------------------------


async def fits(adapter: OpenAIAdapter, request: ChatRequest) -> bool:
    """Whether the server accepts the request (an oversized one is refused as too long)."""
    try:
        events = [e async for e in adapter.stream(request)]
    except ProviderError as exc:
        assert exc.too_long, exc
        return False
    assert isinstance(events[-1], Done)
    return True


@pytest.mark.parametrize("flavour", ["local", "llamacpp"])
async def test_a_pasted_board_is_shortened_to_what_the_server_really_holds(
    openai_server: StartServer, loopback_client: httpx.AsyncClient, flavour: str
) -> None:
    server = openai_server(flavour, window=WINDOW)
    server.byte_tokens = True
    adapter = OpenAIAdapter(ROWS[flavour], base_url=server.base_url, client=loopback_client)
    request = chat("Please check this board:\n" + BOARD)
    transcript = sum(estimate_message(m) for m in request.messages)

    # By the estimate alone the paste fits the budget, and the server refuses it.
    assert transcript < B
    assert not await fits(adapter, request)

    # Counted first (a paste this big always is), the factor says it does not fit: the
    # session shortens it to the budget over the factor, and the server takes it.
    assert needs_calibration(transcript, B, 1.0, fold=0, last=None)
    real = await count_request(adapter, request)
    assert real is not None
    factor = update_factor(1.0, real, sent_estimate(request))
    assert transcript * factor > B
    (person,) = request.messages
    shorter = person.model_copy(update={"text": shorten_text(person.text, int(B / factor))})
    assert await fits(adapter, request.model_copy(update={"messages": (shorter,)}))
