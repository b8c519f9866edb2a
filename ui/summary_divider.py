"""The one quiet line where the model's word-for-word memory starts, opening to the summary.

Only the latest fold shows one (the chat view asks the store for ``latest_compaction``); every
message stays in the scrollback above it. The summary is selectable and copyable: what the
model knows about the start of the chat is never hidden. Under a summary that keeps facts word
for word, a line says what that list is, its cap, and what the cap left out this time.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.store import Compaction
from engines.context.facts import FACTS_SHARE, LEFT_OUT, kept_parts
from ui._widgets import LineButton, outside_text
from ui.message_delegate import copy_to_clipboard
from ui.plain import PlainLabel, button_words, shown_name

NO_SUMMARY = (
    "No summary could be written this time; the model no longer reads these messages word for word."
)
# The answer did not wait for the summary of the messages above: it is written after the turn.
WRITING = "Summary being written…"
WRITING_NOTE = "Until the summary is done, the model reads this instead:"


def facts_caption(summary: str) -> str:
    """What the "Kept word for word" list under ``summary`` is, and what its cap left out, in
    words ("" when the summary keeps no list)."""
    _body, items, note = kept_parts(summary)
    if not items and not note:
        return ""
    share = f"{round(FACTS_SHARE * 100)}%"
    n = len(items)
    text = (
        f"{n} fact{'' if n == 1 else 's'} kept word for word: the names, numbers, files, links "
        "and decisions of your own messages first, numbers from pasted text and tool results "
        f"last, in at most {share} of what the model reads at once."
    )
    left = note.removeprefix(LEFT_OUT).strip().removesuffix(".)").removesuffix(")").strip()
    if left:
        text += f" Left out to stay within that: {left}."
    return text


class SummaryDivider(QFrame):
    """ "Earlier messages are summarised for <model>"; click, Enter or Space shows the summary.

    Signals:
        toggled(bool): opened (True) or closed.
        size_changed(): its height changed (the chat view re-lays the row out).
    """

    toggled = Signal(bool)
    size_changed = Signal()

    def __init__(
        self, compaction: Compaction, parent: QWidget | None = None, *, writing: bool = False
    ) -> None:
        super().__init__(parent)
        self.setObjectName("SummaryDivider")
        self.compaction = compaction
        self.writing = writing  # the summary is still being written (after its turn)
        title = f"Earlier messages are summarised for {shown_name(compaction.model)}"

        self.button = LineButton(self)
        self.button.setObjectName("SummaryDividerButton")
        self.button.setCheckable(True)
        self.button.setAutoRaise(True)
        self.button.setText(button_words(f"▸ {title}"))
        self.button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.button.setAccessibleName(title)
        self.button.setAccessibleDescription("Shows the summary the model reads instead")
        self.button.setToolTip("Show what the model remembers of the messages above")
        self.button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

        left, right = QFrame(self), QFrame(self)
        for line in (left, right):
            line.setObjectName("SummaryDividerLine")
            line.setFrameShape(QFrame.Shape.HLine)
            line.setFrameShadow(QFrame.Shadow.Plain)
            line.setEnabled(False)
            line.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # Beside the line while the summary is written: the chat view draws the divider
        # again, without it, when the summary is done.
        self.writing_label = PlainLabel(WRITING, self)
        self.writing_label.setObjectName("SummaryWriting")
        self.writing_label.setEnabled(False)  # the quieter colour of a hint
        self.writing_label.setAccessibleName(WRITING)
        self.writing_label.setVisible(writing)
        if writing:
            self.button.setAccessibleDescription(
                f"{WRITING} Shows what the model reads instead until then"
            )
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(left, 1)
        top.addWidget(self.button, 0)
        top.addWidget(self.writing_label, 0)
        top.addWidget(right, 1)

        shown = compaction.summary.strip() or NO_SUMMARY
        if writing:
            shown = f"{WRITING_NOTE}\n\n{compaction.summary.strip()}".strip()
        self.summary = outside_text(shown, "SummaryText", self)
        self.summary.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.summary.setAccessibleName("Summary of the earlier messages")
        self.summary.setVisible(False)

        self.facts = PlainLabel(facts_caption(compaction.summary), self)
        self.facts.setObjectName("SummaryFactsNote")
        self.facts.setWordWrap(True)
        self.facts.setEnabled(False)  # the quieter colour of a hint
        self.facts.setVisible(False)

        self.copy_button = QPushButton("Copy summary", self)
        self.copy_button.setAccessibleName("Copy the summary")
        self.copy_button.setVisible(False)
        self.copy_button.clicked.connect(self._copy)
        copy_row = QHBoxLayout()
        copy_row.setContentsMargins(0, 0, 0, 0)
        copy_row.addStretch(1)
        copy_row.addWidget(self.copy_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 2, 14, 2)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.summary)
        layout.addWidget(self.facts)
        layout.addLayout(copy_row)

        self.button.toggled.connect(self._set_open)

    # --- never shorter than its words --------------------------------------------------------
    #
    # The chat view gives a row's widget the row's height less the list item's padding, which
    # is less than the widget asked for: the line's descenders were cut ("messaqes"). The
    # widget's minimum height is what its words need at its width, so it is given that.

    def needed_height(self) -> int:
        width = self.width()
        if self.hasHeightForWidth() and width > 0:
            wanted = self.heightForWidth(width)
            if wanted > 0:
                return wanted
        return self.sizeHint().height()

    def _keep_whole(self) -> None:
        needed = self.needed_height()
        if self.minimumHeight() != needed:
            self.setMinimumHeight(needed)

    def event(self, event: QEvent) -> bool:
        done = super().event(event)
        if event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.StyleChange, QEvent.Type.Polish):
            self._keep_whole()
        return done

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._keep_whole()

    @property
    def title(self) -> str:
        return f"Earlier messages are summarised for {shown_name(self.compaction.model)}"

    def is_open(self) -> bool:
        return self.summary.isVisible() or self.button.isChecked()

    def set_open(self, open_: bool) -> None:
        self.button.setChecked(open_)

    def _set_open(self, open_: bool) -> None:
        self.button.setText(button_words(("▾ " if open_ else "▸ ") + self.title))
        self.summary.setVisible(open_)
        self.facts.setVisible(open_ and bool(self.facts.text()))
        self.copy_button.setVisible(open_)
        self.updateGeometry()
        self.toggled.emit(open_)
        self.size_changed.emit()

    def _copy(self) -> None:
        copy_to_clipboard(self.compaction.summary)
