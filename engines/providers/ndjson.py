"""Newline-delimited JSON (Ollama's streaming format): one JSON object per line.

The parser is strict about what a line must be (a JSON object) and lenient about blank lines
and a trailing carriage return, which proxies sometimes add. A line has a size limit: a
server that never ends its line must not fill the memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

# One streamed line carries a few tokens; a tool call with a whole file in its arguments can
# reach megabytes. Past this, it is not an answer.
MAX_LINE = 8 * 1024 * 1024


class NdjsonError(ValueError):
    """A line that is not a JSON object. ``line`` is the offending text, shortened."""

    def __init__(self, line: str, why: str) -> None:
        shown = line if len(line) <= 200 else line[:200] + "…"
        super().__init__(f"{why}: {shown!r}")
        self.line = shown
        self.why = why


def parse_line(line: str) -> dict[str, Any] | None:
    """The object on one line, or None for a blank line. Raises ``NdjsonError`` otherwise."""
    text = line.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NdjsonError(text, f"not JSON ({exc.msg})") from exc
    except RecursionError as exc:
        raise NdjsonError(text, "JSON nested too deeply") from exc
    if not isinstance(value, dict):
        raise NdjsonError(text, "not a JSON object")
    return value


async def lines(chunks: AsyncIterable[bytes], *, max_line: int = MAX_LINE) -> AsyncIterator[str]:
    """The lines of a byte stream, each decoded as UTF-8 (bad bytes replaced).

    Raises ``NdjsonError`` as soon as one line grows past ``max_line`` bytes, without reading
    the rest of it.
    """
    pending = bytearray()
    async for chunk in chunks:
        scanned = len(pending)  # earlier bytes hold no newline: search only the new ones
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", max(start, scanned))) >= 0:
            # A newline byte never occurs inside a multi-byte UTF-8 character.
            yield pending[start:end].decode("utf-8", errors="replace")
            start = end + 1
        if start:
            del pending[:start]
        if len(pending) > max_line:
            head = pending[:200].decode("utf-8", errors="replace")
            raise NdjsonError(head, f"a line longer than {max_line:,} bytes")
    if pending:
        yield pending.decode("utf-8", errors="replace")


async def objects(lines: AsyncIterable[str]) -> AsyncIterator[dict[str, Any]]:
    """Each object of an NDJSON stream, skipping blank lines."""
    async for line in lines:
        obj = parse_line(line)
        if obj is not None:
            yield obj
