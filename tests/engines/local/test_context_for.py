"""The num_ctx Conch asks Ollama for: decided once per model, from what the server says."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engines.providers.ollama_window import (
    GIB,
    ContextFor,
    _meminfo_total,
    model_key,
    parse_version,
    supports_no_truncate,
    total_memory,
)
from engines.window import UNKNOWN_WINDOW_LOCAL


class Probe:
    """Answers like /api/ps and /api/show would, and counts the questions."""

    def __init__(self, loaded: dict[str, int], trained: dict[str, int | None]) -> None:
        self.loaded = loaded
        self.trained = trained
        self.ps_calls = 0
        self.show_calls = 0
        self.fail = False

    async def loaded_windows(self) -> dict[str, int]:
        self.ps_calls += 1
        await asyncio.sleep(0.01)
        if self.fail:
            raise ConnectionError("server down")
        return dict(self.loaded)

    async def trained_window(self, model: str) -> int | None:
        self.show_calls += 1
        await asyncio.sleep(0.01)
        return self.trained[model]


@pytest.mark.parametrize(
    ("memory", "loaded", "trained", "expected"),
    [
        (32 * GIB, {}, 131_072, 32_768),  # large computer: capped at 32K
        (16 * GIB, {}, 131_072, 32_768),
        (8 * GIB, {}, 131_072, 16_384),  # small computer: capped at 16K
        (None, {}, 131_072, 16_384),  # memory unknown counts as small
        (32 * GIB, {}, 4_096, 4_096),  # a model trained on less gets its own window
        (32 * GIB, {"m:latest": 4_096}, 131_072, 4_096),  # loaded: never ask for a reload
        (8 * GIB, {"m:latest": 65_536}, 131_072, 65_536),  # loaded bigger than the cap: keep
        (32 * GIB, {"m:latest": 0}, 131_072, 32_768),  # /api/ps without context_length
        (32 * GIB, {}, None, UNKNOWN_WINDOW_LOCAL),  # no trained window known
    ],
)
async def test_the_window_decision(
    memory: int | None, loaded: dict[str, int], trained: int | None, expected: int
) -> None:
    decider = ContextFor(Probe(loaded, {"m:latest": trained}), memory=memory)
    assert await decider.context_for("m") == expected


async def test_the_decision_is_made_once_and_kept() -> None:
    probe = Probe({}, {"m:latest": 131_072})
    decider = ContextFor(probe, memory=32 * GIB)
    first = await decider.context_for("m")
    probe.loaded = {"m:latest": 4_096}  # someone else loads it smaller later
    probe.trained = {"m:latest": 2_048}
    assert await decider.context_for("m") == first == 32_768
    assert await decider.context_for("m:latest") == first
    assert decider.decide("m", loaded=1_000, trained=1_000) == first
    assert (probe.ps_calls, probe.show_calls) == (1, 1)


async def test_concurrent_first_requests_ask_the_server_once() -> None:
    probe = Probe({}, {"m:latest": 131_072})
    decider = ContextFor(probe, memory=32 * GIB)
    results = await asyncio.gather(*(decider.context_for("m") for _ in range(5)))
    assert set(results) == {32_768}
    assert (probe.ps_calls, probe.show_calls) == (1, 1)


async def test_a_failed_probe_is_not_remembered() -> None:
    probe = Probe({"m:latest": 8_192}, {"m:latest": 131_072})
    probe.fail = True
    decider = ContextFor(probe, memory=32 * GIB)
    with pytest.raises(ConnectionError):
        await decider.context_for("m")
    assert decider.known("m") is None
    probe.fail = False
    assert await decider.context_for("m") == 8_192


def test_memory_is_read_from_the_system() -> None:
    memory = total_memory()
    assert memory is not None and memory > 256 * 1024**2


def test_meminfo_is_parsed(tmp_path: Path) -> None:
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       16318196 kB\nMemFree:         1234 kB\n")
    assert _meminfo_total(f) == 16_318_196 * 1024
    f.write_text("nothing useful\n")
    assert _meminfo_total(f) is None
    assert _meminfo_total(tmp_path / "missing") is None


def test_a_memory_function_is_asked_when_deciding() -> None:
    decider = ContextFor(Probe({}, {}), memory=lambda: 64 * GIB)
    assert decider.cap == 32_768


@pytest.mark.parametrize(
    ("version", "parsed", "no_truncate"),
    [
        ("0.12.6", (0, 12, 6), True),
        ("0.12.5", (0, 12, 5), False),
        ("0.12.6-rc1", (0, 12, 6), True),
        ("v0.13", (0, 13, 0), True),
        ("1.0.0", (1, 0, 0), True),
        ("0.0.0", (0, 0, 0), False),  # a development build
        ("0.9.10", (0, 9, 10), False),
        ("", None, False),
        (None, None, False),
        ("unknown", None, False),
    ],
)
def test_version_gating(
    version: str | None, parsed: tuple[int, int, int] | None, no_truncate: bool
) -> None:
    assert parse_version(version) == parsed
    assert supports_no_truncate(version) is no_truncate


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("llama3.2", "llama3.2:latest"),
        ("llama3.2:latest", "llama3.2:latest"),
        ("qwen3:8b", "qwen3:8b"),
        ("hf.co/bartowski/Llama-3.2-1B-GGUF", "hf.co/bartowski/Llama-3.2-1B-GGUF:latest"),
        ("registry.local:5000/team/model", "registry.local:5000/team/model:latest"),
        ("registry.local:5000/team/model:q4", "registry.local:5000/team/model:q4"),
    ],
)
def test_model_names_are_normalised_like_ollama(name: str, key: str) -> None:
    assert model_key(name) == key
