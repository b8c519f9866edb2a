"""A crash of the bundled model's runtime is named, counted, and not repeated blindly.

The runtime here is ``fake_runtime.py``, a small loopback server that the real
``BundledRuntime`` starts as its child process, and that ends itself by a real signal at a
chosen moment (the self-test, before the first word, after it). The same behaviour with the
real llama.cpp runtime is in ``tests/integration/test_bundled_crash.py``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.catalogue import ModelCatalogue
from engines.base import Done, Message, ModelInfo, Problem, ProblemKind, TextDelta, TurnInput
from engines.context.session import ApiSession
from engines.local.bundled import (
    CACHE_MIB,
    CRASH_NAME,
    MODEL_ID,
    REBUILD_COMMAND,
    BundledRuntime,
    CrashBook,
    RuntimeCrashError,
    bundled_adapter,
    ending_words,
)
from engines.local.gate import background
from engines.providers.base import ChatRequest, ProviderError

FAKE = Path(__file__).with_name("fake_runtime.py")
pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.allow_log("conch.local.bundled"),  # every crash provoked here is logged
]


def fake_runtime(data_dir: Path, crash: str = "none") -> BundledRuntime:
    model = data_dir.parent / "model.gguf"
    model.write_bytes(b"GGUF")
    return BundledRuntime(
        data_dir,
        server=(sys.executable, str(FAKE), "--crash", crash),
        model_path=model,
        start_timeout=60,
    )


def starts(data_dir: Path) -> list[list[str]]:
    path = data_dir / "fake-runtime-starts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def ask(text: str = "Name three colours.") -> ChatRequest:
    return ChatRequest(model=MODEL_ID, messages=(Message(role="user", text=text),))


async def answer(runtime: BundledRuntime) -> tuple[str, BaseException | None]:
    """Stream one answer through the bundled adapter: (the text that arrived, the error)."""
    adapter = bundled_adapter(runtime)
    text: list[str] = []
    try:
        async for event in adapter.stream(ask()):
            if isinstance(event, TextDelta):
                text.append(event.text)
    except ProviderError as exc:
        return "".join(text), exc
    finally:
        await adapter.aclose()
    return "".join(text), None


@pytest.fixture
async def stopped_after() -> AsyncIterator[list[BundledRuntime]]:
    """Runtimes to stop at the end of the test, whatever happened."""
    made: list[BundledRuntime] = []
    yield made
    for runtime in made:
        await runtime.stop()


def test_endings_are_named_in_words() -> None:
    assert ending_words(-int(signal.SIGILL)) == "stopped (illegal instruction)"
    assert ending_words(-int(signal.SIGSEGV)) == "crashed (segmentation fault)"
    assert ending_words(-int(signal.SIGKILL)) == "was killed (often: out of memory)"
    assert ending_words(-int(signal.SIGABRT)) == "aborted"
    assert ending_words(3) == "exited with code 3"
    assert ending_words(-int(signal.SIGUSR1)) == "stopped (SIGUSR1)"


async def test_the_runtime_is_started_with_a_slot_for_the_chat_and_one_for_background_work(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir)
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    args = starts(data_dir)[0]
    assert args[args.index("--n_parallel") + 1] == "2"  # the chat's slot and background work's
    # the chat's state is saved in the data folder, so it outlives the runtime
    assert args[args.index("--states") + 1] == str(data_dir / "local-model-states")
    # and with a RAM cache of prompt states, for the chat a slot held before, at a size fit
    # for a small model (llama.cpp's own default is 8 GiB)
    assert args[args.index("--cache_ram_mib") + 1] == str(CACHE_MIB)


async def test_sigill_on_the_self_test_stops_the_runtime_before_it_is_called_ready(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "selftest-SIGILL")
    stopped_after.append(runtime)
    state = await runtime.start()
    assert state.phase == "stopped", (state.text, (data_dir / "local-model.log").read_text())
    assert state.text == "Stopped: its runtime stopped (illegal instruction) while starting"
    assert runtime.base_url is None and runtime.pid is None

    text, error = await answer(runtime)  # the adapter starts it again: one crash is a one-off
    assert text == ""
    assert isinstance(error, RuntimeCrashError)
    problem = error.to_problem()
    assert problem.kind is ProblemKind.RUNTIME_STOPPED
    assert problem.message.startswith(
        "The local model's runtime stopped (illegal instruction) while starting. "
        "That is 2 times in a row, so Conch will not start it again until you ask"
    )
    assert REBUILD_COMMAND in problem.message
    assert problem.next_step is not None and problem.next_step.kind == "rebuild-runtime"
    assert problem.next_step.text == REBUILD_COMMAND
    assert "fake runtime: listening" in problem.detail  # the runtime's own last log lines


async def test_a_sigsegv_before_the_first_word_asks_for_a_rebuild(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "first-SIGSEGV")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    text, error = await answer(runtime)
    assert text == ""
    assert isinstance(error, RuntimeCrashError)
    problem = error.to_problem()
    assert problem.message.startswith(
        "The local model's runtime crashed (segmentation fault) before its first word. "
        "Reinstall it: in "
    )
    assert problem.next_step is not None and problem.next_step.kind == "rebuild-runtime"
    assert problem.partial is False
    assert runtime.state.phase == "stopped"
    assert runtime.state.text == (
        "Stopped: its runtime crashed (segmentation fault) before its first word"
    )


async def test_a_one_off_kill_mid_answer_offers_a_retry_that_works_and_clears_the_count(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-SIGKILL-once")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    first = runtime.pid
    text, error = await answer(runtime)
    assert text == "Red"
    assert isinstance(error, RuntimeCrashError)
    problem = error.to_problem()
    assert problem.message == (
        "The local model's runtime was killed (often: out of memory) part-way through an answer."
    )
    assert problem.next_step is not None and problem.next_step.kind == "retry"
    assert problem.partial is True
    book = CrashBook(data_dir).last()
    assert book is not None and book.count == 1 and book.returncode == -int(signal.SIGKILL)

    text, error = await answer(runtime)  # the person pressed "Try again"
    assert error is None and text == "Red, green and blue."
    assert runtime.pid not in (None, first)
    assert not (data_dir / CRASH_NAME).exists()  # a whole answer: the runtime works again


async def test_two_answers_broken_by_one_crash_both_say_so_and_it_counts_once(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "first-SIGKILL")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    results = await asyncio.gather(answer(runtime), answer(runtime))
    errors = [error for _text, error in results]
    assert all(isinstance(e, RuntimeCrashError) for e in errors), errors
    crash = CrashBook(data_dir).last()
    assert crash is not None and crash.count == 1


async def test_background_work_never_starts_a_crashed_runtime_again(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-SIGKILL-once")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    _, error = await answer(runtime)
    assert isinstance(error, RuntimeCrashError)
    with background():  # learning, a title, a prepared summary
        _, error = await answer(runtime)
    assert isinstance(error, RuntimeCrashError)
    assert len(starts(data_dir)) == 1 and runtime.state.phase == "stopped"
    text, error = await answer(runtime)  # the person's own "Try again" does start it
    assert error is None and text == "Red, green and blue."
    assert len(starts(data_dir)) == 2


async def test_an_exit_mid_answer_is_named_with_its_code(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-exit3")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    _, error = await answer(runtime)
    assert isinstance(error, RuntimeCrashError)
    assert error.to_problem().message == (
        "The local model's runtime exited with code 3 part-way through an answer."
    )


async def test_a_dropped_connection_from_a_running_server_is_not_a_crash(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-drop")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    text, error = await answer(runtime)
    assert text == "Red"
    assert isinstance(error, ProviderError) and not isinstance(error, RuntimeCrashError)
    assert error.kind is ProblemKind.BROKEN_STREAM
    assert runtime.state.phase == "ready" and runtime.running()
    assert not (data_dir / CRASH_NAME).exists()


async def test_two_crashes_in_a_row_hold_the_runtime_until_the_person_asks(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-SIGSEGV")
    stopped_after.append(runtime)
    catalogue = ModelCatalogue([bundled_adapter(runtime)])
    seen: list[list[ModelInfo]] = []
    catalogue.on_change(seen.append)
    try:
        listed = await catalogue.refresh()  # the first use starts the runtime
        assert [(m.id, m.ready, m.status) for m in listed] == [(MODEL_ID, True, "")]

        _, error = await answer(runtime)
        assert isinstance(error, RuntimeCrashError)
        step = error.to_problem().next_step
        assert step is not None and step.kind == "retry"
        # The picker hears of it at once, and never shows the model ready.
        assert [(m.ready, m.status) for m in seen[-1]] == [(False, "stopped")]
        assert catalogue.ready_models() == []

        # Listing again does not start it again behind the person's back.
        await catalogue.refresh()
        assert len(starts(data_dir)) == 1
        assert [(m.ready, m.status) for m in catalogue.models()] == [(False, "stopped")]

        _, error = await answer(runtime)  # "Try again": a second start, a second crash
        assert isinstance(error, RuntimeCrashError)
        problem = error.to_problem()
        assert "That is 2 times in a row" in problem.message
        assert problem.next_step is not None and problem.next_step.text == "health"

        # Held: neither a new answer nor a new Conch starts it.
        _, error = await answer(runtime)
        assert isinstance(error, RuntimeCrashError) and error.refused
        assert error.to_problem().message == (
            "The local model is stopped: its runtime crashed (segmentation fault) part-way "
            "through an answer, 2 times in a row. Conch will not start it again until you ask "
            "(Settings → Health → Start the local model again)."
        )
        again = fake_runtime(data_dir, "answer-SIGSEGV")
        stopped_after.append(again)
        refused = await again.start()
        assert refused.phase == "stopped"
        assert refused.text == (
            "Stopped: its runtime crashed (segmentation fault) part-way through an answer, "
            "2 times in a row; start it again in Settings → Health"
        )
        assert again.held and again.pid is None
        assert len(starts(data_dir)) == 2

        # The person asks: it starts.
        await catalogue.start_again("local")
        assert len(starts(data_dir)) == 3
        assert [(m.ready, m.status) for m in catalogue.models()] == [(True, "")]
        assert CrashBook(data_dir).last() is None
    finally:
        await catalogue.aclose()


async def test_a_crash_ends_the_turn_with_the_sentence_and_step_in_the_session(
    data_dir: Path, stopped_after: list[BundledRuntime]
) -> None:
    runtime = fake_runtime(data_dir, "answer-SIGILL")
    stopped_after.append(runtime)
    assert (await runtime.start()).phase == "ready"
    adapter = bundled_adapter(runtime)
    session = ApiSession(chat_id="c1", data_dir=data_dir, adapters={"local": adapter})
    model = ModelInfo(provider="local", id=MODEL_ID, context=8_192, local=True)
    try:
        events = [
            e
            async for e in session.turn(
                TurnInput(chat_id="c1", seq=0, text="Name three colours.", model=model)
            )
        ]
    finally:
        await session.aclose()
        await adapter.aclose()
    assert not [e for e in events if isinstance(e, Done)]
    problems = [e.problem for e in events if isinstance(e, Problem)]
    assert len(problems) == 1
    problem = problems[0]
    assert problem.kind is ProblemKind.RUNTIME_STOPPED
    assert problem.message.startswith(
        "The local model's runtime stopped (illegal instruction) part-way through an answer. "
    )
    assert problem.next_step is not None and problem.next_step.kind == "rebuild-runtime"
    assert problem.partial is True
