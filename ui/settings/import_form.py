"""Pieces the Settings pages that import a JSON file share (Programs: Zed's agents; Tools: MCP
servers): a heading, the line that says how an action went, the file chooser, and reading the
chosen file with one sentence for each way it can fail."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ui._widgets import form_card
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


@dataclass
class ImportCard:
    """The card of a page's import: a box to paste the JSON into, "Choose a file…", "Import",
    and the line saying how it went."""

    card: QWidget
    field: QPlainTextEdit
    file_button: QPushButton
    import_button: QPushButton
    result: QLabel


def import_card(object_name: str, placeholder: str, accessible_name: str) -> ImportCard:
    """The widgets of an import card; the page connects the buttons."""
    card, inner = form_card(QVBoxLayout)
    inner.setSpacing(8)
    field = QPlainTextEdit()
    field.setObjectName(object_name)
    field.setPlaceholderText(placeholder)
    field.setAccessibleName(accessible_name)
    field.setFixedHeight(96)
    inner.addWidget(field)
    import_button = QPushButton("Import")
    import_button.setProperty("variant", "secondary")
    file_button = QPushButton("Choose a file…")
    file_button.setProperty("variant", "ghost")
    result = result_label()
    row = QHBoxLayout()
    row.addWidget(result, 1)
    row.addWidget(file_button)
    row.addWidget(import_button)
    inner.addLayout(row)
    return ImportCard(card, field, file_button, import_button, result)
