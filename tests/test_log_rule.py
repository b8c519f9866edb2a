"""The suite's rule (tests/conftest.py): a WARNING or ERROR from any logger fails the test
unless the test says it provokes it. Proven on a tiny test file run by a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.waits import HANG_SECONDS

ROOT = Path(__file__).resolve().parent.parent

TESTS = """
import logging

import pytest


def test_a_warning_nobody_expects():
    logging.getLogger("conch.bridge").warning("a turn's answer could not be saved")


def test_a_library_warning_nobody_expects():
    logging.getLogger("httpx").warning("connection pool is full")


def test_an_error_nobody_expects():
    logging.getLogger("asyncio").error("Task was destroyed but it is pending!")


@pytest.mark.allow_log("conch.bridge")
def test_a_warning_it_expects():
    logging.getLogger("conch.bridge").warning("a turn's answer could not be saved")


@pytest.mark.allow_log("conch.bridge")
def test_a_warning_from_another_logger_than_it_expects():
    logging.getLogger("conch.tool_calls").warning("a tool call could not be saved")


@pytest.mark.allow_log("conch")
def test_an_error_above_the_level_it_expects():
    logging.getLogger("conch.bridge").error("a turn failed")


@pytest.mark.allow_log("conch", "mcp", level="ERROR")
def test_errors_it_expects():
    logging.getLogger("conch.bridge").error("a turn failed")
    logging.getLogger("mcp.client").warning("unknown notification")


@pytest.mark.allow_error_log
def test_a_conch_error_it_expects_the_old_way():
    logging.getLogger("conch.store").error("the chat log is damaged")


def test_info_is_fine():
    logging.getLogger("conch.bridge").info("a turn began")
    logging.getLogger("httpx").info("HTTP Request: GET / 200")
"""


def test_a_log_the_test_does_not_expect_fails_it(tmp_path: Path) -> None:
    (tmp_path / "test_tiny.py").write_text(TESTS, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",  # the suite's rule, on a file outside the suite
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-q",
            "-rA",
            "test_tiny.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    out = run.stdout
    failed = {
        line.split("::")[1].split()[0]
        for line in out.splitlines()
        if line.startswith("ERROR test_tiny.py::") or line.startswith("FAILED test_tiny.py::")
    }
    assert failed == {
        "test_a_warning_nobody_expects",
        "test_a_library_warning_nobody_expects",
        "test_an_error_nobody_expects",
        "test_a_warning_from_another_logger_than_it_expects",
        "test_an_error_above_the_level_it_expects",
    }, out
    assert "5 errors" in out and "9 passed" in out, out
    assert "conch.tool_calls WARNING: a tool call could not be saved" in out
