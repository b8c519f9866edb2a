"""Shared pieces for the tests that run the real bundled model (SmolLM2-135M on llama.cpp).

The model server is slow on a small machine (about 100-250 prompt tokens a second on one
core), so each module starts one server and shares it, and the chat model's answers are kept
short by ``Recorder`` (a pass-through adapter that also records what the session sent). The
summariser's requests go through the same adapter, so what a fold costs is real.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.conversation import Conversation, ConvEvent
from app.health import HealthLog
from app.services import history_messages
from app.store import ChatStore, StoredMessage
from bench._common import is_summary_request
from engines.base import Event, ModelInfo
from engines.context.prepare import WARM_TOKENS
from engines.context.protocols import ModelDirectory
from engines.context.session import ApiSession
from engines.context.summarise import ModelSummariser
from engines.local.bundled import MODEL_ID, MODEL_LABEL, BundledRuntime, available, missing
from engines.providers.base import ChatRequest, ProviderAdapter

needs_bundled = pytest.mark.skipif(
    not available(), reason=f"the bundled model is not installed here ({missing()})"
)

ANSWER_TOKENS = 24  # the chat model's answers: enough to be an answer, cheap to generate
SUMMARY_TOKENS = 256  # a summary reply; SmolLM2 usually stops well before this
# A hang guard for a patient chat's summaries: a loaded two-core machine takes minutes, not an hour.
SUMMARY_GUARD = 3_600.0


def bundled_model(context: int) -> ModelInfo:
    """The bundled model as a catalogue would list it, with the window it *claims*."""
    return ModelInfo(
        provider="local", id=MODEL_ID, label=MODEL_LABEL, context=context, local=True, loaded=True
    )


# --- the server ---------------------------------------------------------------------------------


def _gone(pid: int, seconds: float = 10.0) -> bool:
    """True once neither the process nor anything in its process group is left."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def started_runtime(data_dir: Path, n_ctx: int) -> Iterator[BundledRuntime]:
    """A ready bundled runtime for a whole module; stopped (and checked gone) afterwards.

    Started on a private event loop on the main thread: the kernel ties the server's life
    to the thread that started it, and each test then talks to it from its own loop.
    """
    runtime = BundledRuntime(data_dir, n_ctx=n_ctx)
    loop = asyncio.new_event_loop()
    try:
        state = loop.run_until_complete(runtime.start())
    finally:
        loop.close()
    pid = runtime.pid
    try:
        assert state.phase == "ready", state.text
        yield runtime
    finally:
        runtime.stop_now()
        assert runtime.pid is None
        if pid is not None:
            assert _gone(pid), f"the model server (pid {pid}) outlived its tests"


@pytest.fixture(scope="module")
def runtime_8k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledRuntime]:
    yield from started_runtime(tmp_path_factory.mktemp("bundled-8k"), 8_192)


# --- an adapter that records --------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    request: ChatRequest
    summary: bool  # one of the summariser's requests, not the chat's

    @property
    def warm(self) -> bool:
        """Sent in the background only so the server reads a fold's prompt ahead (its answer
        is ``WARM_TOKENS`` long and never shown): not one of the chat's turns."""
        return not self.summary and self.request.max_output_tokens == WARM_TOKENS


class Recorder:
    """Passes every request to the real adapter, records it, and caps how long replies get.

    Only ``max_output_tokens`` changes: what the session fitted into the window is sent as
    it is. (llama.cpp checks only the prompt against its window, so the cap cannot
    hide an overflow.)
    """

    def __init__(
        self,
        inner: ProviderAdapter,
        *,
        answer_tokens: int = ANSWER_TOKENS,
        summary_tokens: int = SUMMARY_TOKENS,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.label = inner.label
        self.local = inner.local
        self.answer_tokens = answer_tokens
        self.summary_tokens = summary_tokens
        self.sent: list[Sent] = []

    async def list_models(self) -> list[ModelInfo]:
        return await self.inner.list_models()

    def cheap_models(self) -> tuple[str, ...]:
        return self.inner.cheap_models()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        summary = is_summary_request(request)
        self.sent.append(Sent(request, summary))
        cap = self.summary_tokens if summary else self.answer_tokens
        capped = request.model_copy(
            update={"max_output_tokens": min(request.max_output_tokens, cap)}
        )
        async for event in self.inner.stream(capped):
            yield event

    def chat_requests(self) -> list[ChatRequest]:
        """The requests of the chat's turns (a summary's or a read-ahead's are not)."""
        return [s.request for s in self.sent if not s.summary and not s.warm]

    def warm_requests(self) -> list[ChatRequest]:
        return [s.request for s in self.sent if s.warm]

    def summary_requests(self) -> list[ChatRequest]:
        return [s.request for s in self.sent if s.summary]


# --- one chat, wired as the app wires it ----------------------------------------------------------


class Directory:
    """The app's model list, as far as a too-long card needs it."""

    def __init__(self, models: list[ModelInfo]) -> None:
        self.models = models

    def ready_models(self) -> list[ModelInfo]:
        return [m for m in self.models if m.ready]


class LiveChat:
    """A chat log, health notes, a Conversation and an ApiSession with the real summariser."""

    def __init__(
        self,
        data_dir: Path,
        adapter: Recorder,
        model: ModelInfo,
        *,
        system: str,
        directory: ModelDirectory | None = None,
        patient: bool = False,
    ) -> None:
        """``patient``: after each turn the chat waits for the summaries written in the
        background (the next fold's ahead, a fold's after its turn), as a person reading the
        answer gives them time, and the summariser has up to the hang guard; so whether a
        fold is summarised does not depend on the machine's speed."""
        self.data_dir = data_dir
        self.adapter = adapter
        self.patient = patient
        self.store = ChatStore.in_dir(data_dir)
        self.health = HealthLog.in_dir(data_dir)
        chat = self.store.create_chat(model_key=model.key)
        self.chat_id = chat.id
        adapters = {adapter.name: adapter}
        self.session = ApiSession(
            chat_id=chat.id,
            data_dir=data_dir,
            adapters=adapters,
            summariser=ModelSummariser(adapters, timeout=SUMMARY_GUARD)
            if patient
            else ModelSummariser(adapters),
            directory=directory,
            history=lambda: history_messages(self.store.messages(chat.id)),
        )
        self.conversation = Conversation(
            chat.id,
            store=self.store,
            engine=self.session,
            model=model,
            health=self.health,
            system_prompt=lambda _model: system,
        )

    async def send(self, text: str) -> list[ConvEvent]:
        events = [event async for event in self.conversation.turn(text)]
        if self.patient:
            await asyncio.wait_for(self.session.wait_prepared(), SUMMARY_GUARD)
        return events

    async def close(self) -> None:
        await self.conversation.aclose()
        self.store.close()
        self.health.close()


def read_log(data_dir: Path, chat_id: str) -> list[StoredMessage]:
    """The chat log as the next start of Conch reads it (a fresh connection)."""
    store = ChatStore.in_dir(data_dir)
    try:
        return store.messages(chat_id)
    finally:
        store.close()
