"""The app's MCP servers: one ``ToolServers`` for every chat, kept in step with Settings → Tools.

Servers are listed in settings (``Settings.tool_servers``); their secrets live in the keyring
under the entry each ``SecretRef`` names, never in the settings file. Adding, importing, turning
off and removing a server changes settings here, and the running servers follow at once: a
removed or changed server is stopped, a new one waits until a chat needs it (nothing starts when
Conch starts). ``stop`` (on quit) stops them all.

A server that failed and is held (it did not start, or stopped twice in a row) is written down
in ``held_file`` for ``HOLD_SECONDS``: the next run of Conch (another ``conch ask``, the
window started again) leaves it out at once, saying why, instead of waiting up to
``START_TIMEOUT`` for it every time. Starting it again in Settings → Tools, a changed server,
or the time passing lifts that.

Which servers a chat may use is the chat's own choice (``ChatSettings.tool_servers`` in the chat
log): None means every enabled server; a list names the ones the person left on for that chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.background import Background
from app.secrets import SecretStore
from app.settings import SettingsError, SettingsStore
from engines.context.tool_loop import ToolHost
from engines.files import write_atomically
from engines.listeners import Listeners
from engines.scrub import contains_secret
from engines.tools.catalogue import Catalogue
from engines.tools.config import (
    HttpServer,
    Imported,
    SecretRef,
    ServerConfig,
    StdioServer,
    Value,
    import_servers,
    is_secret,
    secret_args,
    secret_key,
    server_id,
)
from engines.tools.servers import (
    START_TIMEOUT,
    ServerState,
    ToolServer,
    ToolServers,
)

log = logging.getLogger("conch.tools")

HOLD_SECONDS = 600.0  # a held server is left out of later runs of Conch this long
HELD_FILE = "tool-servers-held.json"  # in the data dir

Listener = Callable[[], None]


class ToolsError(Exception):
    """A server that cannot be added as given; the text says what to change."""


def _fingerprint(config: ServerConfig) -> str:
    """What a server runs or reaches, as a short digest: a changed server is tried again."""
    return hashlib.sha256(config.model_dump_json().encode("utf-8")).hexdigest()[:32]


def secret_refs(config: ServerConfig) -> list[tuple[str, str]]:
    """The secrets a server's settings point at: (what it is, in words; its keyring entry)."""
    named: list[tuple[str, Value]] = []
    if isinstance(config, StdioServer):
        named = [(f"Argument {i + 1}", a) for i, a in enumerate(config.args)]
        named += list(config.env.items())
    else:
        named = [("The address", config.url), *config.headers.items()]
    return [(what, v.secret) for what, v in named if isinstance(v, SecretRef)]


def _refs(config: ServerConfig) -> list[str]:
    """The keyring entries a server's settings point at."""
    return [key for _what, key in secret_refs(config)]


def split_args(text: str) -> list[str]:
    """Arguments as a person types them: separated by spaces, "quoted parts" kept whole."""
    import shlex

    try:
        return shlex.split(text, posix=True)
    except ValueError:
        raise ToolsError(
            "The arguments have a quote that is never closed; close it or remove it."
        ) from None


def parse_pairs(text: str, sep: str) -> dict[str, str]:
    """``NAME=value`` (or ``Name: value``) lines as a dict; blank lines are skipped."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, found, value = line.partition(sep)
        if not found or not name.strip():
            raise ToolsError(f"Line {n} needs the form name{sep}value.")
        out[name.strip()] = value.strip()
    return out


def _keeper(sid: str, secrets: dict[str, str]) -> Callable[[str, str, bool], Value]:
    """How a new server's values are kept: a secret one goes into ``secrets`` (for the
    keyring) and the config holds a reference to it; any other one is kept as it is."""

    def keep(where: str, value: str, secret: bool) -> Value:
        if not secret:
            return value
        key = secret_key(sid, where)
        secrets[key] = value
        return SecretRef(secret=key)

    return keep


class ToolSettings:
    """The app's tool servers (see the module doc). Lives on the app's event loop."""

    def __init__(
        self,
        settings: SettingsStore,
        secrets: SecretStore,
        *,
        start_timeout: float = START_TIMEOUT,
        held_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._secrets = secrets
        self._held_file = held_file
        self._clock = clock
        self._listeners: Listeners[[]] = Listeners("a tool settings listener")
        self._tasks = Background(log, "the tool servers could not follow settings")
        self._configs = tuple(settings.settings.tool_servers)
        self._applied = self._configs  # the list the running servers follow
        self._applying: asyncio.Lock | None = None
        self.servers = ToolServers(
            self._configs,
            self._lookup,
            on_state=self._state_changed,
            start_timeout=start_timeout,
        )
        # A catalogue's tool runs on the servers as they are (the tool loop's ``call``).
        self.call = self.servers.call
        self._stop_listening = settings.on_change(lambda s: self._follow(tuple(s.tool_servers)))
        self._closed = False
        self._restoring = False  # holds read back are not written down again
        self._restore_holds()

    # --- reading ----------------------------------------------------------------------------

    @property
    def configs(self) -> tuple[ServerConfig, ...]:
        return self._configs

    def config(self, sid: str) -> ServerConfig | None:
        return next((c for c in self._configs if c.id == sid), None)

    def state(self, sid: str) -> ServerState:
        try:
            return self.servers[sid].state
        except KeyError:
            config = self.config(sid)
            return ServerState("idle" if config is None or config.enabled else "off")

    def on_change(self, listener: Listener) -> Callable[[], None]:
        """Hear every change: a server added, removed, turned off, or its state."""
        return self._listeners.add(listener)

    def _tell(self) -> None:
        self._listeners.tell()

    def _state_changed(self, sid: str, state: ServerState) -> None:
        self._note_hold(sid, state)
        self._tell()

    # --- holds across runs ------------------------------------------------------------------

    def _holds(self) -> dict[str, dict[str, object]]:
        if self._held_file is None:
            return {}
        try:
            data = json.loads(self._held_file.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        servers = data.get("servers") if isinstance(data, dict) else None
        if not isinstance(servers, dict):
            return {}
        return {str(k): v for k, v in servers.items() if isinstance(v, dict)}

    def _write_holds(self, holds: Mapping[str, Mapping[str, object]]) -> None:
        if self._held_file is None:
            return
        data = json.dumps({"version": 1, "servers": holds}, sort_keys=True)
        try:
            write_atomically(self._held_file, data.encode("utf-8"))
        except OSError as exc:  # the hold then lasts for this run only
            log.info("could not write %s: %s", self._held_file.name, exc)

    def _fresh(self, record: Mapping[str, object], config: ServerConfig) -> bool:
        at = record.get("at")
        return (
            record.get("config") == _fingerprint(config)
            and isinstance(at, int | float)
            and 0 <= self._clock() - at < HOLD_SECONDS
        )

    def _note_hold(self, sid: str, state: ServerState) -> None:
        """Write down a server that became held (or forget one that is ready again)."""
        config = self.config(sid)
        if self._held_file is None or config is None or self._restoring:
            return
        holds = self._holds()
        record = holds.get(sid)
        if state.phase == "ready" and record is not None:
            del holds[sid]
            self._write_holds(holds)
            return
        try:
            held = self.servers[sid].held
        except KeyError:
            return
        if state.phase != "failed" or not held:
            return
        holds[sid] = {"config": _fingerprint(config), "reason": state.reason, "at": self._clock()}
        self._write_holds(holds)

    def _restore_holds(self) -> None:
        """Hold the servers an earlier run of Conch found failed a moment ago."""
        self._restoring = True
        try:
            self._hold_again(self._holds())
        finally:
            self._restoring = False

    def _hold_again(self, holds: Mapping[str, Mapping[str, object]]) -> None:
        for sid, record in holds.items():
            config = self.config(sid)
            if config is None or not config.enabled or not self._fresh(record, config):
                continue
            at = record.get("at")
            ago = max(0, round((self._clock() - at) / 60)) if isinstance(at, int | float) else 0
            when = "just now" if ago < 1 else f"{ago} min ago"
            reason = str(record.get("reason") or "it did not start")
            with contextlib.suppress(KeyError):
                self.servers[sid].hold(f"{reason}, when Conch last tried {when}")

    def _lookup(self, key: str) -> str | None:
        try:
            return self._secrets.get(key)
        except Exception as exc:  # a keyring that fails reads as a missing secret, said in words
            log.warning("reading the tool secret %s failed (%s)", key, type(exc).__name__)
            return None

    # --- following settings -----------------------------------------------------------------

    def _follow(self, configs: tuple[ServerConfig, ...]) -> None:
        if configs == self._configs or self._closed:
            return
        self._configs = configs
        try:
            # At once, so a server turned off stops now; ``settled`` applies it too, should
            # this task not get to run.
            task = self._tasks.start(self.settled())
        except RuntimeError:  # no loop (a command line tool): the next use applies it
            pass
        else:
            task.add_done_callback(lambda _task: self._tell())
        self._tell()

    async def settled(self) -> None:
        """Make the running servers follow the latest settings (a removed or changed server
        is stopped); returns when they do."""
        if self._applying is None:
            self._applying = asyncio.Lock()
        async with self._applying:
            while self._applied != self._configs:
                target = self._configs
                await self.servers.configure(target)
                self._applied = target

    def _save(self, configs: Sequence[ServerConfig]) -> None:
        try:
            self._settings.update(tool_servers=tuple(configs))
        except SettingsError as exc:
            raise ToolsError(str(exc)) from None

    def _keep_secrets(self, secrets: Mapping[str, str]) -> None:
        for key, value in secrets.items():
            try:
                self._secrets.set(key, value)
            except Exception as exc:  # the keyring refused: say so, keep nothing in a file
                raise ToolsError(
                    f"The secret could not be saved in the keyring ({type(exc).__name__})."
                ) from None

    # --- changing ---------------------------------------------------------------------------

    def _taken(self) -> set[str]:
        return {c.id for c in self._configs}

    def add_stdio(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> StdioServer:
        """A server Conch runs as a program. Secret values go to the keyring."""
        name = " ".join(name.split())
        command = command.strip()
        if not command:
            raise ToolsError("Give the command that starts the server, for example npx.")
        label = name or command.split("/")[-1]
        sid = server_id(label, self._taken())
        secrets: dict[str, str] = {}
        keep = _keeper(sid, secrets)

        args = tuple(args)
        flags = secret_args(args)
        env = dict(env or {})
        server = StdioServer(
            id=sid,
            name=label,
            command=command,
            args=tuple(keep(f"arg/{i}", a, flags[i]) for i, a in enumerate(args)),
            env={k: keep(f"env/{k}", v, is_secret(k, v)) for k, v in env.items()},
        )
        self._keep_secrets(secrets)
        self._save([*self._configs, server])
        return server

    def add_http(self, name: str, url: str, headers: Mapping[str, str] | None = None) -> HttpServer:
        """A server Conch reaches over Streamable HTTP. Secret values go to the keyring."""
        from urllib.parse import urlsplit

        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolsError("The address must start with http:// or https://.")
        label = " ".join(name.split()) or parts.hostname or "server"
        sid = server_id(label, self._taken())
        secrets: dict[str, str] = {}
        keep = _keeper(sid, secrets)

        headers = dict(headers or {})
        server = HttpServer(
            id=sid,
            name=label,
            url=keep("url", url, contains_secret(url)),
            headers={k: keep(f"header/{k}", v, is_secret(k, v)) for k, v in headers.items()},
        )
        self._keep_secrets(secrets)
        self._save([*self._configs, server])
        return server

    def import_text(self, text: str) -> Imported:
        """Add the servers of an ``mcpServers`` JSON; what was skipped is in ``problems``."""
        imported = import_servers(text, self._taken())
        if imported.servers:
            self._keep_secrets(imported.secrets)
            self._save([*self._configs, *imported.servers])
        return imported

    def set_enabled(self, sid: str, enabled: bool) -> None:
        """Turn a server on or off for every chat (off: stopped, its tools offered nowhere)."""
        configs = [
            c.model_copy(update={"enabled": enabled}) if c.id == sid else c for c in self._configs
        ]
        self._save(configs)

    def remove(self, sid: str) -> None:
        """Remove a server, and its secrets from the keyring."""
        gone = self.config(sid)
        if gone is None:
            return
        self._save([c for c in self._configs if c.id != sid])
        for key in _refs(gone):
            with contextlib.suppress(Exception):
                self._secrets.delete(key)

    def has_secret(self, key: str) -> bool:
        return self._lookup(key) is not None

    def set_secrets(self, values: Mapping[str, str]) -> None:
        """Put a server's secrets (keyring entry -> value) in the keyring again, say after a
        keyring that kept them only until Conch quit; empty values are skipped."""
        self._keep_secrets({k: v.strip() for k, v in values.items() if v.strip()})

    async def start_again(self, sid: str) -> ServerState:
        """The person's retry of a failed server."""
        await self.settled()
        try:
            server = self.servers[sid]
        except KeyError:
            return self.state(sid)
        return await server.start_again()

    # --- using ------------------------------------------------------------------------------

    def usable(self, chosen: Collection[str] | None = None) -> list[str]:
        """The ids of the enabled servers a chat may use: all of them, or those ``chosen``."""
        return [c.id for c in self._configs if c.enabled and (chosen is None or c.id in chosen)]

    def ready_catalogue(self, chosen: Collection[str] | None = None) -> Catalogue:
        """The tools of the running servers a chat may use; starts nothing (for the meter)."""
        return self.servers.ready_catalogue(self.usable(chosen))

    async def catalogue(self, chosen: Collection[str] | None = None) -> Catalogue:
        """The tools of the servers a chat may use, starting the ones that are not running."""
        await self.settled()
        allowed = self.usable(chosen)
        if not allowed:
            return Catalogue()
        return await self.servers.catalogue(allowed)

    def __iter__(self) -> Iterator[ToolServer]:
        """The running servers (the tool loop reads their names for the approval card)."""
        return iter(list(self.servers))

    async def stop(self) -> None:
        """Stop every server (Conch is quitting); returns when all are gone."""
        self._closed = True
        self._stop_listening()
        await self.settled()
        await self.servers.stop()


@dataclass
class ChatToolHost(ToolHost):
    """A chat's tools in the tool loop, with the servers it may use read from the chat's own
    settings at every turn: a toggle flipped between two messages holds for the next one."""

    chosen: Callable[[], Collection[str] | None] = field(default=lambda: None)

    async def catalogue(self) -> Catalogue:
        self.allowed = self.chosen()
        return await self.runner.catalogue(self.allowed)

    def ready_catalogue(self) -> Catalogue:
        self.allowed = self.chosen()
        return super().ready_catalogue()


__all__ = [
    "ChatToolHost",
    "ToolSettings",
    "ToolsError",
    "parse_pairs",
    "split_args",
]
