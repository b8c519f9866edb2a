"""A chat's temperature and answer length in Anthropic's request body (Ollama's and the
OpenAI-style ones are checked end to end in tests/app/test_chat_settings.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from engines.providers.anthropic import AnthropicAdapter
from engines.providers.base import ChatRequest
from tests.fakes.adapters import ask as one_message
from tests.fakes.anthropic_server import AnthropicServer
from tests.fakes.streams import collect


def ask(**kw: Any) -> ChatRequest:
    return one_message(model="claude-fake-1", **kw)


async def test_anthropic_gets_the_temperature_within_its_range_and_the_answer_length(
    anthropic_server: Callable[..., AnthropicServer], loopback_client: httpx.AsyncClient
) -> None:
    server = anthropic_server()
    adapter = AnthropicAdapter(api_key="sk-ant-x", base_url=server.base_url, client=loopback_client)
    await collect(adapter, ask(temperature=0.4, max_output_tokens=321))
    await collect(adapter, ask(temperature=1.8))
    await collect(adapter, ask())
    low, high, unset = (r.json for r in server.message_requests)
    assert (low["temperature"], low["max_tokens"]) == (0.4, 321)
    assert high["temperature"] == 1.0  # Anthropic accepts 0 to 1
    assert "temperature" not in unset
