"""The real bundled runtime is killed in the middle of an answer; the person is told what
happened and what to do, in the chat and in Health.

Each test starts its own llama.cpp server (it is killed), begins a real answer through the
app's Conversation and ApiSession, and sends the signal to the server's process as soon as the
first words arrive. The answer is kept from ending early (the end-of-turn tokens are banned)
so the signal always lands mid-answer. SIGKILL is what the kernel's out-of-memory killer
sends; SIGILL is what a runtime built for another processor dies of.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.conversation import ConvEvent
from app.health import HealthLog
from engines.base import Done, Event, Problem, ProblemKind, TextDelta, TurnProblem
from engines.local.bundled import (
    CRASH_NAME,
    REBUILD_COMMAND,
    BundledRuntime,
    CrashBook,
    bundled_adapter,
    source_checkout,
)
from engines.providers.base import ChatRequest
from tests.integration.conftest import LiveChat, Recorder, bundled_model, needs_bundled, read_log

pytestmark = [
    pytest.mark.bundled,
    needs_bundled,
    pytest.mark.allow_log("conch.local.bundled"),  # every crash provoked here is logged
]

# SmolLM2's end-of-turn (<|im_end|>) and end-of-text tokens: banned, the answer runs on.
NO_END = {"2": -100.0, "0": -100.0}
LONG_ANSWER = 400  # tokens: far more than the first word the test waits for


class Endless(Recorder):
    """The real adapter, asked for a long answer that cannot end early (until ``endless`` is
    turned off, for the person's "Try again")."""

    endless = True

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if self.endless:
            request = request.model_copy(update={"extra": {**request.extra, "logit_bias": NO_END}})
        async for event in super().stream(request):
            yield event


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[BundledRuntime]:
    rt = BundledRuntime(tmp_path / "runtime")
    state = await rt.start()
    assert state.phase == "ready", state.text
    yield rt
    await rt.stop()


async def kill_after_first_words(
    chat: LiveChat, runtime: BundledRuntime, sig: signal.Signals
) -> tuple[list[ConvEvent], int]:
    """Send a message; at the first words of the answer, send ``sig`` to the server."""
    pid = runtime.pid
    assert pid is not None
    events: list[ConvEvent] = []
    sent = False
    async for event in chat.conversation.turn("Count from one to two hundred in words."):
        events.append(event)
        if isinstance(event, TextDelta) and not sent:
            os.kill(pid, sig)
            sent = True
    assert sent, "the answer ended before its first words"
    return events, pid


def the_problem(events: list[ConvEvent]) -> TurnProblem:
    problems = [e.problem for e in events if isinstance(e, Problem)]
    assert len(problems) == 1, events
    assert not [e for e in events if isinstance(e, Done)]
    return problems[0]


@pytest.mark.timeout(600)
async def test_sigkill_mid_answer_says_the_runtime_was_killed_and_a_retry_answers(
    runtime: BundledRuntime, tmp_path: Path
) -> None:
    adapter = Endless(bundled_adapter(runtime), answer_tokens=LONG_ANSWER)
    chat = LiveChat(tmp_path, adapter, bundled_model(runtime.n_ctx), system="Be brief.")
    try:
        events, pid = await kill_after_first_words(chat, runtime, signal.SIGKILL)
        problem = the_problem(events)
        assert problem.kind is ProblemKind.RUNTIME_STOPPED
        assert problem.message == (
            "The local model's runtime was killed (often: out of memory) part-way through "
            "an answer."
        )
        assert problem.next_step is not None and problem.next_step.kind == "retry"
        assert problem.partial is True
        assert "The runtime's last log lines:" in problem.detail

        # What arrived is kept in the chat log with the problem beside it.
        saved = read_log(tmp_path, chat.chat_id)[-1]
        assert saved.role == "assistant" and saved.partial and saved.text
        assert runtime.state.phase == "stopped" and runtime.base_url is None
        crash = CrashBook(runtime.data_dir).last()
        assert crash is not None and crash.count == 1
        assert crash.returncode == -int(signal.SIGKILL)

        # "Try again": the runtime starts afresh, answers, and the crash no longer counts.
        adapter.endless = False
        adapter.answer_tokens = 8
        again = await chat.send("Say hello.")
        assert [e for e in again if isinstance(e, Done)], again
        assert runtime.pid not in (None, pid)
        assert not (runtime.data_dir / CRASH_NAME).exists()
    finally:
        await chat.close()


@pytest.mark.timeout(600)
async def test_sigill_mid_answer_names_an_illegal_instruction_and_asks_for_a_rebuild(
    runtime: BundledRuntime, tmp_path: Path
) -> None:
    adapter = Endless(bundled_adapter(runtime), answer_tokens=LONG_ANSWER)
    chat = LiveChat(tmp_path, adapter, bundled_model(runtime.n_ctx), system="Be brief.")
    try:
        events, _pid = await kill_after_first_words(chat, runtime, signal.SIGILL)
        problem = the_problem(events)
        assert problem.kind is ProblemKind.RUNTIME_STOPPED
        assert problem.message.startswith(
            "The local model's runtime stopped (illegal instruction) part-way through an answer. "
        )
        step = problem.next_step
        assert step is not None and step.kind == "rebuild-runtime"
        if source_checkout() is not None:
            assert step.label == "Reinstall the local runtime" and step.text == REBUILD_COMMAND
            assert f"run {REBUILD_COMMAND}" in problem.message
        else:
            assert step.label == "Reinstall Conch"
        crash = CrashBook(runtime.data_dir).last()
        assert crash is not None and crash.returncode == -int(signal.SIGILL)
        assert crash.log  # the runtime's last log lines, for Health
        assert runtime.state.phase == "stopped"
    finally:
        await chat.close()
    # Health has the sentence and the runtime's last log lines.
    health = HealthLog.in_dir(tmp_path)
    try:
        notes = [n for n in health.notes() if n.topic == "local-model"]
    finally:
        health.close()
    assert len(notes) == 1
    assert "illegal instruction" in notes[0].text
    assert crash.log[-1][-60:] in notes[0].text
