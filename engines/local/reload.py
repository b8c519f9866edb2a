"""Raising the window a model on this computer is loaded with, and fetching an Ollama model.

A local model often runs with a window far below what it was trained for: LM Studio loads a
model at 4,096 tokens unless told otherwise, and an Ollama model loaded by another app may sit
at 2,048 (Conch then asks for the same, so as not to reload it under that app). When that
window is what makes a chat too long, the person can have the model loaded again with a bigger
one: LM Studio through its REST load endpoint with ``context_length`` (0.4+: unload the loaded
instance, then load a new one), Ollama by an empty chat request with the new ``num_ctx``, which
every later request then sends too (docs/local_servers.md A7, D).

The offer says how much memory the model will need: the weights (the size the server lists)
plus the KV cache, two f16 vectors per layer and per key/value head for every token of the
window. Ollama's ``/api/show`` gives the layer and head counts; LM Studio's list does not, so
there the cache is guessed from the size of the weights (on the high side).

``pull`` fetches an Ollama model with ``/api/pull``, reading its streamed progress. Stopping it
closes the stream; Ollama keeps what it already fetched and the next pull goes on from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from engines.base import ModelInfo, ProblemKind
from engines.providers import ndjson
from engines.providers.base import ProviderError, closing_stream
from engines.providers.errors import error_from_response, error_from_transport
from engines.providers.http import make_client, request_json, root_of
from engines.providers.ollama_window import (
    model_key,
    supports_no_truncate,
    total_memory,
    window_cap,
)

# The windows a reload offers, smallest first: the first that is clearly bigger is offered.
WINDOW_STEPS = (16_384, 32_768, 65_536, 131_072)
CLEARLY_MORE = 1.5  # as a "switch to" offer: a window at least this many times the current
# The most of this computer's memory one model may be planned to take.
MEMORY_SHARE = 0.8
# Bytes of weights per byte of KV cache per token when the server names no layer counts: an
# 8B model at 4 bits (4.9 GB) has about 128 KiB of cache per token; this guesses a bit more.
WEIGHTS_PER_KV_BYTE = 32_000
F16_BYTES = 2
LOAD_TIMEOUT = httpx.Timeout(connect=5.0, read=900.0, write=30.0, pool=10.0)
PULL_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=10.0)


@dataclass(frozen=True)
class ModelFacts:
    """What the server says about a model that sizes a reload."""

    trained: int | None  # the longest window the model was trained for
    weights: int | None  # bytes of weights (the listed size of the model)
    kv_per_token: int | None  # bytes of KV cache per token of window, None when not known

    def memory_at(self, window: int) -> int | None:
        """Bytes the model takes loaded with ``window``: weights plus KV cache (about)."""
        if self.weights is None:
            return None
        per_token = self.kv_per_token
        if per_token is None:
            per_token = max(1, self.weights // WEIGHTS_PER_KV_BYTE)
        return self.weights + per_token * window


@dataclass(frozen=True)
class ReloadOffer:
    """Load ``model`` again with ``window`` tokens; it will take about ``memory`` bytes."""

    model: ModelInfo  # as listed now, with the window it is loaded with
    window: int
    memory: int | None
    memory_total: int | None  # this computer's memory, to put the figure beside


@dataclass(frozen=True)
class PullProgress:
    """One step of a pull: Ollama's status words and, while fetching, bytes so far."""

    status: str
    completed: int = 0
    total: int = 0

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.completed / self.total) if self.total > 0 else None


class PullError(Exception):
    """A pull that failed, with one sentence for the person."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_per_token(info: Mapping[str, Any]) -> int | None:
    """Bytes of f16 KV cache per token, from GGUF keys (``/api/show``'s ``model_info``)."""
    arch = info.get("general.architecture")
    if not isinstance(arch, str):
        return None

    def key(name: str) -> Any:
        return info.get(f"{arch}.{name}")

    layers = _int(key("block_count"))
    heads = _int(key("attention.head_count"))
    kv = key("attention.head_count_kv")
    embedding = _int(key("embedding_length"))
    head_dim = embedding // heads if embedding and heads else None
    k_len = _int(key("attention.key_length")) or head_dim
    v_len = _int(key("attention.value_length")) or k_len
    if layers is None or k_len is None or v_len is None:
        return None
    if isinstance(kv, list):  # some models name the KV heads layer by layer
        summed = sum(n for n in kv if isinstance(n, int) and n > 0)
        return summed * (k_len + v_len) * F16_BYTES or None
    kv_heads = _int(kv) or heads
    if kv_heads is None:
        return None
    return layers * kv_heads * (k_len + v_len) * F16_BYTES


def choose_window(
    current: int, facts: ModelFacts, *, cap: int, memory_total: int | None
) -> int | None:
    """The window to offer: the smallest step clearly above ``current`` that the model was
    trained for, within ``cap``, and that leaves room in this computer's memory; None when no
    step qualifies."""
    ceiling = min(facts.trained, cap) if facts.trained else cap
    for step in WINDOW_STEPS:
        if step > ceiling:
            return None
        if step < CLEARLY_MORE * current:
            continue
        needed = facts.memory_at(step)
        if memory_total and needed and needed > MEMORY_SHARE * memory_total:
            return None
        return step
    return None


class Loader(Protocol):
    """One server's way to describe and reload a model."""

    async def facts(self, model_id: str) -> ModelFacts: ...

    async def reload(self, model_id: str, window: int, *, previous: int) -> int:
        """Load ``model_id`` with ``window`` (it has ``previous`` now); returns the window it
        is loaded with after the load."""
        ...

    async def aclose(self) -> None: ...


def _not_json(what: str) -> Callable[[httpx.Response], ProviderError]:
    def make(response: httpx.Response) -> ProviderError:
        return ProviderError(
            ProblemKind.SERVER_ERROR,
            f"{what} answered with something that is not JSON.",
            status=response.status_code,
        )

    return make


class LmStudioLoader:
    """LM Studio 0.4+: ``/api/v1/models`` for the facts, ``/api/v1/models/unload`` and
    ``/api/v1/models/load`` (``context_length`` at the top level) for the reload."""

    def __init__(self, base_url: str, *, client: httpx.AsyncClient | None = None) -> None:
        self.root = root_of(base_url)
        self._own = client is None
        self._client = client or make_client(local=True, timeout=LOAD_TIMEOUT)

    async def _entry(self, model_id: str) -> dict[str, Any]:
        listed = await request_json(
            self._client,
            "GET",
            self.root + "/api/v1/models",
            not_json=_not_json("LM Studio's model list"),
        )
        models = listed.get("models") if isinstance(listed, dict) else None
        for entry in models if isinstance(models, list) else []:
            if isinstance(entry, dict) and model_id in (entry.get("key"), entry.get("id")):
                return entry
        raise ProviderError(ProblemKind.MODEL_MISSING, f"LM Studio does not list {model_id}.")

    async def facts(self, model_id: str) -> ModelFacts:
        entry = await self._entry(model_id)
        return ModelFacts(
            trained=_int(entry.get("max_context_length")),
            weights=_int(entry.get("size_bytes")),
            kv_per_token=None,
        )

    async def reload(self, model_id: str, window: int, *, previous: int) -> int:
        entry = await self._entry(model_id)
        instances = entry.get("loaded_instances")
        # A load beside a loaded instance makes a second copy in memory: unload first.
        for instance in instances if isinstance(instances, list) else []:
            ident = instance.get("id") if isinstance(instance, dict) else None
            if isinstance(ident, str) and ident:
                await request_json(
                    self._client,
                    "POST",
                    self.root + "/api/v1/models/unload",
                    not_json=_not_json("LM Studio"),
                    json={"instance_id": ident},
                )
        loaded = await request_json(
            self._client,
            "POST",
            self.root + "/api/v1/models/load",
            not_json=_not_json("LM Studio"),
            json={"model": model_id, "context_length": window, "echo_load_config": True},
        )
        config = loaded.get("load_config") if isinstance(loaded, dict) else None
        said = _int(config.get("context_length")) if isinstance(config, dict) else None
        return said or window

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()


class OllamaServer(Protocol):
    """What the Ollama loader needs of the chat adapter (engines/providers/ollama.py)."""

    base_url: str

    def use_window(self, model: str, window: int) -> None: ...

    async def version(self) -> str | None: ...


class OllamaLoader:
    """Ollama: ``/api/show`` and ``/api/tags`` for the facts; an empty ``/api/chat`` with the new
    ``num_ctx`` loads the model (``done_reason: "load"``), and ``/api/ps`` says what it got."""

    def __init__(self, server: OllamaServer, *, client: httpx.AsyncClient | None = None) -> None:
        self.server = server
        self._own = client is None
        self._client = client or make_client(local=True, timeout=LOAD_TIMEOUT)

    @property
    def base(self) -> str:
        return self.server.base_url.rstrip("/")

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        return await request_json(
            self._client, method, self.base + path, not_json=_not_json("Ollama"), json=body
        )

    async def facts(self, model_id: str) -> ModelFacts:
        key = model_key(model_id)
        shown = await self._json("POST", "/api/show", {"model": key})
        info = shown.get("model_info") if isinstance(shown, dict) else None
        info = info if isinstance(info, dict) else {}
        arch = info.get("general.architecture")
        trained = _int(info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
        tags = await self._json("GET", "/api/tags")
        weights = None
        for entry in tags.get("models", []) if isinstance(tags, dict) else []:
            name = entry.get("name") or entry.get("model") if isinstance(entry, dict) else None
            if isinstance(name, str) and model_key(name) == key:
                weights = _int(entry.get("size"))
        return ModelFacts(trained=trained, weights=weights, kv_per_token=kv_per_token(info))

    async def reload(self, model_id: str, window: int, *, previous: int) -> int:
        key = model_key(model_id)
        body: dict[str, Any] = {
            "model": key,
            "messages": [],
            "stream": False,
            "options": {"num_ctx": window},
        }
        # The fields a chat request sends that also decide a reload (``shift`` from v0.30)
        # go the same way here, so the next chat request finds the model as it wants it.
        if supports_no_truncate(await self.server.version()):
            body["truncate"] = False
            body["shift"] = False
        try:
            await self._json("POST", "/api/chat", body)
        except ProviderError:
            self.server.use_window(key, previous)  # not loaded: keep asking for the old one
            raise
        got = window
        running = await self._json("GET", "/api/ps")
        for entry in running.get("models", []) if isinstance(running, dict) else []:
            name = entry.get("name") or entry.get("model") if isinstance(entry, dict) else None
            if isinstance(name, str) and model_key(name) == key:
                got = _int(entry.get("context_length")) or window
        # Every later request sends this num_ctx (Ollama caps it at the trained window, and
        # the budget should be the window really loaded).
        self.server.use_window(key, min(got, window))
        return min(got, window)

    async def pull(self, name: str) -> AsyncGenerator[PullProgress, None]:
        """Fetch ``name``, yielding progress; raises ``PullError`` with a sentence on failure.

        Closing the iterator (or cancelling its reader) closes the stream at once.
        """
        layers: dict[str, tuple[int, int]] = {}  # digest -> (completed, total)
        try:
            async with self._client.stream(
                "POST",
                self.base + "/api/pull",
                json={"model": name, "stream": True},
                timeout=PULL_TIMEOUT,
            ) as response:
                if response.status_code >= 400:
                    raw = (await response.aread()).decode("utf-8", errors="replace")
                    err = error_from_response(response.status_code, raw, response.headers)
                    raise PullError(f"Ollama could not fetch {name}: {err.detail}")
                async with (
                    closing_stream(response.aiter_bytes()) as chunks,
                    closing_stream(ndjson.lines(chunks)) as lines,
                    closing_stream(ndjson.objects(lines)) as objects,
                ):
                    async for obj in objects:
                        progress = _pull_step(obj, layers, name)
                        if progress is None:
                            continue
                        yield progress
                        if progress.status == "success":
                            return
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            err = error_from_transport(exc, partial=False)
            raise PullError(f"The download of {name} stopped: {err.detail}") from exc
        except ndjson.NdjsonError as exc:
            raise PullError(f"Ollama sent something that is not progress ({exc.why}).") from exc
        raise PullError(f"Ollama stopped sending {name} before it was complete.")

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()


def _pull_step(
    obj: Mapping[str, Any], layers: dict[str, tuple[int, int]], name: str
) -> PullProgress | None:
    error = obj.get("error")
    if error:
        said = error if isinstance(error, str) else json.dumps(error)
        if "file does not exist" in said or "not found" in said:
            raise PullError(f"Ollama's library has no model called {name}.")
        raise PullError(f"Ollama could not fetch {name}: {said}")
    status = obj.get("status")
    if not isinstance(status, str):
        return None
    digest = obj.get("digest")
    total = _int(obj.get("total"))
    if isinstance(digest, str) and total:
        completed = obj.get("completed")
        done = completed if isinstance(completed, int) and completed > 0 else 0
        layers[digest] = (min(done, total), total)
    done_all = sum(c for c, _ in layers.values())
    total_all = sum(t for _, t in layers.values())
    return PullProgress(status=status, completed=done_all, total=total_all)


# --- the service the app holds ------------------------------------------------------------


class LocalModels:
    """Reload offers for the models of this computer's servers, the reloads, and Ollama pulls.

    ``adapter_for(provider)`` is the catalogue's lookup. Facts are asked once per model (the
    offer itself is then worked out at once, so a card can show it as it is built).
    """

    def __init__(
        self,
        adapter_for: Callable[[str], Any],
        *,
        memory: int | Callable[[], int | None] | None = total_memory,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._adapter_for = adapter_for
        self._memory = memory
        self._client = client
        self._facts: dict[str, ModelFacts] = {}
        self._loaders: dict[tuple[str, int], Loader] = {}
        self._lock = asyncio.Lock()

    def memory_total(self) -> int | None:
        return self._memory() if callable(self._memory) else self._memory

    def _server(self, provider: str) -> Any:
        adapter = self._adapter_for(provider)
        return getattr(adapter, "inner", adapter)  # the catalogue wraps local adapters

    def loader(self, provider: str) -> Loader | None:
        """The loader for ``provider``'s server, or None when it cannot reload models."""
        server = self._server(provider)
        if server is None:
            return None
        slot = (provider, id(server))
        found = self._loaders.get(slot)
        if found is not None:
            return found
        made: Loader | None = None
        if provider == "ollama" and hasattr(server, "use_window"):
            made = OllamaLoader(server, client=self._client)
        elif provider == "lmstudio" and isinstance(getattr(server, "base_url", None), str):
            made = LmStudioLoader(server.base_url, client=self._client)
        if made is not None:
            self._loaders[slot] = made
        return made

    def can_pull(self) -> bool:
        return isinstance(self.loader("ollama"), OllamaLoader)

    def offer(self, model: ModelInfo) -> ReloadOffer | None:
        """The reload to offer for ``model`` from what is already known (None: none, or not
        known yet; ``learn`` asks the server)."""
        facts = self._facts.get(model.key)
        if facts is None or not model.local or not model.ready:
            return None
        total = self.memory_total()
        window = choose_window(model.context, facts, cap=window_cap(total), memory_total=total)
        if window is None:
            return None
        return ReloadOffer(
            model=model, window=window, memory=facts.memory_at(window), memory_total=total
        )

    async def learn(self, model: ModelInfo) -> ReloadOffer | None:
        """Ask the server about ``model`` (once), then ``offer``. A server that cannot say
        leaves no offer; it is asked again next time."""
        if model.key not in self._facts:
            loader = self.loader(model.provider) if model.local else None
            if loader is None:
                return None
            try:
                self._facts[model.key] = await loader.facts(model.id)
            except ProviderError:
                return None
        return self.offer(model)

    async def reload(self, offer: ReloadOffer) -> int:
        """Load the offer's model with its window; returns the window it has now. Raises
        ``ProviderError`` (with the server's words) when the load fails."""
        loader = self.loader(offer.model.provider)
        if loader is None:
            raise ProviderError(
                ProblemKind.UNREACHABLE, f"{offer.model.provider} is not set up any more."
            )
        async with self._lock:  # one load at a time: two would fight over the memory
            return await loader.reload(offer.model.id, offer.window, previous=offer.model.context)

    async def pull(self, name: str) -> AsyncGenerator[PullProgress, None]:
        """Fetch an Ollama model (see ``OllamaLoader.pull``)."""
        loader = self.loader("ollama")
        if not isinstance(loader, OllamaLoader):
            raise PullError("Ollama is not set up, so there is nowhere to fetch models to.")
        steps = loader.pull(name)
        try:
            async for step in steps:
                yield step
        finally:
            await steps.aclose()

    async def aclose(self) -> None:
        loaders = list(self._loaders.values())
        self._loaders.clear()
        for loader in loaders:
            with contextlib.suppress(Exception):
                await loader.aclose()
