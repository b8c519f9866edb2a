"""Two Conch processes on one chat (the window and ``conch ask``): the model sees every turn.

Each process is a real driver (``Conversation`` → ``ApiSession`` → the OpenAI-style adapter →
a loopback fake, wired as ``app.services`` wires it) reading ``SEND <text>`` lines. The test
lets them take turns, and in one round answer at the same time, on one data dir with a small
window so the chat folds. After every turn it checks what a person would notice: the request
the model got holds every message the chat log has since its latest fold, word for word, and
no transcript was set aside or left half-written. Before "one writer per chat" each process
kept its own copy in memory and the last one to save won, so the other's turns left the
model's view.

Run a driver by hand with ``python -m tests.robustness.test_two_writers DATA_DIR URL``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest

from engines.base import Message, ModelInfo
from engines.context.protocols import SummaryResult
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer, Script
from tests.waits import HANG_SECONDS as HANG

CHAT = "shared-chat"
MODEL = ModelInfo(provider="openai", id="fake-model", label="Fake", context=2_048)
ROOT = Path(__file__).resolve().parents[2]
FILLER = "Some detail worth keeping in mind for later. " * 6


# --- the driver (runs in its own process) -----------------------------------------------------


class _Summariser:
    """Folds quickly and deterministically: the test is about who saves what, not summaries."""

    async def summarise(
        self, folded: Sequence[Message], previous: str, *, model: ModelInfo, focus: str = ""
    ) -> SummaryResult:
        said = "; ".join(m.text[:20] for m in folded if m.role == "user")
        return SummaryResult(text=f"{previous} {said}".strip()[-600:], tokens=5)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _drive(data_dir: Path, url: str) -> None:
    from app.conversation import Conversation, MessageSaved
    from app.services import history_messages, latest_fold
    from app.store import ChatStore
    from engines.base import Done, Note, Problem
    from engines.context.session import ApiSession
    from engines.providers.openai import ROWS, OpenAIAdapter

    store = ChatStore.in_dir(data_dir)
    adapter = OpenAIAdapter(ROWS["openai"], base_url=url, api_key="sk-two-writers", timeout=HANG)
    session = ApiSession(
        chat_id=CHAT,
        data_dir=data_dir,
        adapters={"openai": adapter},
        summariser=_Summariser(),
        history=lambda: history_messages(store.messages(CHAT)),
        latest_fold=lambda: latest_fold(store, CHAT),
    )
    conversation = Conversation(
        CHAT, store=store, engine=session, model=MODEL, system_prompt=lambda _m: "Be brief."
    )
    _say("READY")
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).rstrip("\n")
        if not line.startswith("SEND "):
            break
        ended = "NOTHING"
        async for event in conversation.turn(line[5:]):
            if isinstance(event, MessageSaved) and event.role == "user":
                _say(f"SAVED {event.seq}")
            elif isinstance(event, Note):
                _say(f"NOTE {event.topic} {event.text}")
            elif isinstance(event, Done):
                ended = "DONE"
            elif isinstance(event, Problem):
                ended = f"PROBLEM {event.problem.kind} {event.problem.detail}"
        _say(ended)
    await conversation.aclose()
    await adapter.aclose()
    store.close()


# --- the test ---------------------------------------------------------------------------------


class _Gated(OpenAIStyleServer):
    """Answers each request with words of its own; can hold answers until N requests wait."""

    def __init__(self) -> None:
        super().__init__("openai")
        self._lock = threading.Lock()
        self._arrived = threading.Condition()
        self.waiting = 0
        self.release = threading.Event()
        self.release.set()

    def handle(self, request: Recorded) -> Reply:
        if not request.path.endswith("/chat/completions"):
            return super().handle(request)
        with self._arrived:
            self.waiting += 1
            self._arrived.notify_all()
        self.release.wait(HANG)
        asked = request.json["messages"][-1]["content"]
        label = asked.split(".", 1)[0] if isinstance(asked, str) else "?"
        with self._lock:  # the script is shared by the server's threads
            self.script = Script(text=["Answer to ", f"{label}", "."])
            return super().handle(request)

    def wait_for(self, n: int) -> None:
        with self._arrived:
            assert self._arrived.wait_for(lambda: self.waiting >= n, HANG)


class Driver:
    def __init__(self, data_dir: Path, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.robustness.test_two_writers", str(data_dir), url],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.notes: list[str] = []
        assert self.line() == "READY"

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def line(self) -> str:
        # No deadline of its own: a driver that hangs is caught by the test's timeout mark.
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        assert text, f"the driver ended (code {self.proc.poll()})"
        return text.strip()

    def send(self, text: str) -> int:
        """Send one message; returns its seq once it is in the chat log."""
        self.stdin.write(f"SEND {text}\n")
        self.stdin.flush()
        first = self.next_line()
        assert first.startswith("SAVED "), first
        return int(first.split()[1])

    def next_line(self) -> str:
        while True:
            line = self.line()
            if line.startswith("NOTE "):
                self.notes.append(line)
                continue
            return line

    def finish(self) -> None:
        ended = self.next_line()
        assert ended == "DONE", ended

    def close(self) -> None:
        try:
            self.stdin.write("QUIT\n")
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def server() -> Iterator[_Gated]:
    with _Gated() as fake:
        yield fake


@pytest.fixture
def drivers(data_dir: Path, server: _Gated) -> Iterator[tuple[Driver, Driver]]:
    from app.store import ChatStore

    store = ChatStore.in_dir(data_dir)
    store.create_chat(chat_id=CHAT, model_key=MODEL.key)
    store.close()
    window, ask = Driver(data_dir, server.base_url), Driver(data_dir, server.base_url)
    try:
        yield window, ask
    finally:
        window.close()
        ask.close()


def _logged_since_fold(data_dir: Path, before: int) -> list[str]:
    """The texts the model must see: the chat log since its latest fold, before ``before``."""
    from app.services import history_messages, latest_fold
    from app.store import ChatStore

    store = ChatStore.in_dir(data_dir)
    try:
        fold = latest_fold(store, CHAT)
        start = fold[0] if fold else 0
        rows = history_messages(store.messages(CHAT))
    finally:
        store.close()
    return [m.text for s, m in rows if start <= s < before]


def _sent(request: Recorded) -> str:
    return "\n".join(str(m.get("content")) for m in request.json["messages"])


def _check_request(data_dir: Path, request: Recorded, seq: int, who: str) -> None:
    sent = _sent(request)
    for text in _logged_since_fold(data_dir, seq):
        assert text in sent, f"{who} sent turn {seq} without {text[:40]!r}"


def _message(i: int, who: str) -> str:
    return f"Message {i} from {who}. {FILLER}"


@pytest.mark.timeout(300)
def test_two_processes_taking_turns_each_send_every_answered_turn(
    data_dir: Path, server: _Gated, drivers: tuple[Driver, Driver]
) -> None:
    window, ask = drivers
    for i in range(14):
        who, driver = (("window", window), ("ask", ask))[i % 2]
        seq = driver.send(_message(i, who))
        driver.finish()
        _check_request(data_dir, server.chat_requests[-1], seq, who)
    _check_files(data_dir)
    assert _folded(data_dir), "the chat should have folded at least once"


@pytest.mark.timeout(300)
def test_after_two_processes_answer_at_once_the_next_turn_sees_both(
    data_dir: Path, server: _Gated, drivers: tuple[Driver, Driver]
) -> None:
    window, ask = drivers
    n = 0
    for _round in range(3):
        for who, driver in (("window", window), ("ask", ask)):
            seq = driver.send(_message(n, who))
            driver.finish()
            _check_request(data_dir, server.chat_requests[-1], seq, who)
            n += 1
        # Both at once: each request waits at the server until the other has arrived.
        server.release.clear()
        before = server.waiting
        window.send(_message(n, "window"))
        ask.send(_message(n + 1, "ask"))
        n += 2
        server.wait_for(before + 2)
        server.release.set()
        window.finish()
        ask.finish()
    for who, driver in (("window", window), ("ask", ask)):
        seq = driver.send(_message(n, who))
        driver.finish()
        _check_request(data_dir, server.chat_requests[-1], seq, who)
        n += 1
    _check_files(data_dir)


def _folded(data_dir: Path) -> bool:
    from app.store import ChatStore

    store = ChatStore.in_dir(data_dir)
    try:
        return store.latest_compaction(CHAT) is not None
    finally:
        store.close()


def _check_files(data_dir: Path) -> None:
    folder = data_dir / "api-sessions"
    assert not list(folder.glob("*.broken-*")), "a transcript was found half-written"
    assert not list(folder.glob(".*.tmp")), "a temp file was left behind"
    json.loads((folder / f"{CHAT}.json").read_bytes())


def main(argv: list[str]) -> None:
    asyncio.run(_drive(Path(argv[0]), argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
