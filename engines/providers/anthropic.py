"""Anthropic's Messages API, streamed.

Thinking blocks carry signatures that must come back exactly as they were sent: every content
block of an answer is collected as it streams and handed over as ``AssistantRaw`` before
``Done``; a past assistant message with ``raw`` is sent back unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx

from engines.base import (
    AssistantRaw,
    Done,
    Event,
    Message,
    ModelInfo,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.base import ChatRequest, ProviderError
from engines.providers.deadlines import (
    Clock,
    Deadlines,
    Pace,
    StreamDeadlineError,
    deadlines_for,
)
from engines.providers.errors import (
    broken_stream,
    describe_body,
    error_from_redirect,
    error_from_response,
    error_from_stream_payload,
    error_from_transport,
    is_redirect,
)
from engines.providers.http import join, make_client, request_json, same_origin
from engines.providers.registry import PROVIDERS
from engines.providers.sse import SSELineTooLongError, iter_sse
from engines.window import UNKNOWN_WINDOW_API

log = logging.getLogger("conch.providers.anthropic")

BASE_URL = PROVIDERS["anthropic"].address
API_VERSION = "2023-06-01"
CHEAP_MODELS = PROVIDERS["anthropic"].cheap
_MAX_PAGES = 20


def _tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's tool shape; OpenAI's ``{"type": "function", "function": …}`` is unwrapped."""
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, dict):
        return {
            "name": function.get("name", ""),
            "description": function.get("description", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
    if "parameters" in tool and "input_schema" not in tool:
        return {
            "name": tool.get("name", ""),
            "description": tool.get("description", ""),
            "input_schema": tool["parameters"],
        }
    return tool


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": picture.mime, "data": picture.data},
        }
        for picture in message.pictures
    ]
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    return blocks


def _call_text(name: str, arguments: Any) -> dict[str, Any]:
    """A tool call as words, for a request that offers no tools (the API refuses ``tool_use``
    blocks then)."""
    args = json.dumps(arguments, ensure_ascii=False, default=str)
    return {"type": "text", "text": f"[Called the tool {name} with {args}]"}


def _assistant_content(message: Message, *, tools: bool) -> list[dict[str, Any]]:
    if message.raw is not None:
        # Sent back exactly as received: signatures cover the thinking text. Without tools,
        # only a call is written as words; the other blocks stay as they were.
        return [
            b
            if tools or b.get("type") != "tool_use"
            else _call_text(str(b.get("name", "")), b.get("input", {}))
            for b in message.raw
        ]
    blocks: list[dict[str, Any]] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        if tools:
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            )
        else:
            blocks.append(_call_text(call.name, call.arguments))
    if not blocks:
        # The API refuses an empty assistant turn; keep the turn so the roles still alternate.
        blocks.append({"type": "text", "text": "(no answer)"})
    return blocks


def _result_block(message: Message, *, tools: bool) -> dict[str, Any]:
    if not tools:
        # A chat with tool calls (kept from another model or a program, or before the tools
        # were turned off) asked without tools: the result goes as words, marked as a
        # tool's, since the API refuses a ``tool_result`` block in a request with no tools.
        name = message.tool_name or "a tool"
        how = "failed" if message.tool_failed else "returned"
        return {"type": "text", "text": f"[The tool {name} {how}:]\n{message.text}"}
    result: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": message.text,
    }
    if message.tool_failed:
        result["is_error"] = True
    return result


def to_anthropic_messages(
    messages: tuple[Message, ...], *, tools: bool = True
) -> list[dict[str, Any]]:
    """Neutral messages in Anthropic's shape. Tool results ride in a user message; with
    ``tools`` False (the request offers none) calls and results are sent as words."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            out.append({"role": "assistant", "content": _assistant_content(message, tools=tools)})
            continue
        if message.role == "tool":
            blocks: list[dict[str, Any]] = [_result_block(message, tools=tools)]
        else:
            if not message.pictures and not (out and out[-1]["role"] == "user"):
                out.append({"role": "user", "content": message.text})
                continue
            blocks = _user_blocks(message)
        if out and out[-1]["role"] == "user":
            # Consecutive user-side messages (tool results, then words) form one user turn.
            previous = out[-1]["content"]
            if isinstance(previous, str):
                previous = [{"type": "text", "text": previous}] if previous else []
            out[-1]["content"] = [*previous, *blocks]
        else:
            out.append({"role": "user", "content": blocks})
    return out


@dataclass
class _Answer:
    """Content blocks of one streamed answer, in index order."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    json_parts: dict[int, list[str]] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    partial: bool = False
    # Events that moved the answer on (a ping or the opening message_start does not).
    moved: int = 0
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0
    has_usage: bool = False

    def read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.has_usage = True
        for name, attr in (
            ("input_tokens", "input_tokens"),
            ("cache_read_input_tokens", "cache_read"),
            ("cache_creation_input_tokens", "cache_write"),
            ("output_tokens", "output_tokens"),
        ):
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self, attr, value)

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + self.cache_read + self.cache_write,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
        )

    def raw_blocks(self) -> tuple[dict[str, Any], ...]:
        return tuple(self.blocks[index] for index in sorted(self.blocks))


def _tool_input(parts: list[str], fallback: Any) -> dict[str, Any]:
    text = "".join(parts).strip()
    if not text:
        return fallback if isinstance(fallback, dict) else {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {"_unparsed": "".join(parts)}
    return value if isinstance(value, dict) else {"_value": value}


def _list_not_json(response: httpx.Response) -> ProviderError:
    return ProviderError(
        ProblemKind.SERVER_ERROR, "The model list was not JSON: " + describe_body(response.text)
    )


class AnthropicAdapter:
    """``ProviderAdapter`` for the Anthropic Messages API."""

    name = "anthropic"
    label = PROVIDERS["anthropic"].label
    local = False
    continues_answer = (
        True  # a final assistant message is continued (engines/context/continuation.py)
    )

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float | None = None,
        deadlines: Deadlines | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.base_url = (base_url or BASE_URL).rstrip("/")
        self._key = api_key or None
        self._own_client = client is None
        self._client = client if client is not None else make_client(local=False, timeout=timeout)
        self._deadlines = deadlines  # None: sized for each request (deadlines_for)
        self._clock = clock

    def _headers(self, url: str, *, streaming: bool = False) -> dict[str, str]:
        headers = {
            "anthropic-version": API_VERSION,
            "accept": "text/event-stream" if streaming else "application/json",
        }
        if self._key and same_origin(url, self.base_url):
            headers["x-api-key"] = self._key
        return headers

    def _require_key(self) -> None:
        if not self._key:
            raise ProviderError(ProblemKind.AUTH, "No API key is set for Anthropic.")

    async def list_models(self) -> list[ModelInfo]:
        """Every model the key can use, with ``max_input_tokens`` as the window."""
        self._require_key()
        models: list[ModelInfo] = []
        after: str | None = None
        for _ in range(_MAX_PAGES):
            url = join(self.base_url, "v1/models")
            params = {"limit": "1000", **({"after_id": after} if after else {})}
            page = await request_json(
                self._client,
                "GET",
                url,
                not_json=_list_not_json,
                params=params,
                headers=self._headers(url),
            )
            entries = page.get("data") if isinstance(page, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                    continue
                window = entry.get("max_input_tokens")
                if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
                    window = UNKNOWN_WINDOW_API
                label = entry.get("display_name")
                models.append(
                    ModelInfo(
                        provider=self.name,
                        id=entry["id"],
                        label=label if isinstance(label, str) and label else entry["id"],
                        context=window,
                    )
                )
            last = page.get("last_id") if isinstance(page, dict) else None
            if not (isinstance(page, dict) and page.get("has_more") and isinstance(last, str)):
                break
            after = last
        return models

    def cheap_models(self) -> tuple[str, ...]:
        return CHEAP_MODELS

    def _payload(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": to_anthropic_messages(request.messages, tools=bool(request.tools)),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.temperature is not None:
            body["temperature"] = min(1.0, request.temperature)  # Anthropic's range ends at 1
        if request.tools:
            body["tools"] = [_tool_spec(tool) for tool in request.tools]
        body.update(request.extra)
        return body

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        """Stream one answer; ``AssistantRaw`` and ``Usage`` come just before ``Done``."""
        self._require_key()
        url = join(self.base_url, "v1/messages")
        answer = _Answer()
        log.debug("anthropic: streaming %s", request.model)
        pace = Pace(self._deadlines or deadlines_for(request.max_output_tokens), self._clock)
        try:
            async with self._client.stream(
                "POST", url, json=self._payload(request), headers=self._headers(url, streaming=True)
            ) as response:
                if is_redirect(response.status_code):
                    raise error_from_redirect(response)
                if response.status_code >= 400:
                    body = (await response.aread()).decode("utf-8", errors="replace")
                    raise error_from_response(response.status_code, body, response.headers)
                async with aclosing(iter_sse(response, pace)) as events:
                    async for sse in events:
                        data = sse.data.strip()
                        if not data:
                            continue
                        try:
                            obj = json.loads(data)
                        except (ValueError, RecursionError) as exc:
                            if sse.event == "error":
                                # A gateway's error event in plain words is still the error.
                                error = error_from_stream_payload({}, data)
                                error.partial = answer.partial
                                raise error from exc
                            raise broken_stream(
                                "Anthropic sent a line that is not JSON: " + describe_body(data),
                                partial=answer.partial,
                            ) from exc
                        if not isinstance(obj, dict):
                            continue
                        before = answer.moved
                        for event in self._read(sse.event, obj, data, answer):
                            yield event
                        if answer.moved != before:
                            pace.progress()
                        if answer.stopped:
                            break
        except httpx.TransportError as exc:
            raise error_from_transport(exc, partial=answer.partial) from exc
        except StreamDeadlineError as exc:
            raise exc.to_error(partial=answer.partial) from exc
        except SSELineTooLongError as exc:
            raise broken_stream(
                f"Anthropic sent {exc}; Conch stopped reading it.", partial=answer.partial
            ) from exc
        if not answer.stopped:
            raise broken_stream(
                "Anthropic ended the answer without message_stop.", partial=answer.partial
            )
        yield AssistantRaw(blocks=answer.raw_blocks())
        if answer.has_usage:
            yield answer.usage()
        yield Done(stop_reason=answer.stop_reason or "end_turn")

    def _read(self, name: str, obj: dict[str, Any], raw: str, answer: _Answer) -> Iterator[Event]:
        kind = obj.get("type") or name
        if kind == "error" or name == "error":
            error = error_from_stream_payload(obj, raw)
            error.partial = answer.partial
            raise error
        if kind in ("content_block_stop", "message_delta", "message_stop"):
            answer.moved += 1
        if kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict):
                answer.read_usage(message.get("usage"))
        elif kind == "content_block_start":
            index = obj.get("index")
            block = obj.get("content_block")
            if isinstance(index, int) and isinstance(block, dict):
                answer.blocks[index] = dict(block)
                if block.get("type") == "tool_use":
                    answer.json_parts[index] = []
                    answer.moved += 1  # the tool's name; an empty text block is no news yet
        elif kind == "content_block_delta":
            yield from self._read_delta(obj, answer)
        elif kind == "content_block_stop":
            index = obj.get("index")
            block = answer.blocks.get(index) if isinstance(index, int) else None
            if isinstance(index, int) and block is not None and block.get("type") == "tool_use":
                block["input"] = _tool_input(answer.json_parts.pop(index, []), block.get("input"))
                yield ToolCall(
                    call=ToolCallData(
                        id=str(block.get("id", "")),
                        name=str(block.get("name", "")),
                        arguments=block["input"],
                    )
                )
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                answer.stop_reason = delta["stop_reason"]
            answer.read_usage(obj.get("usage"))
        elif kind == "message_stop":
            answer.stopped = True

    def _read_delta(self, obj: dict[str, Any], answer: _Answer) -> Iterator[Event]:
        index = obj.get("index")
        delta = obj.get("delta")
        if not isinstance(index, int) or not isinstance(delta, dict):
            return
        block = answer.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if any(isinstance(v, str | dict) and v for k, v in delta.items() if k != "type"):
            answer.moved += 1  # an empty delta keeps a connection alive but says nothing
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = block.get("text", "") + delta["text"]
            if delta["text"]:
                answer.partial = True
                yield TextDelta(text=delta["text"])
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            if delta["thinking"]:
                answer.partial = True
                yield ThinkingDelta(text=delta["thinking"])
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            answer.json_parts.setdefault(index, []).append(delta["partial_json"])
        elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
            block.setdefault("citations", []).append(delta["citation"])

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()
