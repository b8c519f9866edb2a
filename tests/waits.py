"""How long a test waits for an event before it calls the wait a hang.

Tests wait for events (a line on a pipe, a request a fake received, a Qt signal), never for a
stretch of time. The numbers here are only hang guards: far more than a loaded machine needs,
so a test that passes never reaches them, however busy the machine is.
"""

from __future__ import annotations

HANG_SECONDS = 60.0
HANG_MS = int(HANG_SECONDS * 1000)  # for pytest-qt, which counts in milliseconds
