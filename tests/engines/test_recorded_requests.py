"""Every request a long chat sends, byte for byte, against a golden record.

A scripted 60-turn chat runs through ``ApiSession`` on a loopback OpenAI-style server: it folds
(summaries written ahead, or after the turn that folded, by the server's own model), is
compacted on request, loses an answer from its chat log (rebuilt), calls a tool, sends a message
too long to send whole, and meets a too-long refusal it heals. Every request body the server
received and every event the turns yielded must match ``tests/data/recorded_requests.jsonl``:
a change in how the engine is arranged must not change what it sends.

After a deliberate change in what is sent, write the record again with
``CONCH_RECORD=1 pytest tests/engines/test_recorded_requests.py`` and read the diff.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.base import (
    Approval,
    Compacted,
    Event,
    Message,
    ModelInfo,
    SummaryWritten,
    TextDelta,
    ToolAsk,
    ToolResult,
    TurnInput,
)
from engines.context.session import ApiSession
from engines.context.summarise import ModelSummariser
from engines.context.tool_loop import ToolHost
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.tools.catalogue import Catalogue, ServerTool, build_catalogue
from engines.tools.servers import CALL_TIMEOUT, ToolOutcome
from tests.fakes.http import Recorded, Reply
from tests.fakes.openai_server import OpenAIStyleServer, Script, ScriptedCall, estimate

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "recorded_requests.jsonl"
CHAT = "chat-recorded"
SYSTEM = "You are Conch, a helpful assistant. Answer briefly."
MODEL = ModelInfo(provider="openai", id="gpt-fake", label="GPT Fake", context=12_000)
TOPICS = (
    "garden",
    "lemons",
    "bicycle",
    "invoice",
    "holiday",
    "printer",
    "violin",
    "mortgage",
    "chess",
    "bakery",
)
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
_WORD = re.compile(r"[a-z]{5,}")


class ChatServer(OpenAIStyleServer):
    """Answers a summary request with a short summary naming the chat's topics, and a turn with
    a short answer (or the next of ``turns``); usage says about a fifth more than the fake's
    own count."""

    turns: list[Script]

    def _chat(self, request: Recorded) -> Reply:
        body = request.json or {}
        messages = body.get("messages") or []
        last = messages[-1].get("content") if messages else ""
        last = last if isinstance(last, str) else ""
        real = int(estimate(messages) * 1.2) + 1
        if "<next-part-of-the-chat>" in last:
            piece = last.split("<next-part-of-the-chat>", 1)[1]
            named = [t for t in TOPICS if t in piece] or sorted(set(_WORD.findall(piece)))[:3]
            self.script = Script(
                text=["The person asked about ", ", ".join(named), "."],
                prompt_tokens=real,
                completion_tokens=12,
            )
        elif self.turns:
            self.script = self.turns.pop(0)
            self.script.prompt_tokens = real
        else:
            words = _WORD.findall(last.lower())
            self.script = Script(
                text=["Noted: ", " ".join(words[:4]), "."],
                prompt_tokens=real,
                completion_tokens=8,
            )
        return super()._chat(request)


class Runner:
    """One ``read_file`` tool, run in this process."""

    async def catalogue(self, allowed: Collection[str] | None = None) -> Catalogue:
        tool = ServerTool("files", "read_file", "Reads a file from the notes folder.", SCHEMA)
        return build_catalogue([("files", [tool])])

    async def call(
        self,
        catalogue: Catalogue,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        time_limit: float = CALL_TIMEOUT,
    ) -> ToolOutcome | None:
        tool = catalogue.find(name)
        if tool is None:
            return None
        path = str((arguments or {}).get("path", ""))
        return ToolOutcome("files", tool.name, f"{path}: 3 eggs, 250 g flour, 2 lemons.")


async def allow(_ask: ToolAsk) -> Approval:
    return Approval.ONCE


class ChatLog:
    """What the app's chat log would hold: the person's messages, the answers, the folds."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, Message]] = []
        self.fold: tuple[int, str] | None = None

    def history(self) -> list[tuple[int, Message]]:
        return list(self.rows)

    def latest_fold(self) -> tuple[int, str] | None:
        return self.fold

    def record(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, Compacted):
                self.fold = (ev.first_kept_seq, ev.summary)
        text = "".join(ev.text for ev in events if isinstance(ev, TextDelta))
        if text:
            self.rows.append((self.rows[-1][0] + 1, Message(role="assistant", text=text)))

    def written(self, ev: SummaryWritten) -> None:
        if ev.summary:
            self.fold = (ev.first_kept_seq, ev.summary)


def person_text(n: int) -> str:
    topic = TOPICS[n % len(TOPICS)]
    lines = [f"Message {n} about the {topic}: on 2024-03-{n % 28 + 1:02d} it cost {n * 37} euros."]
    lines += [f"The {topic} detail {k} of message {n} is worth remembering." for k in range(18)]
    return "\n".join(lines)


def event_line(ev: Event | SummaryWritten) -> dict[str, Any]:
    line = {"event": type(ev).__name__, **ev.model_dump(mode="json")}
    if isinstance(ev, ToolResult):
        line["seconds"] = 0.0  # how long the tool ran: the clock's, not the engine's
    return line


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer("openai")
    s.turns = []
    s.start()
    yield s
    s.stop()


async def test_a_long_chat_sends_exactly_the_recorded_requests(
    server: ChatServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    adapter = OpenAIAdapter(
        ROWS["openai"], base_url=server.base_url, api_key="sk-test", client=client
    )
    adapters = {"openai": adapter}
    log = ChatLog()
    session = ApiSession(
        chat_id=CHAT,
        data_dir=tmp_path,
        adapters=adapters,
        summariser=ModelSummariser(adapters),
        history=log.history,
        latest_fold=log.latest_fold,
        tools=ToolHost(Runner(), allow),
    )
    lines: list[dict[str, Any]] = []

    def written(ev: SummaryWritten) -> None:
        # A fold's summary written after its turn: the app's chat log records it.
        log.written(ev)
        lines.append(event_line(ev))

    session.listen(written)

    async def turn(n: int, text: str) -> None:
        seq = log.rows[-1][0] + 1 if log.rows else 0
        log.rows.append((seq, Message(role="user", text=text)))
        ask = TurnInput(chat_id=CHAT, seq=seq, text=text, model=MODEL, system=SYSTEM)
        events = [ev async for ev in session.turn(ask)]
        log.record(events)  # as the app does while the turn streams
        lines.append({"turn": n, "seq": seq})
        lines.extend(event_line(ev) for ev in events)
        # Summaries written after the turn (a fold's, the next fold's ahead) are in the record.
        await session.wait_prepared()

    for n in range(60):
        if n == 12:
            # The model reads a file before it answers.
            server.turns = [
                Script(
                    text=["Let me look."],
                    calls=[ScriptedCall("call_1", "read_file", {"path": "shopping.txt"})],
                    finish_reason="tool_calls",
                ),
                Script(text=["You need eggs, flour and lemons."]),
            ]
        if n == 20:
            # The person deleted an answer: the transcript is rebuilt from the log.
            del log.rows[-1]
        if n == 30:
            events = [ev async for ev in session.compact("the lemons", model=MODEL)]
            log.record(events)
            lines.append({"compact": n})
            lines.extend(event_line(ev) for ev in events)
        if n == 40:
            # The server reads less than the model's listing says: the next long request is
            # refused, and the turn heals.
            server.window = 5_000
        text = person_text(n)
        if n == 50:
            text = "Please keep this log:\n" + "\n".join(
                f"row {i}: {i * 7919 % 10007} units" for i in range(2_500)
            )
        await turn(n, text)

    for request in server.requests:
        lines.append(
            {"method": request.method, "path": request.path, "body": request.body.decode()}
        )
    recorded = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
    if os.environ.get("CONCH_RECORD"):
        GOLDEN.write_text(recorded, encoding="utf-8")
    golden = GOLDEN.read_text(encoding="utf-8")
    if recorded != golden:
        (tmp_path / "recorded_requests.jsonl").write_text(recorded, encoding="utf-8")
        pytest.fail(f"the chat sent other requests than the record; see {tmp_path}")
    # The record holds what it is meant to prove.
    kinds = [line.get("event") for line in lines]
    assert kinds.count("Compacted") >= 4
    assert "Healed" in kinds and "ToolResult" in kinds and "Shortened" in kinds
    assert any(line.get("topic") == "transcript-recovered" for line in lines)
