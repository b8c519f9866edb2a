"""A long chat, turn after turn: memory, the transcript file and the time per turn must stay flat.

Runs ``--turns`` turns (2,000 by default) through the real ``ApiSession`` and Ollama adapter
against the fake Ollama on a loopback port, on a 16K window: the transcript folds every few
dozen turns and each fold is summarised by the fake model through the real summariser. The
fake runs in a separate process so the figures are the chat's own.

Prints one JSON object on its last line: peak memory (``ru_maxrss``), resident memory early
and at the end, the transcript file's size (largest seen and at the end), and the time per
turn over the first and the last tenth of the run (mean and median, milliseconds).

    python -m bench.soak [--turns N] [--window TOKENS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engines.base import Compacted, Done, ModelInfo, Problem, TurnInput  # noqa: E402
from engines.context.session import ApiSession  # noqa: E402
from engines.context.summarise import ModelSummariser  # noqa: E402
from engines.context.transcript import transcript_path  # noqa: E402
from engines.providers.ollama import OllamaAdapter  # noqa: E402

TURNS = 2_000
WINDOW = 16_384
SEED = 20_260_516
CHAT = "soak-chat"
MODEL_ID = "soak-model"
SYSTEM = "You are Conch, a helpful assistant. Answer briefly and plainly."
WORDS = [
    "garden",
    "larch",
    "budget",
    "compost",
    "seedlings",
    "Marta",
    "library",
    "rota",
    "invoice",
    "tomatoes",
    "watering",
    "beds",
    "fence",
    "permit",
    "volunteers",
    "shed",
    "soil",
    "mulch",
    "harvest",
    "spreadsheet",
]
_PIECE = re.compile(r"<next-part-of-the-chat>\n(.*?)\n</next-part-of-the-chat>", re.DOTALL)


# --- the fake model (runs in its own process) -------------------------------------------------


def _reply_text(body: dict[str, Any]) -> tuple[str, int]:
    """What the fake model answers: a summary for the summariser, prose for the chat."""
    messages = body.get("messages") or []
    last = str(messages[-1].get("content", "")) if messages else ""
    found = _PIECE.search(last)
    if found:
        # A fair summary: one line per section, much shorter than the part it read.
        words = found.group(1).split()
        picked = " ".join(words[:: max(1, len(words) // 40)][:40])
        text = (
            "What the person wants: a tidy plan for the community garden.\n"
            f"Decided or done: went through {len(words)} words of the chat.\n"
            f"Facts to keep: {picked}\n"
            "Still open: the next steps they asked about."
        )
        return text, 64
    rng = random.Random(len(last))
    answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(90, 200)))
    return answer.capitalize() + ".", 64


def serve(window: int) -> None:
    """Start the fake Ollama, print its URL, and run until stdin closes."""
    from bench._ollama import FakeModel, FakeOllama, FakeReply

    fake = FakeOllama([FakeModel(MODEL_ID, window, ("completion",))], version="0.12.6")

    def respond(body: dict[str, Any]) -> FakeReply:
        with fake._lock:  # the recorded requests would grow for the whole run
            fake.requests.clear()
            fake.outcomes.clear()
        text, chunk = _reply_text(body)
        return FakeReply(text=text, chunk=chunk)

    fake.responder = respond
    fake.start()
    print(fake.url, flush=True)
    try:
        sys.stdin.read()
    finally:
        fake.stop()


# --- the chat ---------------------------------------------------------------------------------


def _rss_mb() -> float | None:
    """Resident memory now, from /proc (Linux); None elsewhere."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS


def _person(rng: random.Random, i: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 140)))
    return f"Turn {i}: about the {words}. Costs so far €{rng.randint(10, 2_500)}."


async def soak(url: str, turns: int, window: int, data_dir: Path) -> dict[str, Any]:
    adapter = OllamaAdapter(url, memory=64 * 2**30)
    adapters = {adapter.name: adapter}
    session = ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters=adapters,
        summariser=ModelSummariser(adapters),
    )
    model = ModelInfo(provider="ollama", id=MODEL_ID, label="Soak", context=window, local=True)
    rng = random.Random(SEED)
    path = transcript_path(data_dir, CHAT)
    times: list[float] = []
    folds = summarised = problems = unfinished = 0
    largest = 0
    rss_early: float | None = None
    tenth = max(1, turns // 10)
    try:
        for i in range(turns):
            turn = TurnInput(
                chat_id=CHAT, seq=2 * i, text=_person(rng, i), model=model, system=SYSTEM
            )
            started = time.perf_counter()
            done = False
            async for event in session.turn(turn):
                if isinstance(event, Compacted):
                    folds += 1
                    summarised += event.summarised
                elif isinstance(event, Problem):
                    problems += 1
                elif isinstance(event, Done):
                    done = True
            times.append(time.perf_counter() - started)
            unfinished += not done
            largest = max(largest, path.stat().st_size)
            if i == tenth - 1:
                rss_early = _rss_mb()
    finally:
        await adapter.aclose()
    first, last = times[:tenth], times[-tenth:]

    def ms(values: list[float], how: Callable[[list[float]], float]) -> float:
        return round(how(values) * 1000, 2)

    return {
        "bench": "soak",
        "turns": turns,
        "window": window,
        "folds": folds,
        "summarised_folds": summarised,
        "problems": problems,
        "unfinished_turns": unfinished,
        "kept_messages": len(session.messages),
        "peak_rss_mb": round(_peak_mb(), 1),
        "rss_mb_after_first_tenth": None if rss_early is None else round(rss_early, 1),
        "rss_mb_at_end": None if (end := _rss_mb()) is None else round(end, 1),
        "transcript_bytes_at_end": path.stat().st_size,
        "transcript_bytes_largest": largest,
        "turn_ms_first_tenth_mean": ms(first, statistics.fmean),
        "turn_ms_last_tenth_mean": ms(last, statistics.fmean),
        "turn_ms_first_tenth_median": ms(first, statistics.median),
        "turn_ms_last_tenth_median": ms(last, statistics.median),
        "last_over_first_median": round(statistics.median(last) / statistics.median(first), 2),
        "total_seconds": round(sum(times), 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.window)
        return {}
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.soak", "--serve", "--window", str(args.window)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit(f"the fake server did not start (it said {url!r})")
        with tempfile.TemporaryDirectory(prefix="conch-soak-") as tmp:
            figures = asyncio.run(soak(url, args.turns, args.window, Path(tmp)))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
