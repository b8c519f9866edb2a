"""Test-wide setup: offscreen Qt, isolated data dirs, no stray keyring, no test that a busy
machine can fail (property tests without deadlines, Qt waits that time out only on a hang), and
no warning or error logged without a test expecting it."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from pytestqt.qtbot import QtBot

from tests.waits import HANG_MS

# Property tests judge answers, never speed: no per-example deadline and no complaint that
# making examples is slow, which on a busy machine it is.
settings.register_profile(
    "conch", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("conch")

# Qt reads this when QApplication is created; set it before pytest-qt makes one.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Never touch the developer's real keyring or config from a test.
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Nor a real API key from the developer's shell: `conch ask`/`conch models` read the usual
# variables, and a subprocess test would then call the real company.
from app.secrets import KEY_ENV_VARS  # noqa: E402

for _name in {n for names in KEY_ENV_VARS.values() for n in names}:
    os.environ.pop(_name, None)

# The bundled model's runtime leaves a core free for Conch's window; in the suite nothing else
# needs one. On two idle cores two threads read a 2,000-token prompt in 15-16 s against 25-30 s
# with one (three prompts each, one run), which takes minutes off the tests on the real model.
from engines.local.bundled import THREADS_ENV, thread_count  # noqa: E402

os.environ.setdefault(THREADS_ENV, str(thread_count()))

# For the shared fixtures at the end: the chat log, the memory book, a loopback model API.
from app.memories import MemoryBook  # noqa: E402
from app.store import ChatStore  # noqa: E402
from engines.providers.openai import ROWS, OpenAIAdapter  # noqa: E402
from tests.fakes.openai_server import OpenAIStyleServer  # noqa: E402
from tests.loopback_chat import held_summaries  # noqa: E402

# --- no log a test did not expect -------------------------------------------------------------
#
# A WARNING or ERROR from any logger (Conch's, asyncio's, httpx's, the MCP SDK's, Qt's through
# "conch.qt") fails the test, unless the test says it provokes it:
#
#   @pytest.mark.allow_log("conch.bridge")                  WARNING from conch.bridge (and below)
#   @pytest.mark.allow_log("conch.tools", "mcp", level="ERROR")   up to ERROR from either
#   @pytest.mark.allow_error_log                            anything from "conch" (a failure
#                                                           Conch swallows on purpose)
#
# A name covers its children ("conch" covers "conch.bridge"). What is kept out on purpose, and
# why, is in ``_load_dependent``: a log that only a busy machine produces must not make the
# suite flaky.


def _covers(name: str, logger: str) -> bool:
    return logger == name or logger.startswith(name + ".") or name == "root"


def _load_dependent(record: logging.LogRecord) -> bool:
    """Logs that say the machine was slow, not that Conch did something wrong.

    asyncio in debug mode reports every callback slower than 0.1 s ("Executing <Task …> took
    0.123 seconds"); two CPU burners beside the suite make that happen at random. Conch's own
    shutdown warnings ("did not stop within …") are not here: no test may reach them by a slow
    machine, since their limit is far above any wait a test makes.
    """
    return record.name == "asyncio" and record.getMessage().startswith("Executing ")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not _load_dependent(record):
            self.records.append(record)


def _allowed(node: pytest.Item) -> list[tuple[str, int]]:
    """(logger name, highest level allowed) for every allow_log/allow_error_log marker."""
    allowed: list[tuple[str, int]] = []
    for marker in node.iter_markers("allow_log"):
        level = logging.getLevelName(str(marker.kwargs.get("level", "WARNING")).upper())
        if not isinstance(level, int) or not marker.args:
            raise pytest.UsageError(
                f"{node.nodeid}: allow_log takes logger names and level=WARNING/ERROR/CRITICAL"
            )
        allowed += [(str(name), level) for name in marker.args]
    if node.get_closest_marker("allow_error_log") is not None:
        allowed.append(("conch", logging.CRITICAL))
    return allowed


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_log(*loggers, level='WARNING'): the test provokes logs up to that level from "
        "those loggers on purpose (tests/conftest.py)",
    )


@pytest.fixture(autouse=True)
def no_unexpected_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test in which any logger logged at WARNING or above that the test did not allow.

    Such a log is a failure something swallowed to keep going (Conch, a library, the event
    loop); a test that provokes one on purpose says which with ``allow_log`` (see above).
    """
    handler = _Records()
    root, conch = logging.getLogger(), logging.getLogger("conch")
    # A level a test leaves behind (the CLI's, the window's) would hide the next test's logs.
    levels = root.level, conch.level
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        conch.setLevel(levels[1])
    allowed = _allowed(request.node)
    unexpected = [
        r
        for r in handler.records
        if not any(_covers(name, r.name) and r.levelno <= level for name, level in allowed)
    ]
    if unexpected:
        logged = "\n".join(
            f"  {r.name} {r.levelname}: {r.getMessage()}"
            + (f" ({r.exc_info[0].__name__})" if r.exc_info and r.exc_info[0] else "")
            for r in unexpected[:10]
        )
        pytest.fail(
            f"{len(unexpected)} log(s) at WARNING or above this test did not expect:\n{logged}\n"
            "Fix the cause, or mark the test @pytest.mark.allow_log(<logger>, level=...) if it "
            "provokes them on purpose.",
            pytrace=False,
        )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh Conch data directory for one test."""
    d = tmp_path / "conch-data"
    d.mkdir()
    return d


def _guarded(timeout: int, kwargs: dict[str, Any]) -> int:
    # raising=False: running out of time is the expected end (assertNotEmitted), not a hang.
    return timeout if kwargs.get("raising") is False else max(timeout, HANG_MS)


class EventWaits(QtBot):
    """pytest-qt's bot, whose waits for an event time out only on a hang.

    Every wait in this suite is for an event (a signal, a state the window reaches), so its
    timeout is only a hang guard. pytest-qt's default of five seconds, or a test's own few
    seconds, can run out on a busy machine while the event is still on its way.
    """

    def waitUntil(self, callback: Callable[[], bool | None], *, timeout: int = HANG_MS) -> None:
        super().waitUntil(callback, timeout=max(timeout, HANG_MS))

    def waitSignal(self, signal: Any, *, timeout: int = HANG_MS, **kwargs: Any) -> Any:
        return super().waitSignal(signal, timeout=_guarded(timeout, kwargs), **kwargs)

    def waitSignals(self, signals: Any, *, timeout: int = HANG_MS, **kwargs: Any) -> Any:
        return super().waitSignals(signals, timeout=_guarded(timeout, kwargs), **kwargs)

    def waitCallback(self, *, timeout: int = HANG_MS, **kwargs: Any) -> Any:
        return super().waitCallback(timeout=_guarded(timeout, kwargs), **kwargs)

    def waitExposed(self, widget: Any, *, timeout: int = HANG_MS) -> Any:
        return super().waitExposed(widget, timeout=max(timeout, HANG_MS))

    def waitActive(self, widget: Any, *, timeout: int = HANG_MS) -> Any:
        return super().waitActive(widget, timeout=max(timeout, HANG_MS))


@pytest.fixture
def qtbot(qapp: Any, request: pytest.FixtureRequest) -> QtBot:
    """pytest-qt's ``qtbot``, with waits that time out only on a hang (see ``EventWaits``)."""
    return EventWaits(request)


@pytest.fixture
def store(data_dir: Path) -> Iterator[ChatStore]:
    """The chat log in ``data_dir``, closed after the test."""
    s = ChatStore.in_dir(data_dir)
    yield s
    s.close()


@pytest.fixture
def book(data_dir: Path) -> Iterator[MemoryBook]:
    """The memory book in ``data_dir``, closed after the test."""
    b = MemoryBook.in_dir(data_dir)
    yield b
    b.close()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for adapters on loopback servers (no proxy from the environment)."""
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(60.0)) as c:
        yield c


@pytest.fixture
def api() -> Iterator[OpenAIStyleServer]:
    """A loopback model API that holds each summary request until the test sets its
    ``summary_gate``, then answers ``loopback_chat.SUMMARY``."""
    with held_summaries() as s:
        yield s


@pytest.fixture
def api_adapter(api: OpenAIStyleServer, client: httpx.AsyncClient) -> OpenAIAdapter:
    """The OpenAI adapter on ``api``."""
    return OpenAIAdapter(ROWS["openai"], base_url=api.base_url, api_key="sk-test", client=client)
