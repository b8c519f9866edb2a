"""Guards against Qt binding bugs that would crash a long session."""

from __future__ import annotations

import sys

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
