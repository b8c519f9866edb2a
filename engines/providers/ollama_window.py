"""The window Conch asks Ollama for, per model, and which request fields a server understands.

Ollama reloads a model whenever a request's ``num_ctx`` differs from the one it is loaded with
(seconds of delay and an empty cache), so the decision is made once per model and reused for
every request for the life of the adapter. See docs/local_servers.md A4, A7.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from engines.window import UNKNOWN_WINDOW_LOCAL

GIB = 1024**3

# A "16 GB" computer reports a little less than 16 GiB (firmware and the kernel keep some), so
# the line is drawn a bit lower: those machines should still get the larger window.
LARGE_MEMORY = 15 * GIB
WINDOW_LARGE_MEMORY = 32_768
WINDOW_SMALL_MEMORY = 16_384

NO_TRUNCATE_SINCE = (0, 12, 6)  # `truncate` and `shift` request fields


def total_memory() -> int | None:
    """Bytes of physical memory on this computer, or None when it cannot be read."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
        if pages > 0 and size > 0:
            return int(pages) * int(size)
    except (AttributeError, ValueError, OSError):
        pass
    meminfo = _meminfo_total(Path("/proc/meminfo"))
    if meminfo is not None:
        return meminfo
    if sys.platform == "win32":
        return _windows_total_memory()
    return None


def _meminfo_total(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _windows_total_memory() -> int | None:
    import ctypes

    class _MemoryStatus(ctypes.Structure):
        _fields_ = [
            ("length", ctypes.c_ulong),
            ("load", ctypes.c_ulong),
            ("total_phys", ctypes.c_ulonglong),
            ("avail_phys", ctypes.c_ulonglong),
            ("total_page", ctypes.c_ulonglong),
            ("avail_page", ctypes.c_ulonglong),
            ("total_virtual", ctypes.c_ulonglong),
            ("avail_virtual", ctypes.c_ulonglong),
            ("avail_ext", ctypes.c_ulonglong),
        ]

    status = _MemoryStatus()
    status.length = ctypes.sizeof(_MemoryStatus)
    windll = getattr(ctypes, "windll", None)
    if windll is None or not windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        return None
    return int(status.total_phys)


def window_cap(memory: int | None) -> int:
    """The most Conch asks for on a computer with this much memory (unknown counts as small)."""
    if memory is not None and memory >= LARGE_MEMORY:
        return WINDOW_LARGE_MEMORY
    return WINDOW_SMALL_MEMORY


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.12.6"`` → (0, 12, 6); a pre-release ("0.12.6-rc1") counts as its release."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def supports_no_truncate(version: str | None) -> bool:
    """Whether the server honours ``truncate: false`` and ``shift: false`` (v0.12.6+).

    A development build reports 0.0.0 and an unreadable version counts as old: sending the
    fields to an old server is harmless but promises a refusal it will not give.
    """
    parsed = parse_version(version)
    return parsed is not None and parsed >= NO_TRUNCATE_SINCE


def model_key(name: str) -> str:
    """Ollama's name for a model: ``llama3.2`` and ``llama3.2:latest`` are the same model."""
    name = name.strip()
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


class WindowProbe(Protocol):
    """What the decision needs to know from the server (the adapter answers over HTTP)."""

    async def loaded_windows(self) -> dict[str, int]:
        """Model key → the context length it is loaded with (``/api/ps``)."""
        ...

    async def trained_window(self, model: str) -> int | None:
        """The model's trained context length (``/api/show``), None when the server omits it."""
        ...


class ContextFor:
    """Decides, once per model, the ``num_ctx`` to send, and then always gives the same answer.

    The window is the one the model is already loaded with (so asking for it never reloads
    it); otherwise the trained window, capped by the computer's memory. A failed probe raises
    and decides nothing, so the next call asks again.
    """

    def __init__(
        self, probe: WindowProbe, *, memory: int | Callable[[], int | None] | None = total_memory
    ) -> None:
        self._probe = probe
        self._memory = memory
        self._decided: dict[str, int] = {}
        self._lock = asyncio.Lock()

    @property
    def cap(self) -> int:
        memory = self._memory() if callable(self._memory) else self._memory
        return window_cap(memory)

    def known(self, model: str) -> int | None:
        """The decision already made for this model, if any."""
        return self._decided.get(model_key(model))

    def decide(self, model: str, *, loaded: int | None, trained: int | None) -> int:
        """Make (or repeat) the decision from facts the caller already has."""
        key = model_key(model)
        if key in self._decided:
            return self._decided[key]
        if loaded is not None and loaded > 0:
            window = loaded
        else:
            # No trained length known (a very old server, or a model without it).
            window = min(trained, self.cap) if trained and trained > 0 else UNKNOWN_WINDOW_LOCAL
        self._decided[key] = window
        return window

    def choose(self, model: str, window: int) -> None:
        """The person asked for ``model`` to be reloaded with ``window``: from now on that is
        the one decision for it (``known``, ``decide`` and ``context_for`` all give it)."""
        if window > 0:
            self._decided[model_key(model)] = window

    async def context_for(self, model: str, *, loaded: dict[str, int] | None = None) -> int:
        """The ``num_ctx`` for ``model``; ``loaded`` is a fresh ``/api/ps`` the caller has."""
        key = model_key(model)
        if key in self._decided:
            return self._decided[key]
        async with self._lock:
            if key in self._decided:
                return self._decided[key]
            windows = loaded if loaded is not None else await self._probe.loaded_windows()
            if windows.get(key):
                return self.decide(key, loaded=windows[key], trained=None)
            trained = await self._probe.trained_window(key)
            return self.decide(key, loaded=None, trained=trained)
