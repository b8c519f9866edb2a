"""The log file and the errors nobody caught (app/logs.py): every one reaches ``conch.log``
with its traceback, and the person sees one sentence in Health, never the traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.health import HealthLog
from app.logs import LOG_NAME, configure_logging, report_unhandled


@pytest.fixture
def logged(data_dir: Path) -> Iterator[Path]:
    """The data dir's log file, set up as the window sets it up, taken away after."""
    undo = configure_logging(data_dir, console=False)
    try:
        yield data_dir / "logs" / LOG_NAME
    finally:
        undo()


@pytest.fixture
def health(data_dir: Path) -> Iterator[HealthLog]:
    notes = HealthLog.in_dir(data_dir)
    yield notes
    notes.close()


def _flushed(path: Path) -> str:
    for handler in logging.getLogger().handlers:
        handler.flush()
    return path.read_text(encoding="utf-8")


def _one_sentence_without_traceback(health: HealthLog) -> str:
    (note,) = health.notes(topic="error")
    assert "Traceback" not in note.text and "\n" not in note.text
    assert note.text.count(". ") == 0 and note.text.endswith(".")
    assert LOG_NAME in note.text
    return note.text


@pytest.mark.allow_log("httpx", "mcp")
def test_library_warnings_reach_the_log_file_and_their_chatter_does_not(logged: Path) -> None:
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/ 200 OK")
    logging.getLogger("mcp").warning("server sent an unknown notification")
    logging.getLogger("conch.catalogue").info("listed 3 models")
    text = _flushed(logged)
    assert "WARNING mcp: server sent an unknown notification" in text
    assert "INFO conch.catalogue: listed 3 models" in text
    assert "HTTP Request" not in text


def test_setting_up_again_moves_the_log_to_the_new_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    configure_logging(first, console=False)
    undo = configure_logging(second, console=False)
    try:
        logging.getLogger("conch.test").info("where does this go")
        assert "where does this go" in _flushed(second / "logs" / LOG_NAME)
        assert "where does this go" not in (first / "logs" / LOG_NAME).read_text()
    finally:
        undo()
    assert not [h for h in logging.getLogger().handlers if getattr(h, "_conch", False)]


async def _fails() -> None:
    await asyncio.sleep(0)
    raise KeyError("the garden's larch")


@pytest.mark.allow_log("conch.unhandled", level="ERROR")
async def test_a_background_task_that_fails_reaches_the_log_and_health(
    logged: Path, health: HealthLog
) -> None:
    loop = asyncio.get_running_loop()
    undo = report_unhandled(health, loop)
    try:
        task = loop.create_task(_fails(), name="nobody-awaits-me")
        await asyncio.wait([task])
        del task
        gc.collect()  # asyncio says "never retrieved" when the task is collected
    finally:
        undo()
    text = _flushed(logged)
    assert "Task exception was never retrieved (task nobody-awaits-me)" in text
    assert "Traceback" in text and 'KeyError: "the garden\'s larch"' in text
    said = _one_sentence_without_traceback(health)
    assert "KeyError in tests/app/test_logs.py" in said
    assert "larch" not in said  # what the error said may be the person's words: log only
    assert loop.get_exception_handler() is None  # put back


@pytest.mark.allow_log("conch.unhandled", level="ERROR")
def test_a_thread_that_fails_reaches_the_log_and_health_once(
    logged: Path, health: HealthLog
) -> None:
    def fail() -> None:
        raise ValueError("no window")

    before = threading.excepthook
    undo = report_unhandled(health)
    try:
        for _ in range(3):  # the same failure again and again is noted once, logged each time
            thread = threading.Thread(target=fail, name="reader")
            thread.start()
            thread.join()
    finally:
        undo()
    assert _flushed(logged).count("uncaught, in the thread reader") == 3
    assert "ValueError in tests/app/test_logs.py" in _one_sentence_without_traceback(health)
    assert threading.excepthook is before


@pytest.mark.allow_log("conch.unhandled", level="ERROR")
def test_an_uncaught_exception_reaches_the_log_and_health(logged: Path, health: HealthLog) -> None:
    before = sys.excepthook
    undo = report_unhandled(health)
    try:
        try:
            raise OSError("disk gone")
        except OSError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        undo()
    assert sys.excepthook is before
    assert "OSError: disk gone" in _flushed(logged)
    _one_sentence_without_traceback(health)


@pytest.mark.allow_log("conch.test")
def test_a_key_in_an_error_is_left_out_of_the_log(logged: Path) -> None:
    key = "sk-proj-" + "A1b2C3d4" * 5
    try:
        raise PermissionError(f"the server refused Authorization: Bearer {key}")
    except PermissionError:
        logging.getLogger("conch.test").warning("sending failed", exc_info=True)
    text = _flushed(logged)
    assert "PermissionError: the server refused" in text
    assert key not in text
