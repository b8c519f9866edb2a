"""What the benches' scripted stand-ins for a model have in common."""

from __future__ import annotations

from engines.base import ModelInfo
from engines.providers.base import ChatRequest


class StandIn:
    """A scripted model that lists no models, names no cheap ones and holds nothing open; a
    bench gives it ``name``, ``label``, ``local`` and ``stream`` (``ProviderAdapter``)."""

    async def list_models(self) -> list[ModelInfo]:
        return []

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


def is_summary_request(request: ChatRequest) -> bool:
    """One of the summariser's requests (its first message holds the summary so far), not the
    chat's."""
    first = request.messages[0].text if request.messages else ""
    return first.startswith("<summary-so-far>")
