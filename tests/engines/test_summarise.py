"""The summariser: which model writes the summary, how big each request is, what counts as a
summary, and that no secret and no planted fact is lost on the way.

Unit tests use a small in-memory adapter that records every request; the end-to-end tests run
the real adapters against the loopback fakes (tests/fakes) and read what those servers got.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engines.base import (
    Done,
    Event,
    Message,
    ModelInfo,
    Picture,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.context.facts import (
    BY_CONCH,
    FACTS,
    HEADING,
    SECTIONS,
    compose,
    missing_facts,
    split_kept,
)
from engines.context.protocols import Summariser
from engines.context.summarise import PIECE_CHARS, ModelSummariser, fit, judge, render
from engines.providers.base import ChatRequest, ProviderError
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.resources import read_prompt
from engines.scrub import MARKER
from engines.window import estimate_tokens
from tests.fakes.http import Recorded, Reply
from tests.fakes.ollama_server import FakeModel, FakeReply, Fault, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, Script

# --- an in-memory adapter ---------------------------------------------------------------------


@dataclass(frozen=True)
class Say:
    """Answer with ``text`` (after some thinking); report usage when given."""

    text: str
    thinking: str = ""
    usage: tuple[int, int] | None = None


@dataclass(frozen=True)
class Fail:
    error: ProviderError


@dataclass(frozen=True)
class CallTool:
    name: str = "web_search"


@dataclass(frozen=True)
class Hang:
    pass


Behaviour = Say | Fail | CallTool | Hang


def framed(request: ChatRequest, tag: str) -> str:
    text = request.messages[0].text
    m = re.search(f"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return m.group(1) if m else ""


def folding_summary(request: ChatRequest) -> Say:
    """A well-behaved summariser: the summary so far plus one line for the new piece."""
    before = framed(request, "summary-so-far")
    lines = [] if before == "(none yet)" else before.splitlines()
    n = sum(line.startswith("- part ") for line in lines) + 1
    return Say("\n".join([*lines, f"- part {n} of the chat was read"]))


@dataclass
class MemoryAdapter:
    """``ProviderAdapter`` in memory: per model id a behaviour (or a list used in turn)."""

    name: str = "openai"
    label: str = "Memory"
    local: bool = False
    cheap: tuple[str, ...] = ()
    script: dict[str, Behaviour | list[Behaviour]] = field(default_factory=dict)
    default: Callable[[ChatRequest], Behaviour] = folding_summary
    requests: list[ChatRequest] = field(default_factory=list)
    closed_streams: int = 0
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    async def list_models(self) -> list[ModelInfo]:
        return []

    def cheap_models(self) -> tuple[str, ...]:
        return self.cheap

    async def aclose(self) -> None:
        return None

    def _behaviour(self, request: ChatRequest) -> Behaviour:
        planned = self.script.get(request.model)
        if isinstance(planned, list):
            return planned.pop(0) if planned else self.default(request)
        return planned if planned is not None else self.default(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        self.asked.set()
        behaviour = self._behaviour(request)
        try:
            await asyncio.sleep(0)
            if isinstance(behaviour, Fail):
                raise behaviour.error
            if isinstance(behaviour, Hang):
                await asyncio.Event().wait()
            if isinstance(behaviour, CallTool):
                yield ToolCall(call=ToolCallData(id="c1", name=behaviour.name))
                yield Done(stop_reason="tool_use")
                return
            assert isinstance(behaviour, Say)
            if behaviour.thinking:
                yield ThinkingDelta(text=behaviour.thinking)
            for i in range(0, len(behaviour.text), 7):
                yield TextDelta(text=behaviour.text[i : i + 7])
            if behaviour.usage is not None:
                yield Usage(input_tokens=behaviour.usage[0], output_tokens=behaviour.usage[1])
            yield Done()
        finally:
            self.closed_streams += 1

    @property
    def models_asked(self) -> list[str]:
        return [r.model for r in self.requests]


def api_model(model_id: str = "gpt-4.1", context: int = 128_000) -> ModelInfo:
    return ModelInfo(provider="openai", id=model_id, context=context)


def local_model(model_id: str = "llama3.2", context: int = 8_192) -> ModelInfo:
    return ModelInfo(provider="ollama", id=model_id, context=context, local=True)


def chat(turns: int, size: int = 400, start: int = 0) -> list[Message]:
    """``turns`` turns of person + assistant text, each message about ``size`` characters."""
    out: list[Message] = []
    for i in range(start, start + turns):
        ask = f"Question {i}: please look at part {i} of the plan. " * (size // 48 + 1)
        out.append(Message(role="user", text=ask[:size]))
        out.append(Message(role="assistant", text=(f"Answer {i} covers step {i}. " * size)[:size]))
    return out


def request_size(request: ChatRequest) -> int:
    """Tokens a request takes by the app's own estimate, answer room included."""
    text = request.system + "".join(m.text for m in request.messages)
    return estimate_tokens(text) + request.max_output_tokens


def test_model_summariser_is_a_summariser() -> None:
    assert isinstance(ModelSummariser({}), Summariser)


# --- which model ------------------------------------------------------------------------------


async def test_an_api_provider_tries_cheapest_then_small_then_the_chats_own() -> None:
    adapter = MemoryAdapter(
        cheap=("gpt-4.1-nano", "gpt-4.1-mini"),
        script={
            "gpt-4.1-nano": Fail(ProviderError(ProblemKind.MODEL_MISSING, "no such model")),
            "gpt-4.1-mini": Say("I'm sorry, but I can't help with that."),
        },
    )
    result = await ModelSummariser({"openai": adapter}).summarise(
        chat(2), "", model=api_model("gpt-4.1")
    )
    assert adapter.models_asked == ["gpt-4.1-nano", "gpt-4.1-mini", "gpt-4.1"]
    assert result.text is not None and "part 1 of the chat was read" in result.text
    assert result.model == "gpt-4.1"


async def test_the_cheapest_model_is_used_when_it_works() -> None:
    adapter = MemoryAdapter(cheap=("gpt-4.1-nano", "gpt-4.1-mini"))
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    assert adapter.models_asked == ["gpt-4.1-nano"]
    assert result.model == "gpt-4.1-nano"


async def test_a_server_on_this_computer_only_ever_uses_the_chats_own_model() -> None:
    adapter = MemoryAdapter(
        name="ollama",
        local=True,
        cheap=("qwen3:0.6b",),  # even if an adapter offered one, loading it would evict the chat's
        script={"llama3.2": [Say("I cannot do that."), Say("")]},
    )
    result = await ModelSummariser({"ollama": adapter}).summarise(
        chat(2), "", model=local_model("llama3.2")
    )
    assert set(adapter.models_asked) == {"llama3.2"}
    assert result.text is None
    assert "refused" in result.problem


async def test_no_adapter_for_the_provider_is_a_problem_not_an_error() -> None:
    result = await ModelSummariser({}).summarise(chat(1), "old", model=api_model())
    assert result.text is None and result.problem


# --- pieces and windows -----------------------------------------------------------------------


@pytest.mark.parametrize("window", [2_048, 4_096, 8_192, 32_768, 128_000])
async def test_no_request_ever_exceeds_the_summarising_models_window(window: int) -> None:
    adapter = MemoryAdapter(name="ollama", local=True)
    model = local_model(context=window)
    previous = "What the person wants: a plan.\n" + "Decided or done: many things. " * 60
    folded = chat(40, size=1_500)
    result = await ModelSummariser({"ollama": adapter}).summarise(folded, previous, model=model)
    assert result.text is not None
    assert adapter.requests
    for request in adapter.requests:
        assert request_size(request) <= 0.9 * window
        assert len(framed(request, "next-part-of-the-chat")) <= PIECE_CHARS
        assert request.window == window
    # Every line of the folded chat was read, in order, across the pieces.
    pieces = "\n".join(framed(r, "next-part-of-the-chat") for r in adapter.requests)
    assert pieces.replace("\n", "") == render(folded).replace("\n", "")


async def test_text_outside_ascii_is_cut_into_pieces_that_still_fit() -> None:
    adapter = MemoryAdapter(name="ollama", local=True)
    folded = [
        Message(role="user", text="长文本测试。" * 3_000),
        Message(role="assistant", text="好"),
    ]
    await ModelSummariser({"ollama": adapter}).summarise(
        folded, "", model=local_model(context=4_096)
    )
    assert len(adapter.requests) > 3
    for request in adapter.requests:
        assert request_size(request) <= 0.9 * 4_096


async def test_each_piece_is_folded_into_the_summary_so_far() -> None:
    adapter = MemoryAdapter(name="ollama", local=True)
    result = await ModelSummariser({"ollama": adapter}).summarise(
        chat(30, size=1_000), "The person wants a plan.", model=local_model(context=8_192)
    )
    assert len(adapter.requests) >= 3
    assert framed(adapter.requests[0], "summary-so-far").startswith("The person wants a plan.")
    for k in range(1, len(adapter.requests)):
        so_far = framed(adapter.requests[k], "summary-so-far")
        assert f"- part {k} of the chat was read" in so_far
    assert result.text is not None
    assert f"part {len(adapter.requests)} of the chat was read" in result.text


async def test_a_small_window_gets_the_lean_prompt_and_a_large_one_the_full() -> None:
    small = MemoryAdapter(name="ollama", local=True)
    large = MemoryAdapter(name="ollama", local=True)
    await ModelSummariser({"ollama": small}).summarise(
        chat(2), "", model=local_model(context=8_192)
    )
    await ModelSummariser({"ollama": large}).summarise(
        chat(2), "", model=local_model(context=32_768)
    )
    lean, full = small.requests[0].system, large.requests[0].system
    assert lean and full and len(lean) < len(full) / 2
    for prompt in (lean, full):
        assert "secret" in prompt and "Still open" in prompt
    assert small.requests[0].max_output_tokens <= 0.15 * 8_192
    assert large.requests[0].max_output_tokens <= 1_024


async def test_a_too_long_refusal_naming_a_window_is_retried_with_smaller_pieces() -> None:
    too_long = ProviderError(ProblemKind.TOO_LONG, "max 4096", too_long=True, window=4_096)
    adapter = MemoryAdapter(cheap=("gpt-4.1-nano",), script={"gpt-4.1-nano": [Fail(too_long)]})
    result = await ModelSummariser({"openai": adapter}).summarise(
        chat(20, size=1_000), "", model=api_model()
    )
    assert result.text is not None and result.model == "gpt-4.1-nano"
    assert set(adapter.models_asked) == {"gpt-4.1-nano"}
    assert all(request_size(r) <= 0.9 * 4_096 for r in adapter.requests[1:])


# --- what counts as a summary -----------------------------------------------------------------

GOOD = "What the person wants: a Lisbon trip.\nStill open: the hotel."


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (Say("I'm sorry, I can't summarise this conversation."), "refused"),
        (Say("As an AI, I do not keep summaries."), "refused"),
        (Say(""), "empty"),
        (Say("   \n\t "), "empty"),
        (Say("", thinking="Let me think about a summary of this..."), "empty"),
        (Say("<think>I should summarise"), "empty"),
        (CallTool(), "tool"),
        (Say("Person: Question 0: please look at part 0 of the plan."), "copied"),
        (Say("What the person wants: " + "a very long plan, " * 5_000), "more"),
    ],
    ids=[
        "sorry",
        "as-an-ai",
        "empty",
        "whitespace",
        "only-thinking",
        "think-tag",
        "tool-call",
        "echo",
        "runaway",
    ],
)
async def test_a_reply_that_is_not_a_summary_falls_through_to_the_next_model(
    reply: Behaviour, why: str
) -> None:
    adapter = MemoryAdapter(
        cheap=("gpt-4.1-nano",), script={"gpt-4.1-nano": reply, "gpt-4.1": Say(GOOD)}
    )
    result = await ModelSummariser({"openai": adapter}).summarise(chat(3), "", model=api_model())
    assert adapter.models_asked == ["gpt-4.1-nano", "gpt-4.1"]
    assert result.model == "gpt-4.1"
    assert result.text is not None and split_kept(result.text)[0] == split_kept(GOOD)[0]


async def test_an_echo_of_the_lines_without_their_labels_is_not_a_summary() -> None:
    folded = chat(3, size=120)
    echo = "\n".join(m.text for m in folded)
    adapter = MemoryAdapter(cheap=("nano",), script={"nano": Say(echo), "gpt-4.1": Say(GOOD)})
    result = await ModelSummariser({"openai": adapter}).summarise(folded, "", model=api_model())
    assert result.model == "gpt-4.1"


async def test_when_every_model_fails_there_is_no_summary_and_the_reasons_are_given() -> None:
    adapter = MemoryAdapter(
        cheap=("nano", "mini"),
        script={
            "nano": Fail(ProviderError(ProblemKind.AUTH, "bad key")),
            "mini": CallTool(),
            "gpt-4.1": Say("I cannot help with that."),
        },
    )
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "old", model=api_model())
    assert result.text is None
    assert "nano" in result.problem and "auth" in result.problem
    assert "mini" in result.problem and "tool" in result.problem
    assert "gpt-4.1" in result.problem and "refused" in result.problem


async def test_thinking_is_ignored_and_a_preamble_is_dropped() -> None:
    reply = Say("Here is the updated summary:\n" + GOOD, thinking="The person wants Lisbon...")
    adapter = MemoryAdapter(script={"gpt-4.1": reply})
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    assert result.text is not None and split_kept(result.text)[0] == split_kept(GOOD)[0]
    assert "The person wants Lisbon" not in result.text


async def test_a_think_block_in_the_text_is_left_out() -> None:
    adapter = MemoryAdapter(script={"gpt-4.1": Say("<think>plan the sections</think>\n" + GOOD)})
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    assert result.text is not None and split_kept(result.text)[0] == split_kept(GOOD)[0]


# --- timeouts and cancelling ------------------------------------------------------------------


async def test_a_model_that_never_answers_times_out_without_raising() -> None:
    adapter = MemoryAdapter(cheap=("nano",), script={"nano": Hang(), "gpt-4.1": Hang()})
    summariser = ModelSummariser({"openai": adapter}, timeout=0.05)
    result = await summariser.summarise(chat(2), "old", model=api_model())
    assert result.text is None
    assert "did not answer within" in result.problem
    assert adapter.closed_streams == 2  # each hung stream was closed, not leaked


async def test_a_timeout_on_the_cheap_model_falls_back_to_the_next() -> None:
    adapter = MemoryAdapter(cheap=("nano",), script={"nano": Hang()})
    result = await ModelSummariser({"openai": adapter}, timeout=0.05).summarise(
        chat(2), "", model=api_model()
    )
    assert result.model == "gpt-4.1" and result.text is not None


async def test_cancelling_the_turn_cancels_the_summary() -> None:
    adapter = MemoryAdapter(script={"gpt-4.1": Hang()})
    task = asyncio.create_task(
        ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    )
    await adapter.asked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.allow_error_log  # each model's failure is logged with its traceback
async def test_an_adapter_bug_is_a_failed_model_not_a_crash() -> None:
    class Broken(MemoryAdapter):
        async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
            self.requests.append(request)
            raise KeyError("choices")
            yield TextDelta(text="")  # pragma: no cover - makes this an async generator

    adapter = Broken(cheap=("nano",))
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    assert result.text is None and "KeyError" in result.problem


# --- usage ------------------------------------------------------------------------------------


async def test_usage_is_summed_over_every_request_including_failed_ones() -> None:
    adapter = MemoryAdapter(
        cheap=("nano",),
        script={
            "nano": Say("I'm sorry, no.", usage=(300, 5)),
            "gpt-4.1": Say(GOOD, usage=(400, 20)),
        },
    )
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    assert result.tokens == 725


async def test_usage_is_estimated_when_the_provider_reports_none() -> None:
    adapter = MemoryAdapter(script={"gpt-4.1": Say(GOOD)})
    result = await ModelSummariser({"openai": adapter}).summarise(chat(2), "", model=api_model())
    sent = adapter.requests[0]
    expected = (
        estimate_tokens(sent.system)
        + estimate_tokens(sent.messages[0].text)
        + estimate_tokens(GOOD)
    )
    assert result.tokens == expected


# --- rendering, focus, secrets ----------------------------------------------------------------


def test_folded_turns_are_read_back_as_plain_lines() -> None:
    folded = [
        Message(
            role="user",
            text="What is in this photo?",
            pictures=(Picture(name="beach.jpg", data="AAAA"),),
        ),
        Message(
            role="assistant",
            text="Let me look it up.",
            thinking="The person wants the beach name.",
            tool_calls=(ToolCallData(id="1", name="web_search", arguments={"q": "beach"}),),
        ),
        Message(role="tool", text="Praia da Rocha, Portugal", tool_name="web_search"),
        Message(role="assistant", text="It is Praia da Rocha."),
    ]
    text = render(folded)
    assert text.splitlines() == [
        "Person: What is in this photo? [picture: beach.jpg]",
        "Assistant: Let me look it up.",
        'Assistant used web_search: {"q": "beach"}',
        "Tool result (web_search): Praia da Rocha, Portugal",
        "Assistant: It is Praia da Rocha.",
    ]
    assert "beach name" not in text and "AAAA" not in text


async def test_the_focus_from_compact_is_asked_for() -> None:
    adapter = MemoryAdapter()
    await ModelSummariser({"openai": adapter}).summarise(
        chat(2), "", model=api_model(), focus="the hotel booking"
    )
    assert "Keep especially: the hotel booking" in adapter.requests[0].messages[0].text


PLANTED_SECRETS = [
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "MIIEowIBAAKCAQEAx4BqZm9vYmFyYmF6cXV4",
    "hunter2-Tr0ub4dor",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
]


def secret_chat() -> tuple[list[Message], str, str]:
    folded = [
        Message(role="user", text=f"Here is my key {PLANTED_SECRETS[0]}, set it up please."),
        Message(role="assistant", text="Done. Anything else?"),
        Message(
            role="user",
            text="Also push with ghp_16C7e42F292c6912E7710c838347Ae178B4a and my server key:\n"
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4BqZm9vYmFyYmF6cXV4\n"
            "-----END RSA PRIVATE KEY-----\npassword: hunter2-Tr0ub4dor",
        ),
        Message(
            role="tool",
            tool_name="read_file",
            text="[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        Message(role="assistant", text="Configured the server and AWS."),
    ]
    previous = f"The person shared a key {PLANTED_SECRETS[1]} earlier."
    focus = f"the key {PLANTED_SECRETS[0]}"
    return folded, previous, focus


async def test_no_secret_reaches_a_request_or_the_summary() -> None:
    folded, previous, focus = secret_chat()

    def parrot(request: ChatRequest) -> Say:  # a model that repeats whatever it was given
        return Say("Decided or done: " + framed(request, "next-part-of-the-chat")[:300])

    adapter = MemoryAdapter(default=parrot)
    result = await ModelSummariser({"openai": adapter}).summarise(
        folded, previous, model=api_model(), focus=focus
    )
    sent = "\n".join(r.system + r.messages[0].text for r in adapter.requests)
    assert MARKER in sent
    for secret in PLANTED_SECRETS:
        assert secret not in sent
        assert result.text is not None and secret not in result.text


# --- the fact keeper on a realistic chat ------------------------------------------------------

TRIP_FACTS = [
    "Priya Raman",
    "Tomás Oliveira",
    "2026-11-29",
    "4 December 2026",
    "$1,200",
    "€30",
    "23 kg",
    "14:30",
    "/home/priya/trips/lisbon.md",
    "C:\\Users\\Priya\\Receipts\\lisbon.xlsx",
    "https://www.visitlisbon.com/en/events?month=nov",
    "bookings@alfama-hotel.pt",
    "plan_itinerary(days=5)",
    "build_day_plan",
    "40%",
    "15 EUR",
    "report.pdf",
    "#48213",
    "Ana Costa",
]


def trip_chat() -> list[Message]:
    return [
        Message(
            role="user",
            text="Hi! I'm planning the Lisbon trip with Priya Raman and Tomás Oliveira. "
            "We fly on 2026-11-29 and come back 4 December 2026.",
        ),
        Message(
            role="assistant",
            text="Lovely. You said the budget is $1,200 per person, plus €30 for the airport "
            "transfer. Your flight leaves at 14:30.",
        ),
        Message(
            role="user",
            text="Yes. My bag can be 23 kg at most. Keep the itinerary in "
            "/home/priya/trips/lisbon.md and the receipts in "
            "C:\\Users\\Priya\\Receipts\\lisbon.xlsx please.",
        ),
        Message(
            role="assistant",
            text="Saved.",
            tool_calls=(ToolCallData(id="t1", name="web_search", arguments={"q": "Lisbon"}),),
        ),
        Message(
            role="tool",
            tool_name="web_search",
            text="https://www.visitlisbon.com/en/events?month=nov lists a fado night.",
        ),
        Message(
            role="assistant",
            text="I ran `plan_itinerary(days=5)`; the helper build_day_plan split the days. The "
            "hotel (bookings@alfama-hotel.pt) wants a 40% deposit.",
        ),
        Message(
            role="user",
            text="My bank charges 15 EUR per foreign payment. The booking confirmation is in "
            "report.pdf, order #48213. Yesterday Ana Costa said the hotel is lovely.",
        ),
        Message(role="assistant", text="Noted all of that."),
    ]


VAGUE = (
    "What the person wants: a trip to Lisbon with two friends.\n"
    "Decided or done: flights, luggage, hotel and budget were discussed.\n"
    "Still open: the deposit."
)


@pytest.mark.parametrize("model", [api_model(), local_model(context=8_192)], ids=["api", "8k"])
async def test_every_planted_fact_survives_a_summary_that_left_them_out(model: ModelInfo) -> None:
    folded = trip_chat()
    text = render(folded)
    assert missing_facts(TRIP_FACTS, text) == []  # the fixture really holds them
    assert len(missing_facts(TRIP_FACTS, VAGUE)) == len(TRIP_FACTS)
    adapter = MemoryAdapter(name=model.provider, local=model.local, default=lambda r: Say(VAGUE))
    result = await ModelSummariser({model.provider: adapter}).summarise(folded, "", model=model)
    assert result.text is not None
    assert split_kept(result.text)[0] == split_kept(VAGUE)[0]
    assert missing_facts(TRIP_FACTS, result.text) == []
    for fact in TRIP_FACTS:
        assert fact in result.text


async def test_a_summary_for_an_8k_model_stays_short_and_keeps_its_facts() -> None:
    # Long and varied (a reply repeating one line over and over is turned down as junk).
    things = (
        "Lisbon flight",
        "Priya",
        "Tomás",
        "The budget",
        "The bag",
        "The itinerary",
        "The trip",
    )
    done = ("was settled", "was checked", "came up again", "was confirmed", "was noted")
    rambling = "Decided or done: " + " ".join(
        f"{things[i % 7]} detail {i % 10} {done[i % 5]}." for i in range(800)
    )
    folded = trip_chat() + chat(20, size=1_500)
    adapter = MemoryAdapter(name="ollama", local=True, default=lambda r: Say(rambling[:3_000]))
    result = await ModelSummariser({"ollama": adapter}).summarise(
        folded, "", model=local_model(context=8_192)
    )
    assert result.text is not None
    assert len(result.text) <= 6_000
    body, kept = split_kept(result.text)
    assert kept and SECTIONS[FACTS] in result.text
    assert "detail 2" in body  # the newest content of the rambling reply stayed
    assert missing_facts(["2026-11-29", "$1,200", "/home/priya/trips/lisbon.md"], result.text) == []


# --- against the real adapters and loopback servers -------------------------------------------


class PerModelServer(OpenAIStyleServer):
    """The OpenAI fake, answering each model its own way (a fault, or a script)."""

    def __init__(self, answers: dict[str, str | Script], **kwargs: Any) -> None:
        super().__init__("openai", **kwargs)
        self.answers = answers

    def _chat(self, request: Recorded) -> Reply:
        model = (request.json or {}).get("model", "")
        if model in self.answers:
            answer = self.answers[model]
            self.fault = answer if isinstance(answer, str) else None
            if isinstance(answer, Script):
                self.script = answer
        return super()._chat(request)


def script(text: str) -> Script:
    return Script(text=[text[i : i + 40] for i in range(0, len(text), 40)], prompt_tokens=900)


def sent_bodies(requests: list[Recorded]) -> str:
    return "\n".join(r.body.decode("utf-8") for r in requests)


async def test_openai_style_provider_tries_cheapest_small_then_own_over_http() -> None:
    answers: dict[str, str | Script] = {
        "gpt-4.1-nano": "not-found",
        "gpt-4.1-mini": script("I'm sorry, but I can't help with summarising this."),
        "gpt-4.1": script(VAGUE),
    }
    with PerModelServer(answers) as server:
        adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key-1")
        try:
            result = await ModelSummariser({"openai": adapter}).summarise(
                trip_chat(), "", model=api_model("gpt-4.1")
            )
        finally:
            await adapter.aclose()
        asked = [r.json["model"] for r in server.chat_requests]
    assert asked == ["gpt-4.1-nano", "gpt-4.1-mini", "gpt-4.1"]
    assert result.model == "gpt-4.1"
    assert result.text is not None and split_kept(result.text)[0] == split_kept(VAGUE)[0]
    assert missing_facts(TRIP_FACTS, result.text) == []
    assert result.tokens >= 2 * 900  # the provider's own usage of both answered requests


async def test_no_secret_reaches_an_http_server() -> None:
    folded, previous, focus = secret_chat()
    answers: dict[str, str | Script] = {
        "gpt-4.1-nano": "500",
        "gpt-4.1-mini": script("Decided or done: the server and AWS were configured."),
    }
    with PerModelServer(answers) as server:
        adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key-2")
        try:
            result = await ModelSummariser({"openai": adapter}).summarise(
                folded, previous, model=api_model(), focus=focus
            )
        finally:
            await adapter.aclose()
        bodies = sent_bodies(server.chat_requests)
    assert len(server.chat_requests) == 2 and MARKER in bodies
    for secret in PLANTED_SECRETS:
        assert secret not in bodies
    assert result.text is not None


async def test_pieces_fit_a_small_api_window_so_the_server_never_refuses() -> None:
    with PerModelServer({"gpt-4.1-nano": script(VAGUE)}, window=4_096) as server:
        adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key-3")
        try:
            result = await ModelSummariser(
                {"openai": adapter}, windows=lambda provider, model_id: 4_096
            ).summarise(chat(30, size=1_200), "", model=api_model())
        finally:
            await adapter.aclose()
        requests = server.chat_requests
    assert result.text is not None and result.model == "gpt-4.1-nano"
    assert len(requests) > 3
    for r in requests:
        body = r.json
        text = "".join(m["content"] for m in body["messages"])
        assert estimate_tokens(text) + body["max_completion_tokens"] <= 0.9 * 4_096


async def test_a_server_refusing_for_length_teaches_the_window_over_http() -> None:
    # Nobody knows the cheap model's window (128K assumed); the server allows 4,096 tokens.
    with PerModelServer({"gpt-4.1-nano": script(VAGUE)}, window=4_096) as server:
        adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key-4")
        try:
            result = await ModelSummariser({"openai": adapter}).summarise(
                chat(30, size=1_200), "", model=api_model()
            )
        finally:
            await adapter.aclose()
        requests = server.chat_requests
    assert result.text is not None and result.model == "gpt-4.1-nano"
    assert {r.json["model"] for r in requests} == {"gpt-4.1-nano"}
    assert len(requests) >= 3  # one refused, then pieces sized for 4,096


async def test_a_slow_http_server_times_out_and_nothing_is_raised() -> None:
    with PerModelServer({}) as server:
        server.fault = "slow"
        server.slow_seconds = 5.0
        adapter = OpenAIAdapter(ROWS["openai"], base_url=server.base_url, api_key="test-key-5")
        try:
            result = await ModelSummariser({"openai": adapter}, timeout=0.3).summarise(
                chat(2), "old summary", model=api_model()
            )
        finally:
            await adapter.aclose()
    assert result.text is None
    assert result.problem.count("did not answer within") == 3


def summary_from_ollama(body: dict[str, Any]) -> FakeReply:
    user = body["messages"][-1]["content"]
    m = re.search(r"<summary-so-far>\n(.*?)\n</summary-so-far>", user, re.DOTALL)
    before = "" if m is None or m.group(1) == "(none yet)" else m.group(1)
    return FakeReply(text=(before + "\n- one more part was read").strip())


async def test_ollama_only_ever_gets_the_chats_own_model_and_pieces_that_fit() -> None:
    with running_ollama(
        [FakeModel("llama3.2", 8_192), FakeModel("qwen3:0.6b", 40_960)],
        version="0.12.6",
        responder=summary_from_ollama,
    ) as ollama:
        adapter = OllamaAdapter(ollama.url, memory=64 * 2**30)
        try:
            window = await adapter.context_for("llama3.2")
            model = local_model("llama3.2", context=window)
            folded, previous, focus = secret_chat()
            folded = [*folded, *trip_chat(), *chat(40, size=1_500)]
            result = await ModelSummariser({"ollama": adapter}).summarise(
                folded, previous, model=model, focus=focus
            )
        finally:
            await adapter.aclose()
        chats = ollama.chat_requests()
        every_model = {
            str(r.body.get("model") or r.body.get("name")).removesuffix(":latest")
            for r in ollama.requests
            if isinstance(r.body, dict) and (r.body.get("model") or r.body.get("name"))
        }
        outcomes = list(ollama.outcomes)
        reloads = ollama.total_reloads()
        bodies = "\n".join(str(b) for b in chats)
    assert window == 8_192
    assert every_model == {"llama3.2"}
    assert len(chats) > 3
    assert reloads == 0
    for outcome, body in zip(outcomes, chats, strict=True):
        assert not outcome.truncated and not outcome.refused
        assert outcome.prompt_tokens + body["options"]["num_predict"] <= outcome.num_ctx
    for secret in PLANTED_SECRETS:
        assert secret not in bodies
    assert result.text is not None and result.model == "llama3.2"
    assert missing_facts(["2026-11-29", "$1,200", "bookings@alfama-hotel.pt"], result.text) == []


async def test_ollama_failing_every_time_gives_no_summary_and_no_error() -> None:
    with running_ollama([FakeModel("llama3.2", 8_192)], version="0.12.6") as ollama:
        ollama.fault = Fault.OUT_OF_MEMORY
        adapter = OllamaAdapter(ollama.url, memory=64 * 2**30)
        try:
            result = await ModelSummariser({"ollama": adapter}).summarise(
                chat(3), "old", model=local_model("llama3.2")
            )
        finally:
            await adapter.aclose()
        asked = {b["model"] for b in ollama.chat_requests()}
    assert result.text is None and "llama3.2" in result.problem
    assert asked == {"llama3.2"}


def test_trimming_keeps_the_newest_lines_and_the_kept_facts_with_one_note() -> None:
    long = "\n".join(f"Decided or done: item {i}." for i in range(500))
    long += f"\n\n{HEADING}\n- 2026-11-29\n- /srv/trips/lisbon.md"
    once = fit(long, 400, 1_600)
    assert len(once) <= 1_600 and estimate_tokens(once) <= 400
    assert "item 499." in once and "item 0." not in once
    assert split_kept(once)[1] == ["2026-11-29", "/srv/trips/lisbon.md"]
    # A cap with room for little more than the frame: the four parts, the kept facts, the note.
    frame = estimate_tokens(compose([[], [], [], []], split_kept(once)[1], "", trimmed=True))
    twice = fit(once, frame + 15, 400)
    assert twice.count("left out to keep this summary short") == 1
    assert "item 499." in twice and split_kept(twice)[1]


def test_prompts_load_from_the_source_tree_and_from_a_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "Never write down a password" in read_prompt("summarise.txt")
    assert "Never write a secret" in read_prompt("summarise_lean.txt")
    prompts = tmp_path / "resources" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "only_in_the_bundle.txt").write_text("from the bundle\n", encoding="utf-8")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert read_prompt("only_in_the_bundle.txt") == "from the bundle"
    with pytest.raises(ValueError):
        read_prompt("../summarise.txt")


def test_a_reply_about_something_else_is_not_a_summary() -> None:
    piece = (
        "Person: We are building 24 raised beds of untreated larch behind the library.\n"
        "Assistant: Larch lasts about ten years; order the soil in two loads.\n"
        "Person: Marta coordinates; the budget is 2,500 euros and Tom can't do Saturdays.\n"
    )
    rambling = (
        "Bathroom. A space where we gather to share what makes us who we are – our stories, "
        "traditions, and humanity. So, let's take a moment here in the sanctuary of your home "
        "to honor the people who have lived across generations before you."
    )
    text, why = judge(rambling, piece, "", 512)
    assert text is None and "never mentioned" in why
    fair = (
        "The person is building 24 raised beds of untreated larch behind the library. "
        "Marta coordinates, the budget is 2,500 euros, and Tom cannot help on Saturdays. "
        "Decided: order the soil in two loads."
    )
    assert judge(fair, piece, "", 512) == (fair, "")


def test_a_reply_that_repeats_the_frame_is_not_a_summary() -> None:
    piece = "Person: We meet at the library on Saturday with Marta.\n"
    echo = "Said:\n<Summary-of-the-chat>\n(None yet)\n</Summary-of-the-chat>"
    text, why = judge(echo, piece, "", 512)
    assert text is None and "frame" in why


async def test_made_up_facts_in_an_earlier_summary_are_not_kept_word_for_word() -> None:
    previous = "The person met Ben Johnson on 2026-14-30.\n\n" + HEADING + "\n- 48213"
    folded = [Message(role="user", text="The ticket number is 48213, and we meet on Friday.")]
    adapter = MemoryAdapter(
        name="ollama",
        local=True,
        default=lambda r: Say("The person has a ticket and meets someone on Friday."),
    )
    result = await ModelSummariser({"ollama": adapter}).summarise(
        folded, previous, model=local_model(context=8_192)
    )
    assert result.text is not None
    _body, kept = split_kept(result.text)
    assert "48213" in kept
    assert "Ben Johnson" not in kept and "2026-14-30" not in kept


async def test_when_every_model_fails_the_facts_are_still_kept_word_for_word() -> None:
    adapter = MemoryAdapter(name="ollama", local=True, default=lambda r: Say("I'm sorry, no."))
    result = await ModelSummariser({"ollama": adapter}).summarise(
        trip_chat(), "", model=local_model(context=8_192)
    )
    assert result.text is not None and result.text.startswith(SECTIONS[0])
    assert result.text.endswith(BY_CONCH)  # the model wrote none of it
    assert "refused" in result.problem
    for fact in ("2026-11-29", "$1,200", "/home/priya/trips/lisbon.md", "Priya Raman"):
        assert fact in result.text
