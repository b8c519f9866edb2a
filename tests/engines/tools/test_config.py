"""Importing the mcpServers JSON of other apps, and keeping its secrets out of settings."""

from __future__ import annotations

import json

from pydantic import TypeAdapter

from engines.tools.config import (
    HttpServer,
    SecretRef,
    ServerConfig,
    StdioServer,
    import_servers,
    is_secret,
    resolve,
    secret_args,
    server_id,
)

CLAUDE_DESKTOP = """
{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/ana/Desktop"]
    },
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "LOG_LEVEL": "info"
      }
    },
    "postgres": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-postgres", "postgresql://ana:hunter2-Horse@localhost/shop"]
    }
  }
}
"""

CURSOR_REMOTE = """
{
  "mcpServers": {
    "linear": {
      "url": "https://mcp.linear.app/mcp",
      "headers": {"Authorization": "Bearer lin_api_Zx81KqTnW2", "X-Team": "design"}
    }
  }
}
"""


def dumped(imported_servers: tuple[StdioServer | HttpServer, ...]) -> str:
    return json.dumps([s.model_dump(mode="json") for s in imported_servers])


def test_claude_desktop_servers_become_conch_servers_with_their_secrets_set_apart() -> None:
    imported = import_servers(CLAUDE_DESKTOP)

    assert imported.problems == ()
    fs, github, postgres = imported.servers
    assert isinstance(fs, StdioServer)
    assert (fs.id, fs.name, fs.command) == ("filesystem", "filesystem", "npx")
    assert fs.args == ("-y", "@modelcontextprotocol/server-filesystem", "/home/ana/Desktop")

    assert isinstance(github, StdioServer)
    token = github.env["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert token == SecretRef(secret="mcp/github/env/GITHUB_PERSONAL_ACCESS_TOKEN")
    assert github.env["LOG_LEVEL"] == "info"  # not a secret: stays readable in settings

    assert isinstance(postgres, StdioServer)
    assert isinstance(postgres.args[2], SecretRef)  # a password inside a connection string

    assert imported.secrets == {
        "mcp/github/env/GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "mcp/postgres/arg/2": "postgresql://ana:hunter2-Horse@localhost/shop",
    }
    # What settings would store holds none of the secret values.
    text = dumped(imported.servers)
    assert "ghp_16C7" not in text and "hunter2" not in text


def test_a_remote_server_keeps_its_url_and_its_authorization_goes_to_the_keyring() -> None:
    imported = import_servers(CURSOR_REMOTE)
    (linear,) = imported.servers
    assert isinstance(linear, HttpServer)
    assert linear.url == "https://mcp.linear.app/mcp"
    assert linear.headers["Authorization"] == SecretRef(secret="mcp/linear/header/Authorization")
    assert linear.headers["X-Team"] == "design"
    assert imported.secrets == {"mcp/linear/header/Authorization": "Bearer lin_api_Zx81KqTnW2"}
    assert "lin_api" not in dumped(imported.servers)


def test_a_saved_server_reads_back_the_same_and_its_secret_resolves_through_the_keyring() -> None:
    imported = import_servers(CLAUDE_DESKTOP)
    adapter: TypeAdapter[StdioServer | HttpServer] = TypeAdapter(ServerConfig)
    for server in imported.servers:
        assert adapter.validate_python(json.loads(server.model_dump_json())) == server

    github = imported.servers[1]
    assert isinstance(github, StdioServer)
    token = github.env["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert resolve(token, imported.secrets.get, "the token").startswith("ghp_")
    assert resolve("plain", imported.secrets.get, "x") == "plain"


def test_other_apps_spellings_are_read_too() -> None:
    vscode = '{"servers": {"web": {"type": "http", "url": "http://127.0.0.1:9000/mcp"}}}'
    windsurf = '{"mcpServers": {"docs": {"serverUrl": "https://docs.example.com/mcp"}}}'
    cline = '{"mcpServers": {"git": {"command": "uvx", "disabled": true}}}'
    bare = '{"fetch": {"command": "uvx", "args": ["mcp-server-fetch"]}}'
    fragment = '"fetch": {"command": "uvx", "args": ["mcp-server-fetch"]},'

    assert isinstance(import_servers(vscode).servers[0], HttpServer)
    assert import_servers(windsurf).servers[0].id == "docs"
    assert import_servers(cline).servers[0].enabled is False
    assert import_servers(bare).servers[0].name == "fetch"
    assert import_servers(fragment).servers[0].name == "fetch"  # pasted without its braces


def test_what_cannot_be_imported_is_said_in_one_sentence_each() -> None:
    broken = import_servers('{"mcpServers": {"a": {"command": "x",}}')
    assert broken.servers == ()
    (why,) = broken.problems
    assert why.startswith("This is not valid JSON (")
    assert "line 1" in why

    assert import_servers("").problems == (
        "There is nothing to import: paste the servers' JSON or pick a file.",
    )
    assert "No servers were found" in import_servers('{"theme": "dark"}').problems[0]

    mixed = import_servers(
        json.dumps(
            {
                "mcpServers": {
                    "ok": {"command": "uvx", "args": ["mcp-server-time"]},
                    "old": {"type": "sse", "url": "https://example.com/sse"},
                    "nothing": {"args": ["x"]},
                    "ftp": {"url": "ftp://example.com/mcp"},
                    "odd": ["not", "an", "object"],
                    "vars": {"command": "x", "env": {"API_KEY": "${input:key}"}},
                }
            }
        )
    )
    assert [s.name for s in mixed.servers] == ["ok", "vars"]
    assert mixed.problems == (
        "Skipped “old”: it uses the older SSE transport, which Conch does not speak; use the "
        "server's Streamable HTTP address instead.",
        "Skipped “nothing”: it has neither a command nor a URL.",
        "Skipped “ftp”: “ftp” is not an http or https address.",
        "Skipped “odd”: its entry is not an object.",
        "“vars” sets API_KEY from a ${…} placeholder, which Conch does not fill in; enter the "
        "real value in Settings → Tools.",
    )


def test_imported_ids_never_collide_with_servers_already_there() -> None:
    imported = import_servers(CLAUDE_DESKTOP, taken_ids={"filesystem", "github"})
    assert [s.id for s in imported.servers] == ["filesystem-2", "github-2", "postgres"]
    # The keyring entries follow the new ids, so an existing server's secret is not replaced.
    assert "mcp/github-2/env/GITHUB_PERSONAL_ACCESS_TOKEN" in imported.secrets
    assert server_id("My  Server (work)!") == "my-server-work"
    assert server_id("???") == "server"


def test_which_values_count_as_secrets() -> None:
    assert is_secret("BRAVE_API_KEY", "BSAabc")
    assert is_secret("slackBotToken", "x")  # camelCase names too
    assert is_secret("DB_PWD", "pw")
    assert is_secret("Authorization", "Bearer x")
    assert is_secret("NOTES", "sk-proj-abcdefghijklmnop1234567890abcd")  # a key's shape
    assert not is_secret("PWD", "/home/ana")  # the shell's working directory
    assert not is_secret("ALLOWED_DIRECTORIES", "/home/ana/Desktop")
    assert not is_secret("KEYBOARD_LAYOUT", "us")
    assert not is_secret("API_KEY", "")  # nothing to keep

    args = ("--api-key", "abc123", "--token=xyz", "--port", "8080", "/srv/data", "--verbose")
    assert secret_args(args) == [False, True, True, False, False, False, False]
