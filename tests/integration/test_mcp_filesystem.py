"""The published MCP filesystem server (``@modelcontextprotocol/server-filesystem``, from npm,
started with npx over stdio) reads a file from a temp folder through the whole chain: settings
→ the app's tool servers → the tool loop → ``conch ask`` on the fake Ollama.

The dev set-up (scripts/setup.sh) installs the server into the npm cache folder, so the test
needs no network; without it npx fetches the package. Skipped only when npx is missing (CI
installs Node).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.app.test_cli import conch
from tests.app.test_cli_tools import MODEL, calls_then_answers, with_servers
from tests.fakes.ollama_server import FakeModel, running_ollama

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed"),
]

PACKAGE = "@modelcontextprotocol/server-filesystem"
CACHE = Path(os.environ.get("CONCH_NPM_CACHE", Path.home() / ".cache/conch/npm"))


def filesystem_server(folder: Path) -> dict[str, object]:
    """The server as a person would add it, run from the set-up's cache when it is there."""
    installed = (CACHE / "node_modules/.bin/mcp-server-filesystem").exists()
    args = (
        ["--no", "--prefix", str(CACHE), "mcp-server-filesystem", str(folder)]
        if installed
        else ["-y", PACKAGE, str(folder)]
    )
    return {
        "transport": "stdio",
        "id": "filesystem",
        "name": "Filesystem",
        "command": "npx",
        "args": args,
    }


def test_the_filesystem_server_reads_a_file_for_the_model(data_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    notes = folder / "shopping.txt"
    notes.write_text("eggs, flour, 2 lemons\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    with_servers(data_dir, filesystem_server(folder))

    with running_ollama([FakeModel("llama3.2", 131_072)]) as ollama:
        ollama.responder = calls_then_answers("read_text_file", {"path": str(notes)})
        done = conch(
            "ask",
            "--model",
            MODEL,
            "--allow-tools",
            "read_text_file",
            "--data-dir",
            str(data_dir),
            "What is on my shopping list?",
            home=home,
            ollama=ollama.url,
        )
        first = ollama.chat_requests()[0]

    assert done.returncode == 0, done.stderr
    assert done.stdout == "The tool said: eggs, flour, 2 lemons\n"
    assert "Tool read_text_file (Filesystem)" in done.stderr and ": done" in done.stderr
    # The real server's whole tool list was offered (it has a dozen tools).
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"read_text_file", "list_directory", "write_file"} <= offered
