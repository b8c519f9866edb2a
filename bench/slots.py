"""``python -m bench.slots [--tokens N]``: the bundled runtime's chat slot, measured.

One chat of about ``N`` prompt tokens (6,000 by default) on the real bundled model: read once
(cold), a warm turn, three pieces of background work (a summary written ahead, learning, a
title: each a prompt of its own), the next turn, then the runtime stopped and started again
(as when Conch is closed and opened) and that turn sent again, then one more. It prints one
JSON line: prompt tokens the server evaluated for each (its own usage counts), the seconds to
each first word, whether the reopened turn's answer is the same (fixed seed), and the
runtime's peak resident size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from engines.base import Message, Note, TextDelta, Usage
from engines.local.bundled import MODEL_ID, BundledRuntime, bundled_adapter, missing
from engines.local.gate import background, gated
from engines.providers.base import ChatRequest, ProviderAdapter

SEED = 7
SYSTEM = "You are a helpful assistant. Answer in a few words."
TOPICS = ("garden", "lemons", "bicycle", "invoice", "violin", "chess", "bakery", "river")


@dataclass
class Measured:
    """One answer: its text, the prompt tokens the server evaluated and took from the slot
    (its own usage figures), when its first word came, and any note the runtime added."""

    text: str = ""
    read: int = 0
    cached: int = 0
    first_word_s: float = -1.0  # a figure for the report only
    notes: list[str] = field(default_factory=list)


def chat(tokens: int) -> list[Message]:
    """Exchanges of about 60 tokens each until the chat is about ``tokens`` long."""
    messages: list[Message] = []
    index = 0
    while len(messages) * 30 < tokens:
        topic = TOPICS[index % len(TOPICS)]
        messages.append(
            Message(
                role="user",
                text=f"Note {index + 1}: my {topic} needs attention this week; the {topic} "
                f"comes first on day {index % 7 + 1}, before anything else on my list.",
            )
        )
        messages.append(Message(role="assistant", text=f"Noted about the {topic}, day {index}."))
        index += 1
    return messages


def then(messages: list[Message], said: str, text: str) -> list[Message]:
    return [*messages, Message(role="assistant", text=said), Message(role="user", text=text)]


def request(messages: list[Message], max_tokens: int = 12) -> ChatRequest:
    return ChatRequest(
        model=MODEL_ID,
        system=SYSTEM,
        messages=tuple(messages),
        max_output_tokens=max_tokens,
        temperature=0.0,
        extra={"seed": SEED},
    )


async def measure(adapter: ProviderAdapter, sent: ChatRequest, *, behind: bool = False) -> Measured:
    got = Measured()
    began = time.monotonic()

    async def read() -> None:
        async for event in adapter.stream(sent):
            if isinstance(event, TextDelta):
                if got.first_word_s < 0:
                    got.first_word_s = round(time.monotonic() - began, 3)
                got.text += event.text
            elif isinstance(event, Usage):
                # llama.cpp's usage: every prompt token, and how many came from the cache
                got.read = event.input_tokens - event.cache_read_tokens
                got.cached = event.cache_read_tokens
            elif isinstance(event, Note):
                got.notes.append(event.text)

    if behind:
        with background():
            await read()
    else:
        await read()
    return got


def peak_mb(pid: int | None) -> int:
    """The peak resident size of the runtime's processes (the launcher and its server), MB."""
    if pid is None:
        return 0
    pids = [pid]
    with contextlib.suppress(OSError, ValueError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    peak = 0
    for each in pids:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) // 1024)
    return peak


async def run(tokens: int, data_dir: Path) -> dict[str, object]:
    messages = [*chat(tokens), Message(role="user", text="What comes first on my list?")]
    figures: dict[str, object] = {"bench": "slots"}
    runtime = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(runtime))
    try:
        await runtime.start()
        cold = await measure(adapter, request(messages))
        turn = then(messages, cold.text, "Why?")
        warm = await measure(adapter, request(turn))
        piece = "\n".join(m.text for m in messages[: len(messages) // 3])
        for kind, text in (
            ("summary", f"Summarise this part of a chat:\n{piece}"),
            ("learning", f"List what this person said about themselves:\n{piece[::-1]}"),
            ("title", f"Give this chat a title of three words:\n{piece[: len(piece) // 2]}"),
        ):
            asked = request([Message(role="user", text=text)], 16)
            work = await measure(adapter, asked, behind=True)
            figures[f"background_{kind}_read"] = work.read
        after = then(turn, warm.text, "And then?")
        after_work = await measure(adapter, request(after))
        figures["peak_rss_mb"] = peak_mb(runtime.pid)
    finally:
        await adapter.aclose()
        await runtime.stop()
    again = BundledRuntime(data_dir)
    adapter = gated(bundled_adapter(again))
    try:
        await again.start()
        reopened = await measure(adapter, request(after))
        last = then(after, reopened.text, "OK.")
        following = await measure(adapter, request(last))
    finally:
        await adapter.aclose()
        await again.stop()
    figures.update(
        chat_tokens=cold.read + cold.cached,
        cold_read=cold.read,
        cold_first_word_s=cold.first_word_s,
        warm_read=warm.read,
        warm_first_word_s=warm.first_word_s,
        after_background_read=after_work.read,
        after_background_first_word_s=after_work.first_word_s,
        reopened_read=reopened.read,
        reopened_first_word_s=reopened.first_word_s,
        reopened_same_answer=reopened.text == after_work.text,
        reopened_vs_warm=round(reopened.first_word_s / warm.first_word_s, 2),
        next_turn_read=following.read,
        next_turn_first_word_s=following.first_word_s,
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slots")
    parser.add_argument("--tokens", type=int, default=6_000)
    args = parser.parse_args(argv)
    why = missing()
    if why is not None:
        print(json.dumps({"bench": "slots", "skipped": why}))
        return 0
    with tempfile.TemporaryDirectory(prefix="conch-bench-slots-") as folder:
        figures = asyncio.run(run(args.tokens, Path(folder)))
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
