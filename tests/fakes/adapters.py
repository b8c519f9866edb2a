"""What the provider tests ask a fake server with: a one-message request, and an OpenAI-style
adapter pointed at a fake server's address."""

from __future__ import annotations

from typing import Any

import httpx

from engines.base import Message
from engines.providers.base import ChatRequest
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import OpenAIStyleServer


def ask(text: str = "Hello?", model: str = "fake-model", **kw: Any) -> ChatRequest:
    """A request of one message from the person."""
    return ChatRequest(model=model, messages=(Message(role="user", text=text),), **kw)


def openai_adapter(
    server: OpenAIStyleServer, client: httpx.AsyncClient, row: str | None = None, **kw: Any
) -> OpenAIAdapter:
    """The adapter of ``row`` (the server's own flavour when None) at the server's address."""
    kw.setdefault("base_url", server.base_url)
    return OpenAIAdapter(ROWS[row or server.flavour], client=client, **kw)
