"""What an installed Conch holds: its own packages, never the tests or the benchmarks.

Both run from a checkout, so neither is in the wheel, and nothing that is imports them (the
tests use fakes that live in ``bench``, which imports nothing from ``tests``).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = {"tests", "bench"}


def shipped_packages() -> list[str]:
    """The packages setuptools puts in the wheel, found the way pyproject.toml tells it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    find = config["tool"]["setuptools"]["packages"]["find"]
    found: list[str] = setuptools.find_packages(
        where=str(ROOT), include=find.get("include", ("*",)), exclude=find.get("exclude", ())
    )
    return found


def test_the_wheel_holds_neither_tests_nor_benchmarks() -> None:
    tops = {name.split(".")[0] for name in shipped_packages()}
    assert {"app", "engines", "ui"} <= tops
    assert not tops & DEV_ONLY


def test_nothing_installed_imports_the_tests_or_the_benchmarks() -> None:
    wrong = []
    for package in shipped_packages():
        for path in (ROOT / package.replace(".", "/")).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                wrong += [
                    f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in DEV_ONLY
                ]
    assert wrong == []
