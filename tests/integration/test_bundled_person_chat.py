"""A chat the way a person has one, on the real bundled model: every turn answers, folds too.

Pasted texts of a few kilobytes (notes, a table of numbers, a log), facts planted along the way,
learning on, at a 3,072-token window so the chat folds several times in sixteen turns. Wired as
the app wires it: the bundled adapter behind its server gate, the real summariser, learning and
the summaries written ahead running as background work that gives way to the person's turn,
and the estimate corrected by the runtime's own tokenizer. Between turns the test waits for the
summary being written ahead, as a person reading the answer and typing would give it time.
The model's answers are capped at a few dozen tokens (``Recorder``) to keep the run short.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.conversation import Conversation, MessageSaved
from app.health import HealthLog
from app.learning import QuietLearning
from app.memories import MemoryBook
from app.services import history_messages
from app.settings import SettingsStore
from app.store import ChatStore
from bench._person import asker
from engines.base import (
    Compacted,
    Done,
    Event,
    Problem,
    TextDelta,
)
from engines.context.calibrate import count_request
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.context.summarise import ModelSummariser
from engines.local.bundled import BundledRuntime, bundled_adapter
from engines.local.gate import gated
from engines.providers.base import ChatRequest, ProviderAdapter
from engines.resources import read_prompt
from tests.integration.conftest import (
    Recorder,
    bundled_model,
    needs_bundled,
    read_log,
    started_runtime,
)

pytestmark = [pytest.mark.bundled, pytest.mark.slow, needs_bundled]

WINDOW = 3_072
LEARN_TOKENS = 64  # a learning answer: enough for a short list, cheap to generate
SUMMARY_TOKENS = 128  # a summary reply
HANG_GUARD = 1_500.0  # about four minutes on two idle cores; this is only a hang guard

NOTES = "Notes from Tuesday's garden committee, pasted as I wrote them.\n" + "\n".join(
    f"- Item {n}: the {thing} needs a decision before the spring planting, and "
    f"{who} offered to look into it with the volunteers who come on Saturdays."
    for n, (thing, who) in enumerate(
        [
            ("watering rota", "Tomas"),
            ("compost bays", "Ines"),
            ("tool shed lock", "Mira"),
            ("seed order", "Tomas"),
            ("rainwater barrels", "Ines"),
            ("children's corner", "Mira"),
            ("south path", "the committee"),
            ("greenhouse door", "Tomas"),
        ],
        start=1,
    )
)
TABLE = "plot,holder,size_m2,fee_eur,paid\n" + "\n".join(
    f"{n},{name},{12 + n % 9},{40 + 5 * (n % 7)},{'yes' if n % 3 else 'no'}"
    for n, name in enumerate(
        [
            "Okafor",
            "Berg",
            "Lindqvist",
            "Moreau",
            "Haddad",
            "Novak",
            "Silva",
            "Kowalski",
            "Tanaka",
            "Ferreira",
            "Nilsen",
            "Rossi",
        ]
        * 2,
        start=1,
    )
)
LOG = "\n".join(
    f"2026-03-{1 + n % 28:02d} 07:{n % 60:02d}:13 pump-controller INFO cycle {n} "
    f"pressure={1.2 + (n % 5) / 10:.1f}bar flow={30 + n % 11}l/min valve=open"
    for n in range(16)
)

# What the person sends, in order: planted facts (a name, a colleague, a budget, a file, a
# date, a link), pasted notes, a table of numbers and a log, and questions about them.
SCRIPT: list[str] = [
    "Hi! I'm Mira Okafor and I run the allotment garden on Elm Street. Can you help me plan?",
    "My colleague Tomas Berg handles the volunteers. Here are our notes:\n\n" + NOTES,
    "What should we decide first?",
    "The budget for this year is 12,400 euros. Does that change your advice?",
    "Here is the plot table from our spreadsheet garden-plots-2026.csv:\n\n" + TABLE,
    "Which holders have not paid yet?",
    "The irrigation pump keeps stopping. This is from its log:\n\n" + LOG,
    "Could that be the pressure?",
    "The open day is on 14 June. What would you put on the programme?",
    "Here are the notes again with my comments:\n\n" + NOTES.replace("offered", "promised"),
    "Please remind me who looks after the volunteers.",
    "We keep the shared plan at https://example.org/elm-street-plan. Anything to add?",
    "The pump log from this morning:\n\n" + LOG.replace("INFO", "WARN"),
    "Should we call the installer?",
    "What was our budget again?",
    "One last thing: what is my name?",
]


class CountingRecorder(Recorder):
    """``Recorder`` that also counts requests through the runtime's tokenizer, and gives a
    learning request room for a short list."""

    def __init__(self, inner: ProviderAdapter) -> None:
        super().__init__(inner, summary_tokens=SUMMARY_TOKENS)
        self.counts = 0
        self.learn_prompt = read_prompt("learn.txt")

    async def count_tokens(self, request: ChatRequest) -> int | None:
        counted = await count_request(self.inner, request)
        if counted is not None:
            self.counts += 1
        return counted

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if request.system == self.learn_prompt:
            capped = request.model_copy(
                update={"max_output_tokens": min(request.max_output_tokens, LEARN_TOKENS)}
            )
            async for event in self.inner.stream(capped):
                yield event
            return
        async for event in super().stream(request):
            yield event


@pytest.fixture(scope="module")
def runtime_3k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledRuntime]:
    yield from started_runtime(tmp_path_factory.mktemp("bundled-3k"), WINDOW)


@pytest.mark.timeout(HANG_GUARD)
async def test_a_person_like_chat_answers_every_turn_through_every_fold(
    runtime_3k: BundledRuntime, tmp_path: Path
) -> None:
    model = bundled_model(WINDOW)
    recorder = CountingRecorder(gated(bundled_adapter(runtime_3k)))
    adapters: dict[str, ProviderAdapter] = {recorder.name: recorder}
    store = ChatStore.in_dir(tmp_path)
    health = HealthLog.in_dir(tmp_path)
    book = MemoryBook.in_dir(tmp_path)
    settings = SettingsStore.in_dir(tmp_path)
    chat = store.create_chat(model_key=model.key)
    session = ApiSession(
        chat_id=chat.id,
        data_dir=tmp_path,
        adapters=adapters,
        summariser=ModelSummariser(adapters),
        history=lambda: history_messages(store.messages(chat.id)),
    )
    learner = QuietLearning(store, book, settings, asker(recorder, model), health=health)
    conversation = Conversation(
        chat.id,
        store=store,
        engine=session,
        model=model,
        learner=learner,
        health=health,
        system_prompt=lambda _model: read_prompt("system_lean.txt"),
    )
    folds: list[tuple[int, Compacted]] = []
    summaries_in_fold_turns = 0
    started = time.monotonic()
    try:
        for i, text in enumerate(SCRIPT):
            summaries_before = len(recorder.summary_requests())
            events = [e async for e in conversation.turn(text)]
            problems = [e for e in events if isinstance(e, Problem)]
            assert not problems, f"turn {i} failed: {problems}"
            assert any(isinstance(e, Done) for e in events), f"turn {i} did not finish"
            answer = "".join(e.text for e in events if isinstance(e, TextDelta))
            assert answer.strip(), f"turn {i} has an empty answer"
            saved = [e.role for e in events if isinstance(e, MessageSaved)]
            assert saved == ["user", "assistant"], f"turn {i}: {saved}"
            for e in events:
                if isinstance(e, Compacted):
                    folds.append((i, e))
                    summaries_in_fold_turns += len(recorder.summary_requests()) - summaries_before
            # The person reads the answer and types the next message meanwhile.
            await asyncio.wait_for(session.wait_prepared(), HANG_GUARD)
    finally:
        await conversation.aclose()  # lets a learning run under way finish
        seconds = time.monotonic() - started
        chat_log = read_log(tmp_path, chat.id)
        store.close()
        health.close()
        book.close()

    # Every turn answered, in full, in the chat log as the next start reads it.
    assert [m.role for m in chat_log] == ["user", "assistant"] * len(SCRIPT)
    for m in chat_log[1::2]:
        assert m.text.strip() and not m.partial and m.problem is None, m
    # It folded several times, each further on, and the request after a fold carried the
    # summary in front of the first kept message.
    assert len(folds) >= 2, f"only {len(folds)} fold(s)"
    firsts = [f.first_kept_seq for _i, f in folds]
    assert firsts == sorted(set(firsts))
    assert any(f.summary.strip() for _i, f in folds)
    assert any(
        next(m for m in r.messages if m.role == "user").text.startswith(SUMMARY_OPEN)
        for r in recorder.chat_requests()[folds[0][0] :]
    )
    # The estimate was corrected by the runtime's own tokenizer (it streams no usage); the
    # count is exact, so the factor is the last count's, above or below 1.
    assert recorder.counts >= len(folds)
    assert session.factor != 1.0
    print(
        f"\n{len(SCRIPT)} turns in {seconds:.0f} s; folds at turns {[i for i, _f in folds]}; "
        f"{len(recorder.summary_requests())} summary requests, {summaries_in_fold_turns} "
        f"of them inside a fold turn; {recorder.counts} counts; factor {session.factor:.2f}"
    )
