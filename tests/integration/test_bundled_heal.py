"""A "too long" refusal from the real bundled model heals itself, or ends in a card with a way on.

The server runs with a 2,048-token window while the chat believes the model reads 8,192, as a
stale catalogue entry would: the session sends a request that fits 8K, llama.cpp refuses it
(a 400 naming 2,048), and the session must learn the window,
fold, shorten and send again once — or, when nothing can fit, say so with one next step.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.conversation import MessageSaved
from bench._garden import prose
from engines.base import HUMAN_TEXT, Compacted, Healed, ModelInfo, Note, Problem, ProblemKind
from engines.context import transcript as tfile
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.local.bundled import BundledRuntime, bundled_adapter
from engines.resources import read_prompt
from engines.window import budget, estimate_message, estimate_tokens
from tests.integration.conftest import (
    Directory,
    LiveChat,
    Recorder,
    bundled_model,
    needs_bundled,
    read_log,
    started_runtime,
)

pytestmark = [pytest.mark.bundled, needs_bundled]

REAL_WINDOW = 2_048  # what the server was started with
CLAIMED_WINDOW = 8_192  # what the (stale) model list says


@pytest.fixture(scope="module")
def runtime_2k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledRuntime]:
    yield from started_runtime(tmp_path_factory.mktemp("bundled-2k"), REAL_WINDOW)


@pytest.mark.timeout(600)
async def test_a_refusal_for_length_heals_once_and_the_window_is_remembered(
    runtime_2k: BundledRuntime, tmp_path: Path
) -> None:
    system = read_prompt("system_lean.txt")
    model = bundled_model(CLAIMED_WINDOW)
    recorder = Recorder(bundled_adapter(runtime_2k))
    chat = LiveChat(tmp_path, recorder, model, system=system)
    rng = random.Random(2048)
    try:
        # Turn 1 fits the real window; turn 2 on top of it does not (about 2,400 tokens),
        # though both together fit the 8K the chat was told about.
        first = await chat.send(prose(rng, 700))
        assert not [e for e in first if isinstance(e, Problem | Healed)]
        sent_before = len(recorder.chat_requests())
        second_text = prose(rng, 2_000)
        second = await chat.send(second_text)
        turn_requests = recorder.chat_requests()[sent_before:]

        problems = [e for e in second if isinstance(e, Problem)]
        assert not problems, problems
        healed = [e for e in second if isinstance(e, Healed)]
        assert len(healed) == 1
        assert healed[0].window == REAL_WINDOW
        # Exactly one resend: the refused request and the one that was answered.
        assert len(turn_requests) == 2
        refused, resent = turn_requests
        assert refused.window == CLAIMED_WINDOW
        assert resent.window == REAL_WINDOW
        # The resend fitted the learned window: turn 1 folded into a summary in front, the
        # person's long message shortened with a visible marker.
        assert sum(estimate_message(m) for m in resent.messages) <= budget(
            REAL_WINDOW, estimate_tokens(resent.system)
        )
        assert [m.role for m in resent.messages] == ["user"]
        assert any(isinstance(e, Compacted) for e in second)
        person = resent.messages[0].text
        if chat.session.summary:
            assert person.startswith(SUMMARY_OPEN)
        assert "characters left out" in person
        assert second_text[:60] in person and second_text[-60:] in person
        notes = [e for e in second if isinstance(e, Note) and e.topic == "window-learned"]
        assert len(notes) == 1 and "2,048" in notes[0].text

        # The answer is in the chat log, complete; Health noted the healing.
        saved = [e for e in second if isinstance(e, MessageSaved)]
        assert [s.role for s in saved] == ["user", "assistant"]
        answer = chat.store.message(chat.chat_id, saved[1].seq)
        assert answer is not None and answer.text.strip()
        assert not answer.partial and answer.problem is None
        assert chat.health.notes(topic="healed")
        assert chat.session.learned_window(model) == REAL_WINDOW

        # The next turn is fitted to 2,048 from the start: one request, no refusal.
        sent_before = len(recorder.chat_requests())
        third = await chat.send(prose(rng, 300))
        assert not [e for e in third if isinstance(e, Problem | Healed)]
        assert len(recorder.chat_requests()) == sent_before + 1
        assert recorder.chat_requests()[-1].window == REAL_WINDOW
    finally:
        await chat.close()

    # Remembered across a restart, as a hint: the server may have been fixed meanwhile, so
    # the listing counts until a refusal confirms the learned window (which then heals at once).
    saved_file = tfile.load_transcript(tmp_path, chat.chat_id).transcript
    assert saved_file.windows.get(model.key) == REAL_WINDOW
    reopened = ApiSession(chat_id=chat.chat_id, data_dir=tmp_path, adapters={})
    assert reopened.learned_window(model) == REAL_WINDOW
    assert reopened.window_for(model) == CLAIMED_WINDOW


BIGGER = ModelInfo(
    provider="ollama", id="llama3.2:3b", label="Llama 3.2 3B", context=32_768, local=True
)


@pytest.mark.parametrize(
    ("offered", "step"),
    [([BIGGER], "switch-model"), ([], "new-chat")],
    ids=["a-bigger-model-is-ready", "no-bigger-model"],
)
async def test_when_nothing_fits_the_person_gets_one_next_step(
    runtime_2k: BundledRuntime, tmp_path: Path, offered: list[ModelInfo], step: str
) -> None:
    """The system prompt alone is larger than the real window: no fold or cut can help."""
    rng = random.Random(99)
    system = read_prompt("system_lean.txt") + "\n\nNotes to keep in mind:\n" + prose(rng, 2_700)
    model = bundled_model(CLAIMED_WINDOW)
    recorder = Recorder(bundled_adapter(runtime_2k))
    chat = LiveChat(tmp_path, recorder, model, system=system, directory=Directory(offered))
    question = "What should we plant first this spring?"
    try:
        events = await chat.send(question)
        assert chat.health.notes(topic="too-long")
    finally:
        await chat.close()

    problems = [e.problem for e in events if isinstance(e, Problem)]
    assert len(problems) == 1
    problem = problems[0]
    assert problem.kind is ProblemKind.TOO_LONG
    assert problem.message == HUMAN_TEXT[ProblemKind.TOO_LONG]
    assert problem.next_step is not None
    assert problem.next_step.kind == step
    if step == "switch-model":
        assert problem.next_step.model == BIGGER
        assert BIGGER.name in problem.next_step.label
    else:
        assert problem.next_step.text == question
    assert not [e for e in events if isinstance(e, Healed)]
    # Nothing could fit the window the refusal named: the turn was tried once more as it was
    # (the one re-send a refusal gets; a learned window is a hint, never a wall), then the card.
    assert len(recorder.chat_requests()) == 2

    # The person's message is kept, and the failed answer is marked with the problem.
    log = read_log(tmp_path, chat.chat_id)
    assert [m.role for m in log] == ["user", "assistant"]
    assert log[0].text == question
    assert log[1].problem is not None and log[1].problem.kind is ProblemKind.TOO_LONG
