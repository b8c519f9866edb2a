"""A tool server with 500 tools on a 32K model: the full list (tens of thousands of tokens) would
not fit, so the chat sends the small on-demand list (lean mode) and the turn is answered.
Through the real ``conch ask``, the fake Ollama and a real MCP server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engines.tools.lean import GET_TOOL_SCHEMA, LIST_TOOLS
from engines.window import LEAN_WINDOW
from tests.app.test_cli import conch
from tests.app.test_cli_tools import MODEL, fake_server, with_servers
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, running_ollama

WINDOW = 32_768


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama([FakeModel("llama3.2", WINDOW)]) as fake:
        yield fake


def lists_then_calls(body: dict[str, Any]) -> FakeReply:
    """A model that lists the tools, fetches one schema, calls that tool, then answers."""
    messages = body.get("messages") or []
    results = [m for m in messages if m.get("role") == "tool"]
    if len(results) == 0:
        return FakeReply(text="", tool_calls=({"name": LIST_TOOLS, "arguments": {}},))
    if len(results) == 1:
        wanted = {"name": "lookup_0421"}
        return FakeReply(text="", tool_calls=({"name": GET_TOOL_SCHEMA, "arguments": wanted},))
    if len(results) == 2:
        query = {"query": "blue widgets"}
        return FakeReply(text="", tool_calls=({"name": "lookup_0421", "arguments": query},))
    return FakeReply(text=f"Found: {results[-1].get('content')}")


def test_500_tools_on_a_32k_model_go_on_demand_and_the_turn_is_answered(
    ollama: FakeOllama, data_dir: Path, tmp_path: Path
) -> None:
    server = fake_server(tmp_path / "control")
    server["args"] = [*server["args"], "--many", "500"]
    with_servers(data_dir, server)
    ollama.responder = lists_then_calls
    home = tmp_path / "home"
    home.mkdir()

    done = conch(
        "ask",
        "--model",
        MODEL,
        "--data-dir",
        str(data_dir),
        "--allow-tools",
        "lookup_0421",
        "Find blue widgets",
        home=home,
        ollama=ollama.url,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Found: lookup_0421: nothing matched “blue widgets”")
    first = ollama.chat_requests()[0]
    assert first["options"]["num_ctx"] > LEAN_WINDOW  # lean for the list's size, not the window
    sent = [t["function"]["name"] for t in first["tools"]]
    assert sent == [LIST_TOOLS, GET_TOOL_SCHEMA]
    # Once fetched, the one tool is sent in full beside the two small ones; never the 500.
    last = ollama.chat_requests()[-1]
    assert [t["function"]["name"] for t in last["tools"]] == [
        LIST_TOOLS,
        GET_TOOL_SCHEMA,
        "lookup_0421",
    ]
    listed = next(m for m in last["messages"] if m.get("role") == "tool")
    assert "lookup_0499: Look up records of kind 499" in listed["content"]
