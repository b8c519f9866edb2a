"""A stand-in for a llama.cpp server on a CPU, for benchmarks that cannot wait for the real one.

It takes time the way such a server does: prompt tokens it has not cached are read at
``prompt_rate`` a second, the answer is written at ``answer_rate``, and it keeps the prompts of
its last ``slots`` requests, so a request that starts like one of them reads only the rest
(llama.cpp's prompt cache). Tokens are Conch's own estimate of the text. A summary request is
answered with a short summary naming words of the piece it was given (one the summariser's
checks accept); any other request with a short answer. Like ``bench._bundled.Probe`` it records
what it was sent (``sent``) and what each request made it read (``evaluated``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bench._bundled import Evaluated, Sent
from bench._common import is_summary_request
from engines.base import Done, Event, ModelInfo, TextDelta, Usage
from engines.local.gate import in_background, reads_for_the_chat
from engines.providers.base import ChatRequest
from engines.window import estimate_tokens

_WORD = re.compile(r"[a-z]{5,}")


def _prompt(request: ChatRequest) -> str:
    """The request as the server's chat template would lay it out, near enough."""
    parts = [f"<system>{request.system}"] if request.system else []
    parts += [f"<{m.role}>{m.text}" for m in request.messages]
    return "\n".join(parts) + "\n<assistant>"


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class TimedServer:
    """A local server that takes the time a CPU does (see the module doc)."""

    window: int
    prompt_rate: float = 2_000.0  # prompt tokens read a second
    answer_rate: float = 200.0  # answer tokens written a second
    answer_tokens: int = 24
    summary_tokens: int = 128
    slots: int = 1  # prompts kept for reuse (llama.cpp keeps one state a slot)
    name: str = "local"
    label: str = "Timed stand-in"
    local: bool = True
    sent: list[Sent] = field(default_factory=list)
    counts: int = 0
    _read: list[Evaluated] = field(default_factory=list)
    _cache: list[str] = field(default_factory=list)

    async def list_models(self) -> list[ModelInfo]:
        return []

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None

    def evaluated(self, index: int) -> Evaluated | None:
        return self._read[index] if index < len(self._read) else None

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        summary = is_summary_request(request)
        background = in_background()
        kind = "summary" if summary else ("background" if background else "chat")
        self.sent.append(Sent(kind, request, background, for_the_chat=reads_for_the_chat()))
        prompt = _prompt(request)
        hit = max((_common(prompt, held) for held in self._cache), default=0)
        cached, read = estimate_tokens(prompt[:hit]), estimate_tokens(prompt[hit:])
        self._read.append(Evaluated(cached, read))
        await asyncio.sleep(read / self.prompt_rate)
        # The prompt is in the cache once read, even if the answer is cut short.
        self._cache = [prompt, *[p for p in self._cache if p != prompt]][: self.slots]
        text = self._summary(request) if summary else self._answer(request)
        cap = self.summary_tokens if summary else self.answer_tokens
        tokens = min(request.max_output_tokens, cap)
        words = text.split(" ")
        for i, word in enumerate(words):
            yield TextDelta(text=word if i == 0 else " " + word)
            await asyncio.sleep(tokens / len(words) / self.answer_rate)
        yield Usage(input_tokens=cached + read, output_tokens=tokens)
        yield Done()

    def _summary(self, request: ChatRequest) -> str:
        piece = request.messages[-1].text.split("<next-part-of-the-chat>", 1)[-1].lower()
        named = sorted(set(_WORD.findall(piece)))[:4] or ["things"]
        return f"The person talked about {', '.join(named)}."

    def _answer(self, request: ChatRequest) -> str:
        last = request.messages[-1].text.lower() if request.messages else ""
        words = _WORD.findall(last)[:12] or ["that"]
        return "Noted: " + " ".join(words) + "."
