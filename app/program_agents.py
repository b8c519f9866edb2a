"""The ACP agents the person adds (Settings → Programs), and which programs get Conch's tools.

Agents live in settings (``acp_agents``) with their secrets in the keyring (``app.secrets``),
as MCP servers do: adding one writes its secret values to the keyring first, then settings;
removing one deletes them. ``programs_with_tools`` holds the program keys the person lets
have Conch's MCP servers (off for every program until ticked). Bad input raises
``AgentsError`` with one sentence saying what to change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from app.secrets import SecretStore
from app.settings import SettingsError, SettingsStore
from engines.programs.agents import AgentConfig, ImportedAgents, import_agents, make_agent
from engines.tools.config import SecretRef


class AgentsError(Exception):
    """An agent that cannot be added or changed as given; the text says what to do."""


class ProgramAgents:
    """Reads and changes the person's agents and the programs' tools switch."""

    def __init__(self, settings: SettingsStore, secrets: SecretStore) -> None:
        self._settings = settings
        self._secrets = secrets

    @property
    def agents(self) -> tuple[AgentConfig, ...]:
        return self._settings.settings.acp_agents

    def _taken(self) -> set[str]:
        return {a.id for a in self.agents}

    def _keep_secrets(self, secrets: Mapping[str, str]) -> None:
        try:
            for key, value in secrets.items():
                self._secrets.set(key, value)
        except Exception as exc:
            raise AgentsError(
                f"The keyring did not take the agent's secret ({type(exc).__name__}); nothing "
                "was saved. Unlock the keyring and try again."
            ) from None

    def _save(self, agents: Sequence[AgentConfig]) -> None:
        try:
            self._settings.update(acp_agents=tuple(agents))
        except SettingsError as exc:
            raise AgentsError(f"The agent could not be saved: {exc}.") from None

    def add(
        self, name: str, command: str, args: Sequence[str], env: Mapping[str, str]
    ) -> AgentConfig:
        """Add an agent run exactly as given. Secret values go to the keyring."""
        command = command.strip()
        if not command:
            raise AgentsError("Give the command that starts the agent, for example codex-acp.")
        label = " ".join(name.split()) or command.replace("\\", "/").split("/")[-1]
        agent, secrets = make_agent(label, command, list(args), env, self._taken())
        self._keep_secrets(secrets)
        self._save([*self.agents, agent])
        return agent

    def import_text(self, text: str) -> ImportedAgents:
        """Add the agents of Zed's ``agent_servers``; what was skipped is in ``problems``."""
        imported = import_agents(text, self._taken())
        if imported.agents:
            self._keep_secrets(imported.secrets)
            self._save([*self.agents, *imported.agents])
        return imported

    def remove(self, agent_id: str) -> None:
        """Remove an agent, its secrets from the keyring and its tools switch."""
        gone = next((a for a in self.agents if a.id == agent_id), None)
        if gone is None:
            return
        self._save([a for a in self.agents if a.id != agent_id])
        self.set_tools(gone.key, False)
        refs = [*gone.args, *gone.env.values()]
        for ref in refs:
            if isinstance(ref, SecretRef):
                with contextlib.suppress(Exception):
                    self._secrets.delete(ref.secret)

    def has_tools(self, key: str) -> bool:
        return key in self._settings.settings.programs_with_tools

    def set_tools(self, key: str, on: bool) -> None:
        """Let the program ``key`` have Conch's MCP servers in its sessions, or not."""
        now = self._settings.settings.programs_with_tools
        wanted = tuple(k for k in now if k != key) + ((key,) if on else ())
        if wanted == now:
            return
        try:
            self._settings.update(programs_with_tools=wanted)
        except SettingsError as exc:
            raise AgentsError(f"The choice could not be saved: {exc}.") from None
