"""Pieces the Settings pages that import a JSON file share (Programs: Zed's agents; Tools: MCP
servers): a heading, the line that says how an action went, the file chooser, and reading the
chosen file with one sentence for each way it can fail."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QWidget

from ui.plain import PlainLabel

IMPORT_MAX_BYTES = 1024 * 1024  # such a file is a few KB; anything far larger is not one


def heading(text: str) -> QLabel:
    label = PlainLabel(text)
    label.setProperty("role", "heading")
    return label


def result_label() -> QLabel:
    """The line under a form that says how its action went (hidden until then)."""
    label = PlainLabel()
    label.setObjectName("TestResult")
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def pick_json_file(parent: QWidget, title: str, chosen: Callable[[str], None]) -> None:
    # open(), not exec(): a modal loop would stall the asyncio loop's tasks.
    dialog = QFileDialog(parent, title)
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    dialog.setNameFilter("JSON (*.json);;All files (*)")
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.fileSelected.connect(chosen)
    dialog.open()


def read_import(path: str, too_large: str) -> tuple[str | None, str]:
    """The text of the file at ``path``, or None and the sentence saying why not;
    ``too_large`` ends the sentence for a file far too big to be the one asked for."""
    file = Path(path)
    try:
        if file.stat().st_size > IMPORT_MAX_BYTES:
            return None, f"“{file.name}” is too large to be {too_large}"
        return file.read_text("utf-8-sig"), ""
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not text"
        return None, f"“{file.name}” could not be read ({why})."
