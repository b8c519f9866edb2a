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

from engines.providers.base import closing_stream
from engines.providers.deadlines import Pace, paced

_EOL = re.compile(r"[\r\n]")


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" unless the server named it; "error" for a bare ``error:`` line
    data: str


# A streamed event carries a few tokens; a tool call with a whole file in it can reach
# megabytes. Past this, a line is not an answer, and reading on would only fill the memory.
MAX_LINE = 8 * 1024 * 1024


class SSELineTooLongError(ValueError):
    """One line grew past ``MAX_LINE`` characters before it ended."""


async def _lines(
    response: httpx.Response, max_line: int = MAX_LINE, pace: Pace | None = None
) -> AsyncIterator[str]:
    # Text of an unfinished line, kept as pieces so a long line costs linear time to read.
    pieces: list[str] = []
    held = 0
    chunks = response.aiter_text()
    async with closing_stream(paced(chunks, pace) if pace else chunks) as texts:
        async for text in texts:
            start = 0
            if pieces and pieces[-1].endswith("\r"):
                # The last chunk ended on a CR: that ended the line, with or without an LF now.
                line = "".join(pieces)[:-1]
                pieces, held = [], 0
                yield line
                if text.startswith("\n"):
                    start = 1
            while True:
                found = _EOL.search(text, start)
                if found is None:
                    break
                cut = found.start()
                # A CR at the very end may be the first half of CRLF: wait for more text.
                if text[cut] == "\r" and cut == len(text) - 1:
                    break
                pieces.append(text[start:cut])
                yield "".join(pieces)
                pieces, held = [], 0
                start = cut + (2 if text[cut] == "\r" and text[cut + 1 : cut + 2] == "\n" else 1)
            rest = text[start:]
            if rest:
                pieces.append(rest)
                held += len(rest)
                if held > max_line:
                    raise SSELineTooLongError(f"a line longer than {max_line:,} characters")
    if pieces:
        yield "".join(pieces).rstrip("\r")


async def iter_sse(
    response: httpx.Response, pace: Pace | None = None
) -> AsyncGenerator[SSEEvent, None]:
    """The events of an SSE body, in order. A stream cut short yields what was complete.

    With ``pace``, reading raises ``StreamDeadlineError`` once the answer's deadlines pass;
    comments and blank lines are read but never count as progress.
    """
    event = ""
    data: list[str] = []
    async with closing_stream(_lines(response, pace=pace)) as lines:
        async for line in lines:
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
