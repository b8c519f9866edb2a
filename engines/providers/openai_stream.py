"""The OpenAI-style chat protocol: the request body (messages, tools, answer length), and a
streamed answer read chunk by chunk (text, thinking, tool-call deltas, usage) into events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from engines.base import (
    Done,
    Event,
    Message,
    Reading,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    Usage,
)
from engines.providers.base import ChatRequest
from engines.providers.errors import is_error_payload
from engines.providers.json_fields import positive_int
from engines.providers.openai_rows import OpenAIStyleRow


def tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's tool shape; a neutral ``{name, description, parameters}`` is wrapped."""
    if "type" in tool:
        return tool
    if "input_schema" in tool:  # Anthropic's shape
        return {
            "type": "function",
            "function": {
                "name": tool.get("name", ""),
                "description": tool.get("description", ""),
                "parameters": tool["input_schema"],
            },
        }
    return {"type": "function", "function": tool}


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    if not message.pictures:
        return message.text
    parts: list[dict[str, Any]] = []
    if message.text:
        parts.append({"type": "text", "text": message.text})
    for picture in message.pictures:
        url = f"data:{picture.mime};base64,{picture.data}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def to_openai_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Provider-neutral messages in OpenAI's shape, system first."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": _user_content(message)})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text}
            if message.tool_calls:
                entry["content"] = message.text or None
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(entry)
        else:
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
    return out


def request_body(
    row: OpenAIStyleRow, request: ChatRequest, *, stream: bool, max_tokens: int
) -> dict[str, Any]:
    """The chat completions body for ``request`` as ``row``'s server takes it."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": to_openai_messages(request.system, request.messages),
        "stream": stream,
        row.max_tokens_field: max_tokens,
    }
    if stream and row.include_usage:
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [tool_spec(tool) for tool in request.tools]
    body.update(request.extra)
    return body


@dataclass
class _ToolSlot:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class AnswerStream:
    """What one streamed answer has produced so far."""

    thinking_fields: tuple[str, ...]
    finish_reason: str | None = None
    done_marker: bool = False
    partial: bool = False  # answer text (or thinking) has been shown
    shown: int = 0  # pieces of text or thinking shown
    chunks: int = 0
    tools: dict[int, _ToolSlot] = field(default_factory=dict)
    usage: Usage | None = None
    read: int = -1  # prompt tokens the server said it had read (llama.cpp's prompt_progress)

    @property
    def finished(self) -> bool:
        return self.done_marker or self.finish_reason is not None

    def mark(self) -> tuple[object, ...]:
        """Changes whenever the answer moves on; an empty delta or a repeat leaves it alone."""
        tool_chars = sum(len(t.id) + len(t.name) + len(t.arguments) for t in self.tools.values())
        return (self.shown, tool_chars, self.usage, self.finish_reason, self.done_marker, self.read)

    def _show(self) -> None:
        self.partial = True
        self.shown += 1

    @property
    def answered(self) -> bool:
        return self.partial or bool(self.tools)

    def feed(self, obj: dict[str, Any]) -> Iterator[Event]:
        self.chunks += 1
        self._read_usage(obj)
        yield from self._read_progress(obj.get("prompt_progress"))
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = choice.get("message")  # a whole (non-streamed) answer
            if isinstance(delta, dict):
                yield from self._read_delta(delta)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason

    def _read_progress(self, progress: Any) -> Iterator[Event]:
        """llama.cpp's ``prompt_progress`` (``{"total", "cache", "processed"}``; processed
        counts the cached tokens too), sent while it reads a prompt, when asked."""
        if not isinstance(progress, dict) or self.answered:
            return
        total = positive_int(progress.get("total"))
        done = progress.get("processed")
        if not total or not isinstance(done, int) or isinstance(done, bool) or done <= self.read:
            return
        self.read = done
        cached = positive_int(progress.get("cache")) or 0
        yield Reading(done=min(done, total), total=total, cached=min(cached, total))

    def _read_delta(self, delta: dict[str, Any]) -> Iterator[Event]:
        for name in self.thinking_fields:
            thought = delta.get(name)
            if isinstance(thought, str) and thought:
                self._show()
                yield ThinkingDelta(text=thought)
                break
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._show()
            yield TextDelta(text=content)
        elif isinstance(content, list):
            # Mistral's reasoning models stream typed parts: text, and thinking parts.
            for part in content:
                yield from self._read_part(part)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                self._read_tool_call(position, call)

    def _read_part(self, part: Any) -> Iterator[Event]:
        if not isinstance(part, dict):
            return
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
            self._show()
            yield TextDelta(text=part["text"])
        elif kind == "thinking":
            inner = part.get("thinking")
            pieces = inner if isinstance(inner, list) else [{"text": inner}]
            for piece in pieces:
                text = piece.get("text") if isinstance(piece, dict) else None
                if isinstance(text, str) and text:
                    self._show()
                    yield ThinkingDelta(text=text)

    def _read_tool_call(self, position: int, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index", position)
        slot = self.tools.setdefault(index if isinstance(index, int) else position, _ToolSlot())
        if isinstance(call.get("id"), str) and call["id"]:
            slot.id = call["id"]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"]:
                slot.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                slot.arguments += arguments
            elif isinstance(arguments, dict):  # some local servers send an object
                slot.arguments += json.dumps(arguments)

    def _read_usage(self, obj: dict[str, Any]) -> None:
        usage = obj.get("usage")
        groq = obj.get("x_groq")
        if not isinstance(usage, dict) and isinstance(groq, dict):
            usage = groq.get("usage")
        if isinstance(usage, dict):
            prompt = positive_int(usage.get("prompt_tokens")) or 0
            details = usage.get("prompt_tokens_details")
            cached = positive_int(details.get("cached_tokens")) if isinstance(details, dict) else 0
            cached = cached or positive_int(usage.get("prompt_cache_hit_tokens")) or 0
            output = positive_int(usage.get("completion_tokens")) or 0
            self.usage = Usage(input_tokens=prompt, output_tokens=output, cache_read_tokens=cached)
            return
        timings = obj.get("timings")  # llama-server's own counters, when usage is absent
        if isinstance(timings, dict) and self.usage is None:
            cache_n = positive_int(timings.get("cache_n")) or 0
            prompt_n = positive_int(timings.get("prompt_n")) or 0
            predicted = positive_int(timings.get("predicted_n")) or 0
            if cache_n or prompt_n or predicted:
                self.usage = Usage(
                    input_tokens=cache_n + prompt_n,
                    output_tokens=predicted,
                    cache_read_tokens=cache_n,
                )

    def ending(self) -> Iterator[Event]:
        for index in sorted(self.tools):
            slot = self.tools[index]
            yield ToolCall(
                call=ToolCallData(
                    id=slot.id or f"call_{index}", name=slot.name, arguments=_arguments(slot)
                )
            )
        if self.usage is not None:
            yield self.usage
        yield Done(stop_reason=self.finish_reason or "stop")


def _arguments(slot: _ToolSlot) -> dict[str, Any]:
    text = slot.arguments.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        # Keep what the model wrote so the tool layer can say what was wrong with it.
        return {"_unparsed": slot.arguments}
    return value if isinstance(value, dict) else {"_value": value}


def error_line(body: str) -> tuple[dict[str, Any], str] | None:
    """The first error object on a line of its own (``data:`` framing allowed), and its text."""
    for line in body.splitlines():
        text = line.strip()
        if text.startswith("data:"):
            text = text[5:].strip()
        if not text.startswith("{"):
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if is_error_payload(obj):
            return obj, text
    return None


async def read_text(response: httpx.Response) -> str:
    return (await response.aread()).decode("utf-8", errors="replace")
