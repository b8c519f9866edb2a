"""engines/ and app/ must never load Qt: importing every module of each in a fresh interpreter
proves it (the window's start-up lives in ui/start.py, and only ``conch`` without a command
goes there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QT = ("PySide6", "qasync", "shiboken6")


def modules_of(package: str) -> list[str]:
    names = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / package).rglob("*.py")
    )
    return [m.removesuffix(".__init__") for m in names]


def qt_loaded_by(modules: list[str]) -> list[str]:
    """The Qt modules a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {QT!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [m for m in out.stdout.strip().split(",") if m]


@pytest.mark.parametrize("package", ["engines", "app"])
def test_importing_every_module_loads_no_qt(package: str) -> None:
    modules = modules_of(package)
    assert len(modules) >= 3
    assert qt_loaded_by(modules) == [], f"{package}/ loaded Qt modules"


def test_the_check_sees_qt_when_a_module_loads_it() -> None:
    assert "PySide6.QtCore" in qt_loaded_by(["ui.chat.chat_view"])


def loaded_by(modules: list[str], prefix: str) -> list[str]:
    """The modules under ``prefix`` a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({prefix!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [m for m in out.stdout.strip().split(",") if m]


def test_the_providers_load_nothing_of_the_transcript_keeping_engine() -> None:
    # engines.context builds on the providers; a provider importing it back makes a cycle.
    assert loaded_by(modules_of("engines/providers"), "engines.context") == []
    assert "engines.context.session" in loaded_by(["engines.context.session"], "engines.context")
