"""Reading a provider adapter's stream in a test: every event, or the error it ends with."""

from __future__ import annotations

import pytest

from engines.base import Event, TextDelta, ThinkingDelta
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError


async def collect(adapter: ProviderAdapter, request: ChatRequest) -> list[Event]:
    return [event async for event in adapter.stream(request)]


async def failure(
    adapter: ProviderAdapter, request: ChatRequest, *, thinking: bool = False
) -> tuple[ProviderError, str]:
    """The error the stream ends with, and the answer text shown before it (with the thinking,
    when ``thinking``). The test fails if the stream ends without one."""
    shown: list[str] = []
    kinds = (TextDelta, ThinkingDelta) if thinking else (TextDelta,)
    with pytest.raises(ProviderError) as caught:
        async for event in adapter.stream(request):
            if isinstance(event, kinds):
                shown.append(event.text)
    return caught.value, "".join(shown)


def text_of(events: list[Event]) -> str:
    """The answer text of a stream's events."""
    return "".join(e.text for e in events if isinstance(e, TextDelta))
