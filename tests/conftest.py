"""Test-wide setup: offscreen Qt, isolated data dirs, no stray keyring, no test that a busy
machine can fail (property tests without deadlines, Qt waits that time out only on a hang), and
no error Conch logs without a test expecting it."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def no_unexpected_error_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test in which a Conch logger ("conch", "conch.*") logged at ERROR or above.

    Such a log is a failure Conch swallowed to keep going; a test that provokes one on purpose
    says so with ``@pytest.mark.allow_error_log``.
    """
    handler = _ErrorRecords()
    conch = logging.getLogger("conch")
    conch.addHandler(handler)
    try:
        yield
    finally:
        conch.removeHandler(handler)
    if handler.records and request.node.get_closest_marker("allow_error_log") is None:
        logged = "\n".join(
            f"  {r.name} {r.levelname}: {r.getMessage()}"
            + (f" ({r.exc_info[0].__name__})" if r.exc_info and r.exc_info[0] else "")
            for r in handler.records[:10]
        )
        pytest.fail(
            f"Conch logged {len(handler.records)} error(s) this test did not expect:\n{logged}\n"
            "Fix the cause, or mark the test @pytest.mark.allow_error_log if it provokes them.",
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
