"""Guards against Qt binding bugs that would crash a long session."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator

from PySide6.QtCore import QObject, QSocketNotifier, Slot
from pytestqt.qtbot import QtBot


class _Receiver(QObject):
    @Slot()
    def on(self) -> None:
        return


def test_disconnecting_signals_does_not_leak_references_to_true(qtbot: QtBot) -> None:
    # qasync disconnects a socket notifier for every closed connection. PySide6 6.12.0 lost a
    # reference to True on each, and Python 3.11 aborts when the count runs out mid-session.
    receiver = _Receiver()
    notifier = QSocketNotifier(0, QSocketNotifier.Type.Read)
    before = sys.getrefcount(True)
    for _ in range(200):
        notifier.activated.connect(receiver.on)
        notifier.activated.disconnect()
    assert sys.getrefcount(True) >= before - 5


async def _needs_the_loop_to_close(closed: list[str]) -> AsyncIterator[int]:
    try:
        yield 1
        yield 2
    finally:
        await asyncio.sleep(0)  # like httpx's body iterators, which take a lock to close
        closed.append("closed")


def test_an_abandoned_async_generator_is_closed_on_the_loop(
    qloop: asyncio.AbstractEventLoop, qtbot: QtBot
) -> None:
    # qasync does not finalise async generators itself; ui/start.py installs the hooks.
    closed: list[str] = []

    async def use_once() -> None:
        stream = _needs_the_loop_to_close(closed)
        await anext(stream)

    task = qloop.create_task(use_once())
    qtbot.waitUntil(task.done)
    gc.collect()
    qtbot.waitUntil(lambda: closed == ["closed"], timeout=3000)
