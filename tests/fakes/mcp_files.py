"""A small real MCP file server for the window's tests, written with the SDK's server API.

It stands in for ``@modelcontextprotocol/server-filesystem`` (which needs Node and the npm
registry): ``read_text_file`` and ``list_directory``, under the one folder it is given, over
stdio::

    python -m tests.fakes.mcp_files FOLDER

A path outside the folder is refused with an error result, as the real server does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build(root: Path) -> MCPServer:
    server = MCPServer("conch-files", instructions="Reads the files of one folder.")
    root = root.resolve()

    def inside(path: str) -> Path:
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise ToolError(f"Access denied: {path} is outside {root}.")
        return target

    @server.tool()
    def read_text_file(path: str) -> str:
        """Read a text file in the folder. Give its path relative to the folder."""
        target = inside(path)
        if not target.is_file():
            raise ToolError(f"No such file: {path}")
        return target.read_text("utf-8")

    @server.tool()
    def list_directory(path: str = ".") -> str:
        """List what a folder holds, one entry a line."""
        target = inside(path)
        return "\n".join(
            f"[{'DIR' if p.is_dir() else 'FILE'}] {p.name}" for p in sorted(target.iterdir())
        )

    return server


def main() -> None:
    build(Path(sys.argv[1])).run("stdio")


if __name__ == "__main__":
    main()
