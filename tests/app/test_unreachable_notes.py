"""A server that cannot be reached is noted in Health once per change of state: not on every
look, and not again by every ``conch`` command (each a new process) while it stays down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.catalogue import ModelCatalogue, server_key
from app.health import HealthLog
from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.app.test_cli import closed_port, conch
from tests.fakes.ollama_server import FakeModel, FakeOllama


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


async def look_once(data_dir: Path, url: str) -> None:
    """What one ``conch`` process does: open Health, list the server, close."""
    health = HealthLog.in_dir(data_dir)
    catalogue = ModelCatalogue([OllamaAdapter(url)], health=health)
    try:
        await catalogue.refresh()
    finally:
        await catalogue.aclose()
        health.close()


def notes(data_dir: Path) -> list[tuple[str, str]]:
    health = HealthLog.in_dir(data_dir)
    try:
        return [(n.topic, n.text) for n in reversed(health.notes())]
    finally:
        health.close()


async def test_a_server_down_for_three_processes_is_noted_once(data_dir: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    for _ in range(3):
        await look_once(data_dir, url)
    said = notes(data_dir)
    assert len(said) == 1
    assert said[0][0] == "unreachable" and "Ollama could not be reached" in said[0][1]


async def test_down_up_and_down_again_is_three_notes(data_dir: Path) -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    await look_once(data_dir, url)
    fake = FakeOllama([FakeModel("llama3.2", 131_072)]).start(port)
    try:
        await look_once(data_dir, url)
        await look_once(data_dir, url)  # still up: nothing more to say
    finally:
        fake.stop()
    await look_once(data_dir, url)
    assert [topic for topic, _ in notes(data_dir)] == ["unreachable", "reachable", "unreachable"]
    assert notes(data_dir)[1][1] == "Ollama is reachable again."


async def test_another_address_is_another_server(data_dir: Path) -> None:
    await look_once(data_dir, f"http://127.0.0.1:{closed_port()}")
    await look_once(data_dir, f"http://127.0.0.1:{closed_port()}")
    assert [topic for topic, _ in notes(data_dir)] == ["unreachable", "unreachable"]


def test_the_remembered_server_holds_no_password() -> None:
    adapter = OpenAIAdapter(ROWS["lmstudio"], base_url="http://me:hunter2@10.0.0.5:1234/v1?key=k")
    assert server_key(adapter) == "lmstudio http://10.0.0.5:1234/v1"


def test_three_conch_commands_with_servers_down_write_one_note_each(
    data_dir: Path, home: Path
) -> None:
    settings = {
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "llamacpp_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    ollama = f"127.0.0.1:{closed_port()}"
    for _ in range(3):
        result = conch("models", "--data-dir", str(data_dir), home=home, ollama=ollama)
        assert result.returncode == 0, result.stderr
    unreachable = [text for topic, text in notes(data_dir) if topic == "unreachable"]
    assert sorted(text.split(" could not")[0] for text in unreachable) == [
        "LM Studio",
        "Ollama",
        "llama.cpp",
        "vLLM",
    ]
