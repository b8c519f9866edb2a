"""A chat killed at any moment opens again whole, and keeps every message it acknowledged.

A driver process runs real turns (``Conversation`` → ``ApiSession`` → the OpenAI-style adapter
→ a loopback fake, with a small window so the transcript folds and is rewritten often) and
reports each step on a pipe: ``ACK <run> <index> <seq>`` once a person message is saved, and a
line for every other step (the chat opened, a fold began, a piece of the answer arrived, the
answer was saved). The test kills it with SIGKILL right after the Nth step, N chosen afresh for
each of a hundred runs over one data dir, so kills land at every kind of moment whatever the
machine's speed. After every kill it checks what a person would notice on the next start: the
chat log passes SQLite's integrity check, every transcript parses, every acknowledged message
is there word for word, nothing the driver never wrote appeared, and no transcript was ever
found half-written (none set aside as broken).

The driver is forked from a "zygote" that has already imported everything, so each run starts
in milliseconds. Run the zygote by hand with
``python -m tests.robustness.test_crash_safety DATA_DIR URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest

from engines.base import Message, ModelInfo
from engines.context.protocols import SummaryResult
from engines.context.transcript import FOLDER, TranscriptFile
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.waits import HANG_SECONDS

CHAT = "c1"
RUNS = 100
TURNS = 10_000  # a killed run never gets near its end
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
        _say("FOLD")  # a kill now lands while the fold is under way
        await asyncio.sleep(0)  # a real summariser awaits a server here
        said = "; ".join(m.text[:24] for m in folded if m.role == "user")
        return SummaryResult(text=f"{previous} {said}".strip()[-1500:], tokens=10)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def _drive(data_dir: Path, url: str, run: int, turns: int) -> None:
    from app.conversation import Conversation, MessageSaved
    from app.store import ChatStore
    from engines.base import Compacted, Done, TextDelta
    from engines.context.session import ApiSession
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

    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=url, api_key="sk-crash-test", timeout=HANG_SECONDS
    )
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
    _say("OPENED")
    for index in range(turns):
        async for event in conversation.turn(person_text(run, index)):
            if isinstance(event, MessageSaved):
                if event.role == "user":
                    _say(f"ACK {run} {index} {event.seq}")
                else:
                    _say("REPLY")
            elif isinstance(event, TextDelta):
                _say("TEXT")
            elif isinstance(event, Compacted):
                _say("FOLDED")
            elif isinstance(event, Done):
                _say("DONE-TURN")
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
        "engines.context.session",
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
    """Streams in small steps, as a real model does, so a kill after a piece lands mid-answer."""

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


# What the driver reports each turn: each is one step a kill can follow. Runs are killed, in
# turn, as soon as they start, right after the chat opened, or right after the first or second
# time a turn's step comes up, so kills land at every kind of moment: starting up,
# between saving the message and sending it, while a fold is under way and just after it,
# mid-answer, between the answer's end and its saving, and after it was saved.
STEPS = ("ACK", "FOLD", "FOLDED", "TEXT", "DONE-TURN", "REPLY")
KILLS = [("START", 0), ("OPENED", 1), *((step, nth) for nth in (1, 2) for step in STEPS)]
FOLD_EVERY = 10  # turns; the driver's small window folds every five or six


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
        self._pending = b""
        assert self.line() == "READY"

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def line(self) -> str:
        """The next line the zygote or its driver wrote; a long silence is a hang."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()  # read raw, so select() sees every byte still to come
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], HANG_SECONDS)
            assert ready, f"the driver said nothing for {HANG_SECONDS:.0f} s"
            chunk = os.read(fd, 65536)
            assert chunk, f"the zygote ended (code {self.proc.poll()})"
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode().strip()

    def start(self, run: int, turns: int) -> int:
        self.stdin.write(f"GO {run} {turns}\n")
        self.stdin.flush()
        first = self.line()
        assert first.startswith("CHILD "), first
        return int(first.split()[1])

    def until_exit(self, pid: int) -> tuple[list[str], int]:
        """The driver's lines up to its end, and its wait status."""
        lines: list[str] = []
        while True:
            line = self.line()
            if line.startswith(f"EXIT {pid} "):
                return lines, int(line.split()[2])
            lines.append(line)

    def close(self) -> None:
        try:
            self.stdin.write("STOP\n")
            self.stdin.flush()
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=HANG_SECONDS)
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
        made = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages'").fetchone()
        if made is None:
            return {}  # killed before the chat log was first made
        rows = db.execute(
            "SELECT seq, text FROM messages WHERE chat_id = ? AND role = 'user'", (CHAT,)
        ).fetchall()
    finally:
        db.close()
    return {int(seq): str(text) for seq, text in rows}


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and SIGKILL")
@pytest.mark.timeout(30 * HANG_SECONDS)  # a last guard: a loaded machine needs two minutes
def test_a_hundred_kills_lose_no_acknowledged_message(
    data_dir: Path, server: OpenAIStyleServer
) -> None:
    zygote = Zygote(data_dir, server.base_url)
    acked: dict[int, str] = {}  # seq -> the text the driver saved and acknowledged
    may_exist: dict[int, str] = {}  # seq -> a text saved just before a kill, unacknowledged
    try:
        for run in range(RUNS):
            step, nth = KILLS[run % len(KILLS)]
            pid = zygote.start(run, turns=TURNS)
            lines: list[str] = []
            while sum(line.split()[0] == step for line in lines) < nth:
                line = zygote.line()
                assert not line.startswith(("CRASH", "DONE ", "EXIT ")), (line, lines)
                lines.append(line)
                turns = sum(line.startswith("ACK ") for line in lines)
                assert turns <= nth * FOLD_EVERY, f"run {run}: no {step} in {turns} turns"
            with contextlib.suppress(ProcessLookupError):  # it ended early: reported below
                os.kill(pid, signal.SIGKILL)
            rest, status = zygote.until_exit(pid)
            lines += rest
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"run {run} ended by itself before its kill: {lines[-3:]}"
            )
            crashes = [line for line in lines if line.startswith("CRASH")]
            assert not crashes, crashes

            indices: list[int] = []
            for line in lines:
                if line.startswith("ACK "):
                    _, acked_run, index, acked_seq = line.split()
                    assert int(acked_run) == run
                    acked[int(acked_seq)] = person_text(run, int(index))
                    indices.append(int(index))
            assert indices == list(range(len(indices))), indices

            _check_files(data_dir)
            saved = _person_messages(data_dir)
            lost = {seq: text for seq, text in acked.items() if saved.get(seq) != text}
            assert not lost, f"after run {run}, acknowledged messages are missing: {lost}"
            # The one message a kill can catch between saving and acknowledging is the run's
            # next; anything else in the log would be a message nobody wrote.
            for seq, text in saved.items():
                if seq not in acked and text == person_text(run, len(indices)):
                    may_exist[seq] = text
            unexpected = {s: t for s, t in saved.items() if s not in acked and s not in may_exist}
            assert not unexpected, f"after run {run}, messages nobody sent: {unexpected}"

        # After a hundred kills the chat still works: one more run, left to finish.
        pid = zygote.start(RUNS, turns=2)
        lines, status = zygote.until_exit(pid)
        assert f"DONE {RUNS}" in lines and status == 0, lines
        _check_files(data_dir)
    finally:
        zygote.close()


def main(argv: Sequence[str]) -> None:
    zygote(Path(argv[0]), argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
