"""A tool result too big to read is called that, not a server that "stopped during the call";
the server is not counted as crashing, and the next call works."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.tools.config import HttpServer
from engines.tools.servers import MAX_HTTP_MESSAGE, ToolServers
from engines.tools.stdio import MAX_MESSAGE_BYTES
from tests.engines.tools.test_servers import ROOT, fake
from tests.waits import HANG_SECONDS


async def test_a_result_past_the_message_limit_is_said_to_be_too_big(tmp_path: Path) -> None:
    # 40 MB of text is sent twice in one message (as text and as structured content): past
    # the 64 MB Conch reads of one message.
    server = fake(tmp_path / "control")
    server = server.model_copy(update={"args": (*server.args, "--huge-mb", "40")})
    servers = ToolServers([server], start_timeout=HANG_SECONDS)
    try:
        catalogue = await servers.catalogue()
        outcome = await servers.call(catalogue, "huge", {}, time_limit=HANG_SECONDS)
        assert outcome is not None and outcome.error
        limit = MAX_MESSAGE_BYTES // (1024 * 1024)
        assert outcome.text.startswith(f"“huge” returned more than {limit} MB")
        assert "stopped during the call" not in outcome.text
        assert servers["fake"].state.phase == "idle"  # not failed, not held

        again = await servers.call(catalogue, "echo", {"text": "still here"})
        assert again is not None and again.text == "echo: still here" and not again.error
    finally:
        await servers.stop()


@pytest.fixture
def big_http(tmp_path: Path) -> Iterator[str]:
    """The fake over HTTP, its ``huge`` 40 MB: its address."""
    control = tmp_path / "control-http"
    args = [a for a in fake(control).args if isinstance(a, str)]  # no secrets among them
    with subprocess.Popen(
        [sys.executable, *args, "--http", "--huge-mb", "40"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the socket is listening once this is printed
            assert line.startswith("port "), f"the fake did not start: {line!r}"
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
        finally:
            proc.kill()
            proc.wait()


async def test_a_result_past_the_limit_over_http_is_said_to_be_too_big(big_http: str) -> None:
    servers = ToolServers([HttpServer(id="web", name="Web", url=big_http)])
    try:
        catalogue = await servers.catalogue()
        outcome = await servers.call(catalogue, "huge", {}, time_limit=HANG_SECONDS)
        assert outcome is not None and outcome.error
        limit = MAX_HTTP_MESSAGE // (1024 * 1024)
        assert outcome.text.startswith(f"“huge” returned more than {limit} MB")
        assert servers["web"].state.phase == "ready"  # the connection stays up
        again = await servers.call(catalogue, "echo", {"text": "still here"})
        assert again is not None and again.text == "echo: still here"
    finally:
        await servers.stop()
