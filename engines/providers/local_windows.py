"""The window a local OpenAI-style server has *loaded*, where its own lists say it.

LM Studio's REST lists (``/api/v1/models``, older ``/api/v0/models``) know which models are
loaded and at what length; llama-server says its loaded ``n_ctx`` at ``/props``. The plain
``/v1/models`` list names at most the trained ceiling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from engines.base import ModelInfo, ProblemKind
from engines.providers.base import ProviderError
from engines.providers.http import join, root_of
from engines.providers.json_fields import dig, positive_int
from engines.window import UNKNOWN_WINDOW_LOCAL

GetJson = Callable[[str], Awaitable[Any]]
# (model id, loaded window or None, trained window or None)
_Listed = tuple[str, int | None, int | None]


async def llamacpp_window(get_json: GetJson, base: str) -> int | None:
    """llama-server's loaded window from ``/props``; None when it has no such page."""
    try:
        props = await get_json(join(root_of(base), "props"))
    except ProviderError as exc:
        if exc.kind is ProblemKind.UNREACHABLE:
            raise
        return None  # /props absent (older build or a proxy in front): fall back
    if not isinstance(props, dict):
        return None
    return positive_int(dig(props, "default_generation_settings.n_ctx")) or positive_int(
        props.get("n_ctx")
    )


def llamacpp_trained_window(entry: dict[str, Any]) -> int | None:
    """A /models entry's trained ceiling, never more than a local server would load unasked."""
    # n_ctx_train is the trained ceiling, never more than what is really loaded.
    trained = positive_int(dig(entry, "meta.n_ctx_train"))
    return min(trained, UNKNOWN_WINDOW_LOCAL) if trained else None


async def lmstudio_models(
    get_json: GetJson, base: str, *, provider: str, window_override: int | None
) -> list[ModelInfo] | None:
    """LM Studio's own lists know which models are loaded and at what length."""
    root = root_of(base)
    listed: list[_Listed] | None = None
    try:
        listed = _lmstudio_v1(await get_json(join(root, "api/v1/models")))
    except ProviderError as exc:
        if exc.kind is ProblemKind.UNREACHABLE:
            raise
    if listed is None:
        try:
            listed = _lmstudio_v0(await get_json(join(root, "api/v0/models")))
        except ProviderError as exc:
            if exc.kind is ProblemKind.UNREACHABLE:
                raise
            return None
    if listed is None:
        return None
    return [_lmstudio_model(provider, window_override, *entry) for entry in listed]


def _lmstudio_model(
    provider: str,
    window_override: int | None,
    model_id: str,
    loaded: int | None,
    trained: int | None,
) -> ModelInfo:
    if window_override:
        window = window_override
    elif loaded:
        window = loaded
    else:
        # Not loaded: a JIT load uses the model's saved settings, not its trained maximum.
        window = min(trained, UNKNOWN_WINDOW_LOCAL) if trained else UNKNOWN_WINDOW_LOCAL
    return ModelInfo(
        provider=provider,
        id=model_id,
        label=model_id,
        context=window,
        local=True,
        ready=True,
        loaded=loaded is not None,
    )


def _lmstudio_v1(listed: Any) -> list[_Listed] | None:
    entries = listed.get("models") if isinstance(listed, dict) else None
    if not isinstance(entries, list):
        return None
    models: list[_Listed] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        model_id = entry.get("key") or entry.get("id")
        if not isinstance(model_id, str) or entry.get("type") in ("embedding", "embeddings"):
            continue
        loaded: int | None = None
        instances = entry.get("loaded_instances")
        if isinstance(instances, list):
            lengths = [
                positive_int(dig(instance, "config.context_length")) for instance in instances
            ]
            known = [n for n in lengths if n]
            loaded = min(known) if known else None
        trained = positive_int(entry.get("max_context_length"))
        models.append((model_id, loaded, trained))
    return models


def _lmstudio_v0(listed: Any) -> list[_Listed] | None:
    entries = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(entries, list):
        return None
    models: list[_Listed] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        if entry.get("type") in ("embedding", "embeddings"):
            continue
        loaded = positive_int(entry.get("loaded_context_length"))
        if loaded is None and entry.get("state") == "loaded":
            loaded = positive_int(entry.get("max_context_length"))
        trained = positive_int(entry.get("max_context_length"))
        models.append((entry["id"], loaded, trained))
    return models
