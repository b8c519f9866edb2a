"""The model catalogue: every model every configured provider offers, and which are ready.

Providers are asked concurrently; one that cannot be reached is noted (Health, topic
"unreachable") and skipped, so a stopped LM Studio never delays Ollama's list. The note is
written once per change of state, not on every look: the Health file remembers which servers
are down, so a server that stays down across many ``conch ask`` calls (each a new process) is
noted once, and once more ("reachable") when it answers again. A model is
"ready" when its server answered and it is pulled/loaded or keyed (the adapter says so). The
catalogue is also the engine's ``ModelDirectory``: a too-long card offers the ready model that
reads clearly more.

An adapter whose models can stop answering between lists (the bundled model's runtime after a
crash) may offer ``status() -> str`` — why its models cannot answer now ("stopped"), "" when
they can — and ``watch(listener) -> stop`` to say when that changed. While ``status`` is not
empty its models are listed not ready, carrying the status for the picker. ``start_again``
asks such an adapter to start its runtime again, when the person says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol
from urllib.parse import urlsplit

from app.health import Notes
from engines.base import ModelInfo
from engines.listeners import Listeners
from engines.local.gate import GatedAdapter, ServerGate, gated
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.providers.base import ProviderAdapter, ProviderError
from engines.providers.registry import PROVIDERS
from engines.window import unknown_window

log = logging.getLogger("conch.catalogue")

LIST_TIMEOUT = 15.0  # seconds one provider may take to list its models


class Fact(Protocol):
    """A kept window (``app.settings.LearnedWindow``)."""

    @property
    def window(self) -> int: ...

    @property
    def listed(self) -> int: ...


class WindowMemory(Protocol):
    """Where windows servers on this computer named in a refusal are kept, for every process
    (``app.settings.SettingsStore``)."""

    def learned_window(self, key: str) -> Fact | None: ...

    def learn_window(self, key: str, window: int, listed: int) -> None: ...

    def forget_window(self, key: str) -> None: ...


class HealthNotes(Notes, Protocol):
    """Health, with what it remembers of which servers were down."""

    def mark_unreachable(self, server: str) -> bool: ...

    def mark_reachable(self, server: str) -> bool: ...


def server_key(adapter: ProviderAdapter) -> str:
    """Which server a provider is, for remembering it was down: its name and address (without
    any user, password or query, which may hold a secret). A new address is a new server."""
    inner = getattr(adapter, "inner", adapter)
    base = getattr(inner, "base_url", None)
    if not isinstance(base, str) or not base:
        return adapter.name
    try:
        parts = urlsplit(base)
        where = f"{parts.scheme}://{parts.hostname or ''}"
        if parts.port is not None:
            where += f":{parts.port}"
    except ValueError:
        return adapter.name
    return f"{adapter.name} {where}{parts.path.rstrip('/')}"


def window_key(adapter: ProviderAdapter, model_id: str) -> str:
    """Which server and model a learned window belongs to: the server's name and address
    (``server_key``), then the model's id."""
    return f"{server_key(adapter)} {model_id}"


def split_key(key: str) -> tuple[str, str]:
    """("provider", "model-id") from "provider/model-id" (ids may hold slashes themselves)."""
    provider, _, model_id = key.partition("/")
    return provider, model_id


def provider_is_local(provider: str) -> bool:
    """Whether a provider Conch knows by name runs on this computer; one it does not know (a
    provider no longer offered, a damaged key) counts as local, so nothing of its chats goes
    anywhere else on a guess. The programs (Claude Code, Codex) send to their company."""
    if provider == PROGRAMS:
        return False
    known = PROVIDERS.get(provider)
    return known.local if known is not None else True


def key_is_local(model_key: str) -> bool:
    """``provider_is_local`` for a "provider/model-id" key (a chat's model, a message's)."""
    return provider_is_local(split_key(model_key)[0])


def status_of(adapter: ProviderAdapter) -> str:
    """Why ``adapter``'s models cannot answer now (see the module doc); "" when they can."""
    status = getattr(adapter, "status", None)
    if not callable(status):
        return ""
    try:
        said = status()
    except Exception:  # a status is a hint; it must never break the list
        log.exception("%s: status failed", adapter.name)
        return ""
    return said if isinstance(said, str) else ""


def with_window(model: ModelInfo, local: bool) -> ModelInfo:
    """The model with a usable window: unknown → 8,192 on this computer, 128,000 for an API."""
    if model.context > 0:
        return model
    return model.model_copy(update={"context": unknown_window(model.local or local)})


class ModelCatalogue:
    """What the configured providers offer. Implements ``engines.context.protocols.ModelDirectory``.

    ``probed`` names providers Conch only looked for at their usual address (the person never
    set them up): their absence is recorded in ``unreachable`` but not written to Health.
    """

    def __init__(
        self,
        adapters: Iterable[ProviderAdapter] = (),
        *,
        health: HealthNotes | None = None,
        probed: Collection[str] = (),
        timeout: float = LIST_TIMEOUT,
        windows: WindowMemory | None = None,
    ) -> None:
        self._adapters: dict[str, ProviderAdapter] = {}
        for adapter in adapters:
            self._adapters[adapter.name] = gated(adapter)
        self.health = health
        self.probed: set[str] = set(probed)
        self.timeout = timeout
        self.windows = windows
        self._models: dict[str, list[ModelInfo]] = {}
        self._listed_windows: dict[str, int] = {}  # model key → the window its server's list says
        self.unreachable: dict[str, str] = {}  # provider → why, from the latest refresh
        self.problems: dict[str, str] = {}  # provider → other failures (a refused key, …)
        self._listeners: Listeners[[list[ModelInfo]]] = Listeners("a catalogue listener")
        self._lock = asyncio.Lock()
        self._retired: list[ProviderAdapter] = []  # replaced adapters, closed at the end
        self._unwatch: dict[str, Callable[[], None]] = {}
        self.refreshed = False
        for adapter in self._adapters.values():
            self._watch(adapter)

    # --- providers ----------------------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, ProviderAdapter]:
        return dict(self._adapters)

    @property
    def live_adapters(self) -> Mapping[str, ProviderAdapter]:
        """The catalogue's own mapping: an engine holding it sees providers added later."""
        return self._adapters

    def adapter(self, provider: str) -> ProviderAdapter | None:
        return self._adapters.get(provider)

    def replace_provider(self, adapter: ProviderAdapter, *, probed: bool = False) -> None:
        """Put ``adapter`` in place of the provider of that name (closed later, not now:
        a turn may still be streaming through it). Call ``refresh`` after."""
        old = self._adapters.get(adapter.name)
        # A server on this computer takes one piece of work at a time (engines/local/gate.py).
        same = isinstance(old, GatedAdapter) and old.inner is adapter
        adapter = old if same and old is not None else gated(adapter)
        self._adapters[adapter.name] = adapter
        if probed:
            self.probed.add(adapter.name)
        else:
            self.probed.discard(adapter.name)
        if old is not adapter:
            if old is not None:
                self._retired.append(old)
            self._watch(adapter)

    def _watch(self, adapter: ProviderAdapter) -> None:
        stop = self._unwatch.pop(adapter.name, None)
        if stop is not None:
            stop()
        watch = getattr(adapter, "watch", None)
        if callable(watch):
            self._unwatch[adapter.name] = watch(self._changed)

    async def add_provider(
        self, adapter: ProviderAdapter, *, probed: bool = False
    ) -> list[ModelInfo]:
        """Add (or replace) a provider and refresh the list."""
        self.replace_provider(adapter, probed=probed)
        return await self.refresh()

    def remove_provider(self, name: str) -> list[ModelInfo]:
        adapter = self._adapters.pop(name, None)
        stop = self._unwatch.pop(name, None)
        if stop is not None:
            stop()
        self._models.pop(name, None)
        self.unreachable.pop(name, None)
        self.problems.pop(name, None)
        if adapter is not None:
            self._retired.append(adapter)  # a turn may still stream through it
        self._changed()
        return self.models()

    # --- listing ------------------------------------------------------------------------------

    async def _list(self, adapter: ProviderAdapter) -> list[ModelInfo] | Exception:
        try:
            async with asyncio.timeout(self.timeout):
                return await adapter.list_models()
        except Exception as exc:  # reported per provider, never raised
            return exc

    async def refresh(self) -> list[ModelInfo]:
        """Ask every provider at once; returns every model found (ready or not)."""
        async with self._lock:
            names = list(self._adapters)
            results = await asyncio.gather(*(self._list(self._adapters[n]) for n in names))
            for name, result in zip(names, results, strict=True):
                adapter = self._adapters[name]
                if isinstance(result, Exception):
                    self._failed(adapter, result)
                    continue
                was_unreachable = name in self.unreachable
                self.unreachable.pop(name, None)
                self.problems.pop(name, None)
                listed = [with_window(m, adapter.local) for m in result]
                self._models[name] = [self._with_fact(adapter, m) for m in listed]
                if was_unreachable:
                    log.info("%s is reachable again", adapter.label)
                self._reachable(adapter)
            self.refreshed = True
        self._changed()
        return self.models()

    # --- windows servers named --------------------------------------------------------------

    def _with_fact(self, adapter: ProviderAdapter, model: ModelInfo) -> ModelInfo:
        """``model`` with the window its server named in a refusal, while the server still
        lists what it listed then (a new list means it was started again)."""
        self._listed_windows[model.key] = model.context
        if self.windows is None or not (adapter.local or model.local):
            return model
        key = window_key(adapter, model.id)
        fact = self.windows.learned_window(key)
        if fact is None:
            return model
        if fact.listed and fact.listed != model.context:
            log.info("%s lists another window for %s; forgetting %s", adapter.label, model.id, fact)
            self.windows.forget_window(key)
            return model
        return model.model_copy(update={"context": min(model.context, fact.window)})

    def window_learned(self, model: ModelInfo, window: int) -> None:
        """A refusal named ``window`` for ``model`` (the engine says so): kept for every
        process, and the model is listed with it from now on."""
        adapter = self._adapters.get(model.provider)
        if self.windows is None or adapter is None or not (adapter.local or model.local):
            return
        listed = self._listed_windows.get(model.key, model.context)
        self.windows.learn_window(window_key(adapter, model.id), window, listed)
        self._set_context(model, min(listed, window))

    def window_answered(self, model: ModelInfo, tokens: int) -> None:
        """The server read ``tokens`` for ``model``: a kept window smaller than that is wrong
        (the server was started again with a larger one) and is dropped."""
        adapter = self._adapters.get(model.provider)
        if self.windows is None or adapter is None:
            return
        key = window_key(adapter, model.id)
        fact = self.windows.learned_window(key)
        if fact is None or tokens <= fact.window:
            return
        self.windows.forget_window(key)
        self._set_context(model, self._listed_windows.get(model.key, model.context))

    def _set_context(self, model: ModelInfo, context: int) -> None:
        models = self._models.get(model.provider)
        if not models:
            return
        self._models[model.provider] = [
            m.model_copy(update={"context": context}) if m.id == model.id else m for m in models
        ]
        self._changed()

    def _failed(self, adapter: ProviderAdapter, exc: Exception) -> None:
        name = adapter.name
        slow = isinstance(exc, TimeoutError) or (
            isinstance(exc, ProviderError) and exc.kind.value == "timeout"
        )
        gate = getattr(adapter, "gate", None)
        if slow and isinstance(gate, ServerGate) and gate.working:
            # A server on this computer reading or answering for Conch is busy, not gone: its
            # models stay listed and Health gets no note (it used to flap "unreachable").
            log.info("%s is busy; its models stay listed", adapter.label)
            return
        self._models.pop(name, None)
        unreachable = isinstance(exc, TimeoutError) or (
            isinstance(exc, ProviderError) and exc.kind.value in ("unreachable", "timeout")
        )
        if isinstance(exc, ProviderError):
            why = exc.detail or exc.kind.value
        elif isinstance(exc, TimeoutError):
            why = f"no answer within {self.timeout:g} seconds"
        else:
            why = f"{type(exc).__name__}: {exc}"
            log.warning("listing %s failed", adapter.label, exc_info=exc)
        if unreachable:
            first = name not in self.unreachable
            self.unreachable[name] = why
            self.problems.pop(name, None)
            if (
                first
                and name not in self.probed
                and self.health is not None
                and self.health.mark_unreachable(server_key(adapter))
            ):
                self.health.add("unreachable", f"{adapter.label} could not be reached: {why}")
        else:
            first = self.problems.get(name) != why
            self.problems[name] = why
            self.unreachable.pop(name, None)
            if first and self.health is not None:
                self.health.add("provider", f"{adapter.label} did not list its models: {why}")

    def _reachable(self, adapter: ProviderAdapter) -> None:
        if adapter.name in self.probed or self.health is None:
            return
        if self.health.mark_reachable(server_key(adapter)):
            self.health.add("reachable", f"{adapter.label} is reachable again.")

    # --- reading ------------------------------------------------------------------------------

    def models(self) -> list[ModelInfo]:
        """Every model, in provider order, ready or not."""
        return [m for name in self._adapters for m in self._listed(name)]

    def _listed(self, name: str) -> list[ModelInfo]:
        models = self._models.get(name, [])
        said = status_of(self._adapters[name])
        if not said:
            return list(models)
        return [m.model_copy(update={"ready": False, "status": said}) for m in models]

    async def start_again(self, provider: str) -> list[ModelInfo]:
        """Start ``provider``'s runtime again after it stopped (the person asked), and list."""
        adapter = self._adapters.get(provider)
        again = getattr(adapter, "start_again", None)
        if callable(again):
            await again()
        return await self.refresh()

    def ready_models(self) -> Sequence[ModelInfo]:
        return [m for m in self.models() if m.ready]

    def find(self, key: str) -> ModelInfo | None:
        """The model with this "provider/model-id" key, if a provider listed it."""
        provider, model_id = split_key(key)
        if provider not in self._adapters:
            return None
        return next((m for m in self._listed(provider) if m.id == model_id), None)

    def resolve(self, text: str) -> ModelInfo | None:
        """A model named by key, or by its bare id or label when only one model has it."""
        exact = self.find(text)
        if exact is not None:
            return exact
        matches = [m for m in self.models() if text in (m.id, m.label)]
        ready = [m for m in matches if m.ready]
        pool = ready or matches
        return pool[0] if len(pool) == 1 else None

    def on_change(self, listener: Callable[[list[ModelInfo]], None]) -> Callable[[], None]:
        return self._listeners.add(listener)

    def _changed(self) -> None:
        models = self.models()
        self._listeners.tell(models)

    async def aclose(self) -> None:
        for stop in self._unwatch.values():
            stop()
        self._unwatch.clear()
        for adapter in [*self._adapters.values(), *self._retired]:
            with contextlib.suppress(Exception):
                await adapter.aclose()
