"""Callbacks that hear about a change: settings saved, a model list, a server's state.

Every store that tells others about its changes keeps them the same way: a listener is added
and gets back a function that stops it, and one listener's bug never stops the others nor the
change itself (it is logged).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

P = ParamSpec("P")

log = logging.getLogger("conch.listeners")


class Listeners(Generic[P]):
    """The listeners of one kind of change; ``what`` names them in the log."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.callbacks: list[Callable[P, None]] = []

    def add(self, listener: Callable[P, None]) -> Callable[[], None]:
        """Call ``listener`` on every change; returns a function that stops it (twice is fine)."""
        self.callbacks.append(listener)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self.callbacks.remove(listener)

        return stop

    def tell(self, *args: P.args, **kwargs: P.kwargs) -> None:
        # A copy: a listener may stop itself (or add another) while it is told.
        for listener in list(self.callbacks):
            try:
                listener(*args, **kwargs)
            except Exception:  # a listener's bug must not stop the others or the change
                log.exception("%s failed", self.what)
