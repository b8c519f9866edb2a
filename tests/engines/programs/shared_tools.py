"""What the Claude Code and Codex tests share to check that Conch's MCP servers reach the
program (only when allowed) and that a server's secret is on no command line on the way."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engines.programs.mcp import SharedServer, SharedSource

ROOT = Path(__file__).resolve().parents[3]
SECRET = "tok-very-secret-0123456789"


def fake_server(control: Path) -> SharedServer:
    """The fake MCP server as Conch's servers read it: its token from the keyring."""
    return SharedServer(
        "fake",
        "Fake tools",
        sys.executable,
        ("-m", "tests.fakes.mcp_server", "--control", str(control)),
        {"FAKE_TOKEN": SECRET, "PYTHONPATH": str(ROOT)},
        secret_env=frozenset({"FAKE_TOKEN"}),
    )


def source(servers: list[SharedServer]) -> SharedSource:
    return lambda: (servers, [])


def launches(control: Path) -> list[dict[str, object]]:
    where = control / "launches"
    if not where.exists():
        return []
    return [json.loads(line) for line in where.read_text("utf-8").splitlines()]


def assert_no_secret_on_a_command_line(launch: dict[str, object]) -> None:
    parents = launch["parents"]
    assert isinstance(parents, list) and parents  # Linux: the chain that started it
    for argv in parents:
        assert SECRET not in " ".join(argv), argv
