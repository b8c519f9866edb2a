"""How full the model's memory is: a thin bar by the composer with a tooltip in words.

The numbers come from ``Conversation.context_usage()`` (estimated tokens the next request
sends, and the budget the engine fits the chat into). Past the budget the engine summarises the
start of the chat; the tooltip says so before it happens. The stylesheet colours the bar by
its ``level`` property: "ok", "high" (a summary is near) or "full".
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QProgressBar, QSizePolicy, QWidget

from ui.chat.model_picker import window_label
from ui.theme import set_style_property

SOON = 0.8  # from this share of the budget on, the tooltip warns that a summary is near
STEPS = 1000


def _about(n: int) -> str:
    """Round to what an estimate deserves: 5,123 → "5,100"."""
    if n >= 1000:
        n = round(n, -2)
    return f"{n:,}"


def describe(used: int, budget: int, window: int = 0) -> str:
    """The tooltip: "About 5,100 of 6,100 tokens; earlier messages will be summarised soon".

    With the model's ``window`` it also says why the budget is smaller than the window the
    picker shows (32K): the rest is kept for the answer and Conch's instructions.
    """
    if budget <= 0:
        return "This model's memory size is not known yet."
    head = f"About {_about(used)} of {_about(budget)} tokens"
    share = used / budget
    if share >= 1:
        text = f"{head}; earlier messages will be summarised with the next message"
    elif share >= SOON:
        text = f"{head}; earlier messages will be summarised soon"
    else:
        text = f"{head} of what the model reads at once"
    if window > budget:
        text += (
            f".\nThe model reads {window_label(window)} tokens; Conch fits the chat into "
            f"{_about(budget)}\nand keeps the rest for the answer and its instructions."
        )
    return text


def level(used: int, budget: int) -> str:
    if budget <= 0 or used < SOON * budget:
        return "ok"
    return "high" if used < budget else "full"


class ContextMeter(QProgressBar):
    """A thin bar, filled by used ÷ budget. ``set_usage(None)`` hides it (no capability)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ContextMeter")
        self.setAccessibleName("Context used")
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # reachable, so the words can be read
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setFixedWidth(72)
        self.setRange(0, STEPS)
        self.setTextVisible(False)
        self.used = 0
        self.budget = 0
        self.setVisible(False)

    def set_usage(self, usage: tuple[int, int] | None, window: int = 0) -> None:
        """(used, budget) in tokens, and the model's window when known; None hides the bar."""
        if usage is None:
            self.used, self.budget = 0, 0
            self.setVisible(False)
            return
        self.used, self.budget = max(0, usage[0]), max(0, usage[1])
        words = describe(self.used, self.budget, window)
        self.setToolTip(words)
        self.setAccessibleDescription(words)
        self.setValue(round(self.fraction * STEPS))
        set_style_property(self, "level", level(self.used, self.budget))
        self.setVisible(True)

    @property
    def fraction(self) -> float:
        return min(1.0, self.used / self.budget) if self.budget > 0 else 0.0

    def percent_text(self) -> str:
        """ "62%" for the label beside the bar; past the budget the true share ("263%"), while
        the bar itself stops at full. Rounding never says what is not so: a chat holding a
        turn or two of a 32K model's room is "<1%", not "0%" (as if its words were not
        counted), and one just short of the budget is "99%", not "100%" (nothing is summarised
        yet)."""
        if self.budget <= 0:
            return ""
        shown = round(self.used / self.budget * 100)
        if shown == 0 and self.used > 0:
            return "<1%"
        if shown >= 100 and self.used < self.budget:
            return "99%"
        return f"{shown}%"
