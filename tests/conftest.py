"""Test-wide setup: offscreen Qt, isolated data dirs, no stray keyring."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

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
