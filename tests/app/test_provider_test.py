"""Settings' "Test" goes through the services: it lists what a provider would offer, set up as
typed, and keeps nothing it was given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.providers_config import NotSetUpError
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from tests.fakes.ollama_server import FakeModel, running_ollama


@pytest.fixture
async def services(data_dir: Path) -> AsyncIterator[AppServices]:
    built = build_services(data_dir, mock=False, secrets=SessionSecrets(), seed_demo_chat=False)
    yield built
    await built.aclose()


async def test_testing_a_server_at_an_address_lists_its_models_and_saves_nothing(
    services: AppServices,
) -> None:
    with running_ollama([FakeModel("llama3.2", 131_072)]) as ollama:
        models = await services.test_provider("ollama", ollama.url)
    assert [m.name for m in models] == ["llama3.2"]
    assert services.settings.settings.ollama_url == ""


async def test_testing_a_company_without_a_key_asks_for_one(services: AppServices) -> None:
    with pytest.raises(NotSetUpError, match=r"Add an API key first\."):
        await services.test_provider("groq")
    assert services.secrets.get("groq") is None
