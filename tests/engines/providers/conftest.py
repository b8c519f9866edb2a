"""Fixtures that start the fake provider servers (real HTTP on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.openai_server import OpenAIStyleServer


@pytest.fixture
def openai_server() -> Iterator[Callable[..., OpenAIStyleServer]]:
    """A factory: ``openai_server("groq", window=100)`` starts a fake in that flavour."""
    started: list[OpenAIStyleServer] = []

    def start(flavour: str = "openai", **options: Any) -> OpenAIStyleServer:
        server = OpenAIStyleServer(flavour, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def anthropic_server() -> Iterator[Callable[..., AnthropicServer]]:
    started: list[AnthropicServer] = []

    def start(**options: Any) -> AnthropicServer:
        server = AnthropicServer(**options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
async def loopback_client() -> AsyncIterator[httpx.AsyncClient]:
    """A client that never goes through a proxy, with timeouts short enough for tests."""
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(5.0)) as client:
        yield client
