"""Conch's MCP servers in Codex's and Claude Code's own forms (for their engines to pass)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

from engines.programs.mcp import SharedServer, acp_servers, claude_servers, codex_config
from tests.engines.programs.test_codex import CODEX, needs_codex

SERVERS = [
    SharedServer(
        "gh",
        "GitHub",
        "gh-mcp",
        ("--read-only", 'say "hi"'),
        {"GITHUB_TOKEN": "ghp_secret", "LEVEL": "1"},
        secret_env=frozenset({"GITHUB_TOKEN"}),
    ),
    SharedServer("docs", "Docs", url="https://docs.example/mcp", headers={"X-Team": "a"}),
]


def overrides(args: tuple[str, ...]) -> dict[str, object]:
    """Codex's ``-c key=value`` pairs read the way Codex reads them: the value as TOML."""
    assert args[::2] == ("-c",) * (len(args) // 2)
    out: dict[str, object] = {}
    for pair in args[1::2]:
        key, _, value = pair.partition("=")
        out[key] = tomllib.loads(f"v = {value}")["v"]
    return out


def test_codex_gets_config_overrides_and_its_secrets_in_the_environment() -> None:
    got = codex_config(SERVERS)
    assert overrides(got.args) == {
        "mcp_servers.gh.command": "gh-mcp",
        "mcp_servers.gh.args": ["--read-only", 'say "hi"'],
        "mcp_servers.gh.env": {"LEVEL": "1"},
        "mcp_servers.gh.env_vars": ["GITHUB_TOKEN"],
        "mcp_servers.docs.url": "https://docs.example/mcp",
        "mcp_servers.docs.http_headers": {"X-Team": "a"},
    }
    assert "ghp_secret" not in " ".join(got.args)  # not on a command line others can read
    assert got.env == {"GITHUB_TOKEN": "ghp_secret"}


def test_claude_code_gets_the_sdks_mcp_servers_option_with_secrets_by_reference() -> None:
    got = claude_servers(SERVERS)
    assert got.servers == {
        "GitHub": {
            "type": "stdio",
            "command": "gh-mcp",
            "args": ["--read-only", 'say "hi"'],
            # The SDK puts this on the CLI's command line: the CLI expands the reference.
            "env": {"GITHUB_TOKEN": "${CONCH_MCP_GH_ENV_GITHUB_TOKEN}", "LEVEL": "1"},
        },
        "Docs": {"type": "http", "url": "https://docs.example/mcp", "headers": {"X-Team": "a"}},
    }
    assert got.env == {"CONCH_MCP_GH_ENV_GITHUB_TOKEN": "ghp_secret"}


SECRET_WEB = SharedServer(
    "web",
    "Web",
    url="https://web.example/mcp",
    headers={"Authorization": "Bearer sk-web", "X-Team": "a"},
    secret_headers=frozenset({"Authorization"}),
)
SECRET_ARG = SharedServer(
    "db", "DB", "db-mcp", ("--password", "pw-123"), secret_args=frozenset({1})
)


def test_a_secret_header_reaches_codex_through_its_environment() -> None:
    got = codex_config([SECRET_WEB])
    assert overrides(got.args) == {
        "mcp_servers.web.url": "https://web.example/mcp",
        "mcp_servers.web.http_headers": {"X-Team": "a"},
        "mcp_servers.web.env_http_headers": {"Authorization": "CONCH_MCP_WEB_AUTHORIZATION"},
    }
    assert got.env == {"CONCH_MCP_WEB_AUTHORIZATION": "Bearer sk-web"}


def test_a_server_with_a_secret_argument_is_left_out_of_codex_and_said() -> None:
    got = codex_config([SECRET_ARG, SERVERS[1]])
    assert "pw-123" not in " ".join(got.args)
    assert [k for k in overrides(got.args) if k.startswith("mcp_servers.db")] == []
    assert got.left_out == (
        "“DB” was not given to Codex: its arguments hold a secret, which Codex could only "
        "take on its command line.",
    )
    # Claude Code expands a reference in arguments and headers too.
    claude = claude_servers([SECRET_ARG, SECRET_WEB])
    assert claude.servers["DB"]["args"] == ["--password", "${CONCH_MCP_DB_ARG_1}"]
    assert (
        claude.servers["Web"]["headers"]["Authorization"] == "${CONCH_MCP_WEB_HEADER_AUTHORIZATION}"
    )
    assert "pw-123" not in str(claude.servers) and "sk-web" not in str(claude.servers)


@needs_codex
def test_the_real_codex_reads_the_overrides_as_its_servers(tmp_path: Path) -> None:
    got = codex_config(SERVERS)
    assert CODEX is not None
    # A home of its own (outside /tmp, where Codex refuses to make its helpers).
    home = tmp_path / "codex-home"
    home.mkdir()
    done = subprocess.run(
        [CODEX, *got.args, "mcp", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CODEX_HOME": str(home), **got.env},
        check=True,
    )
    listed = {s["name"]: s["transport"] for s in json.loads(done.stdout)}
    assert listed["gh"]["command"] == "gh-mcp"
    assert listed["gh"]["args"] == ["--read-only", 'say "hi"']
    assert listed["gh"]["env"] == {"LEVEL": "1"}
    assert listed["gh"]["env_vars"] == ["GITHUB_TOKEN"]
    assert listed["docs"]["url"] == "https://docs.example/mcp"
    assert listed["docs"]["http_headers"] == {"X-Team": "a"}
    web = codex_config([SECRET_WEB])
    done = subprocess.run(
        [CODEX, *web.args, "mcp", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CODEX_HOME": str(home), **web.env},
        check=True,
    )
    [read] = json.loads(done.stdout)
    assert read["transport"]["env_http_headers"] == {"Authorization": "CONCH_MCP_WEB_AUTHORIZATION"}


def test_an_acp_agent_gets_web_servers_only_when_it_takes_them() -> None:
    names = [s.name for s in acp_servers(SERVERS, http=False)]
    assert names == ["GitHub"]
    both = acp_servers(SERVERS, http=True)
    assert [s.name for s in both] == ["GitHub", "Docs"]
    assert both[1].model_dump(mode="json", exclude_none=True) == {
        "type": "http",
        "name": "Docs",
        "url": "https://docs.example/mcp",
        "headers": [{"name": "X-Team", "value": "a"}],
    }
