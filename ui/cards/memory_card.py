"""A learning run's card: what Conch learned from earlier in the chat, each with Undo.

Kept memories offer Undo; memories waiting for the person's OK (the chat read something
untrusted, or "Remember things automatically" is off) offer Keep and Discard. Each button acts
on the memory book at once and the card redraws from what the book now says.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ui.plain import PlainLabel

log = logging.getLogger("conch.ui.memory_card")


class MemoryActions(Protocol):
    """The part of ``app.memories.MemoryBook`` a card uses."""

    def keep(self, memory_id: int) -> None: ...
    def discard(self, memory_id: int) -> None: ...
    def undo(self, memory_id: int) -> None: ...
    def run(self, run_id: int) -> Any: ...


def _things(n: int) -> str:
    return "1 thing" if n == 1 else f"{n} things"


def card_title(run: Any) -> str:
    n = len(run.memories)
    if run.waiting:
        return f"Found {_things(n)} to remember from earlier in this chat — keep them?"
    return f"Learned {_things(n)} from earlier in this chat"


def tidied_words(runs: Sequence[Any]) -> str:
    """What "Tidy up memories now" came to, in one line for the status line."""
    learned = sum(len(run.memories) for run in runs)
    if not learned:
        return "Memories tidied up: nothing new to remember."
    chats = len({run.chat_id for run in runs})
    where = "1 chat" if chats == 1 else f"{chats} chats"
    waiting = sum(memory.status == "waiting" for run in runs for memory in run.memories)
    said = f"Memories tidied up: learned {_things(learned)} from {where}"
    if waiting:
        said += f"; {waiting} wait{'s' if waiting == 1 else ''} for your OK in Settings → Memories"
    return said + "."


_STATUS_WORDS = {"undone": "Undone", "discarded": "Discarded", "kept": "Kept"}


class MemoryCard(QFrame):
    """The card for one ``LearningRun``.

    Signals:
        changed(LearningRun): a memory's status changed (the run as the book now has it).
        size_changed(): the card's height may have changed.
    """

    changed = Signal(object)
    size_changed = Signal()

    def __init__(self, run: Any, book: MemoryActions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("MemoryCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.book = book
        # The chat hands over the run as it was when it was learned; the person may have
        # undone or kept a memory on an earlier card for it since (a fold, the next message
        # or Settings draws the chat again). The book is the truth: never offer Undo twice.
        self.run = self._fresh(run)
        self.title = PlainLabel(self)
        self.title.setObjectName("MemoryCardTitle")
        self.title.setWordWrap(True)
        self._rows = QVBoxLayout()
        self._rows.setContentsMargins(0, 0, 0, 0)
        self._rows.setSpacing(4)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(6)
        layout.addWidget(self.title)
        layout.addLayout(self._rows)
        self.buttons: dict[tuple[int, str], QPushButton] = {}
        self._fill()

    def _fresh(self, run: Any) -> Any:
        try:
            fresh = self.book.run(run.id)
        except Exception:  # the book closed or failed: draw what the chat has
            log.exception("could not read the learning run again")
            return run
        return fresh if fresh is not None else run

    # --- actions (also what tests press) ---------------------------------------------------

    def undo(self, memory_id: int) -> None:
        self._act(self.book.undo, memory_id)

    def keep(self, memory_id: int) -> None:
        self._act(self.book.keep, memory_id)

    def discard(self, memory_id: int) -> None:
        self._act(self.book.discard, memory_id)

    def _act(self, action: Any, memory_id: int) -> None:
        try:
            action(memory_id)
        except Exception:  # a memory deleted elsewhere: show the book's truth, lose nothing
            log.exception("memory action failed")
        fresh = self.book.run(self.run.id)
        if fresh is not None:
            self.run = fresh
        self._fill()
        self.changed.emit(self.run)
        self.size_changed.emit()

    # --- drawing ---------------------------------------------------------------------------

    def _fill(self) -> None:
        self.title.setText(card_title(self.run))
        self.title.setAccessibleName(card_title(self.run))
        while self._rows.count():
            item = self._rows.takeAt(0)
            if item is None:
                break
            inner = item.layout()
            if inner is not None:
                while inner.count():
                    taken = inner.takeAt(0)
                    child = taken.widget() if taken is not None else None
                    if child is not None:
                        child.deleteLater()
                inner.deleteLater()
            widget = item.widget()
            if widget is not None:
                widget.deleteLater()
        self.buttons.clear()
        for memory in self.run.memories:
            self._rows.addLayout(self._row(memory))
        self.updateGeometry()

    def _row(self, memory: Any) -> QHBoxLayout:
        line = QHBoxLayout()
        line.setContentsMargins(0, 0, 0, 0)
        text = PlainLabel(f"• {memory.text}", self)
        text.setObjectName("MemoryCardItem")
        text.setWordWrap(True)
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        line.addWidget(text, 1)
        status = memory.status
        if status == "kept":
            self._button(line, memory, "Undo", self.undo)
        elif status == "waiting":
            self._button(line, memory, "Keep", self.keep)
            self._button(line, memory, "Discard", self.discard)
        else:
            done = PlainLabel(_STATUS_WORDS.get(status, status), self)
            done.setEnabled(False)
            line.addWidget(done)
            if status == "undone":
                self._button(line, memory, "Redo", self.keep)
        return line

    def _button(self, line: QHBoxLayout, memory: Any, word: str, action: Any) -> None:
        button = QPushButton(word, self)
        button.setAccessibleName(f"{word}: {memory.text}")
        memory_id = int(memory.id)
        button.clicked.connect(lambda: action(memory_id))
        line.addWidget(button)
        self.buttons[(memory_id, word)] = button
