"""What the benches' scripted stand-ins for a model have in common."""

from __future__ import annotations

from engines.base import ModelInfo


class StandIn:
    """A scripted model that lists no models, names no cheap ones and holds nothing open; a
    bench gives it ``name``, ``label``, ``local`` and ``stream`` (``ProviderAdapter``)."""

    async def list_models(self) -> list[ModelInfo]:
        return []

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None
