"""Reading fields out of the JSON that model servers send, where any field may be missing."""

from __future__ import annotations

from typing import Any


def dig(entry: Any, path: str) -> Any:
    """The value at a dotted path (``"meta.n_ctx"``), or None where any step is missing."""
    for part in path.split("."):
        if not isinstance(entry, dict):
            return None
        entry = entry.get(part)
    return entry


def positive_int(value: Any) -> int | None:
    """A count above zero however it was written (int, float, digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value > 0:
        return int(value)
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None
