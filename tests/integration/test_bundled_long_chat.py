"""A long chat on the real bundled model (8K window): it folds, summarises, and never refuses.

Everything is the app's own code — Conversation, ApiSession, ModelSummariser, the bundled
adapter and llama.cpp's server with SmolLM2-135M — except that the chat model's
answers are capped at a few dozen tokens (see ``Recorder``) to keep the run short.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from app.conversation import MessageSaved
from app.store import ChatStore
from bench._garden import prose
from engines.base import Compacted, Done, Healed, Message, Problem, ProblemKind, TextDelta
from engines.context import transcript as tfile
from engines.context.session import SUMMARY_OPEN, ApiSession
from engines.local.bundled import MODEL_ID, WINDOW, BundledAdapter, BundledRuntime, bundled_adapter
from engines.providers.base import ChatRequest, ProviderError
from engines.resources import read_prompt
from engines.window import answer_reserve, estimate_message
from tests.integration.conftest import (
    LiveChat,
    Recorder,
    bundled_model,
    needs_bundled,
    read_log,
)

pytestmark = [pytest.mark.bundled, pytest.mark.slow, needs_bundled]

TURNS = 46
# Everyday messages and long ones (pasted notes) in turn: enough text for the 8K window to fold
# twice in 46 turns (at turns 25 and 39 in one run; a third would come near 52). Sizes are by the
# estimate; SmolLM2 reads this prose as about 0.82 of it, and the chat's factor follows its
# exact counts down, so the sizes are a fifth above what fills the window by count. Every
# message at 300-600 tokens would fold about six times, and on this machine each fold costs
# the model most of a minute (the summary request, then a fresh read of the half window that
# is kept).
SHORT_TOKENS = 100
LONG_TOKENS = 370


def request_tokens(request: ChatRequest) -> int:
    return sum(estimate_message(m) for m in request.messages)


# A hang guard only: about three minutes on two idle cores, and a busy machine may take many
# times that (a turn waits for the CPU, never for the clock).
@pytest.mark.timeout(3_600)
async def test_a_long_chat_folds_and_every_turn_is_answered(
    runtime_8k: BundledRuntime, tmp_path: Path
) -> None:
    system = read_prompt("system_lean.txt")
    model = bundled_model(WINDOW)
    recorder = Recorder(bundled_adapter(runtime_8k))
    # Patient: whether a fold is summarised must not depend on how busy the machine is.
    chat = LiveChat(tmp_path, recorder, model, system=system, patient=True)
    # No reading ahead of the folds (tests/engines/test_prepared_fold.py covers it on loopback,
    # bench.ttft on this model): here it would triple the run, with up to four prompts read in
    # the background after each turn.
    chat.session.warm_folds = False
    rng = random.Random(55)
    folds: list[Compacted] = []
    # After each fold: how many chat requests had been sent, to find the next one.
    sent_before_fold: list[int] = []
    fold_turns: list[int] = []
    started = time.monotonic()
    try:
        for i in range(TURNS):
            text = prose(rng, LONG_TOKENS if i % 2 == 1 else SHORT_TOKENS)
            chat_requests_before = len(recorder.chat_requests())
            events = await chat.send(text)

            problems = [e for e in events if isinstance(e, Problem)]
            assert not problems, f"turn {i}: the person saw a problem: {problems}"
            saved = [e for e in events if isinstance(e, MessageSaved)]
            assert [s.role for s in saved] == ["user", "assistant"], f"turn {i}: {saved}"
            assert any(isinstance(e, Done) for e in events), f"turn {i} did not finish"
            assert "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
            for e in events:
                if isinstance(e, Compacted):
                    folds.append(e)
                    sent_before_fold.append(chat_requests_before)
                    fold_turns.append(i)
            # Without a refusal, one turn is exactly one request to the chat model.
            healed = [e for e in events if isinstance(e, Healed)]
            assert len(recorder.chat_requests()) == chat_requests_before + 1 + len(healed)
    finally:
        await chat.close()
    seconds = time.monotonic() - started

    # The chat log (read back as the next start would) holds every turn with its answer,
    # none cut off or marked failed.
    log = read_log(tmp_path, chat.chat_id)
    assert [m.role for m in log] == ["user", "assistant"] * TURNS
    for m in log[1::2]:
        assert m.text.strip() and not m.partial and m.problem is None, m

    # It folded, more than once, each time further on, with a summary the model then read.
    assert len(folds) >= 2, f"only {len(folds)} fold(s) in {TURNS} turns"
    firsts = [f.first_kept_seq for f in folds]
    assert firsts == sorted(set(firsts)) and firsts[0] > 0
    assert all(f.first_kept_seq % 2 == 0 for f in folds)  # a person's message starts a turn
    assert any(f.summarised and f.summary.strip() for f in folds), "no fold got a summary"
    chat_requests = recorder.chat_requests()
    for fold, before in zip(folds, sent_before_fold, strict=True):
        after = chat_requests[before]  # the request the fold was made for
        first_user = next(m for m in after.messages if m.role == "user")
        if fold.summary.strip():
            assert first_user.text.startswith(SUMMARY_OPEN)
            assert fold.summary.strip()[:200] in first_user.text
    assert len(recorder.summary_requests()) >= len(folds)

    # Every request the model got fitted the 8K window with the answer's room, by the model's
    # own count, summary block and system prompt included. By the estimate alone one may be
    # larger: the chat's factor follows SmolLM2's exact counts down (it reads this prose as
    # about 0.82 of the estimate). Text added since the last count may take a request a little
    # past the budget (6,174 of 6,143 in one run); the window's last 10% is there for that.
    counter = BundledAdapter(runtime_8k)
    try:
        for request in chat_requests:
            assert request.window == WINDOW
            real = await counter.count_tokens(request)
            assert real is not None, request_tokens(request)
            assert real + answer_reserve(WINDOW) <= WINDOW, (real, request_tokens(request))
    finally:
        await counter.aclose()
    assert chat_requests[-1].messages[0].text.startswith(SUMMARY_OPEN)

    # What the fold left is on disk: the next start of Conch reads the same summary as the
    # chat log has for it (the fold's own, or the one written after its turn).
    store = ChatStore.in_dir(tmp_path)  # as the next start reads it
    try:
        logged = store.latest_compaction(chat.chat_id)
    finally:
        store.close()
    assert logged is not None and logged.first_kept_seq == folds[-1].first_kept_seq
    saved_file = tfile.load_transcript(tmp_path, chat.chat_id).transcript
    assert saved_file.summary == logged.summary
    assert saved_file.seqs[0] == folds[-1].first_kept_seq
    reopened = ApiSession(chat_id=chat.chat_id, data_dir=tmp_path, adapters={})
    assert reopened.context_usage(model, system)[0] > 0
    assert reopened.summary == logged.summary

    print(
        f"\n{TURNS} turns, {len(folds)} folds at turns {fold_turns} (kept from seqs {firsts}), "
        f"{len(chat_requests)} chat requests, {len(recorder.summary_requests())} summary "
        f"requests, {seconds:.0f} s"
    )


async def test_an_oversized_streamed_request_is_recognised_as_too_long(
    runtime_8k: BundledRuntime,
) -> None:
    """llama.cpp refuses it before any stream begins; the adapter reads the window it names."""
    adapter = bundled_adapter(runtime_8k)
    rng = random.Random(7)
    huge = prose(rng, 12_000)  # about 10,500 of SmolLM2's tokens: well past 8,192
    request = ChatRequest(
        model=MODEL_ID,
        messages=(Message(role="user", text=huge),),
        max_output_tokens=16,
        window=WINDOW,
    )
    try:
        with pytest.raises(ProviderError) as caught:
            async for _ in adapter.stream(request):
                pass
        error = caught.value
        assert error.too_long
        assert error.kind is ProblemKind.TOO_LONG
        assert error.window == WINDOW

        # The refusal did not take the server down: a short question still gets an answer.
        short = ChatRequest(
            model=MODEL_ID,
            messages=(Message(role="user", text="Say hello in three words."),),
            max_output_tokens=12,
            window=WINDOW,
        )
        text = "".join([e.text async for e in adapter.stream(short) if isinstance(e, TextDelta)])
        assert text.strip()
    finally:
        await adapter.aclose()
