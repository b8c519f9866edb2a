"""A fake Anthropic Messages API: /v1/models with max_input_tokens, /v1/messages as SSE.

The scripted answer can think (a thinking block with a signature), include a redacted thinking
block, write text and call a tool, and reports usage with cache reads and writes. A window,
when set, is enforced with Anthropic's own refusal words: a 400, or with ``in_stream_shape``
an ``error`` event inside a 200 stream after ``message_start`` ("json": Anthropic's error
object; "text": the words alone, as a gateway may send them). Faults: "overloaded" (an error
event mid-stream), "no-stop" (no message_stop), "529", "disconnect". Like the API, it refuses
a request whose messages hold ``tool_use`` or ``tool_result`` blocks but that defines no
``tools`` (a 400 with the API's words).
"""

from __future__ import annotations

import json
import threading
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


TOOLS_REQUIRED = "Requests which include `tool_use` or `tool_result` blocks must define tools."


def _has_tool_blocks(body: dict[str, Any]) -> bool:
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            return True
    return False


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
        self.scripts: list[ClaudeScript] = []  # the next requests' answers, then ``script``
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
        if not body.get("tools") and _has_tool_blocks(body):
            return Reply.json(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": TOOLS_REQUIRED},
                    "request_id": "req_fake",
                },
                status=400,
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
        if self.scripts:  # a tool loop: each answer in turn (a tool_use, then words)
            self.script = self.scripts.pop(0)
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


# --- what the Claude Code CLI asks for --------------------------------------------------------

COMPACT_CUE = "summary of the conversation so far"  # words of Claude Code's own /compact prompt
FOCUS_CUE = "Additional Instructions:\n"  # where its prompt carries the /compact focus
AFTER_TOOL = "Understood; "  # how the model's answer to a tool result starts
ECHOED = "larch-beds-ready"  # what the ``[[echo]]`` command prints


def _user_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [
        block.get("text", "")
        for block in content or []
        if isinstance(block, dict) and block.get("type") == "text"
    ]


def _said(message: dict[str, Any]) -> str:
    """What the person typed in a user message, without Claude Code's system reminders."""
    texts = [t for t in _user_texts(message) if not t.lstrip().startswith("<system-reminder>")]
    return texts[-1].strip() if texts else ""


class ClaudeCodeServer(AnthropicServer):
    """The Anthropic fake taught what the Claude Code CLI asks for.

    It counts tokens (``/v1/messages/count_tokens``), answers Claude Code's own compaction
    prompt with an ``<analysis>`` and a ``<summary>`` that lists the person's messages and the
    focus it was given, answers a tool result in words, and otherwise echoes the newest person
    message (``You said: …``). A message containing ``[[bash]]`` makes the model ask to run
    ``touch ran.txt`` with the Bash tool first, so a test can see whether it ran; ``[[echo]]``
    to run ``echo`` with words of its own (``ECHOED``), so the result has something to show;
    ``[[write]]`` to write ``notes.txt`` with the Write tool (an edit, which "accept edits"
    lets through without asking).
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("models", [FakeClaude("claude-sonnet-4-5")])
        super().__init__(**kwargs)
        self._script_lock = threading.Lock()
        self.focuses: list[str] = []  # the focus of every compaction it was asked for
        self.reported_input = 10  # input tokens each answer reports (high: Claude Code compacts)
        self.after_tool_input: int | None = None  # what an answer to a tool result reports

    def handle(self, request: Recorded) -> Reply:
        if request.method == "POST" and request.path == "/v1/messages/count_tokens":
            return Reply.json({"input_tokens": _estimate(request.json or {})})
        return super().handle(request)

    def _messages(self, request: Recorded) -> Reply:
        with self._script_lock:
            kept = self.script
            self.script = self._script_for(request.json or {})
            answers_tool = self.script.text[:1] == [AFTER_TOOL]
            after = self.after_tool_input if answers_tool else None
            self.script.input_tokens = self.reported_input if after is None else after
            try:
                return super()._messages(request)
            finally:
                self.script = kept

    def _script_for(self, body: dict[str, Any]) -> ClaudeScript:
        # Claude Code puts its environment notes last, as a message of role "system".
        messages = [
            m for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"
        ]
        last = messages[-1] if messages else {}
        whole = "\n".join(_user_texts(last))
        if COMPACT_CUE in whole:
            focus = ""
            if FOCUS_CUE in whole:
                focus = whole.split(FOCUS_CUE, 1)[1].split("\n\n", 1)[0].strip()
            self.focuses.append(focus)
            asked = [_said(m) for m in messages[:-1]]
            lines = "\n".join(f"   - {a}" for a in asked if a)
            return ClaudeScript(
                text=[
                    "<analysis>Read the chat.</analysis>\n\n<summary>\n",
                    f"1. Primary Request and Intent:\n{lines}\n",
                    f"2. Kept as asked: {focus or '(nothing in particular)'}\n</summary>",
                ]
            )
        content = last.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return ClaudeScript(text=[AFTER_TOOL, "that step is done or was declined."])
        said = _said(last)
        if "[[bash]]" in said:
            call = ClaudeCall(
                "toolu_fake_1", "Bash", {"command": "touch ran.txt", "description": "Make a file"}
            )
            return ClaudeScript(text=["Let me run it."], calls=[call], stop_reason="tool_use")
        if "[[echo]]" in said:
            echo = {"command": f"echo {ECHOED}", "description": "Say the words"}
            call = ClaudeCall("toolu_fake_2", "Bash", echo)
            return ClaudeScript(text=["Let me run it."], calls=[call], stop_reason="tool_use")
        if "[[write]]" in said:
            note = {"file_path": "./notes.txt", "content": "beds of larch\n"}
            call = ClaudeCall("toolu_fake_3", "Write", note)
            return ClaudeScript(text=["Let me write it."], calls=[call], stop_reason="tool_use")
        return ClaudeScript(text=["You said: ", said[:200] or "(nothing)"])
