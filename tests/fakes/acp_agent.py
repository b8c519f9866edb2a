"""A real ACP agent on the ``agent-client-protocol`` SDK's agent side, for the ACP engine's tests.

Run it as ``python -m tests.fakes.acp_agent --record FILE``. Every prompt it receives is
appended to FILE as one JSON line (``{"session": ..., "texts": [...], "images": n}``) and
flushed *before* it answers, so a test reads exactly what the agent was handed.

It answers ``Heard <n> characters.`` in a few chunks after one thought. A cue in the newest
line of the prompt changes what it does, so one process can show every kind of trouble:

- ``[[exit]]``: one chunk, then the process ends with code 3 (exits mid-turn)
- ``[[garbage]]``: prints a line that is not JSON on stdout, then waits
- ``[[hang]]``: never answers (until cancelled)
- ``[[slow]]``: one thought, then waits until it is cancelled (``{"cancelled": session}`` is
  recorded then)
- ``[[permission]]``: asks to run ``rm -rf build`` first; records the answer
  (``{"permission": "allowed"}`` or ``"denied"``) and says whether it was allowed
- ``[[refuse]]``: ends the turn with the ``refusal`` stop reason

``--banner`` prints a line that is not JSON before anything else, as a program started
without its ACP flag would. ``--grandchild`` starts a process of its own that holds the
agent's stdout and stderr and never ends by itself (as a program's helper may); both pids are
recorded first (``{"pid": ..., "grandchild": ...}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    start_tool_call,
    text_block,
    update_agent_message_text,
    update_agent_thought_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    PermissionOption,
    PromptCapabilities,
    ToolCallUpdate,
)


class FakeAgent(Agent):
    def __init__(self, record: Path | None) -> None:
        self._record = record
        self._client: Client | None = None
        self._cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                prompt_capabilities=PromptCapabilities(image=True)
            ),
            agent_info=Implementation(name="fake-acp-agent", version="1.0"),
        )

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"cancelled": session_id}) + "\n")
        self._cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        assert self._client is not None
        texts = [b.text for b in prompt if getattr(b, "type", "") == "text"]
        images = sum(1 for b in prompt if getattr(b, "type", "") == "image")
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"session": session_id, "texts": texts, "images": images}))
                f.write("\n")
                f.flush()
        whole = "\n".join(texts)
        newest = whole.rstrip().rsplit("\n", 1)[-1]
        cancelled = self._cancelled.setdefault(session_id, asyncio.Event())

        if "[[garbage]]" in newest:
            sys.stdout.write("Oops: this is not JSON\n")
            sys.stdout.flush()
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if "[[hang]]" in newest:
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if "[[refuse]]" in newest:
            return PromptResponse(stop_reason="refusal")

        client = self._client
        await client.session_update(session_id, update_agent_thought_text("Thinking it over."))
        if "[[slow]]" in newest:
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if "[[permission" in newest:
            # "[[permission]]" offers Allow / Reject; "[[permission:allow_always,allow_once,…]]"
            # offers those kinds in that order (claude-code-acp lists allow_always first), each
            # with the kind as its id, and records the id that came back.
            listed = newest.split("[[permission", 1)[1].split("]]", 1)[0].lstrip(":")
            kinds = [k for k in listed.split(",") if k] or ["allow_once", "reject_once"]
            names = {
                "allow_once": "Allow",
                "allow_always": "Always Allow",
                "reject_once": "Reject",
                "reject_always": "Always Reject",
            }
            call = start_tool_call("call-1", "Run rm -rf build", kind="execute", status="pending")
            await client.session_update(session_id, call)
            answer = await client.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id="call-1", title="Run rm -rf build"),
                options=[
                    PermissionOption(option_id=kind, name=names[kind], kind=kind)  # type: ignore[arg-type]
                    for kind in kinds
                ],
            )
            outcome = answer.outcome
            chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else None
            allowed = chosen is not None and chosen.startswith("allow")
            if self._record is not None:
                with self._record.open("a", encoding="utf-8") as f:
                    seen = {"permission": "allowed" if allowed else "denied", "option": chosen}
                    f.write(json.dumps(seen) + "\n")
            if not allowed:
                return PromptResponse(stop_reason="end_turn")
            await client.session_update(session_id, update_agent_message_text("Removed build. "))

        reply = f"Heard {len(whole)} characters."
        for i in range(0, len(reply), 8):
            await client.session_update(session_id, update_agent_message_text(reply[i : i + 8]))
            if "[[exit]]" in newest:
                sys.stdout.flush()
                os._exit(3)
        return PromptResponse(stop_reason="end_turn")


async def _main(record: Path | None) -> None:
    await run_agent(FakeAgent(record))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--banner", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    args = parser.parse_args()
    if args.grandchild:
        # It inherits stdout and stderr, so the agent's pipes stay open while it lives.
        helper = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        if args.record is not None:
            with args.record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"pid": os.getpid(), "grandchild": helper.pid}) + "\n")
    if args.banner:
        sys.stdout.write("Welcome to the fake agent! Type your question.\n")
        sys.stdout.flush()
    asyncio.run(_main(args.record))


if __name__ == "__main__":
    main()


__all__ = ["FakeAgent", "text_block"]
