"""ACP agents the person adds by command, arguments and environment, and Zed's ``agent_servers``.

An agent added in Settings → Programs is run exactly as given: its command, its arguments (no
flag is added, unlike the Gemini and Copilot rows, which append ``--acp``) and its environment.
It shows in the model picker as ``programs/agent-<id>``.

Zed keeps the same in its ``settings.json``::

    "agent_servers": {"My Agent": {"type": "custom", "command": "node",
                                   "args": ["agent.js", "--acp"], "env": {}}}

``import_agents`` reads that (the whole settings file, comments and trailing commas included,
or just the ``agent_servers`` object) and says in words what it skipped: Zed's own entries for
its built-in agents (``claude``, ``gemini``, ``codex``, which have no command) and entries from
its registry or extensions.

Secrets never go to settings: an environment value or argument that is a secret (decided by
``engines.tools.config``, as for MCP servers) becomes a ``SecretRef`` to a keyring entry
``agent/<id>/env/<NAME>`` (or ``…/arg/<n>``), handed back once for the app to store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engines.tools.config import (
    SecretLookup,
    SecretRef,
    Value,
    is_secret,
    resolve,
    secret_args,
    server_id,
)

KEY_PREFIX = "agent-"


class AgentConfig(BaseModel):
    """One ACP agent the person added. A secret is a keyring entry's name, never the value."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str  # stable, unique among the agents; part of its key and of its secrets' entries
    name: str
    command: str
    args: tuple[Value, ...] = ()
    env: dict[str, Value] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        """Its id in the picker: ``programs/<key>``."""
        return KEY_PREFIX + self.id


def secret_key(agent_id: str, where: str) -> str:
    """The keyring entry of one of an agent's secrets ("agent/my-agent/env/API_KEY")."""
    return f"agent/{agent_id}/{where}"


def agent_command(
    agent: AgentConfig, lookup: SecretLookup
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The command line and environment to start ``agent`` with, its secrets read through
    ``lookup``. Raises ``MissingSecretError`` when one is gone from the keyring."""
    args = [resolve(a, lookup, f"argument {i + 1}") for i, a in enumerate(agent.args)]
    env = {k: resolve(v, lookup, k) for k, v in agent.env.items()}
    return (agent.command, *args), env


def make_agent(
    name: str,
    command: str,
    args: list[str] | tuple[str, ...],
    env: Mapping[str, str],
    taken: Collection[str] = (),
    *,
    agent_id: str = "",
) -> tuple[AgentConfig, dict[str, str]]:
    """An agent from what the person typed (or a file gave), with its secrets taken out:
    the config for settings and the keyring entries to write."""
    aid = agent_id or server_id(name, taken)
    secrets: dict[str, str] = {}

    def keep(where: str, value: str, secret: bool) -> Value:
        if not secret:
            return value
        key = secret_key(aid, where)
        secrets[key] = value
        return SecretRef(secret=key)

    flags = secret_args(tuple(args))
    agent = AgentConfig(
        id=aid,
        name=" ".join(name.split()) or aid,
        command=command.strip(),
        args=tuple(keep(f"arg/{i}", a, flags[i]) for i, a in enumerate(args)),
        env={k: keep(f"env/{k}", v, is_secret(k, v)) for k, v in env.items()},
    )
    return agent, secrets


# --- Zed's agent_servers -----------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedAgents:
    agents: tuple[AgentConfig, ...] = ()
    secrets: dict[str, str] = field(default_factory=dict)  # keyring entry -> value
    problems: tuple[str, ...] = ()


_ZED_OWN = frozenset({"claude", "claude_code", "gemini", "codex"})


def _without_comments(text: str) -> str:
    """JSON with comments (``//`` and ``/* */``) and trailing commas, as Zed's settings file
    allows, turned into plain JSON. Strings are left as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _parse(text: str) -> tuple[Any, str]:
    stripped = text.strip().lstrip("\ufeff")
    if not stripped:
        return None, "There is nothing to import: paste Zed's agent_servers or pick its file."
    plain = _without_comments(stripped)
    for candidate in (plain, "{" + plain.rstrip(",") + "}"):
        try:
            return json.loads(candidate), ""
        except json.JSONDecodeError:
            continue
    try:
        json.loads(plain)
    except json.JSONDecodeError as exc:
        return None, (
            f"This is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "check the brackets and commas and paste it again."
        )
    return None, "This is not valid JSON; check the brackets and commas and paste it again."


def _entries(data: Any) -> Mapping[str, Any] | None:
    if not isinstance(data, dict):
        return None
    inner = data.get("agent_servers")
    if isinstance(inner, dict):
        return inner
    if (
        data
        and all(isinstance(v, dict) for v in data.values())
        and not any(k in data for k in ("mcpServers", "context_servers"))
    ):
        return data  # the agent_servers object by itself
    return None


def import_agents(text: str, taken_ids: Collection[str] = ()) -> ImportedAgents:
    """Read Zed's ``agent_servers`` (see the module doc)."""
    data, why = _parse(text)
    if why:
        return ImportedAgents(problems=(why,))
    entries = _entries(data)
    if entries is None:
        return ImportedAgents(
            problems=(
                "No agents found: Conch reads Zed's settings.json, or the object under its "
                "“agent_servers”.",
            )
        )
    taken = set(taken_ids)
    agents: list[AgentConfig] = []
    secrets: dict[str, str] = {}
    problems: list[str] = []
    for raw_name, entry in entries.items():
        label = " ".join(str(raw_name).split()) or "agent"
        if not isinstance(entry, dict):
            problems.append(f"Skipped “{label}”: its entry is not an object.")
            continue
        kind = str(entry.get("type") or "custom").lower()
        command = entry.get("command")
        if isinstance(command, dict):  # older Zed: {"command": {"path": …, "args": …}}
            entry = {**entry, **command, "command": command.get("path")}
            command = entry.get("command")
        if kind != "custom" or not isinstance(command, str) or not command.strip():
            if label.lower() in _ZED_OWN or kind in ("registry", "extension"):
                problems.append(
                    f"Skipped “{label}”: it is one of Zed's own agents, with no command "
                    "to run; add it here by its command (Conch lists Claude Code, Codex and "
                    "Gemini CLI itself)."
                )
            else:
                problems.append(f"Skipped “{label}”: it has no command.")
            continue
        raw_args = entry.get("args") or []
        if not isinstance(raw_args, list):
            raw_args = [raw_args]
        args = [str(a) for a in raw_args if a is not None]
        raw_env = entry.get("env") or {}
        env = (
            {str(k): str(v) for k, v in raw_env.items() if v is not None}
            if isinstance(raw_env, dict)
            else {}
        )
        agent, found = make_agent(label, command, args, env, taken)
        taken.add(agent.id)
        agents.append(agent)
        secrets.update(found)
    return ImportedAgents(tuple(agents), secrets, tuple(problems))
