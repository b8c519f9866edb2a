"""A stand-in for the runtime's server that crashes on cue (run as a script).

``BundledRuntime(server=(python, this file, "--crash", MODE))`` starts it with the runtime's own
arguments after those. It answers ``GET /v1/models`` and ``POST /v1/chat/completions`` (the
self-test's one token, and streamed answers of a few words) the way the real server does, and
ends itself where ``MODE`` says:

- ``none``: never.
- ``selftest-SIG``: on the self-test (before the runtime is called ready).
- ``first-SIG``: once a streamed answer has begun, before its first word.
- ``answer-SIG``: right after a streamed answer's first word.
- ``answer-SIG-once``: the same, only the first time in this data directory.
- ``answer-drop``: closes the connection after the first word and keeps running.

``SIG`` is a signal name (``SIGILL``, ``SIGSEGV``, ``SIGKILL``) or ``exit3`` for ``exit(3)``.
Every start appends its arguments to ``fake-runtime-starts.jsonl`` in the working directory,
and every POST its path and slot to ``fake-runtime-posts.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

WORDS = ("Red", ", green", " and", " blue", ".")


def end_now(how: str) -> None:
    sys.stdout.flush()
    if how.startswith("exit"):
        os._exit(int(how.removeprefix("exit")))
    # raise() signals this very thread, so the process ends before the next line could run
    # (os.kill may be taken by another thread a moment later).
    signal.raise_signal(getattr(signal, how))
    os._exit(99)  # a signal Python handles itself (never used here) must still end us


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "none"
    alias = "model"

    def log_message(self, format: str, *args: Any) -> None:
        print(f"fake runtime: {format % args}", flush=True)

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.alias, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        with open("fake-runtime-posts.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"path": self.path, "id_slot": body.get("id_slot")}) + "\n")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": "not found"}})
            return
        where, _, how = self.mode.partition("-")
        if not body.get("stream"):
            if where == "selftest":
                end_now(how)
            self._json(
                200,
                {
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "Hello"},
                            "finish_reason": "length",
                        }
                    ],
                },
            )
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if where == "first":
            end_now(how)
        once = how.endswith("-once")
        how = how.removesuffix("-once")
        marker = Path("fake-runtime-crashed-once")
        for i, word in enumerate(WORDS):
            finish = "stop" if i == len(WORDS) - 1 else None
            self._chunk(
                {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": finish}]}
            )
            if i == 0 and where == "answer":
                if how == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if not once or not marker.exists():
                    marker.touch()
                    end_now(how)
        self._send(b"data: [DONE]\n\n")
        self._send(b"")

    def _chunk(self, obj: dict[str, Any]) -> None:
        self._send(f"data: {json.dumps(obj)}\n\n".encode())

    def _send(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash", default="none")
    parser.add_argument("--model_alias", default="model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _rest = parser.parse_known_args()
    with open("fake-runtime-starts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(sys.argv[1:]) + "\n")
    Handler.mode = args.crash
    Handler.alias = args.model_alias
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"fake runtime: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
