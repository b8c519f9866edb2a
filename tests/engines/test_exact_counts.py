"""A count by the server's own tokenizer, or usage that includes cached tokens, is exact: the
chat's estimate factor follows it down as well as up. Ollama's usage leaves out what it had
cached, so there the factor still only goes up. On loopback fakes whose tokenizers spend about
four characters a token, fed text the estimate counts at a token a character (accented words).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from engines.base import Done, Event, ModelInfo, TurnInput
from engines.context.session import ApiSession
from engines.local.gate import gated
from engines.providers.base import ProviderAdapter
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.ollama_server import FakeModel, running_ollama
from tests.fakes.openai_server import OpenAIStyleServer

CHAT = "chat-exact"
# 1,500 accented characters and about 4,000 ASCII ones: the estimate says about 2,500 tokens,
# a tokenizer spending four characters a token about 1,400.
FRENCH = "Le café crème à côté, s'il vous plaît; l'été à Noël. " * 100


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(30.0)) as c:
        yield c


async def turn(session: ApiSession, model: ModelInfo, seq: int, text: str) -> list[Event]:
    events = [
        e
        async for e in session.turn(
            TurnInput(chat_id=CHAT, seq=seq, text=text, model=model, system="Be brief.")
        )
    ]
    assert isinstance(events[-1], Done), events[-1]
    return events


def session_of(adapter: ProviderAdapter, data_dir: Path) -> ApiSession:
    return ApiSession(chat_id=CHAT, data_dir=data_dir, adapters={adapter.name: adapter})


async def test_a_tokenizer_count_lowers_the_factor_and_the_meter_follows(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    server = OpenAIStyleServer("local").start()
    try:
        adapter = gated(OpenAIAdapter(ROWS["local"], base_url=server.base_url, client=client))
        session = session_of(adapter, tmp_path)
        model = ModelInfo(provider="local", id="fake-model", context=32_768, local=True)
        before = session.context_usage(model)[0]
        await turn(session, model, 0, FRENCH)
        assert server.count_requests  # counted by the server's tokenizer before it was sent
    finally:
        server.stop()
    assert 0.4 < session.factor < 0.8
    # What the context meter shows is the count, not the estimate's 2,500.
    used = session.context_usage(model)[0] - before
    assert used < 0.8 * 2_500


async def test_ollamas_usage_never_lowers_the_factor(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    with running_ollama([FakeModel("llama3.2", 131_072)]) as fake:
        adapter = OllamaAdapter(base_url=fake.url, client=client)
        session = session_of(adapter, tmp_path)
        model = ModelInfo(provider="ollama", id="llama3.2:latest", context=32_768, local=True)
        await turn(session, model, 0, FRENCH)
        await turn(session, model, 2, FRENCH)
        assert fake.chat_requests()
    # Its prompt_eval_count was well under the estimate, but it leaves cached tokens out.
    assert session.factor == 1.0
