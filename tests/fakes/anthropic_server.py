"""A fake Anthropic Messages API: /v1/models with max_input_tokens, /v1/messages as SSE.

The scripted answer can think (a thinking block with a signature), include a redacted thinking
block, write text and call a tool, and reports usage with cache reads and writes. A window,
when set, is enforced with Anthropic's own refusal words: a 400, or with ``in_stream_shape``
an ``error`` event inside a 200 stream after ``message_start`` ("json": Anthropic's error
object; "text": the words alone, as a gateway may send them). Faults: "overloaded" (an error
event mid-stream), "no-stop" (no message_stop), "529", "disconnect".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http import LoopbackServer, Recorded, Reply


@dataclass
class FakeClaude:
    id: str
    max_input_tokens: int | None = 200_000
    display_name: str = ""


@dataclass
class ClaudeCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass
class ClaudeScript:
    thinking: list[str] = field(default_factory=list)
    signature: str = ""
    redacted: str | None = None  # data of a redacted_thinking block, sent before the text
    text: list[str] = field(default_factory=lambda: ["Hi", " there."])
    calls: list[ClaudeCall] = field(default_factory=list)
    stop_reason: str = "end_turn"
    input_tokens: int = 10
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 7


def _estimate(body: dict[str, Any]) -> int:
    chars = len(json.dumps(body.get("system", ""))) + len(json.dumps(body.get("messages", [])))
    return chars // 4


class AnthropicServer(LoopbackServer):
    def __init__(
        self,
        *,
        models: list[FakeClaude] | None = None,
        script: ClaudeScript | None = None,
        window: int | None = None,
        api_key: str | None = None,
        page_size: int | None = None,
    ) -> None:
        super().__init__()
        self.models = models if models is not None else [FakeClaude("claude-fake-1")]
        self.script = script or ClaudeScript()
        self.window = window
        self.api_key = api_key
        self.page_size = page_size
        self.fault: str | None = None
        self.in_stream_shape: str | None = None  # "json" or "text": refuse inside the stream

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def message_requests(self) -> list[Recorded]:
        return self.requests_to("/v1/messages")

    def handle(self, request: Recorded) -> Reply:
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            return Reply.json(
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                },
                status=401,
            )
        if request.headers.get("anthropic-version") != "2023-06-01":
            return Reply.json(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "anthropic-version: header is required",
                    },
                },
                status=400,
            )
        if request.method == "GET" and request.path == "/v1/models":
            return Reply.json(self._models(request.query))
        if request.method == "POST" and request.path == "/v1/messages":
            return self._messages(request)
        return super().handle(request)

    def _models(self, query: str) -> Any:
        entries = [
            {
                "type": "model",
                "id": model.id,
                "display_name": model.display_name or model.id,
                "created_at": "2025-01-01T00:00:00Z",
                **(
                    {"max_input_tokens": model.max_input_tokens}
                    if model.max_input_tokens is not None
                    else {}
                ),
            }
            for model in self.models
        ]
        start = 0
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        after = params.get("after_id")
        if after:
            ids = [entry["id"] for entry in entries]
            start = ids.index(after) + 1 if after in ids else len(ids)
        size = self.page_size or len(entries) or 1
        page = entries[start : start + size]
        return {
            "data": page,
            "has_more": start + size < len(entries),
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        }

    def _messages(self, request: Recorded) -> Reply:
        body = request.json or {}
        if self.fault == "529":
            return Reply.json(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                status=529,
            )
        tokens = _estimate(body)
        if self.window is not None and tokens > self.window:
            refusal = {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": f"prompt is too long: {tokens} tokens > {self.window} maximum",
                },
                "request_id": "req_fake",
            }
            if self.in_stream_shape is not None:
                return Reply.stream(self._refused_in_stream(body, refusal))
            return Reply.json(refusal, status=400)
        reply = Reply.stream(self._events(body))
        if self.fault == "disconnect":
            reply.cut_after = 4
        return reply

    def _refused_in_stream(self, body: dict[str, Any], refusal: dict[str, Any]) -> list[str]:
        started = self._events(body)[:2]  # message_start and a ping, then the refusal
        if self.in_stream_shape == "text":
            return [*started, f"event: error\ndata: {refusal['error']['message']}\n\n"]
        return [*started, f"event: error\ndata: {json.dumps(refusal)}\n\n"]

    def _events(self, body: dict[str, Any]) -> list[str]:
        script = self.script

        def event(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n"

        out = [
            event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_fake",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": [],
                        "stop_reason": None,
                        "usage": {
                            "input_tokens": script.input_tokens,
                            "cache_creation_input_tokens": script.cache_write,
                            "cache_read_input_tokens": script.cache_read,
                            "output_tokens": 1,
                        },
                    },
                },
            ),
            event("ping", {"type": "ping"}),
        ]
        index = 0
        if script.thinking:
            out.append(
                event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                )
            )
            for piece in script.thinking:
                out.append(
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": piece},
                        },
                    )
                )
            out.append(
                event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": script.signature},
                    },
                )
            )
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        if script.redacted is not None:
            out.append(
                event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "redacted_thinking", "data": script.redacted},
                    },
                )
            )
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        if script.text:
            out.append(
                event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for position, piece in enumerate(script.text):
                out.append(
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
                if position == 0 and self.fault == "overloaded":
                    out.append(
                        event(
                            "error",
                            {
                                "type": "error",
                                "error": {"type": "overloaded_error", "message": "Overloaded"},
                            },
                        )
                    )
                    return out
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        for call in script.calls:
            out.append(
                event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": call.id,
                            "name": call.name,
                            "input": {},
                        },
                    },
                )
            )
            arguments = json.dumps(call.input)
            half = len(arguments) // 2
            for fragment in (arguments[:half], arguments[half:]):
                out.append(
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": fragment},
                        },
                    )
                )
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        out.append(
            event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": script.stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": script.output_tokens},
                },
            )
        )
        if self.fault != "no-stop":
            out.append(event("message_stop", {"type": "message_stop"}))
        return out
