"""Work a window or a page starts and does not wait for.

The event loop keeps only a weak reference to a task, so one nobody holds may be collected
before it ends; and a failure nobody reads is lost. ``Background`` holds each task until it
ends and logs a failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Background:
    """Tasks started on the running loop and held until they end; a failure is logged at
    ERROR on ``log`` as ``failed`` ("a window task failed")."""

    def __init__(self, log: logging.Logger, failed: str) -> None:
        self._log = log
        self._failed = failed
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` as a task. Without a running loop: RuntimeError (``work`` is closed,
        so it does not warn that it was never awaited)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work.close()
            raise
        task = loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def cancel(self) -> list[asyncio.Task[Any]]:
        """Cancel the tasks that have not ended; those, to await if the caller wants to."""
        pending = [t for t in self._tasks if not t.done()]
        for task in pending:
            task.cancel()
        return pending

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error(self._failed, exc_info=task.exception())
