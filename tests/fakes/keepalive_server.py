"""A loopback server for any of the three wire protocols that keeps a stream open.

It answers a chat request with a little text and then, depending on ``mode``:

- ``"keep-alive"``: bytes that carry no answer, forever (blank lines, SSE comments, Anthropic
  pings, empty deltas, Ollama lines with empty content), the way a proxy or a stuck server
  holds a turn open;
- ``"silent-start"``: the same keep-alives, but without any text first;
- ``"endless"``: real pieces of text, forever (a server that never ends its answer);
- ``"paced"``: ``paced_pieces`` pieces of text, each followed by two keep-alives, then a proper
  ending (a slow answer that is still progressing);
- ``"redirect"``: a ``redirect_status`` reply pointing at ``redirect_to`` (or nowhere);
- ``None``: a normal, complete answer.

Endless replies stop when the client hangs up or the server stops; ``beats`` counts the chunks
sent after the text, and ``wait_for_beats`` lets a test wait for them.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from typing import Any

from tests.fakes.http import LoopbackServer, Recorded, Reply

PROTOCOLS = ("ollama", "openai", "anthropic")
PARTIAL = "Tides are "
PIECE = "and "
CHAT_PATHS = {"ollama": "/api/chat", "openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
CONTENT_TYPES = {
    "ollama": "application/x-ndjson",
    "openai": "text/event-stream",
    "anthropic": "text/event-stream",
}
BEAT_SECONDS = 0.01  # between two endless chunks: quick, without spinning a core


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def _ollama_line(content: str, *, done: bool = False) -> str:
    line: dict[str, Any] = {
        "model": "slow-model:latest",
        "message": {"role": "assistant", "content": content},
        "done": done,
    }
    if done:
        line.update(done_reason="stop", prompt_eval_count=30, eval_count=9)
    return json.dumps(line) + "\n"


def prelude(protocol: str) -> list[str]:
    if protocol != "anthropic":
        return []
    return [
        _sse(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "usage": {"input_tokens": 12, "output_tokens": 1},
                },
            },
            "message_start",
        ),
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            "content_block_start",
        ),
    ]


def text(protocol: str, piece: str) -> str:
    if protocol == "ollama":
        return _ollama_line(piece)
    if protocol == "openai":
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        return _sse(chunk)
    delta = {"type": "text_delta", "text": piece}
    return _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")


def keep_alives(protocol: str) -> list[str]:
    """Every way each protocol's servers and proxies keep a quiet connection open."""
    if protocol == "ollama":
        return ["\n", _ollama_line(""), "\r\n"]
    if protocol == "openai":
        empty = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}
        return [": OPENROUTER PROCESSING\n\n", "\n", _sse(empty), _sse({"choices": []})]
    return [
        _sse({"type": "ping"}, "ping"),
        ": keep-alive\n\n",
        "\n",
        text(protocol, ""),
    ]


def ending(protocol: str) -> list[str]:
    if protocol == "ollama":
        return [_ollama_line("", done=True)]
    if protocol == "openai":
        last = {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9},
        }
        return [_sse(last), "data: [DONE]\n\n"]
    return [
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 9},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]


class _Beats:
    """Chunks for ``Reply.chunks``: ``head`` once, then each of ``then``, counting as they go."""

    def __init__(self, head: list[str], then: Iterator[str], owner: KeepAliveServer) -> None:
        self._head = [piece.encode() for piece in head]
        self._then = then
        self._owner = owner

    def __iter__(self) -> Iterator[bytes]:
        head = b"".join(self._head)
        if head:  # an empty chunk would end a chunked body
            yield head
        for piece in self._then:
            self._owner._beat()
            yield piece.encode()


class KeepAliveServer(LoopbackServer):
    """Speaks one protocol; see the module's docstring for ``mode``."""

    def __init__(self, protocol: str) -> None:
        super().__init__()
        self.protocol = protocol
        self.mode: str | None = "keep-alive"
        self.paced_pieces = 30
        self.redirect_status = 302
        self.redirect_to: str | None = "https://login.example.net/sso?ticket=abc123"
        self.beats = 0
        self._beaten = threading.Condition(self.lock)

    @property
    def chat_path(self) -> str:
        return CHAT_PATHS[self.protocol]

    @property
    def base_url(self) -> str:
        """What the adapter is given (OpenAI-style addresses end in /v1)."""
        return self.url + "/v1" if self.protocol == "openai" else self.url

    def _beat(self) -> None:
        with self._beaten:
            self.beats += 1
            self._beaten.notify_all()

    def wait_for_beats(self, count: int, timeout: float) -> bool:
        with self._beaten:
            return self._beaten.wait_for(lambda: self.beats >= count, timeout)

    def handle(self, request: Recorded) -> Reply:
        path = request.path
        if self.protocol == "ollama" and request.method == "GET" and path == "/api/version":
            return Reply.json({"version": "0.12.6"})
        if self.protocol == "ollama" and path == "/api/ps":
            return Reply.json({"models": []})
        if self.protocol == "ollama" and path == "/api/show":
            info = {"general.architecture": "llama", "llama.context_length": 8192}
            return Reply.json({"model_info": info, "capabilities": ["completion"]})
        if self.mode == "redirect":
            headers = {"location": self.redirect_to} if self.redirect_to else {}
            return Reply.text("", self.redirect_status, headers=headers)
        if request.method == "POST" and path == self.chat_path:
            return self._chat()
        return super().handle(request)

    def _chat(self) -> Reply:
        p = self.protocol
        first = [*prelude(p), text(p, PARTIAL)]
        if self.mode is None:
            return Reply.stream(
                [*first, text(p, "pulled by the Moon."), *ending(p)], CONTENT_TYPES[p]
            )
        then: Iterator[str]
        if self.mode == "keep-alive":
            then = itertools.cycle(keep_alives(p))
        elif self.mode == "silent-start":
            first = prelude(p)
            then = itertools.cycle(keep_alives(p))
        elif self.mode == "endless":
            then = itertools.repeat(text(p, PIECE))
        elif self.mode == "paced":
            quiet = keep_alives(p)
            steps = [
                [text(p, PIECE), quiet[i % len(quiet)], quiet[(i + 1) % len(quiet)]]
                for i in range(self.paced_pieces)
            ]
            then = iter([*itertools.chain.from_iterable(steps), *ending(p)])
        else:
            raise AssertionError(f"unknown mode {self.mode!r}")
        reply = Reply(
            headers={"content-type": CONTENT_TYPES[p], "cache-control": "no-cache"},
            chunks=_Beats(first, then, self),  # type: ignore[arg-type]  # iterated once
        )
        if self.mode != "paced":
            reply.chunk_delay = BEAT_SECONDS
        return reply
