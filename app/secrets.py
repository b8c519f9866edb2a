"""API keys: only ever in the system keyring (service "Conch", one entry per provider).

When there is no usable keyring (a headless Linux box, a locked or missing Secret Service, the
null backend), keys are kept in memory for this run and ``warning`` says so: Settings shows it,
Health gets it as one note, and the log one INFO line (a headless machine is no fault, so
nothing on stderr). A key is never written to a file as a fallback, not even inside the data
dir. ``conch ask`` and ``conch models`` also read a company's usual environment variable when
the keyring has no key for it (``EnvironmentKeys``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import keyring
import keyring.errors

from app.health import Notes, StandingNotes
from engines.providers.registry import PROVIDERS

SERVICE = "Conch"
NO_KEYRING = (
    "API keys cannot be saved: no system keyring was found, so a key given here lasts only "
    "until Conch quits; set up a keyring (GNOME Keyring, KWallet) to keep keys."
)
KEYRING_TOPIC = "keyring"  # the Health note's topic

log = logging.getLogger("conch.secrets")


@runtime_checkable
class SecretStore(Protocol):
    """Where API keys live, by provider short name ("openai", "anthropic", ...)."""

    @property
    def warning(self) -> str:
        """Empty when keys are stored safely; otherwise one sentence for Settings."""
        ...

    def get(self, provider: str) -> str | None: ...

    def set(self, provider: str, key: str) -> None: ...

    def delete(self, provider: str) -> None: ...


class SessionSecrets:
    """Keys in memory only, gone when Conch quits."""

    def __init__(self, warning: str = "") -> None:
        self._keys: dict[str, str] = {}
        self._warning = warning

    @property
    def warning(self) -> str:
        return self._warning

    def get(self, provider: str) -> str | None:
        return self._keys.get(provider)

    def set(self, provider: str, key: str) -> None:
        key = key.strip()
        if key:
            self._keys[provider] = key
        else:
            self._keys.pop(provider, None)

    def delete(self, provider: str) -> None:
        self._keys.pop(provider, None)

    def __repr__(self) -> str:  # never show the keys themselves
        return f"SessionSecrets(providers={sorted(self._keys)})"


def _unusable(backend: object) -> bool:
    """Backends that would silently drop keys or write them to a plain file."""
    module = type(backend).__module__
    if module in ("keyring.backends.null", "keyring.backends.fail"):
        return True
    # keyrings.alt's file backends keep keys in a file outside the data dir, readable or
    # weakly encrypted: not what "only in the keyring" promises.
    if module.startswith("keyrings.alt"):
        return True
    priority = getattr(backend, "priority", 1)
    try:
        return float(priority) <= 0
    except (TypeError, ValueError):
        return False


class KeyringSecrets:
    """Keys in the system keyring; falls back to memory (with a warning) when it cannot work.

    The fallback happens when the backend is unusable from the start, or the first time the
    keyring fails an operation (no D-Bus, a keyring that refuses to unlock). A key set during
    the fallback is kept in memory. ``notes`` (Health) is told once when that happens.
    """

    def __init__(
        self, backend: keyring.backend.KeyringBackend | None = None, notes: Notes | None = None
    ) -> None:
        self._notes = notes
        self._backend = backend if backend is not None else keyring.get_keyring()
        self._fallback: SessionSecrets | None = None
        if _unusable(self._backend):
            self._fall_back("the backend is " + type(self._backend).__module__)

    @property
    def warning(self) -> str:
        return self._fallback.warning if self._fallback is not None else ""

    def _fall_back(self, why: str) -> SessionSecrets:
        if self._fallback is None:
            _no_keyring(why, self._notes)
            self._fallback = SessionSecrets(NO_KEYRING)
        return self._fallback

    def get(self, provider: str) -> str | None:
        if self._fallback is not None:
            return self._fallback.get(provider)
        try:
            value = self._backend.get_password(SERVICE, provider)
        except Exception as exc:  # any backend failure: D-Bus gone, locked, no backend
            return self._fall_back(type(exc).__name__).get(provider)
        return value or None

    def set(self, provider: str, key: str) -> None:
        key = key.strip()
        if not key:
            self.delete(provider)
            return
        if self._fallback is not None:
            self._fallback.set(provider, key)
            return
        try:
            self._backend.set_password(SERVICE, provider, key)
        except Exception as exc:
            self._fall_back(type(exc).__name__).set(provider, key)

    def delete(self, provider: str) -> None:
        if self._fallback is not None:
            self._fallback.delete(provider)
            return
        try:
            self._backend.delete_password(SERVICE, provider)
        except keyring.errors.PasswordDeleteError:
            pass  # there was no key: deleting nothing is fine
        except Exception as exc:
            self._fall_back(type(exc).__name__).delete(provider)

    def __repr__(self) -> str:
        where = "keyring" if self._fallback is None else "memory"
        return f"KeyringSecrets({where})"


def _no_keyring(why: str, notes: Notes | None) -> None:
    """Say once that keys are kept in memory: the log's INFO line and the Health note."""
    log.info("no usable system keyring (%s); API keys are kept in memory for this run", why)
    if isinstance(notes, StandingNotes):
        notes.add_standing(KEYRING_TOPIC, NO_KEYRING)  # once, not at every start
    elif notes is not None:
        notes.add(KEYRING_TOPIC, NO_KEYRING)


def open_secrets(notes: Notes | None = None) -> SecretStore:
    """The secret store for this run: the system keyring, or memory with a warning (and one
    note in ``notes``, Health)."""
    try:
        return KeyringSecrets(notes=notes)
    except Exception as exc:  # keyring could not even pick a backend
        _no_keyring(f"it failed to start: {type(exc).__name__}", notes)
        return SessionSecrets(NO_KEYRING)


# Each company's key environment variables (engines.providers.registry), by short name. Only
# `conch ask` and `conch models` read them (a headless machine has no keyring to hold a key);
# they are never copied into the keyring, a file or a log.
KEY_ENV_VARS: dict[str, tuple[str, ...]] = {
    p.name: p.key_env for p in PROVIDERS.values() if p.key_env
}
KEYRING_SOURCE = "keyring"


class EnvironmentKeys:
    """A secret store that, for a company with no key in ``inner``, reads the company's usual
    environment variable. What is set or deleted goes to ``inner`` only."""

    def __init__(self, inner: SecretStore, environ: Mapping[str, str] | None = None) -> None:
        self._inner = inner
        self._environ = os.environ if environ is None else environ

    @property
    def warning(self) -> str:
        return self._inner.warning

    def _from_environment(self, provider: str) -> tuple[str, str] | None:
        for name in KEY_ENV_VARS.get(provider, ()):
            value = self._environ.get(name, "").strip()
            if value:
                return name, value
        return None

    def get(self, provider: str) -> str | None:
        stored = self._inner.get(provider)
        if stored:
            return stored
        found = self._from_environment(provider)
        return found[1] if found else None

    def source(self, provider: str) -> str:
        """Where ``provider``'s key comes from, in words: "keyring", "environment variable
        NAME", or "" when there is none. (A key kept in memory for this run counts as the
        keyring's: it was given in the window's Settings.)"""
        if self._inner.get(provider):
            return KEYRING_SOURCE
        found = self._from_environment(provider)
        return f"environment variable {found[0]}" if found else ""

    def set(self, provider: str, key: str) -> None:
        self._inner.set(provider, key)

    def delete(self, provider: str) -> None:
        self._inner.delete(provider)

    def __repr__(self) -> str:
        return f"EnvironmentKeys({self._inner!r})"
