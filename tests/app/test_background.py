"""Work a window starts and does not wait for: it runs to the end, a failure is logged, and
closing the window stops what still runs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.background import Background

log = logging.getLogger("conch.test.background")


async def test_started_work_runs_and_its_result_is_kept() -> None:
    tasks = Background(log, "work failed")
    task = tasks.start(asyncio.sleep(0, result="done"))
    assert await task == "done"
    assert tasks.cancel() == []  # nothing left running


@pytest.mark.allow_error_log
async def test_a_failure_is_logged_with_what_failed(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise OSError("the disk is full")

    tasks = Background(log, "importing a chat failed")
    task = tasks.start(broken())
    with pytest.raises(OSError):
        await task
    await asyncio.sleep(0)  # the done callback runs on the loop's next step
    (record,) = [r for r in caplog.records if r.name == log.name]
    assert record.levelno == logging.ERROR and record.getMessage() == "importing a chat failed"
    assert record.exc_info is not None and "the disk is full" in str(record.exc_info[1])


async def test_cancel_stops_what_still_runs() -> None:
    tasks = Background(log, "work failed")
    forever = tasks.start(asyncio.Event().wait())
    pending = tasks.cancel()
    assert pending == [forever]
    await asyncio.gather(*pending, return_exceptions=True)
    assert forever.cancelled()


def test_without_a_running_loop_nothing_starts_and_nothing_warns() -> None:
    async def work() -> None:
        return None

    # The suite makes warnings errors: "coroutine 'work' was never awaited" would fail it.
    with pytest.raises(RuntimeError):
        Background(log, "work failed").start(work())
