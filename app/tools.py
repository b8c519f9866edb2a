"""The app's MCP servers: one ``ToolServers`` for every chat, kept in step with Settings → Tools.

Servers are listed in settings (``Settings.tool_servers``); their secrets live in the keyring
under the entry each ``SecretRef`` names, never in the settings file. Adding, importing, turning
off and removing a server changes settings here, and the running servers follow at once: a
removed or changed server is stopped, a new one waits until a chat needs it (nothing starts when
Conch starts). ``stop`` (on quit) stops them all.

Which servers a chat may use is the chat's own choice (``ChatSettings.tool_servers`` in the chat
log): None means every enabled server; a list names the ones the person left on for that chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from app.background import Background
from app.secrets import SecretStore
from app.settings import SettingsError, SettingsStore
from engines.context.tool_loop import ToolHost
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

Listener = Callable[[], None]


class ToolsError(Exception):
    """A server that cannot be added as given; the text says what to change."""


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
    ) -> None:
        self._settings = settings
        self._secrets = secrets
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

    def _state_changed(self, _sid: str, _state: ServerState) -> None:
        self._tell()

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
