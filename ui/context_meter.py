"""How full the model's memory is: a thin bar by the composer with a tooltip in words.

The numbers come from ``Conversation.context_usage()`` (estimated tokens the next request
sends, and the budget the engine fits the chat into). Past the budget the engine summarises the
start of the chat; the tooltip says so before it happens. The stylesheet colours the bar by
its ``level`` property: "ok", "high" (a summary is near) or "full".
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QProgressBar, QSizePolicy, QWidget

from ui.theme import set_style_property

SOON = 0.8  # from this share of the budget on, the tooltip warns that a summary is near
STEPS = 1000


def _about(n: int) -> str:
    """Round to what an estimate deserves: 5,123 → "5,100"."""
    if n >= 1000:
        n = round(n, -2)
    return f"{n:,}"


def describe(used: int, budget: int) -> str:
    """The tooltip: "About 5,100 of 6,100 tokens; earlier messages will be summarised soon"."""
    if budget <= 0:
        return "This model's memory size is not known yet."
    head = f"About {_about(used)} of {_about(budget)} tokens"
    share = used / budget
    if share >= 1:
        return f"{head}; earlier messages will be summarised with the next message"
    if share >= SOON:
        return f"{head}; earlier messages will be summarised soon"
    return f"{head} of what the model reads at once"


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

    def set_usage(self, usage: tuple[int, int] | None) -> None:
        if usage is None:
            self.used, self.budget = 0, 0
            self.setVisible(False)
            return
        self.used, self.budget = max(0, usage[0]), max(0, usage[1])
        words = describe(self.used, self.budget)
        self.setToolTip(words)
        self.setAccessibleDescription(words)
        self.setValue(round(self.fraction * STEPS))
        set_style_property(self, "level", level(self.used, self.budget))
        self.setVisible(True)

    @property
    def fraction(self) -> float:
        return min(1.0, self.used / self.budget) if self.budget > 0 else 0.0

    def percent_text(self) -> str:
        """ "62%" for the label beside the bar."""
        return f"{round(self.fraction * 100)}%" if self.budget > 0 else ""
