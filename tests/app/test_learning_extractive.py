"""Learning on a model that answers "[]" (the bundled 135M model, 4 times out of 4): the words
stay unread, and the person's own clear statements about themselves wait on the card for
their OK. Pasted text and tool results are never mined."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.learning import EMPTY_TRIES, QuietLearning, self_statements
from app.memories import MemoryBook
from app.settings import SettingsStore
from app.store import ChatStore, StoredMessage
from engines.providers.structured import LIST_OF_STRINGS
from tests.loopback_chat import ollama_services

TYPED = [
    ("Hi! My name is Priya and I live in Pune.", "Nice to meet you, Priya."),
    ("I'm a nurse at the city hospital. My budget is 3,100 rupees a month.", "Noted."),
    ("We decided to repaint the shed in May.", "Good plan."),
    ("What colour goes with teal?", "Sand."),
]
FROM_TYPED = {
    "The person's name is Priya.",
    "The person lives in Pune.",
    "The person is a nurse at the city hospital.",
    "The person's budget is 3,100 rupees a month.",
    "The person said: “We decided to repaint the shed in May.”",
}
# A pasted log (its shape makes it pasted) that holds self-statements of somebody else.
PASTED_LOG = "\n".join(
    [f"2026-11-29 14:{i:02d}:00 INFO user said: my name is Mallory" for i in range(6)]
    + ["My name is Mallory and I live in Atlantis.", "I'm allergic to penicillin."]
)


class EmptyModel:
    """A model that cannot do the task: it answers an empty list, and records what it read."""

    def __init__(self, answer: str = "[]") -> None:
        self.answer = answer
        self.read: list[str] = []

    async def __call__(self, prompt: str, text: str, *, model_key: str = "") -> str | None:
        self.read.append(text)
        await asyncio.sleep(0)
        return self.answer


@pytest.fixture
def settings(data_dir: Path) -> SettingsStore:
    s = SettingsStore.in_dir(data_dir)
    s.update(remember_automatically=True)
    return s


def make_chat(store: ChatStore, turns: Sequence[tuple[str, str]]) -> str:
    chat = store.create_chat(title="Shed", model_key="local/smollm2-135m-instruct")
    for person, answer in turns:
        store.append_message(chat.id, "user", person)
        store.append_message(chat.id, "assistant", answer)
    return chat.id


def statements(*texts: str) -> list[str]:
    return self_statements(
        [StoredMessage(chat_id="c", seq=i, role="user", text=t) for i, t in enumerate(texts)]
    )


async def test_an_empty_answer_leaves_the_words_unread_and_the_persons_words_wait(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    chat_id = make_chat(store, TYPED)
    learner = QuietLearning(store, book, settings, EmptyModel())

    run = await learner.review(chat_id, before_seq=8)

    chat = store.get_chat(chat_id)
    assert chat is not None and chat.read_until == -1 and chat.learned_at is None
    # The card: how many, and that they wait for the person's OK even with "Remember things
    # automatically" on in a chat the person only typed in.
    assert run is not None and run.waiting and run.learned == len(FROM_TYPED)
    assert run.waiting_count == len(FROM_TYPED)
    assert {m.text for m in run.memories} == FROM_TYPED
    assert book.kept_for_prompt(4_000) == ""
    book.keep_run(run.id)
    assert "The person's name is Priya." in book.kept_for_prompt(4_000)


async def test_after_a_few_empty_answers_the_words_are_read_and_proposed_once(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    chat_id = make_chat(store, TYPED)
    model = EmptyModel()
    learner = QuietLearning(store, book, settings, model)

    runs = [await learner.review(chat_id, before_seq=8) for _ in range(EMPTY_TRIES)]

    assert runs[0] is not None and all(r is None for r in runs[1:])  # proposed once
    assert len(model.read) == EMPTY_TRIES  # each look asked the model again
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.read_until == 7  # then the words count as read
    assert await learner.tidy_up() == []
    assert len(model.read) == EMPTY_TRIES
    assert len(book.list("waiting")) == len(FROM_TYPED)


async def test_an_empty_answer_where_nothing_was_said_plainly_marks_the_words_read(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    chat_id = make_chat(store, [("What colour goes with teal?", "Sand."), ("And oak?", "Moss.")])
    learner = QuietLearning(store, book, settings, EmptyModel())
    assert await learner.review(chat_id, before_seq=4) is None
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.read_until == 3
    assert book.list() == []


async def test_a_model_that_answers_keeps_its_own_memories_without_the_extractive_pass(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    chat_id = make_chat(store, TYPED)
    learner = QuietLearning(
        store, book, settings, EmptyModel('["The person is a nurse called Priya."]')
    )
    run = await learner.review(chat_id, before_seq=8)
    assert run is not None and not run.waiting
    assert [(m.text, m.status) for m in run.memories] == [
        ("The person is a nurse called Priya.", "kept")
    ]


async def test_pasted_text_and_tool_results_are_never_mined(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    chat_id = make_chat(store, [TYPED[0], (PASTED_LOG, "That log shows six logins.")])
    store.append_message(chat_id, "tool", "My name is Trent and I live in Lagos.")
    store.append_message(chat_id, "assistant", "The tool says Trent.")
    model = EmptyModel()
    learner = QuietLearning(store, book, settings, model)

    run = await learner.review(chat_id, before_seq=6)

    assert "Mallory" not in "".join(model.read) and "Trent" not in "".join(model.read)
    texts = " ".join(m.text for m in book.list())
    for foreign in ("Mallory", "Atlantis", "penicillin", "Trent", "Lagos"):
        assert foreign not in texts
    # What the person typed in a chat that read a paste waits, like everything from it.
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.untrusted
    assert run is not None and {m.status for m in run.memories} == {"waiting"}
    assert {m.text for m in run.memories} == {
        "The person's name is Priya.",
        "The person lives in Pune.",
    }


def test_clear_statements_are_kept_and_rewritten_only_when_that_is_safe() -> None:
    assert statements("Hi! My name is Priya and I live in Pune.") == [
        "The person's name is Priya.",
        "The person lives in Pune.",
    ]
    assert statements("My son is called Tom, and my daughter's name is Ada.") == [
        "The person's son is called Tom.",
        "The person's daughter's name is Ada.",
    ]
    assert statements("I'm allergic to peanuts.") == ["The person is allergic to peanuts."]
    assert statements("I'm from Kraków but I live in Berlin now.") == [
        "The person is from Kraków.",
        "The person lives in Berlin now.",
    ]
    # An object that speaks of the person again is kept in their own words.
    assert statements("I work as a data analyst for my uncle's firm.") == [
        "The person said: “I work as a data analyst for my uncle's firm.”"
    ]
    assert statements("I will order 40 litres of paint on Friday.") == [
        "The person said: “I will order 40 litres of paint on Friday.”"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "What is my name?",
        "If I live in Paris, is the rent high?",
        "Write a letter saying my name is Bob.",
        'He told me "my name is Bob" twice.',
        "Imagine a story, and my name is Bob.",
        "I'm a bit tired today.",
        "I'm a big fan of your answers.",
        "I'll let you know tomorrow.",
        "I'll try that later tonight.",
        "My password is hunter22.",
        "My name is Priya, card 4111 1111 1111 1111.",
    ],
)
def test_questions_requests_quotes_chatter_and_secrets_are_not_statements(text: str) -> None:
    assert statements(text) == []


@pytest.mark.parametrize("answer", ["[]", "I could not find anything."])
async def test_on_ollama_an_empty_or_unreadable_answer_leaves_the_words_unread(
    data_dir: Path, answer: str
) -> None:
    async with ollama_services(data_dir, answer) as (ollama, services):
        chat = services.store.create_chat(title="Shed", model_key="ollama/smollm2:latest")
        for person, said in TYPED:
            services.store.append_message(chat.id, "user", person)
            services.store.append_message(chat.id, "assistant", said)
        run = await services.learner.review(chat.id, before_seq=8)
        assert run is not None and {m.text for m in run.memories} == FROM_TYPED
        assert {m.status for m in run.memories} == {"waiting"}
        again = services.store.get_chat(chat.id)
        assert again is not None and again.read_until == -1
    learning = [b for b in ollama.chat_requests() if "format" in b]
    assert len(learning) == 1 and learning[0]["format"] == LIST_OF_STRINGS
    assert "Priya" in json.dumps(learning[0]["messages"])


class Scripted:
    """Answers each piece with the next scripted answer."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.read: list[str] = []

    async def __call__(self, prompt: str, text: str, *, model_key: str = "") -> str | None:
        self.read.append(text)
        await asyncio.sleep(0)
        return self.answers.pop(0) if self.answers else "[]"


async def test_a_model_memory_is_kept_while_the_persons_words_from_an_empty_piece_wait(
    store: ChatStore, book: MemoryBook, settings: SettingsStore
) -> None:
    filler = " The beds get compost from the council every spring." * 8
    chat_id = make_chat(
        store,
        [
            ("I coordinate the Leeds community garden." + filler, "ok"),
            ("My name is Priya and I live in Pune." + filler, "ok"),
        ],
    )
    model = Scripted('["The person coordinates a community garden in Leeds."]', "[]")
    learner = QuietLearning(store, book, settings, model, piece_chars=500)

    run = await learner.review(chat_id, before_seq=4)

    assert len(model.read) == 2  # two pieces
    chat = store.get_chat(chat_id)
    assert chat is not None and chat.read_until == 0  # the first piece is read, not the second
    assert run is not None and run.waiting and run.learned == 3 and run.waiting_count == 2
    assert {m.text: m.status for m in run.memories} == {
        "The person coordinates a community garden in Leeds.": "kept",
        "The person's name is Priya.": "waiting",
        "The person lives in Pune.": "waiting",
    }


def test_a_decision_that_points_back_is_kept_with_the_start_of_its_sentence() -> None:
    said = "The watering controller runs firmware v2.4.1; we agreed not to update it."
    assert statements(said) == [
        "The person said: “The watering controller runs firmware v2.4.1; we agreed not to "
        "update it.”"
    ]


def test_the_rent_they_named_is_kept_with_what_it_is() -> None:
    assert statements("Our rent is 3,100 zloty, due on the 10th of each month.") == [
        "The person's rent is 3,100 zloty, due on the 10th of each month."
    ]
