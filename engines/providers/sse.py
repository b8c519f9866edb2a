"""Server-sent events read line by line from an httpx response.

A small reader of our own rather than httpx-sse's ``EventSource``: older llama-server builds
sent a non-standard ``error:`` field for a refusal inside a 200 stream, which a spec-exact
decoder drops silently. Only CR, LF and CRLF end a line (JSON may hold U+2028 unescaped).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import httpx

_EOL = re.compile(r"[\r\n]")


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" unless the server named it; "error" for a bare ``error:`` line
    data: str


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    pending = ""
    async for text in response.aiter_text():
        pending += text
        while True:
            found = _EOL.search(pending)
            if found is None:
                break
            cut = found.start()
            # A CR at the very end may be the first half of CRLF: wait for more text.
            if pending[cut] == "\r" and cut == len(pending) - 1:
                break
            line = pending[:cut]
            step = 2 if pending[cut] == "\r" and pending[cut + 1 : cut + 2] == "\n" else 1
            pending = pending[cut + step :]
            yield line
    if pending:
        yield pending.rstrip("\r")


async def iter_sse(response: httpx.Response) -> AsyncGenerator[SSEEvent, None]:
    """The events of an SSE body, in order. A stream cut short yields what was complete."""
    event = ""
    data: list[str] = []
    async for line in _lines(response):
        if not line:
            if data or event:
                yield SSEEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue  # a comment or keep-alive (OpenRouter sends ": OPENROUTER PROCESSING")
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "error":
            # Old llama-server: "error: {...}" on its own, outside any data field.
            yield SSEEvent("error", value)
    if data:
        yield SSEEvent(event or "message", "\n".join(data))
