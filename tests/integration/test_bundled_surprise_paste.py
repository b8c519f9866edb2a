"""A pasted page that forces a fold on the real bundled model is answered before any summary.

A short chat well inside a 2,048-token window (nothing is written ahead), then a page big
enough that the chat and it no longer fit: the fold happens in that turn, and the answer's
first token comes with no summary request sent before it. The summary is asked for after the
answer, and the next turn is answered too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._garden import counted_prose, prose
from bench._policies import surprise_paste
from engines.base import Compacted, Done, Problem, TextDelta
from engines.local.bundled import BundledRuntime, bundled_adapter
from engines.resources import read_prompt
from tests.integration.conftest import (
    SUMMARY_GUARD,
    LiveChat,
    Recorder,
    bundled_model,
    needs_bundled,
    started_runtime,
)

pytestmark = [pytest.mark.bundled, needs_bundled]

WINDOW = 2_048


@pytest.fixture(scope="module")
def runtime_2k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledRuntime]:
    yield from started_runtime(tmp_path_factory.mktemp("bundled-surprise"), WINDOW)


@pytest.mark.timeout(1_800)
async def test_a_paste_that_forces_a_fold_answers_without_a_summary_first(
    runtime_2k: BundledRuntime, tmp_path: Path
) -> None:
    system = read_prompt("system_lean.txt")
    recorder = Recorder(bundled_adapter(runtime_2k))
    chat = LiveChat(tmp_path, recorder, bundled_model(WINDOW), system=system)
    model = bundled_model(WINDOW)
    rng = random.Random(26)
    try:
        while True:
            # Sized by the chat's own count, which the server's real counts correct.
            used, room = chat.session.context_usage(model, system)
            paste = surprise_paste(used, room, chat.session.factor)
            if paste:
                break
            events = await chat.send(prose(rng, rng.randint(15, 50)))
            assert any(isinstance(e, Done) for e in events), events
            assert not [e for e in events if isinstance(e, Compacted)]
        assert not recorder.summary_requests()  # the fold was not near: nothing ahead

        start = len(recorder.sent)
        asked_first: list[bool] | None = None
        events = []
        async for event in chat.conversation.turn(counted_prose(rng, paste)):
            if isinstance(event, TextDelta) and event.text and asked_first is None:
                asked_first = [s.summary for s in recorder.sent[start:]]
            events.append(event)

        assert not [e for e in events if isinstance(e, Problem)], events
        (fold,) = [e for e in events if isinstance(e, Compacted)]
        assert fold.writing
        # The answer's first token came after one request, the answer's: no summary before.
        assert asked_first == [False]

        # The summary is asked for after the answer (what the small model makes of it is
        # the summariser's business), and the next turn is answered.
        await asyncio.wait_for(chat.session.wait_written(), SUMMARY_GUARD)
        assert [s.summary for s in recorder.sent[start:]][:2] == [False, True]
        events = await chat.send(prose(rng, 20))
        assert any(isinstance(e, Done) for e in events), events
    finally:
        await chat.close()
