"""Where Conch's Qt assets (stylesheets, icons) live, in a source checkout and in a frozen build.

A source or editable install finds ``resources/`` next to the ``ui`` package; a PyInstaller
build unpacks the same folder under ``sys._MEIPASS`` (see packaging/conch.spec).
"""

from __future__ import annotations

import sys
from pathlib import Path


def resources_root() -> Path:
    """The folder holding ``styles/`` and ``icons/``."""
    frozen_base = getattr(sys, "_MEIPASS", None)
    if frozen_base:
        return Path(frozen_base) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource_path(*parts: str) -> Path:
    """The path of one asset, for example ``resource_path("styles", "dark.qss")``."""
    return resources_root().joinpath(*parts)


def read_text(*parts: str) -> str:
    """An asset's text; an empty string when the file is missing so the app still starts."""
    try:
        return resource_path(*parts).read_text(encoding="utf-8")
    except OSError:
        return ""
