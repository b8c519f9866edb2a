"""ACP agents the person adds by command (Settings → Programs), through the app: listed in the
picker, started exactly as given with their secrets from the keyring, handed Conch's MCP
servers only when allowed, and their tool calls kept in the chat log."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from app.tool_calls import tool_call_book
from engines.base import Done, Problem
from engines.programs.agents import make_agent
from engines.tools.config import SecretRef, StdioServer

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 60.0  # a hang guard only


async def drain(conv: Conversation, text: str) -> list[object]:
    async def go() -> list[object]:
        return [e async for e in conv.turn(text)]

    return await asyncio.wait_for(go(), HANG_SECONDS)


def records(path: Path) -> list[dict[str, object]]:
    return (
        [json.loads(line) for line in path.read_text("utf-8").splitlines()] if path.exists() else []
    )


def add_agent(services: AppServices, record: Path) -> str:
    agent, secrets = make_agent(
        "My Agent",
        sys.executable,
        [
            "-m",
            "tests.fakes.acp_agent",
            "--record",
            str(record),
            "--sessions",
            "--show-env",
            "MY_AGENT_API_KEY",
        ],
        {"PYTHONPATH": str(ROOT), "MY_AGENT_API_KEY": "sk-agent-0123456789abcdef"},
    )
    for key, value in secrets.items():
        services.secrets.set(key, value)
    services.settings.update(acp_agents=(agent,))
    return agent.key


async def test_an_agent_added_by_command_answers_with_its_secret_from_the_keyring(
    tmp_path: Path,
) -> None:
    services = build_services(tmp_path / "data", mock=False, secrets=SessionSecrets())
    record = tmp_path / "received.jsonl"
    try:
        key = add_agent(services, record)
        # The secret is in the keyring, and settings keep only its entry's name.
        saved = services.settings.settings.acp_agents[0]
        assert isinstance(saved.env["MY_AGENT_API_KEY"], SecretRef)
        settings_text = (tmp_path / "data" / "settings.json").read_text("utf-8")
        assert "sk-agent-0123456789abcdef" not in settings_text
        listed = {m.id: m for m in services.programs()}
        assert listed[key].label == "My Agent" and listed[key].ready
        chat = services.store.create_chat(model_key=f"programs/{key}")
        conv = services.conversation(chat.id)
        try:
            events = await drain(conv, "Hello agent")
        finally:
            await conv.aclose()
        answer = services.store.messages(chat.id)[-1].text
    finally:
        await services.aclose()
    assert any(isinstance(e, Done) for e in events)
    got = records(record)
    assert {"env": {"MY_AGENT_API_KEY": "sk-agent-0123456789abcdef"}} in got
    assert [r["texts"] for r in got if "texts" in r] == [["Hello agent"]]
    # Started exactly as given: no --acp appended (the fake would refuse an unknown flag).
    assert answer == "Heard 11 characters."


async def test_mcp_servers_go_to_an_added_agent_only_when_allowed(tmp_path: Path) -> None:
    for allowed in (False, True):
        data = tmp_path / f"data-{allowed}"
        services = build_services(data, mock=False, secrets=SessionSecrets())
        record = tmp_path / f"received-{allowed}.jsonl"
        try:
            services.secrets.set("mcp/files/env/FILES_TOKEN", "tok-123")
            services.settings.update(
                tool_servers=(
                    StdioServer(
                        id="files",
                        name="Files",
                        command="files-mcp",
                        args=("--root", "/srv"),
                        env={"FILES_TOKEN": SecretRef(secret="mcp/files/env/FILES_TOKEN")},
                    ),
                )
            )
            key = add_agent(services, record)
            chat = services.store.create_chat(model_key=f"programs/{key}")
            conv = services.conversation(chat.id)
            if allowed:  # ticked with the chat already open: its first session gets them
                services.settings.update(programs_with_tools=(key,))
            try:
                await drain(conv, "Hello")
            finally:
                await conv.aclose()
        finally:
            await services.aclose()
        [new] = [r for r in records(record) if "new" in r]
        if allowed:
            assert new["mcp_servers"] == [
                {
                    "name": "Files",
                    "command": "files-mcp",
                    "args": ["--root", "/srv"],
                    "env": [{"name": "FILES_TOKEN", "value": "tok-123"}],
                }
            ]
        else:
            assert new["mcp_servers"] == []


async def test_an_agents_tool_calls_are_kept_in_the_chat_log(tmp_path: Path) -> None:
    services = build_services(tmp_path / "data", mock=False, secrets=SessionSecrets())
    try:
        key = add_agent(services, tmp_path / "received.jsonl")
        chat = services.store.create_chat(model_key=f"programs/{key}")
        conv = services.conversation(chat.id)
        try:
            await drain(conv, "Make the file [[tools]]")
        finally:
            await conv.aclose()
        saved = services.store.messages(chat.id)
        book = tool_call_book(services.store)
        assert book is not None
        calls = book.between(chat.id, 0, saved[-1].seq)
        marked = services.store.get_chat(chat.id)
    finally:
        await services.aclose()
    tools = [m for m in saved if m.role == "tool"]
    assert [m.text for m in tools][:2] == ["created ran.txt", "No such file: missing.txt"]
    assert [(calls[m.seq].tool, calls[m.seq].status) for m in tools] == [
        ("Run touch ran.txt", "done"),
        ("Read missing.txt", "failed"),
        ("Edit notes.txt", "done"),
    ]
    assert calls[tools[0].seq].arguments == {"command": "touch ran.txt"}
    # What the program's tools gave back came from outside: the chat is marked untrusted.
    assert marked is not None and marked.untrusted
    assert saved[-1].role == "assistant"


async def test_an_agent_whose_key_left_the_keyring_says_so_and_keeps_the_message(
    tmp_path: Path,
) -> None:
    services = build_services(tmp_path / "data", mock=False, secrets=SessionSecrets())
    record = tmp_path / "received.jsonl"
    try:
        key = add_agent(services, record)
        (agent,) = services.settings.settings.acp_agents
        ref = agent.env["MY_AGENT_API_KEY"]
        assert isinstance(ref, SecretRef)
        services.secrets.delete(ref.secret)  # a keyring that forgot it (another computer)
        chat = services.store.create_chat(model_key=f"programs/{key}")
        conv = services.conversation(chat.id)
        try:
            events = await drain(conv, "Hello agent")
        finally:
            await conv.aclose()
        saved = services.store.messages(chat.id)
    finally:
        await services.aclose()
    (problem,) = [e.problem for e in events if isinstance(e, Problem)]
    assert problem.message == (
        "Conch could not start My Agent: the value of MY_AGENT_API_KEY is not in the keyring "
        "any more. Enter it again in Settings → Programs."
    )
    assert problem.next_step is not None and problem.next_step.text == "programs"
    assert saved[0].role == "user" and saved[0].text == "Hello agent"
    assert not record.exists()  # nothing was started without its key
