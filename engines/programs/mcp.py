"""Conch's MCP servers (Settings → Tools) in the forms the programs take them.

A program that keeps its own chat runs its own tools; when the person allows it for that
program (Settings → Programs, off by default), it is also given Conch's servers, to start
itself. ``shared_servers`` reads the enabled servers with their secrets from the keyring;
then each program gets its own form:

- an ACP agent: ``mcpServers`` of ``session/new`` and ``session/load`` (``acp_servers``):
  stdio servers always, Streamable HTTP ones only to an agent that advertises
  ``mcpCapabilities.http``;
- Codex: ``-c mcp_servers.<id>.…`` overrides of its config for one run (``codex_config``);
  a secret in a server's environment or headers goes in Codex's own environment, named in
  the server's ``env_vars`` / ``env_http_headers``, so it is not on Codex's command line
  (where anyone on the computer can read it); a server whose arguments or address hold a
  secret has no such form and is left out of Codex;
- Claude Code: the ``mcp_servers`` option of the Claude Agent SDK (``claude_servers``),
  which the SDK puts on the CLI's command line as JSON: each secret there is a
  ``${CONCH_MCP_…}`` reference the CLI expands from its environment, where the value is.

A server whose secret is gone from the keyring is left out, with a sentence saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AcpMcpServer,
    EnvVariable,
    HttpHeader,
    HttpMcpServer,
    McpServerStdio,
    SseMcpServer,
)

from engines.tools.config import (
    HttpServer,
    MissingSecretError,
    SecretLookup,
    StdioServer,
    Value,
    resolve,
)


@dataclass(frozen=True)
class SharedServer:
    """One of Conch's MCP servers, its secrets read: a command to run or an address."""

    id: str
    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    secret_env: frozenset[str] = frozenset()  # the names in ``env`` whose values are secrets
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    secret_headers: frozenset[str] = frozenset()  # the names in ``headers`` that are secrets
    secret_args: frozenset[int] = frozenset()  # the places in ``args`` that are secrets
    secret_url: bool = False

    @property
    def is_http(self) -> bool:
        return bool(self.url)


def shared_servers(
    configs: Iterable[StdioServer | HttpServer], lookup: SecretLookup
) -> tuple[list[SharedServer], list[str]]:
    """The enabled servers with their secrets read, and a sentence for each left out."""
    out: list[SharedServer] = []
    left_out: list[str] = []
    for config in configs:
        if not config.enabled:
            continue

        def value(v: Value, what: str, name: str = config.name) -> str:
            return resolve(v, lookup, f"{what} of “{name}”")

        try:
            if isinstance(config, StdioServer):
                env = {k: value(v, k) for k, v in config.env.items()}
                secret = frozenset(k for k, v in config.env.items() if not isinstance(v, str))
                args = tuple(value(a, f"argument {i + 1}") for i, a in enumerate(config.args))
                hidden = frozenset(i for i, a in enumerate(config.args) if not isinstance(a, str))
                out.append(
                    SharedServer(
                        config.id,
                        config.name,
                        config.command,
                        args,
                        env,
                        secret_env=secret,
                        secret_args=hidden,
                    )
                )
            else:
                url = value(config.url, "the URL")
                headers = {k: value(v, k) for k, v in config.headers.items()}
                out.append(
                    SharedServer(
                        config.id,
                        config.name,
                        url=url,
                        headers=headers,
                        secret_headers=frozenset(
                            k for k, v in config.headers.items() if not isinstance(v, str)
                        ),
                        secret_url=not isinstance(config.url, str),
                    )
                )
        except MissingSecretError as exc:
            left_out.append(
                f"“{config.name}” was not passed on: {exc.what} is not in the keyring any more; "
                "enter it again in Settings → Tools."
            )
    return out, left_out


SharedSource = Callable[[], tuple[list[SharedServer], list[str]]]
"""Reads the servers a program may be given, when its session starts (None: none)."""


AcpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


def acp_servers(servers: Iterable[SharedServer], *, http: bool) -> list[AcpServer]:
    """ACP's ``mcpServers``: stdio servers, and HTTP ones when the agent takes them."""
    out: list[AcpServer] = []
    for s in servers:
        if s.is_http:
            if http:
                headers = [HttpHeader(name=k, value=v) for k, v in s.headers.items()]
                out.append(HttpMcpServer(type="http", name=s.name, url=s.url, headers=headers))
            continue
        env = [EnvVariable(name=k, value=v) for k, v in s.env.items()]
        out.append(McpServerStdio(name=s.name, command=s.command, args=list(s.args), env=env))
    return out


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml(value: Any) -> str:
    """A TOML value (strings, lists of strings, inline tables of strings)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value).__name__)


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)


def _variable(prefix: str, server: SharedServer, name: str) -> str:
    """An environment variable's name for one secret of a server (letters, digits, _)."""
    return re.sub(r"[^A-Z0-9_]", "_", f"{prefix}_{server.id}_{name}".upper())


@dataclass(frozen=True)
class CodexServers:
    """Codex's form: ``args`` go on its command line, ``env`` into its environment;
    ``left_out``: a sentence for each server Codex cannot be given without showing a
    secret on its command line."""

    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()


def codex_config(servers: Iterable[SharedServer]) -> CodexServers:
    """``-c mcp_servers.<id>.<field>=<TOML>`` overrides for one Codex run. Keyed by the
    server's id (a bare TOML key); its secrets travel in Codex's environment (``env``),
    named in ``env_vars`` (passed on to the server under the same name) or
    ``env_http_headers`` (a header's value read from the named variable)."""
    args: list[str] = []
    env: dict[str, str] = {}
    left_out: list[str] = []
    for s in servers:
        if s.secret_args or s.secret_url:
            what = "address" if s.secret_url else "arguments"
            left_out.append(
                f"“{s.name}” was not given to Codex: its {what} hold a secret, which Codex "
                "could only take on its command line."
            )
            continue
        base = f"mcp_servers.{_key(s.id)}"
        if s.is_http:
            args += ["-c", f"{base}.url={_toml(s.url)}"]
            plain = {k: v for k, v in s.headers.items() if k not in s.secret_headers}
            if plain:
                args += ["-c", f"{base}.http_headers={_toml(plain)}"]
            named = {k: _variable("CONCH_MCP", s, k) for k in s.secret_headers}
            if named:
                args += ["-c", f"{base}.env_http_headers={_toml(named)}"]
                env.update({named[k]: s.headers[k] for k in named})
            continue
        args += ["-c", f"{base}.command={_toml(s.command)}"]
        if s.args:
            args += ["-c", f"{base}.args={_toml(list(s.args))}"]
        plain = {k: v for k, v in s.env.items() if k not in s.secret_env}
        secret = {k: v for k, v in s.env.items() if k in s.secret_env}
        if plain:
            args += ["-c", f"{base}.env={_toml(plain)}"]
        if secret:
            args += ["-c", f"{base}.env_vars={_toml(sorted(secret))}"]
            env.update(secret)
    return CodexServers(tuple(args), env, tuple(left_out))


@dataclass(frozen=True)
class ClaudeServers:
    """Claude Code's form: ``servers`` for the SDK's ``mcp_servers`` option (secrets as
    ``${NAME}`` references), ``env`` the values, for the CLI's environment."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def claude_servers(servers: Iterable[SharedServer]) -> ClaudeServers:
    """The Claude Agent SDK's ``mcp_servers`` option (``ClaudeAgentOptions``), by name. The
    SDK passes it on the CLI's command line; the CLI expands ``${NAME}`` in a server's
    command, arguments, environment, address and headers from its own environment, so each
    secret is such a reference and its value goes in ``env``."""
    out: dict[str, dict[str, Any]] = {}
    env: dict[str, str] = {}

    def hide(s: SharedServer, name: str, value: str) -> str:
        variable = _variable("CONCH_MCP", s, name)
        env[variable] = value
        return "${" + variable + "}"

    for s in servers:
        if s.is_http:
            url = hide(s, "url", s.url) if s.secret_url else s.url
            headers = {
                k: hide(s, f"header_{k}", v) if k in s.secret_headers else v
                for k, v in s.headers.items()
            }
            out[s.name] = {"type": "http", "url": url, "headers": headers}
        else:
            out[s.name] = {
                "type": "stdio",
                "command": s.command,
                "args": [
                    hide(s, f"arg_{i}", a) if i in s.secret_args else a
                    for i, a in enumerate(s.args)
                ],
                "env": {
                    k: hide(s, f"env_{k}", v) if k in s.secret_env else v for k, v in s.env.items()
                },
            }
    return ClaudeServers(out, env)
