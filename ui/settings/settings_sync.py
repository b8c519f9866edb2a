"""Keeping widgets and the settings file in step, on every page that shows a setting.

A switch saves the moment it is flipped; a failure shows beside it and puts it back, so the
page never shows a value the file does not hold. A change made elsewhere (the other page, the
file) moves the widget without saving it again.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QAbstractButton, QLabel

from app.settings import Settings, SettingsError, SettingsStore

# What "Remember things automatically" changes, said the same on both pages that show it. What
# waits whatever the switch says follows app/learning.py: anything the person did not type.
REMEMBER_HINT = (
    "When this is off, what Conch learns waits for your OK. Chats that read a file, a tool "
    "result, a web page or pasted text always ask first."
)


@contextlib.contextmanager
def signals_blocked(widget: QObject) -> Iterator[None]:
    old = widget.blockSignals(True)
    try:
        yield
    finally:
        widget.blockSignals(old)


def set_checked_quietly(button: QAbstractButton, on: bool) -> None:
    """Show ``on`` without emitting ``toggled`` (the value is already saved)."""
    if button.isChecked() != on:
        with signals_blocked(button):
            button.setChecked(on)


def save_remember(store: SettingsStore, switch: QAbstractButton, error: QLabel, on: bool) -> None:
    """Save "Remember things automatically"; a failure shows in ``error`` and undoes the flip."""
    if store.settings.remember_automatically == on:
        return
    try:
        store.update(remember_automatically=on)
    except SettingsError as exc:
        error.setText(str(exc))
        error.show()
        set_checked_quietly(switch, not on)
        return
    error.hide()


def listen_to_settings(
    store: SettingsStore, owner: QObject, method: Callable[..., None]
) -> Callable[[], None]:
    """Subscribe ``owner.method`` to settings changes without keeping ``owner`` alive."""
    ref = weakref.ref(owner)

    def listener(settings: Settings) -> None:
        target = ref()
        if target is None:
            return
        with contextlib.suppress(RuntimeError):  # the C++ side is already gone
            method(target, settings)

    stop = store.on_change(listener)
    return lambda *_args: stop()


__all__ = [
    "REMEMBER_HINT",
    "listen_to_settings",
    "save_remember",
    "set_checked_quietly",
    "signals_blocked",
]
