"""The programs Conch can chat through, how to find them, and the engine for each.

A program shows in the model picker as ``programs/<key>`` when its command is found on the
PATH (or set by the person); Claude Code also counts as found when the Claude Agent SDK,
which carries its CLI, is installed. ``program_models`` lists them for the picker (missing
ones not ready, saying how to install them), and after them the ACP agents the person added
by command (``engines/programs/agents.py``). They stay out of the model catalogue on purpose:
a program found on the PATH must not count as "a model is ready" (the bundled model starts
when none is) nor become a new chat's default. ``program_engine`` builds the engine that
keeps (or is handed) the chat.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engines.base import (
    Approver,
    Engine,
    Event,
    ModelInfo,
    NextStep,
    Problem,
    ProblemKind,
    TurnInput,
    TurnProblem,
)
from engines.context.session import FoldLoader, HistoryLoader
from engines.programs import problems
from engines.programs.acp import AcpEngine
from engines.programs.agents import AgentConfig, agent_command
from engines.programs.codex import CodexEngine
from engines.programs.mcp import SharedSource
from engines.tools.config import MissingSecretError, SecretLookup

PROVIDER = "programs"
CLAUDE_CODE = "claude-code"
CODEX = "codex"
PROGRAM_WINDOW = 200_000  # what the picker shows; the programs size their own context


@dataclass(frozen=True)
class Program:
    key: str
    label: str
    command: tuple[str, ...]
    note: str  # one line for the picker: what it is and how it keeps the chat
    install: str
    login: str
    kind: Literal["acp", "claude-code", "codex"] = "acp"
    oss: Literal["ollama", "lmstudio"] | None = None  # Codex on a model of this computer
    # The arguments an older version takes instead of ``command``'s, tried in turn when it
    # refuses them at once (ACP programs only).
    older: tuple[tuple[str, ...], ...] = ()

    @property
    def takes_tools(self) -> bool:
        """Whether Conch's MCP servers reach it when the person allows it: every kind takes
        them, each in its own form (``engines/programs/mcp.py``)."""
        return self.kind in ("acp", "claude-code", "codex")


PROGRAMS: tuple[Program, ...] = (
    Program(
        CLAUDE_CODE,
        "Claude Code",
        ("claude",),
        "Anthropic's coding agent; keeps this chat as its own session and compacts it",
        "npm install -g @anthropic-ai/claude-code",
        "claude /login",
        kind="claude-code",
    ),
    Program(
        CODEX,
        "Codex",
        ("codex",),
        "OpenAI's coding agent; keeps this chat as its own thread and compacts it",
        "npm install -g @openai/codex",
        "codex login",
        kind="codex",
    ),
    Program(
        "codex-ollama",
        "Codex on Ollama",
        ("codex",),
        "Codex with Ollama's model on this computer (codex --oss); the chat stays here",
        "npm install -g @openai/codex",
        "",
        kind="codex",
        oss="ollama",
    ),
    Program(
        "codex-lmstudio",
        "Codex on LM Studio",
        ("codex",),
        "Codex with LM Studio's model on this computer (codex --oss); the chat stays here",
        "npm install -g @openai/codex",
        "",
        kind="codex",
        oss="lmstudio",
    ),
    Program(
        "gemini",
        "Gemini CLI",
        ("gemini", "--acp"),
        "Google's agent over ACP; keeps its own session of this chat",
        "npm install -g @google/gemini-cli",
        "gemini",
        # Before 0.50 Gemini CLI knew its ACP mode only as --experimental-acp.
        older=(("--experimental-acp",),),
    ),
    Program(
        "copilot",
        "GitHub Copilot CLI",
        ("copilot", "--acp"),
        "GitHub's agent over ACP; keeps its own session of this chat",
        "npm install -g @github/copilot",
        "copilot /login",
    ),
)


def program(key: str) -> Program | None:
    return next((p for p in PROGRAMS if p.key == key), None)


def _sdk_installed() -> bool:
    return importlib.util.find_spec("claude_agent_sdk") is not None


def command_for(p: Program, commands: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The program's command: the person's own (Settings → Programs) or the usual one."""
    own = tuple(commands.get(p.key, ()))
    return own or p.command


def program_models(
    commands: Mapping[str, Sequence[str]] | None = None, agents: Sequence[AgentConfig] = ()
) -> list[ModelInfo]:
    """Every known program as a model, then the agents the person added; one whose command
    is missing is listed not ready, its status saying how to install it (or where to fix it)."""
    commands = commands or {}
    out: list[ModelInfo] = []
    for p in PROGRAMS:
        cmd = command_for(p, commands)
        found = bool(cmd) and shutil.which(cmd[0]) is not None
        if p.kind == "claude-code" and p.key not in commands:
            found = found or _sdk_installed()
        out.append(
            ModelInfo(
                provider=PROVIDER,
                id=p.key,
                label=p.label,
                context=PROGRAM_WINDOW,
                local=p.oss is not None,  # the trust rules treat the chat as local
                ready=found,
                status="" if found else f"not installed: {p.install}",
            )
        )
    for agent in agents:
        found = shutil.which(agent.command) is not None
        out.append(
            ModelInfo(
                provider=PROVIDER,
                id=agent.key,
                label=agent.name,
                context=PROGRAM_WINDOW,
                ready=found,
                status="" if found else f"not found: {agent.command} (Settings → Programs)",
            )
        )
    return out


class _Unavailable:
    """A program Conch cannot drive in this install: every turn says what to install (or
    ``problem``, what else is wrong)."""

    def __init__(self, label: str, what: str, problem: TurnProblem | None = None) -> None:
        self.label = label
        self.what = what
        self.problem = problem

    async def turn(self, turn: TurnInput) -> AsyncIterator[Event]:
        yield Problem(
            problem=self.problem or problems.missing(self.label, (self.label,), self.what)
        )

    async def aclose(self) -> None:
        return None


def program_engine(
    model: ModelInfo,
    *,
    chat_id: str,
    data_dir: Path,
    history: HistoryLoader,
    latest_fold: FoldLoader,
    approve: Approver | None = None,
    commands: Mapping[str, Sequence[str]] | None = None,
    env: Mapping[str, str] | None = None,
    agents: Sequence[AgentConfig] = (),
    secrets: SecretLookup | None = None,
    tools: SharedSource | None = None,
) -> Engine:
    """The engine for a chat on ``programs/<key>``. Each chat works in its own folder
    ``<data_dir>/programs/work/<chat-id>``; Claude Code's session id is kept beside it.
    ``agents`` are the ones the person added (their secrets read through ``secrets``);
    ``tools``, given only when the person allowed it for this program, reads Conch's MCP
    servers for the program's sessions (or each Codex run)."""
    found = program(model.id)
    added = next((a for a in agents if a.key == model.id), None)
    if found is None and added is not None:
        return _added_agent(
            added,
            chat_id=chat_id,
            data_dir=data_dir,
            history=history,
            latest_fold=latest_fold,
            approve=approve,
            secrets=secrets,
            tools=tools,
        )
    if found is None:
        raise ValueError(f"no program {model.id!r}")
    commands = commands or {}
    cwd = data_dir / "programs" / "work" / chat_id
    if found.kind == "codex":
        return CodexEngine(
            chat_id=chat_id,
            state_dir=data_dir / "programs" / "sessions",
            cwd=cwd,
            history=history,
            latest_fold=latest_fold,
            command=command_for(found, commands),
            oss=found.oss,
            env=env,
            tools=tools,
        )
    if found.kind == "claude-code":
        try:
            # By name, here: the Claude Agent SDK is an optional extra (its wheel carries a
            # 400 MB CLI), and a frozen build must not pull it in by following this import.
            claude_code = importlib.import_module("engines.programs.claude_code")
        except ImportError:
            return _Unavailable(found.label, "the programs extra (pip install 'conch[programs]')")
        own = commands.get(found.key)
        engine: Engine = claude_code.ClaudeCodeEngine(
            chat_id=chat_id,
            state_dir=data_dir / "programs" / "sessions",
            cwd=cwd,
            history=history,
            latest_fold=latest_fold,
            approve=approve,
            cli_path=own[0] if own else None,
            env=env,
            tools=tools,
        )
        return engine
    command = command_for(found, commands)
    return AcpEngine(
        program=found.label,
        command=command,
        older=[(command[0], *args) for args in found.older] if command else [],
        cwd=cwd,
        history=history,
        latest_fold=latest_fold,
        approve=approve,
        chat_id=chat_id,
        state_dir=data_dir / "programs" / "sessions",
        env=env,
        login=found.login,
        install=found.install,
        mcp_servers=tools,
    )


def _added_agent(
    agent: AgentConfig,
    *,
    chat_id: str,
    data_dir: Path,
    history: HistoryLoader,
    latest_fold: FoldLoader,
    approve: Approver | None,
    secrets: SecretLookup | None,
    tools: SharedSource | None,
) -> Engine:
    """An agent the person added: its command as given, nothing appended."""
    try:
        command, env = agent_command(agent, secrets or (lambda _key: None))
    except MissingSecretError as exc:
        return _Unavailable(
            agent.name,
            "",
            TurnProblem.of(
                ProblemKind.AUTH,
                detail=f"missing keyring entry: {exc.ref.secret}",
                next_step=NextStep(
                    kind="open-settings", label=problems.SETTINGS_LABEL, text="programs"
                ),
                message=(
                    f"Conch could not start {agent.name}: the value of {exc.what} is not in the "
                    "keyring any more. Enter it again in Settings → Programs."
                ),
            ),
        )
    return AcpEngine(
        program=agent.name,
        command=command,
        cwd=data_dir / "programs" / "work" / chat_id,
        history=history,
        latest_fold=latest_fold,
        approve=approve,
        chat_id=chat_id,
        state_dir=data_dir / "programs" / "sessions",
        env=env,
        mcp_servers=tools,
    )
