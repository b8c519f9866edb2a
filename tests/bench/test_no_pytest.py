"""The benches run from a checkout without the test tools: no bench imports pytest or tests/."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.waits import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[2]

# pytest made unimportable, as in a venv with only the app's own extras; then every bench.
PROBE = """
import importlib, pkgutil, sys
sys.modules["pytest"] = None
import bench
names = [m.name for m in pkgutil.iter_modules(bench.__path__)]
for name in names:
    importlib.import_module(f"bench.{name}")
leaked = sorted(m for m in sys.modules if m == "tests" or m.startswith("tests."))
print(len(names), leaked)
"""


def test_every_bench_imports_without_pytest_or_the_tests() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert run.returncode == 0, run.stderr
    count, leaked = run.stdout.split(maxsplit=1)
    assert int(count) >= 10
    assert leaked.strip() == "[]"


def test_no_bench_imports_pytest_or_the_tests_even_inside_a_function() -> None:
    # An import inside a function (a server a bench starts in a child process) escapes the
    # probe above until that function runs.
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("tests", "pytest")]
    assert found == []
