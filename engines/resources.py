"""Find the texts in the repository's resources/ folder, from a checkout or a PyInstaller bundle."""

from __future__ import annotations

import functools
import sys
from pathlib import Path


def resources_dir() -> Path:
    """resources/ next to the code: the bundle's unpack folder when frozen, else the repo root."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if bundle else Path(__file__).resolve().parent.parent
    return root / "resources"


@functools.cache
def read_prompt(name: str) -> str:
    """The prompt text ``resources/prompts/<name>``, without trailing blank lines.

    Raises ``FileNotFoundError`` when it is missing (a packaging mistake worth seeing).
    """
    if Path(name).name != name:
        raise ValueError(f"not a prompt name: {name!r}")
    return (resources_dir() / "prompts" / name).read_text(encoding="utf-8").rstrip()
