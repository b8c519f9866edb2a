"""A stdio "MCP server" that answers every request with something that is not MCP.

``python -m tests.fakes.mcp_garbage MODE``:

- ``text``: a line of plain words for each request (never an answer);
- ``broken``: JSON that names the request's id but is no JSON-RPC message.

It reads until its stdin closes, so it only ends when the client stops it.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "text"
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if "id" not in request:
            continue  # a notification wants no answer
        if mode == "broken":
            print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "answer": "yes"}), flush=True)
        else:
            print("Hello! Server starting up, please wait...", flush=True)


if __name__ == "__main__":
    main()
