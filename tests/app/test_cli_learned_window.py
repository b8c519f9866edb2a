"""``conch ask`` run twice against a llama.cpp-style server that does not say its window (no
``/props``, as llama-cpp-python): the first run is refused and heals, the second (another
process, another chat) already plans with the window the first one learned."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.test_cli import closed_port, conch
from tests.fakes.http import Recorded
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer

ARTICLE = "The hedge along the fence turned the garden into a quiet room of its own. " * 140


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home for the subprocess."""
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def server() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("llamacpp", models=[FakeModel("gemma-2k", window=None)], window=2_048)
    s.props = False
    s.meta_n_ctx = False
    s.start()
    yield s
    s.stop()


def refused(server: OpenAIStyleServer, requests: list[Recorded]) -> int:
    """How many of these chat requests the server refused as over its window."""
    window = server.window or 0
    return sum(
        server.count("".join(m.get("content") or "" for m in r.json["messages"])) > window
        for r in requests
    )


def test_conch_ask_never_heals_the_same_window_twice(
    server: OpenAIStyleServer, data_dir: Path, home: Path
) -> None:
    settings = {
        "llamacpp_url": server.base_url,
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
        "remember_automatically": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    ask = ("ask", "--data-dir", str(data_dir), "--model", "llamacpp/gemma-2k", "-")

    first = conch(*ask, home=home, stdin=ARTICLE)
    assert first.returncode == 0, first.stderr
    sent_first = list(server.chat_requests)
    assert refused(server, sent_first) == 1  # refused once, then healed
    kept = json.loads((data_dir / "settings.json").read_text())["learned_windows"]
    assert [fact["window"] for fact in kept.values()] == [2_048]

    second = conch(*ask, home=home, stdin=ARTICLE)
    assert second.returncode == 0, second.stderr
    sent_second = server.chat_requests[len(sent_first) :]
    assert sent_second and refused(server, sent_second) == 0
