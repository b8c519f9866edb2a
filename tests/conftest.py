"""Test-wide setup: offscreen Qt, isolated data dirs, no stray keyring, no clock in properties."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh Conch data directory for one test."""
    d = tmp_path / "conch-data"
    d.mkdir()
    return d
