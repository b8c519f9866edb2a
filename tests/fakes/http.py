"""A tiny real HTTP server on 127.0.0.1 for tests: records every request, sends scripted replies.

Standard library only (``ThreadingHTTPServer`` in a background thread), so any test can start
one without an event loop of its own. Replies can stream chunk by chunk, pause before the
status line (a server slow to answer), or drop the connection part-way (a broken stream).
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it. Header names are lower case."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: list[bytes] | None = None  # sent one by one, chunked transfer encoding
    chunk_delay: float = 0.0
    head_delay: float = 0.0  # wait this long before the status line
    cut_after: int | None = None  # drop the connection after this many chunks

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls.text(json.dumps(obj), status, "application/json", headers)

    @classmethod
    def text(
        cls,
        text: str,
        status: int = 200,
        content_type: str = "text/plain; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return cls(
            status=status,
            headers={"content-type": content_type, **(headers or {})},
            body=text.encode("utf-8"),
        )

    @classmethod
    def stream(cls, pieces: list[str], content_type: str = "text/event-stream") -> Reply:
        return cls(
            headers={"content-type": content_type, "cache-control": "no-cache"},
            chunks=[piece.encode("utf-8") for piece in pieces],
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-stream is a scripted fault here, not news for the test log.
        return


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # a forgotten keep-alive connection must not pin a thread forever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request = Recorded(
            method=self.command,
            path=parts.path,
            query=parts.query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        owner = self.server.owner
        with owner.lock:
            owner.requests.append(request)
        reply = owner.handle(request)
        try:
            self._send(reply, owner.stopping)
        except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
            self.close_connection = True

    def _cut(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, reply: Reply, stopping: threading.Event) -> None:
        if reply.head_delay and stopping.wait(reply.head_delay):
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.chunks is None:
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for sent, chunk in enumerate(reply.chunks):
            if reply.cut_after is not None and sent >= reply.cut_after:
                self._cut()
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            if reply.chunk_delay and stopping.wait(reply.chunk_delay):
                return
        if reply.cut_after is not None and reply.cut_after >= len(reply.chunks):
            self._cut()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class LoopbackServer:
    """Subclasses answer in ``handle``; tests read ``requests`` afterwards."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def handle(self, request: Recorded) -> Reply:
        return Reply.json({"error": {"message": f"No route for {request.path}"}}, status=404)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def requests_to(self, path_end: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith(path_end)]


def free_port() -> int:
    """A port nothing listens on right now (for "server not running" tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
