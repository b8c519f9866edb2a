"""A chat killed at any moment opens again whole, and keeps every message it acknowledged.

A driver process runs real turns (``Conversation`` → ``ApiSession`` → the OpenAI-style adapter
→ a loopback fake, with a small window so the transcript folds and is rewritten often) and
prints ``ACK <run> <seq>`` once each person message is saved. The test kills it with SIGKILL at
a random moment, a hundred times over one data dir, and after every kill checks what a person
would notice on the next start: the chat log passes SQLite's integrity check, every transcript
parses, every acknowledged message is there word for word, and no transcript was ever found
half-written (none set aside as broken).

The driver is forked from a "zygote" that has already imported everything, so each run starts
in milliseconds and the random delay (0–300 ms) lands inside turns, not inside Python's start.
Run the zygote by hand with ``python -m tests.robustness.test_crash_safety DATA_DIR URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest

from engines.api.protocols import SummaryResult
from engines.api.transcript import FOLDER, TranscriptFile
from engines.base import Message, ModelInfo
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer, Script

CHAT = "c1"
RUNS = 100
MAX_DELAY = 0.300
MODEL = ModelInfo(provider="openai", id="fake-model", label="Fake", context=2048)
FILLER = "The quick brown fox jumps over the lazy dog. " * 6
ROOT = Path(__file__).resolve().parents[2]


def person_text(run: int, index: int) -> str:
    return f"run {run} message {index}. {FILLER}"


# --- the driver (runs in the forked child) ----------------------------------------------------


class _Summariser:
    """Folds quickly and deterministically: the test is about files, not summaries."""

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        await asyncio.sleep(0.001)  # a real summariser awaits a server: leave room for a kill
        said = "; ".join(m.text[:24] for m in folded if m.role == "user")
        return SummaryResult(text=f"{previous} {said}".strip()[-1500:], tokens=10)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def _drive(data_dir: Path, url: str, run: int, turns: int) -> None:
    from app.conversation import Conversation, MessageSaved
    from app.store import ChatStore
    from engines.api.session import ApiSession
    from engines.providers.openai import ROWS, OpenAIAdapter

    store = ChatStore.in_dir(data_dir)
    if store.get_chat(CHAT) is None:
        store.create_chat(chat_id=CHAT, model_key=MODEL.key)

    def history() -> list[tuple[int, Message]]:
        return [
            (m.seq, Message(role=m.role, text=m.text))
            for m in store.messages(CHAT)
            if m.text and not m.partial
        ]

    adapter = OpenAIAdapter(ROWS["openai"], base_url=url, api_key="sk-crash-test", timeout=10.0)
    session = ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters={"openai": adapter},
        summariser=_Summariser(),
        history=history,
    )
    conversation = Conversation(
        CHAT, store=store, engine=session, model=MODEL, system_prompt=lambda _m: "Be brief."
    )
    for index in range(turns):
        async for event in conversation.turn(person_text(run, index)):
            if isinstance(event, MessageSaved) and event.role == "user":
                _say(f"ACK {run} {index} {event.seq}")
    await conversation.aclose()
    await adapter.aclose()
    store.close()


def _child(data_dir: Path, url: str, run: int, turns: int) -> None:
    code = 0
    try:
        asyncio.run(_drive(data_dir, url, run, turns))
        _say(f"DONE {run}")
    except BaseException as exc:
        _say(f"CRASH {run} {type(exc).__name__}: {exc}")
        code = 1
    finally:
        os._exit(code)


def zygote(data_dir: Path, url: str) -> None:
    """Read ``GO <run> <turns>`` lines; fork a driver for each, report its pid and its end."""
    # Imported before any fork, so each driver starts in milliseconds.
    for name in (
        "app.conversation",
        "app.store",
        "engines.api.session",
        "engines.providers.openai",
    ):
        importlib.import_module(name)

    _say("READY")
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] != "GO":
            break
        run, turns = int(parts[1]), int(parts[2])
        pid = os.fork()
        if pid == 0:
            _child(data_dir, url, run, turns)
        _say(f"CHILD {pid}")
        _, status = os.waitpid(pid, 0)
        _say(f"EXIT {pid} {status}")


# --- the test ---------------------------------------------------------------------------------


class _SlowStream(OpenAIStyleServer):
    """Streams in small steps, as a real model does, so kills land mid-answer too."""

    def handle(self, request: Recorded) -> Reply:
        reply = super().handle(request)
        if reply.chunks is not None:
            reply.chunk_delay = 0.003
        return reply


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    script = Script(text=["Noted", ": ", "run ", "and ", "message ", "kept", "."])
    with _SlowStream("openai", script=script) as fake:
        yield fake


class Zygote:
    def __init__(self, data_dir: Path, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.robustness.test_crash_safety", str(data_dir), url],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.line() == "READY"

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def line(self) -> str:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        assert text, f"the zygote ended (code {self.proc.poll()})"
        return text.strip()

    def start(self, run: int, turns: int) -> int:
        self.stdin.write(f"GO {run} {turns}\n")
        self.stdin.flush()
        first = self.line()
        assert first.startswith("CHILD "), first
        return int(first.split()[1])

    def until_exit(self, pid: int) -> list[str]:
        lines: list[str] = []
        while True:
            line = self.line()
            if line.startswith(f"EXIT {pid} "):
                return lines
            lines.append(line)

    def close(self) -> None:
        try:
            self.stdin.write("STOP\n")
            self.stdin.flush()
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _check_files(data_dir: Path) -> None:
    db = sqlite3.connect(data_dir / "conch.sqlite3")
    try:
        (verdict,) = db.execute("PRAGMA integrity_check").fetchone()
        assert verdict == "ok", verdict
    finally:
        db.close()
    for path in (data_dir / FOLDER).glob("*.json"):
        raw = path.read_bytes()
        json.loads(raw)  # the file parses as JSON ...
        TranscriptFile.model_validate_json(raw)  # ... and as a transcript
    broken = list((data_dir / FOLDER).glob("*.broken-*"))
    assert not broken, f"a run found a half-written transcript and set it aside: {broken}"


def _person_messages(data_dir: Path) -> dict[int, str]:
    db = sqlite3.connect(data_dir / "conch.sqlite3")
    try:
        rows = db.execute(
            "SELECT seq, text FROM messages WHERE chat_id = ? AND role = 'user'", (CHAT,)
        ).fetchall()
    finally:
        db.close()
    return {int(seq): str(text) for seq, text in rows}


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and SIGKILL")
@pytest.mark.timeout(240)
def test_a_hundred_kills_lose_no_acknowledged_message(
    data_dir: Path, server: OpenAIStyleServer
) -> None:
    rng = random.Random(int(os.environ.get("CONCH_CRASH_SEED", "6")))
    zygote = Zygote(data_dir, server.base_url)
    acked: dict[int, str] = {}  # seq -> the text the driver saved
    finished = 0
    try:
        for run in range(RUNS):
            pid = zygote.start(run, turns=40)
            time.sleep(rng.uniform(0.0, MAX_DELAY))
            with contextlib.suppress(ProcessLookupError):  # it may have finished already
                os.kill(pid, signal.SIGKILL)
            lines = zygote.until_exit(pid)
            crashes = [line for line in lines if line.startswith("CRASH")]
            assert not crashes, crashes
            finished += any(line.startswith("DONE") for line in lines)
            for line in lines:
                if line.startswith("ACK "):
                    _, acked_run, index, seq = line.split()
                    assert int(acked_run) == run
                    acked[int(seq)] = person_text(run, int(index))

            _check_files(data_dir)
            saved = _person_messages(data_dir)
            lost = {
                seq: text for seq, text in acked.items() if not saved.get(seq, "").startswith(text)
            }
            assert not lost, f"after run {run}, acknowledged messages are missing: {lost}"

        # After a hundred crashes the chat still works: one more run, left to finish.
        pid = zygote.start(RUNS, turns=2)
        lines = zygote.until_exit(pid)
        assert f"DONE {RUNS}" in lines, lines
        _check_files(data_dir)
    finally:
        zygote.close()

    assert len(acked) >= RUNS // 2, "too few messages were acknowledged to prove anything"
    assert finished < RUNS // 10, "most runs must be killed mid-way, not finish by themselves"


def main(argv: Sequence[str]) -> None:
    zygote(Path(argv[0]), argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
