"""The divider where a program's memory of a chat starts, after it was handed the chat.

A program that keeps no chat of Conch's (an ACP program every turn; Claude Code and Codex when
a chat moves to them) is handed the newest part of the chat, and the chat's summary when older
messages were left out. The line sits above the first message it was handed word for word and
opens to that summary, like the summary line does. It is not saved: the next handoff, or a
fold the program makes, takes its place.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.store import Compaction
from engines.base import HandedOff
from ui.cards.summary_divider import SummaryDivider
from ui.plain import button_words, plain_tip


def nothing_before(program: str) -> str:
    return f"No summary went with it: {program} reads the chat word for word from here on."


class HandoffDivider(SummaryDivider):
    """ "<program> starts from here, with a handoff of …"; opens to the summary it was handed."""

    def __init__(self, handoff: HandedOff, parent: QWidget | None = None) -> None:
        self.handoff = handoff
        # The summary line's widget, shown with the handoff's own words.
        shown = Compaction(
            chat_id="",
            first_kept_seq=handoff.first_seq,
            summary=handoff.summary,
            model=handoff.program,
            created=0.0,
        )
        super().__init__(shown, parent)
        self.setObjectName("HandoffDivider")
        self.button.setText(button_words(f"▸ {self.title}"))
        self.button.setAccessibleName(self.title)
        self.button.setAccessibleDescription(f"Shows what {handoff.program} was handed")
        self.button.setToolTip(
            plain_tip(f"Show the summary {handoff.program} was handed with the chat")
        )
        self.summary.setText(handoff.summary.strip() or nothing_before(handoff.program))

    @property
    def title(self) -> str:
        return self.handoff.text

    def _set_open(self, open_: bool) -> None:
        super()._set_open(open_)
        self.copy_button.setVisible(open_ and bool(self.handoff.summary.strip()))
