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

- ``[[fail]]``: fails the prompt with an error of the agent's own (``RequestError`` with its
  own message in ``data``), as agents report a bad key or a broken model
- ``[[tools]]``: runs three tool calls as agents report them: ``touch ran.txt`` (pending, then
  in progress, then completed with its output), ``cat missing.txt`` (failed, with the error as
  its output) and an edit of ``notes.txt`` (completed with a diff); then answers
- ``[[plan]]``: sends a plan of three steps, then the same plan with the first step done
- ``[[unfinished]]``: starts a tool call and answers without ever finishing it

After every ``session/new`` (and ``session/load``) it lists its slash commands
(``available_commands_update``: ``/init``, ``/review [what to review]``), as agents do.
``--sessions`` records each ``session/new`` as ``{"new": id, "mcp_servers": [...]}`` (the
servers as they arrived, in ACP's JSON form).

``--load`` advertises ``loadSession``: every session's prompts and answers are kept in
``<record>.sessions/<id>.jsonl``, so a restarted agent loads them (``session/load`` replays them
as ``user_message_chunk`` / ``agent_message_chunk`` updates first, as agents do) and a session
it never had is refused. With it (as with ``--sessions``), each ``session/new`` is recorded as
``{"new": id, "mcp_servers": [...]}`` and each ``session/load`` as ``{"load": id, "found": bool}``.

``--show-env NAME`` records ``{"env": {NAME: value}}`` as it starts (what it was started
with, secrets included: the record is a test's own file).

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
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import update_available_commands
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandInput,
    Implementation,
    McpCapabilities,
    PermissionOption,
    PromptCapabilities,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

COMMANDS = [
    AvailableCommand(name="init", description="Write an AGENTS.md for this folder"),
    AvailableCommand(
        name="review",
        description="Review the changes in this folder",
        input=AvailableCommandInput(UnstructuredCommandInput(hint="what to review")),
    ),
]


class FakeAgent(Agent):
    def __init__(self, record: Path | None, *, load: bool = False, sessions: bool = False) -> None:
        self._record = record
        self._load = load
        self._sessions = sessions or load
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: Client | None = None
        self._cancelled: dict[str, asyncio.Event] = {}

    def _note(self, item: dict[str, Any]) -> None:
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as f:
                f.write(json.dumps(item) + "\n")
                f.flush()

    def _kept(self, session_id: str) -> Path | None:
        """Where a session's prompts and answers are kept (only with ``--load``)."""
        if not self._load or self._record is None:
            return None
        return self._record.with_name(self._record.name + ".sessions") / f"{session_id}.jsonl"

    def _keep(self, session_id: str, role: str, text: str) -> None:
        path = self._kept(session_id)
        if path is not None:
            path.parent.mkdir(exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"role": role, "text": text}) + "\n")

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
                load_session=self._load,
                prompt_capabilities=PromptCapabilities(image=True),
                mcp_capabilities=McpCapabilities(http=True),
            ),
            agent_info=Implementation(name="fake-acp-agent", version="1.0"),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Any = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        if self._sessions:
            servers = [
                s.model_dump(mode="json", by_alias=True, exclude_none=True)
                for s in mcp_servers or []
            ]
            self._note({"new": session_id, "mcp_servers": servers})
        path = self._kept(session_id)
        if path is not None:
            path.parent.mkdir(exist_ok=True)
            path.touch()
        self._list_commands(session_id)
        return NewSessionResponse(session_id=session_id)

    def _list_commands(self, session_id: str) -> None:
        """List the slash commands just after the answer, as agents do."""

        async def send() -> None:
            assert self._client is not None
            await self._client.session_update(session_id, update_available_commands(COMMANDS))

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: Any = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        path = self._kept(session_id)
        found = path is not None and path.exists()
        self._note({"load": session_id, "found": found})
        if path is None or not found:
            raise RequestError.resource_not_found(session_id)
        assert self._client is not None
        # The session's conversation is replayed to the client before the answer.
        for line in path.read_text("utf-8").splitlines():
            kept = json.loads(line)
            update = (
                update_user_message_text(kept["text"])
                if kept["role"] == "user"
                else update_agent_message_text(kept["text"])
            )
            await self._client.session_update(session_id, update)
        self._list_commands(session_id)
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"cancelled": session_id}) + "\n")
        self._cancelled.setdefault(session_id, asyncio.Event()).set()

    async def _tools(self, session_id: str) -> None:
        assert self._client is not None
        send = self._client.session_update
        touch = {"command": "touch ran.txt"}
        await send(
            session_id,
            start_tool_call(
                "t1", "Run touch ran.txt", kind="execute", status="pending", raw_input=touch
            ),
        )
        await send(session_id, update_tool_call("t1", status="in_progress"))
        await send(
            session_id,
            update_tool_call(
                "t1", status="completed", content=[tool_content(text_block("created ran.txt"))]
            ),
        )
        await send(
            session_id,
            start_tool_call(
                "t2",
                "Read missing.txt",
                kind="read",
                status="in_progress",
                raw_input={"path": "missing.txt"},
            ),
        )
        await send(
            session_id,
            update_tool_call(
                "t2",
                status="failed",
                content=[tool_content(text_block("No such file: missing.txt"))],
            ),
        )
        await send(
            session_id, start_tool_call("t3", "Edit notes.txt", kind="edit", status="pending")
        )
        await send(
            session_id,
            update_tool_call(
                "t3",
                status="completed",
                content=[tool_diff_content("notes.txt", "bread\nmilk\n", "bread\n")],
            ),
        )

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
        if self._kept(session_id) is not None:
            self._keep(session_id, "user", whole)
            self._keep(session_id, "assistant", f"Heard {len(whole)} characters.")
        if "[[fail]]" in newest:
            raise RequestError.internal_error({"details": "model “gpt-9” does not exist"})

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
        if "[[tools]]" in newest:
            await self._tools(session_id)
        if "[[plan]]" in newest:
            steps = ["Read the notes", "Write the summary", "Check the numbers"]
            await client.session_update(session_id, update_plan(plan_entry(s) for s in steps))
            done = [plan_entry(steps[0], status="completed")]
            done += [
                plan_entry(s, status="in_progress" if i == 1 else "pending")
                for i, s in enumerate(steps[1:], 1)
            ]
            await client.session_update(session_id, update_plan(done))
        if "[[unfinished]]" in newest:
            call = start_tool_call("call-9", "Run sleep 100", kind="execute", status="in_progress")
            await client.session_update(session_id, call)
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
                    PermissionOption(option_id=kind, name=names[kind], kind=kind) for kind in kinds
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
                # As agents do: the call ends failed, and the turn ends.
                await client.session_update(session_id, update_tool_call("call-1", status="failed"))
                return PromptResponse(stop_reason="end_turn")
            await client.session_update(
                session_id,
                update_tool_call(
                    "call-1", status="completed", content=[tool_content(text_block("removed"))]
                ),
            )
            await client.session_update(session_id, update_agent_message_text("Removed build. "))

        reply = f"Heard {len(whole)} characters."
        for i in range(0, len(reply), 8):
            await client.session_update(session_id, update_agent_message_text(reply[i : i + 8]))
            if "[[exit]]" in newest:
                sys.stdout.flush()
                os._exit(3)
        return PromptResponse(stop_reason="end_turn")


async def _main(record: Path | None, load: bool, sessions: bool) -> None:
    # The SDK's Agent protocol lists every method of ACP; the fake implements only those the
    # engine calls.
    await run_agent(FakeAgent(record, load=load, sessions=sessions))  # type: ignore[abstract]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--banner", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--sessions", action="store_true")
    parser.add_argument("--show-env", default="")
    args = parser.parse_args()
    if args.grandchild:
        # It inherits stdout and stderr, so the agent's pipes stay open while it lives.
        helper = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        if args.record is not None:
            with args.record.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"pid": os.getpid(), "grandchild": helper.pid}) + "\n")
    if args.show_env and args.record is not None:
        with args.record.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"env": {args.show_env: os.environ.get(args.show_env)}}) + "\n")
    if args.banner:
        sys.stdout.write("Welcome to the fake agent! Type your question.\n")
        sys.stdout.flush()
    asyncio.run(_main(args.record, args.load, args.sessions))


if __name__ == "__main__":
    main()


__all__ = ["FakeAgent", "text_block"]
