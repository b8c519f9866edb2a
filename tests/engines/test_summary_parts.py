"""Whatever the model writes, the summary the divider opens to has its four parts and keeps
what the person said about themselves; a pasted table is one line saying its shape."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engines.base import Message, ModelInfo
from engines.context.facts import BY_CONCH, SECTIONS, SHAPE, kept_parts
from engines.context.summarise import ModelSummariser, facts_kept
from engines.providers.ollama import OllamaAdapter
from tests.fakes.ollama_server import FakeModel, FakeReply, running_ollama

PERSON_FACTS = {
    "name": "My name is Alina Kowalczyk",
    "town": "I live in Gdańsk",
    "rent": "3,100 zloty",
    "decision": "We decided to move the piano lessons to Thursdays",
}
READINGS = "date,kwh\n" + "\n".join(
    f"2026-{1 + n // 8:02d}-{1 + n % 28:02d},{120 + 7 * n % 53}.{n % 10}" for n in range(90)
)


def chat() -> list[Message]:
    return [
        Message(role="user", text="My name is Alina Kowalczyk and I live in Gdańsk with Ewa."),
        Message(role="assistant", text="Nice to meet you, Alina."),
        Message(role="user", text="Our rent is 3,100 zloty, due on the 10th of each month."),
        Message(role="assistant", text="Noted."),
        Message(role="user", text="We decided to move the piano lessons to Thursdays."),
        Message(role="assistant", text="Thursdays it is."),
        Message(role="user", text=f"Our meter readings:\n\n{READINGS}\n\nDo they look high?"),
        Message(role="assistant", text="They rise in winter, as expected."),
    ]


def copy_of_the_chat(body: dict[str, Any]) -> FakeReply:
    user = body["messages"][-1]["content"]
    m = re.search(r"<next-part-of-the-chat>\n(.*?)\n</next-part-of-the-chat>", user, re.DOTALL)
    return FakeReply(text=m.group(1) if m else user)


def off_topic(body: dict[str, Any]) -> FakeReply:
    return FakeReply(
        text="Bathroom. A space where we gather to share what makes us who we are, our "
        "stories, traditions and humanity, so let us honour the generations before us "
        "who built sanctuaries of warmth, laughter and quiet reflection for everyone."
    )


def bare_list(body: dict[str, Any]) -> FakeReply:
    return FakeReply(text="- 3,100\n- 10\n- 2026-01-01\n- 120.0\n- 127.1\n- 134.2\n- 90")


@pytest.mark.parametrize(
    "junk", [copy_of_the_chat, off_topic, bare_list], ids=["copy", "off-topic", "bare-list"]
)
async def test_a_junk_summary_still_leaves_the_four_parts_and_every_person_fact(
    junk: Any,
) -> None:
    with running_ollama([FakeModel("smol", 8_192)], version="0.12.6", responder=junk) as ollama:
        adapter = OllamaAdapter(ollama.url, memory=64 * 2**30)
        try:
            model = ModelInfo(provider="ollama", id="smol", label="Smol", context=8_192, local=True)
            result = await ModelSummariser({"ollama": adapter}).summarise(chat(), "", model=model)
        finally:
            await adapter.aclose()
        asked = len(ollama.chat_requests())
    assert asked >= 1  # the model was asked, and what it wrote was turned down
    text = result.text
    assert text is not None and result.problem  # says why the model's words were not used
    for part in SECTIONS:
        assert part in text
    assert text.endswith(BY_CONCH)  # every line is Conch's, and the summary says so
    for fact in PERSON_FACTS.values():
        assert fact in text, fact
    assert "Bathroom" not in text and "- 127.1" not in text


def test_ninety_pasted_rows_of_numbers_are_one_line_saying_their_shape() -> None:
    for pasted in (chat(), [*chat()[:6], Message(role="user", text=READINGS, untrusted=True)]):
        summary = facts_kept("", "", pasted, 8_192)
        _body, kept, _note = kept_parts(summary)
        shapes = [x for x in kept if x.startswith(SHAPE)]
        assert shapes == ["Pasted: a table of 90 rows (date, kwh), 2026-01-01 to 2026-12-06"]
        readings = {line.split(",")[1] for line in READINGS.splitlines()[1:]}
        assert not [x for x in kept if any(r in x for r in readings)], kept
        # The person's own facts are there, with the words that say what they are.
        assert any("rent is 3,100 zloty, due on the 10th" in x for x in kept), kept
