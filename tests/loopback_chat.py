"""Chat set-ups on loopback servers that several tests share.

A chat on a model API whose summaries a test holds back (``held_summaries``, ``api_conversation``,
``SummaryWaiter``), and the real app services learning from a fake Ollama (``ollama_services``,
its settings ``only_ollama``).
The fixtures on them (``api``, ``api_adapter``) and the chat log's and memory book's
(``store``, ``book``) are in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.services import AppServices, build_services, history_messages, latest_fold
from app.settings import SettingsStore
from app.store import ChatStore
from engines.base import ModelInfo, SummaryWritten
from engines.context.session import ApiSession
from engines.context.summarise import ModelSummariser
from engines.providers.base import ProviderAdapter
from engines.providers.openai import OpenAIAdapter
from tests.fakes.http import free_port
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.waits import HANG_SECONDS

API_MODEL = ModelInfo(provider="openai", id="gpt-fake", label="GPT Fake", context=4_096)
SMOLLM2 = (FakeModel("smollm2", 8_192),)
SUMMARY = "The person asked about Marta's garden rota and the tomatoes."


def turn_text(i: int) -> str:
    """A person's turn of about 450 tokens: four of them nearly fill a 4K model's budget."""
    return f"Turn {i}: Marta keeps the garden rota. " + (
        "We talked about watering the tomatoes and the beans. " * 30
    )


# About 1,200 tokens: with four turns before it, more than a 4K model's budget holds.
PASTE = "Here is the pump log:\n" + "\n".join(
    f"line {k}: the pump ran for {k % 60} minutes" for k in range(130)
)


@contextmanager
def held_summaries(summary: str = SUMMARY, provider: str = "openai") -> Iterator[OpenAIStyleServer]:
    """A started OpenAI-style server whose summary requests get ``summary``, each held until
    the test sets ``summary_gate``; let go and stopped on exit."""
    server = OpenAIStyleServer(provider)
    server.summary_gate = threading.Event()
    server.summary_script = Script(text=[summary])
    server.start()
    try:
        yield server
    finally:
        server.summary_gate.set()
        server.stop()


def api_conversation(
    chat_id: str,
    store: ChatStore,
    data_dir: Path,
    adapters: Mapping[str, ProviderAdapter],
    model: ModelInfo = API_MODEL,
) -> Conversation:
    """The chat as the app opens it on a model API: a new ``ApiSession`` on its transcript
    file and chat log, its folds summarised by ``ModelSummariser``."""
    by_name = dict(adapters)
    session = ApiSession(
        chat_id=chat_id,
        data_dir=data_dir,
        adapters=by_name,
        summariser=ModelSummariser(by_name),
        history=lambda: history_messages(store.messages(chat_id)),
        latest_fold=lambda: latest_fold(store, chat_id),
    )
    return Conversation(chat_id, store=store, engine=session, model=model)


def new_api_chat(store: ChatStore, data_dir: Path, adapter: OpenAIAdapter) -> Conversation:
    """A new chat on ``API_MODEL`` through ``adapter``, as the app starts one."""
    chat = store.create_chat(model_key=API_MODEL.key)
    return api_conversation(chat.id, store, data_dir, {"openai": adapter})


class SummaryWaiter:
    """A conversation's ``on_summary``: keeps what it hears, and waits for the first."""

    def __init__(self) -> None:
        self.heard: list[SummaryWritten] = []
        self._written = asyncio.Event()

    def __call__(self, event: SummaryWritten) -> None:
        self.heard.append(event)
        self._written.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self._written.wait(), HANG_SECONDS)

    async def let_go(self, api: OpenAIStyleServer) -> SummaryWritten:
        """Lets the summary request ``api`` holds go; returns the one summary the chat wrote."""
        assert api.summary_gate is not None
        api.summary_gate.set()
        await self.wait()
        (done,) = self.heard
        return done


def only_ollama(data_dir: Path, ollama_url: str | None = None) -> None:
    """Settings in ``data_dir`` whose only server is the Ollama at ``ollama_url``, or none:
    every other server's address is a free port nothing listens on, and no bundled model."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    SettingsStore.in_dir(data_dir).update(
        ollama_url=ollama_url or nowhere,
        lmstudio_url=nowhere,
        llamacpp_url=nowhere,
        vllm_url=nowhere,
        bundled_model=False,
        remember_automatically=True,
    )


@asynccontextmanager
async def ollama_services(
    data_dir: Path, answer: str, models: Sequence[FakeModel] = SMOLLM2
) -> AsyncIterator[tuple[FakeOllama, AppServices]]:
    """The real app services with automatic learning on, whose only server is a fake Ollama
    (with ``models``: SmolLM2, 8K, unless told) answering every request with ``answer``; the
    services close on exit."""

    def reply(body: dict[str, Any]) -> FakeReply:
        return FakeReply(text=answer)

    with running_ollama(models, responder=reply) as ollama:
        assert isinstance(ollama, FakeOllama)
        only_ollama(data_dir, ollama.url)
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            yield ollama, services
        finally:
            await services.aclose()
