"""A published ACP agent from npm, Zed's ``codex-acp`` (0.16.0), driven by the ACP engine
against the Responses API fake on loopback. Skipped where it is not installed: set
``CONCH_CODEX_ACP`` or install it with ``npm install --prefix ~/.cache/conch/npm
@zed-industries/codex-acp`` (scripts/setup.sh does, for the dev extra)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.base import Approval, Done, PermissionAsk, TextDelta, ToolResult
from engines.programs.acp import AcpEngine
from tests.engines.programs.test_acp import Chat, run_turn
from tests.fakes.openai_server import ResponsesServer


def _codex_acp() -> str | None:
    for candidate in (
        os.environ.get("CONCH_CODEX_ACP", ""),
        str(
            Path(os.environ.get("CONCH_NPM_CACHE", Path.home() / ".cache/conch/npm"))
            / "node_modules/.bin/codex-acp"
        ),
        shutil.which("codex-acp") or "",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


CODEX_ACP = _codex_acp()
pytestmark = pytest.mark.skipif(CODEX_ACP is None, reason="codex-acp is not installed here")


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer() as srv:
        yield srv


def make_engine(
    tmp_path: Path, server: ResponsesServer, chat: Chat, approve: object = None
) -> AcpEngine:
    # A home of its own (outside /tmp, where Codex refuses to make its helpers).
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    fields = f'name="Fake", base_url="{server.url}/v1", wire_api="responses"'
    assert CODEX_ACP is not None
    return AcpEngine(
        program="Codex ACP",
        # As a person adds it in Settings → Programs: the command and its arguments as given.
        command=(
            CODEX_ACP,
            "-c",
            f'model_providers.fake={{{fields}, env_key="FAKE_OPENAI_KEY"}}',
            "-c",
            "model_provider=fake",
            "-c",
            'model="gpt-fake"',
            # Ask before anything that is not known to be read-only.
            "-c",
            'approval_policy="untrusted"',
        ),
        cwd=tmp_path / "work",
        history=chat.history,
        latest_fold=chat.latest_fold,
        env={"CODEX_HOME": str(home), "FAKE_OPENAI_KEY": "sk-test-dummy"},
        approve=approve,  # type: ignore[arg-type]
    )


async def test_codex_acp_starts_and_answers_a_prompt(
    tmp_path: Path, server: ResponsesServer
) -> None:
    chat = Chat()
    engine = make_engine(tmp_path, server, chat)
    try:
        events = await run_turn(engine, chat, "Hello from Conch")
    finally:
        await engine.aclose()
    assert isinstance(events[-1], Done), events
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert answer.endswith("You said: Hello from Conch")
    assert "Hello from Conch" in str(server.responses_requests[-1].json)


async def test_allow_once_is_once_so_codex_acp_asks_again(
    tmp_path: Path, server: ResponsesServer
) -> None:
    asked: list[PermissionAsk] = []

    async def once(ask: PermissionAsk) -> Approval:
        asked.append(ask)
        return Approval.ONCE

    chat = Chat()
    engine = make_engine(tmp_path, server, chat, once)
    try:
        first = await run_turn(engine, chat, "Make the file [[touch]]")
        # Had Conch sent "always" (codex-acp lists it beside "once"), Codex would run the same
        # command again in this session without asking.
        second = await run_turn(engine, chat, "Once more [[touch]]")
    finally:
        await engine.aclose()
    assert [a.title for a in asked] == ["touch ran.txt", "touch ran.txt"]
    for events in (first, second):
        assert isinstance(events[-1], Done), events
        [ran] = [e for e in events if isinstance(e, ToolResult)]
        assert ran.tool == "touch ran.txt" and ran.status != "denied"
