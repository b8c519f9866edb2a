"""Where the person writes: Enter sends, Shift+Enter breaks the line, Esc stops the answer.

Pastes are plain text only. A very long paste (a log, a whole file) is not put in the editor,
where laying out megabytes of text would freeze the window, but attached as "Pasted text", like
a text file. Attachments are pictures or text files; the conversation marks a chat that read
one as untrusted for learning, and so a message with text pasted (or dropped) into the box,
however short (``Submission.pasted``: only the box knows a paste happened).
``/compact [what to keep]`` is recognised while typing (a hint shows) and goes to the
conversation's fold instead of the model. On a program that lists its own slash commands
(``slash_source``), typing "/" shows them under the box: a click or Tab puts one in the box,
and it goes to the program as the message.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QFocusEvent, QImage, QKeyEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engines.base import Attachment, Picture
from engines.programs.slash import SlashCommand, matching
from engines.window import PICTURE_TOKENS, estimate_tokens
from ui._widgets import ElidedLabel
from ui.chat.context_meter import ContextMeter
from ui.icons import MUTED, ON_ACCENT, icon
from ui.plain import PlainLabel, shown_name
from ui.theme import set_style_property

PASTE_LIMIT = 100_000  # characters; a longer paste becomes an attachment
EDIT_MIN_HEIGHT = 56  # px: two lines and a little room
EDIT_MAX_HEIGHT = 200  # px: past this the box scrolls
MAX_TEXT_FILE = 8 * 1024 * 1024
MAX_PICTURE = 20 * 1024 * 1024
PICTURE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
COMPACT_HINT = "/compact [what to keep] — summarise the start of this chat now"
OTHER_COMMAND_HINT = "Only /compact is a command; anything else is sent as a message."
NOT_THE_PROGRAMS = "Not one of the program's commands; it is sent as a message."
COMMAND_ROWS = 6  # more of a program's commands scroll


@dataclass(frozen=True)
class Submission:
    """What the person sent: text (or a command), pictures and text attachments."""

    text: str
    pictures: tuple[Picture, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    compact_focus: str | None = None  # not None: this is ``/compact`` with this focus
    pasted: bool = False  # text was pasted or dropped into the box, not (only) typed

    @property
    def is_compact(self) -> bool:
        return self.compact_focus is not None


def parse_compact(text: str) -> str | None:
    """The focus of ``/compact [what to keep]``, or None when the text is not that command."""
    stripped = text.strip()
    head, _, rest = stripped.partition(" ")
    if "\n" in head:
        head, _, more = head.partition("\n")
        rest = (more + " " + rest).strip()
    if head.lower() != "/compact":
        return None
    return " ".join(rest.split())


def _unreadable(path: Path, exc: OSError) -> str:
    return f"{path.name} could not be read ({exc.strerror or type(exc).__name__})."


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n} bytes"


def picture_from_image(image: QImage, name: str = "pasted picture.png") -> Picture:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, b"PNG")
    buffer.close()
    return Picture(name=name, mime="image/png", data=base64.b64encode(bytes(data.data())).decode())


class ComposerEdit(QPlainTextEdit):
    """The text box.

    Signals:
        submit(): Enter without Shift.
        stop(): Esc.
        long_paste(str): a paste longer than ``PASTE_LIMIT`` (not inserted).
        picture_pasted(QImage): a picture on the clipboard.
        files_dropped(list): local files pasted or dropped (paths as str).
    """

    submit = Signal()
    stop = Signal()
    long_paste = Signal(str)
    picture_pasted = Signal(QImage)
    files_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ComposerInput")
        self.setAccessibleName("Message")
        self.setPlaceholderText("Message — Enter sends, Shift+Enter for a new line")
        self.setTabChangesFocus(True)
        self.setMinimumHeight(EDIT_MIN_HEIGHT)
        self.setMaximumHeight(EDIT_MAX_HEIGHT)
        self._lines = 1
        self.pasted = False  # text came in by a paste or a drop since the box was last empty
        self.document().contentsChanged.connect(self._grow)
        # The box has no border of its own: the composer's rounded frame shows the focus ring.
        self.setProperty("focus_ring_on", "Composer")
        # Tab completes a program's slash command when one is offered (else it moves on).
        self.complete: Callable[[], bool] | None = None

    def focusNextPrevChild(self, next: bool) -> bool:
        if next and self.complete is not None and self.complete():
            return True
        return super().focusNextPrevChild(next)

    def focusInEvent(self, event: QFocusEvent) -> None:
        self._ring(True)
        super().focusInEvent(event)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        self._ring(False)
        super().focusOutEvent(event)

    def _ring(self, on: bool) -> None:
        parent = self.parentWidget()
        while parent is not None and parent.objectName() != "Composer":
            parent = parent.parentWidget()
        if parent is not None:
            set_style_property(parent, "focused", on)

    def sizeHint(self) -> QSize:
        # As tall as the text, from EDIT_MIN_HEIGHT up to EDIT_MAX_HEIGHT. Not the scroll
        # area's default of 192 px: once a wrapping hint line shows above the box, the layout
        # asks for that and the composer stayed a quarter of the window tall.
        frame = self.height() - self.viewport().height() if self.isVisible() else 12
        text = self._lines * self.fontMetrics().lineSpacing() + 2 * self.document().documentMargin()
        wanted = int(text) + frame
        return QSize(super().sizeHint().width(), max(EDIT_MIN_HEIGHT, min(EDIT_MAX_HEIGHT, wanted)))

    def _grow(self) -> None:
        if self.document().isEmpty():
            self.pasted = False  # a new draft starts
        lines = max(1, int(self.document().size().height()))
        if lines != self._lines:
            self._lines = lines
            self.updateGeometry()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submit.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop.emit()
            return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return source.hasText() or source.hasImage() or source.hasUrls()

    def insertFromMimeData(self, source: QMimeData) -> None:
        # Plain text only: rich text from a web page must not bring its formatting (or size).
        if source.hasUrls():
            files = [u.toLocalFile() for u in source.urls() if u.isLocalFile()]
            if files:
                self.files_dropped.emit(files)
                return
        if source.hasImage() and not source.hasText():
            image = source.imageData()
            if isinstance(image, QImage) and not image.isNull():
                self.picture_pasted.emit(image)
            return
        if not source.hasText():
            return
        text = source.text()
        if len(text) > PASTE_LIMIT:
            self.long_paste.emit(text)
            return
        self.insertPlainText(text)
        self.pasted = self.pasted or bool(text.strip())


class AttachmentChip(QFrame):
    """One attachment above the box: what it is (the app's own icon), its name, and ✕."""

    def __init__(self, kind: str, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AttachmentChip")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.kind = kind  # "picture" or "file": the icon's name
        self.icon = PlainLabel(self)
        size = self.fontMetrics().height()
        self.icon.setPixmap(icon(kind, role=MUTED).pixmap(QSize(size, size)))
        self.label = ElidedLabel(shown_name(label), self)
        self.remove_button = QToolButton(self)
        self.remove_button.setIcon(icon("close", role=MUTED))
        self.remove_button.setAutoRaise(True)
        self.remove_button.setToolTip("Remove")
        self.remove_button.setAccessibleName(f"Remove attachment {label}")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.setSpacing(6)
        layout.addWidget(self.icon)
        layout.addWidget(self.label)
        layout.addWidget(self.remove_button)


class Composer(QWidget):
    """The text box with Send/Stop, Attach, attachment chips, the /compact hint and the meter.

    Signals:
        submitted(Submission): the person sent something (the box is already cleared; call
            ``restore`` if it could not be sent).
        stop_requested(): Stop or Esc while an answer streams.
    """

    submitted = Signal(object)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Composer")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self._busy = False
        self._pictures: list[Picture] = []
        self._attachments: list[Attachment] = []
        self.file_dialog_factory: Callable[[QWidget], QFileDialog] = self._default_dialog

        self.edit = ComposerEdit(self)
        self.edit.complete = self.complete_command
        # The program's own slash commands (the window sets where they come from).
        self.slash_source: Callable[[], Sequence[SlashCommand]] = lambda: ()
        self.commands = QListWidget(self)
        self.commands.setObjectName("ComposerCommands")
        self.commands.setAccessibleName("The program's commands")
        self.commands.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.commands.itemClicked.connect(self._command_clicked)
        self.commands.setVisible(False)
        self._command_hint = ""  # the hint the slash commands showed last

        self.hint = PlainLabel(self)
        self.hint.setObjectName("ComposerHint")
        self.hint.setWordWrap(True)
        self.hint.setVisible(False)

        self.chips = QWidget(self)
        self._chips_layout = QHBoxLayout(self.chips)
        self._chips_layout.setContentsMargins(0, 0, 0, 0)
        self._chips_layout.setSpacing(4)
        self._chips_layout.addStretch(1)
        self.chips.setVisible(False)
        self.chip_list: list[AttachmentChip] = []
        self._usage: tuple[int, int] | None = None
        self._window = 0

        self.attach_button = QToolButton(self)
        self.attach_button.setObjectName("AttachButton")
        self.attach_button.setIcon(icon("attach"))
        self.attach_button.setAccessibleName("Attach a picture or a text file")
        self.attach_button.setToolTip("Attach a picture or a text file")
        self.send_button = QPushButton(self)
        self.send_button.setObjectName("SendButton")
        self.send_button.setIcon(icon("send", role=ON_ACCENT))
        self.send_button.setAccessibleName("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton(self)
        self.stop_button.setObjectName("StopButton")
        self.stop_button.setIcon(icon("stop", role=ON_ACCENT))
        self.stop_button.setAccessibleName("Stop the answer")
        self.stop_button.setToolTip("Stop the answer, keeping what arrived (Esc)")
        self.stop_button.setVisible(False)
        for button in (self.send_button, self.stop_button):
            # Reachable with Tab, but a click leaves the focus in the box: the button is about
            # to hide, and typing should go on where it was.
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.meter = ContextMeter(self)
        self.meter_label = PlainLabel(self)
        self.meter_label.setObjectName("ContextMeterLabel")

        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.attach_button)
        buttons.addStretch(1)
        buttons.addWidget(self.meter_label)
        buttons.addWidget(self.meter)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.setSpacing(4)
        layout.addWidget(self.hint)
        layout.addWidget(self.commands)
        layout.addWidget(self.chips)
        layout.addWidget(self.edit)
        layout.addLayout(buttons)

        self.edit.submit.connect(self.submit)
        self.edit.stop.connect(self._stop)
        self.edit.long_paste.connect(self._long_paste)
        self.edit.picture_pasted.connect(self._picture_pasted)
        self.edit.files_dropped.connect(self._files)
        self.edit.textChanged.connect(self._update_hint)
        self.send_button.clicked.connect(self.submit)
        self.stop_button.clicked.connect(self._stop)
        self.attach_button.clicked.connect(self.choose_files)

    # --- state ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._busy

    def set_busy(self, busy: bool) -> None:
        """While an answer streams: Stop instead of Send; typing stays possible."""
        self._busy = busy
        # The button that hides may hold the focus (reached with Tab): give it to the box.
        leaving = self.send_button if busy else self.stop_button
        keep_typing = leaving.hasFocus()
        self.stop_button.setVisible(busy)
        self.send_button.setVisible(not busy)
        if keep_typing:
            self.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)
        self.edit.pasted = False
        self.edit.moveCursor(self.edit.textCursor().MoveOperation.End)

    def pictures(self) -> tuple[Picture, ...]:
        return tuple(self._pictures)

    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(self._attachments)

    def clear(self) -> None:
        """Empty the box, its attachments and any hint about them (a new draft starts)."""
        self.edit.clear()
        self._pictures.clear()
        self._attachments.clear()
        self._redraw_chips()
        self.show_hint("")

    def draft(self) -> Submission | None:
        """What the box holds and has not sent (for ``restore``), or None when it is empty."""
        if not (self.text() or self._pictures or self._attachments):
            return None
        return Submission(
            text=self.text(),
            pictures=tuple(self._pictures),
            attachments=tuple(self._attachments),
            pasted=self.edit.pasted,
        )

    def restore(self, submission: Submission) -> None:
        """Put back what could not be sent, or a draft."""
        if submission.is_compact:
            focus = submission.compact_focus or ""
            self.set_text(("/compact " + focus).strip())
        else:
            self.set_text(submission.text)
            self.edit.pasted = submission.pasted
        self._pictures = list(submission.pictures)
        self._attachments = list(submission.attachments)
        self._redraw_chips()

    def set_usage(self, usage: tuple[int, int] | None, window: int = 0) -> None:
        """The context meter's numbers (used, budget) for the chat so far, or None to hide it;
        ``window``: what the model reads (the tooltip explains the difference)."""
        self._usage = usage
        self._window = window
        self._show_usage()

    def draft_tokens(self) -> int:
        """About how much the attachments waiting in the box will add when sent."""
        files = sum(estimate_tokens(a.text) for a in self._attachments)
        return files + PICTURE_TOKENS * len(self._pictures)

    def _show_usage(self) -> None:
        usage = self._usage
        if usage is not None:
            usage = (usage[0] + self.draft_tokens(), usage[1])
        self.meter.set_usage(usage, self._window)
        self.meter_label.setText(self.meter.percent_text() if usage is not None else "")
        self.meter_label.setToolTip(self.meter.toolTip())

    def show_hint(self, text: str) -> None:
        self.hint.setText(text)
        self.hint.setVisible(bool(text))

    # --- sending --------------------------------------------------------------------------

    def submit(self) -> None:
        if self._busy:
            return  # Enter while an answer streams keeps the draft; Stop first
        text = self.text()
        focus = parse_compact(text)
        if focus is not None and any(c.name == "compact" for c in self.slash_source()):
            focus = None  # the program's own /compact: it goes to the program as typed
        if focus is not None:
            submission = Submission(text=text, compact_focus=focus)
        elif text.strip() or self._pictures or self._attachments:
            submission = Submission(
                text=text.strip(),
                pictures=tuple(self._pictures),
                attachments=tuple(self._attachments),
                pasted=self.edit.pasted,
            )
        else:
            return
        self.clear()
        self.submitted.emit(submission)

    def _stop(self) -> None:
        if self._busy:
            self.stop_requested.emit()

    # --- attachments ----------------------------------------------------------------------

    def choose_files(self) -> None:
        # open(), not exec(): a modal loop inside the asyncio loop breaks running tasks.
        dialog = self.file_dialog_factory(self)
        dialog.filesSelected.connect(self._files)
        dialog.open()

    def _default_dialog(self, parent: QWidget) -> QFileDialog:
        dialog = QFileDialog(parent, "Attach a picture or a text file")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.setNameFilters(
            [
                "Pictures and text files (*.png *.jpg *.jpeg *.gif *.webp *.txt *.md *.csv "
                "*.json *.log *.py *.js *.ts *.html *.xml *.yaml *.yml *.toml)",
                "All files (*)",
            ]
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        return dialog

    def _files(self, paths: list[str]) -> None:
        problems = [p for p in (self.add_file(Path(path)) for path in paths) if p]
        self.show_hint(" ".join(problems))

    def add_file(self, path: Path) -> str:
        """Attach a picture or a text file. Returns "" or a sentence saying why not."""
        try:
            size = path.stat().st_size
        except OSError as exc:
            return _unreadable(path, exc)
        mime = PICTURE_TYPES.get(path.suffix.lower())
        kind, limit = ("text files", MAX_TEXT_FILE) if mime is None else ("pictures", MAX_PICTURE)
        if size > limit:
            return f"{path.name} is {_size(size)}; {kind} up to {_size(limit)} work."
        try:
            raw = path.read_bytes()
        except OSError as exc:
            return _unreadable(path, exc)
        if mime is not None:
            self._pictures.append(
                Picture(name=path.name, mime=mime, data=base64.b64encode(raw).decode())
            )
            self._redraw_chips()
            return ""
        guessed = mimetypes.guess_type(path.name)[0] or ""
        if b"\x00" in raw[:8192] or guessed.startswith(("image/", "audio/", "video/")):
            return f"{path.name} is not a picture or a text file Conch can read."
        text = raw.decode("utf-8", errors="replace")
        self._attachments.append(Attachment(name=path.name, text=text))
        self._redraw_chips()
        return ""

    def add_text(self, name: str, text: str) -> None:
        self._attachments.append(Attachment(name=name, text=text))
        self._redraw_chips()

    def add_picture(self, picture: Picture) -> None:
        self._pictures.append(picture)
        self._redraw_chips()

    def remove_attachment(self, index: int) -> None:
        """Remove chip ``index`` (pictures first, then text attachments)."""
        if index < len(self._pictures):
            del self._pictures[index]
        else:
            i = index - len(self._pictures)
            if 0 <= i < len(self._attachments):
                del self._attachments[i]
        self._redraw_chips()
        if not self._is_command_hint():
            self.show_hint("")  # it spoke of what was attached (or could not be)

    def _long_paste(self, text: str) -> None:
        self.add_text("Pasted text", text)
        self.show_hint(
            f"The pasted text ({_size(len(text.encode('utf-8', errors='replace')))}) is attached "
            "as a file, so the box stays quick."
        )

    def _picture_pasted(self, image: QImage) -> None:
        self.add_picture(picture_from_image(image))

    def _redraw_chips(self) -> None:
        for chip in self.chip_list:
            self._chips_layout.removeWidget(chip)
            chip.deleteLater()
        self.chip_list = []
        shown = [("picture", p.name) for p in self._pictures]
        shown += [
            ("file", f"{a.name} ({_size(len(a.text.encode('utf-8', 'replace')))})")
            for a in self._attachments
        ]
        for i, (kind, label) in enumerate(shown):
            chip = AttachmentChip(kind, label, self.chips)
            chip.remove_button.clicked.connect(
                lambda _checked=False, n=i: self.remove_attachment(n)
            )
            self._chips_layout.insertWidget(self._chips_layout.count() - 1, chip)
            self.chip_list.append(chip)
        self.chips.setVisible(bool(shown))
        self._show_usage()  # what is attached counts before it is sent

    # --- the /compact hint ----------------------------------------------------------------

    def _is_command_hint(self) -> bool:
        shown = self.hint.text()
        return bool(shown) and (
            shown == self._command_hint or shown in (COMPACT_HINT, OTHER_COMMAND_HINT)
        )

    def _update_hint(self) -> None:
        # Only the first line matters; never copy a huge document on every keystroke.
        first = self.edit.document().firstBlock().text()[:200]
        if not first.startswith("/"):
            self._show_commands([])
            if self._is_command_hint():
                self.show_hint("")
            return
        word = first.split(" ", 1)[0].lower()
        own = tuple(self.slash_source())
        typing_word = " " not in first
        found = matching(own, word)
        self._show_commands(found if typing_word else [])
        exact = next((c for c in own if c.text.lower() == word), None)
        if exact is not None:
            hint = f"{exact.text} [{exact.hint}]" if exact.hint else exact.text
            self.show_hint(f"{hint} — {exact.description}" if exact.description else hint)
        elif "/compact".startswith(word) or word == "/compact":
            self.show_hint(COMPACT_HINT)
        elif found:
            self.show_hint("")
        else:
            self.show_hint(NOT_THE_PROGRAMS if own else OTHER_COMMAND_HINT)
        self._command_hint = self.hint.text()

    def _show_commands(self, found: list[SlashCommand]) -> None:
        self.commands.clear()
        for command in found:
            words = f"{command.text} — {command.description}" if command.description else ""
            item = QListWidgetItem(words or command.text)
            item.setData(Qt.ItemDataRole.UserRole, command.text)
            self.commands.addItem(item)
        if found:
            rows = min(len(found), COMMAND_ROWS)
            self.commands.setFixedHeight(rows * self.commands.sizeHintForRow(0) + 4)
        self.commands.setVisible(bool(found))

    def _command_clicked(self, item: QListWidgetItem) -> None:
        self.set_text(f"{item.data(Qt.ItemDataRole.UserRole)} ")
        self.edit.setFocus()

    def complete_command(self) -> bool:
        """Put the first offered command in the box (Tab); False when none is offered."""
        if not self.commands.isVisible() or self.commands.count() == 0:
            return False
        self._command_clicked(self.commands.item(0))
        return True
