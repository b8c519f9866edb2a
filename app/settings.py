"""The person's settings: one JSON file in the data dir, written atomically.

A settings file that cannot be read never stops Conch: the file is moved aside (nothing is lost),
the readable fields are kept, the rest fall back to defaults, and ``SettingsStore.problem`` says
what happened in a sentence the window can show. API keys never live here (see app/secrets.py);
unknown fields, a stray key among them, are dropped on the next save.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from engines.files import aside_name, write_atomically
from engines.listeners import Listeners
from engines.programs.agents import AgentConfig
from engines.tools.config import ServerConfig

SETTINGS_FILE = "settings.json"
_MAX_BYTES = 4 * 1024 * 1024  # a settings file is a few hundred bytes; anything huge is damage


class SettingsError(Exception):
    """The only error the settings code raises: text that is not settings, or a failed save."""


class Settings(BaseModel):
    """Everything the person can set. Every field has a default, so an empty file is valid."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # Servers on this computer; empty means the server's usual address (for Ollama,
    # OLLAMA_HOST first). Conch only looks at these; nothing is started on them.
    ollama_url: str = ""
    lmstudio_url: str = ""
    llamacpp_url: str = ""
    vllm_url: str = ""
    # Company rows turned on. Empty: every company whose key is in the secret store.
    companies: tuple[str, ...] = ()
    # Another address for a company's API (a gateway or proxy), by provider short name.
    base_urls: dict[str, str] = {}
    # The small model that ships with Conch, started when nothing else can answer.
    bundled_model: bool = True
    remember_automatically: bool = True
    theme: Literal["system", "light", "dark"] = "system"
    last_chat_id: str = ""
    window_geometry: str = ""  # base64 of QWidget.saveGeometry()
    default_model_key: str = ""  # "provider/model-id"
    # The person's own path to a program (Settings → Programs), by its usual command name
    # ("claude", "codex", "gemini"); its usual arguments (``--acp``) still follow it. Empty:
    # found on the PATH.
    program_paths: dict[str, str] = {}
    # ACP agents the person added (Settings → Programs), run exactly as given: command,
    # arguments, environment. A secret in one is a keyring entry's name, never the value.
    acp_agents: tuple[AgentConfig, ...] = ()
    # The programs, by key ("codex", "agent-<id>"), the person lets have Conch's MCP servers
    # (Settings → Tools) in their own sessions; none by default.
    programs_with_tools: tuple[str, ...] = ()
    # The person's own system prompt for every chat (Settings → Chat); a chat's own one, set
    # in its Chat settings, wins. Sent with every message and counted in the budget.
    system_prompt: str = ""
    # MCP servers (Settings → Tools), in the order shown. A secret in one is a keyring entry's
    # name (engines.tools.config.SecretRef), never the value.
    tool_servers: tuple[ServerConfig, ...] = ()


_FIELDS = tuple(Settings.model_fields)


def parse_settings(text: str | bytes) -> tuple[Settings, list[str]]:
    """Read settings text. Returns the settings and the names of fields that were unusable.

    Raises ``SettingsError`` (and nothing else) when the text is not a JSON object at all.
    """
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SettingsError(f"not JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise SettingsError("not a JSON object")
    try:
        return Settings.model_validate(data), []
    except ValidationError:
        pass
    except (RecursionError, ValueError, TypeError):  # pathological values: treat like bad fields
        pass
    # Keep every field that is fine by itself; the broken ones fall back to their defaults.
    good: dict[str, Any] = {}
    bad: list[str] = []
    for name in _FIELDS:
        if name not in data:
            continue
        try:
            Settings.model_validate({name: data[name]})
        except (ValidationError, RecursionError, ValueError, TypeError):
            bad.append(name)
        else:
            good[name] = data[name]
    try:
        return Settings.model_validate(good), bad
    except (ValidationError, RecursionError, ValueError, TypeError):
        return Settings(), list(_FIELDS)


_FIELD_AT = re.compile(r'"(' + "|".join(re.escape(n) for n in _FIELDS) + r')"\s*:\s*')


def salvage_fields(raw: bytes) -> dict[str, Any]:
    """The fields that can still be read from text that is not JSON (cut short, scribbled on).

    Each known field name followed by a colon and a value that decodes and is valid by itself
    is kept; the first such value of a field wins.
    """
    text = raw.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    for match in _FIELD_AT.finditer(text):
        name = match.group(1)
        if name in found:
            continue
        try:
            value, _end = decoder.raw_decode(text, match.end())
            Settings.model_validate({name: value})
        except (ValidationError, RecursionError, ValueError, TypeError):
            continue
        found[name] = value
    return found


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class SettingsStore:
    """Loads and saves ``<data_dir>/settings.json`` and tells listeners when settings change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None  # one sentence for the window when the file was damaged
        self._settings = Settings()
        self._listeners: Listeners[[Settings]] = Listeners("a settings listener")

    @classmethod
    def in_dir(cls, data_dir: Path) -> SettingsStore:
        store = cls(data_dir / SETTINGS_FILE)
        store.load()
        return store

    @property
    def settings(self) -> Settings:
        return self._settings

    def load(self) -> Settings:
        """Read the file. A missing file gives defaults; a damaged one is kept aside.

        Every field that can still be read is kept, the rest fall back to defaults, and the
        repaired settings are written so the next start is quiet. The bundled model is the one
        default not used after damage: the person may have turned it off, so it stays off
        until they turn it on, unless the file still says what they chose.
        """
        self.problem = None
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._settings = Settings()
            return self._settings
        except OSError as exc:
            return self._repair({}, f"could not be opened ({_why(exc)})")
        if size > _MAX_BYTES:
            return self._repair({}, "could not be read (it is far too large)")
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            return self._repair({}, f"could not be opened ({_why(exc)})")
        try:
            settings, bad = parse_settings(raw)
        except SettingsError:
            return self._repair(salvage_fields(raw), "could not be read", salvaged=True)
        if not bad:
            self._settings = settings
            return self._settings
        # Valid JSON with some bad values: fields the file left out keep their defaults, as
        # they did before; only the bad ones are reset.
        good = {n: getattr(settings, n) for n in _FIELDS if n not in bad}
        return self._repair(good, f"had settings that could not be read ({', '.join(bad)})")

    def _repair(
        self, good: Mapping[str, Any], what_happened: str, *, salvaged: bool = False
    ) -> Settings:
        """Settings from the ``good`` fields of a damaged file, which is kept aside."""
        values = dict(good)
        bundled_reset = "bundled_model" not in values
        if bundled_reset:
            values["bundled_model"] = False
        settings = Settings.model_validate(values)
        self._settings = settings
        kept = self._move_aside()
        actor = f"Conch kept it as {kept.name} and" if kept else "Conch"
        if not good:
            done = "started with defaults."
        elif salvaged:
            names = ", ".join(n for n in _FIELDS if n in good)
            done = f"used what it could still read ({names}) with defaults for the rest."
        else:
            done = "used defaults for those."
        sentence = f"Your settings file {what_happened}; {actor} {done}"
        if bundled_reset:
            sentence += " The bundled model stays off until you turn it on in Settings."
        self.problem = sentence
        if kept is not None:
            # The damaged file is safe beside it: write the repaired one so the next start is
            # quiet and the bundled model stays off.
            with contextlib.suppress(SettingsError):
                self._write(settings)
        return settings

    def _move_aside(self) -> Path | None:
        target = aside_name(self.path)
        try:
            os.replace(self.path, target)
        except OSError:
            return None
        return target

    def _write(self, settings: Settings) -> None:
        data = json.dumps(settings.model_dump(mode="json"), indent=2, ensure_ascii=False)
        try:
            write_atomically(self.path, (data + "\n").encode("utf-8"))
        except OSError as exc:
            raise SettingsError(
                f"Conch could not save your settings ({exc.strerror or type(exc).__name__})."
            ) from None

    def save(self, settings: Settings | None = None) -> None:
        """Write the settings (the current ones when none are given) and tell listeners."""
        new = self._settings if settings is None else settings
        self._write(new)
        self._settings = new
        self._listeners.tell(new)

    def update(self, **changes: Any) -> Settings:
        """Change some fields, validated, and save. Raises ``SettingsError`` on a bad value."""
        unknown = [k for k in changes if k not in _FIELDS]
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        merged: Mapping[str, Any] = {**self._settings.model_dump(), **changes}
        try:
            new = Settings.model_validate(merged)
        except ValidationError as exc:
            raise SettingsError(f"a setting has a wrong value: {exc.errors()[0]['loc']}") from None
        self.save(new)
        return new

    def on_change(self, listener: Callable[[Settings], None]) -> Callable[[], None]:
        """Call ``listener`` after every save; returns a function that stops it."""
        return self._listeners.add(listener)

    @property
    def changed(self) -> list[Callable[[Settings], None]]:
        """The listeners (the contract's ``changed`` callbacks); append to subscribe."""
        return self._listeners.callbacks


__all__ = [
    "SETTINGS_FILE",
    "Settings",
    "SettingsError",
    "SettingsStore",
    "parse_settings",
    "salvage_fields",
    "write_atomically",
]
