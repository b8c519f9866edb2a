"""The card shown in place of an answer that failed: one sentence and one next step.

For a "too long" refusal that healing could not fix, the one step is either "Switch to <model>
(reads 128K)" — switch the chat's model and send the message again — or "Start a new chat with
this message". Other problems show their own sentence and their next step (Try again, Open
Settings, wait a moment); a server that did not answer gets "Try again" (its words say to
start the server, then try again) with "Open Settings" beside it. The card only says what
the person can do; the chat view carries the request out (``step_requested``).

When the chat's model runs on this computer with a window smaller than it could have (LM Studio
loads at 4,096 tokens, an Ollama model loaded by another app may sit at 2,048), the card is
offered a reload (``offer_reload``): "Reload <model> with a 16K window", with the memory that
will take, becomes its first button; while the model loads the card says so, with a busy bar.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engines.base import NextStep, ProblemKind, TurnProblem
from engines.local.reload import ReloadOffer
from ui._widgets import outside_text, pause, resume
from ui.chat.model_picker import memory_note, reload_label, window_label
from ui.plain import PlainLabel, button_words


def step_label(step: NextStep) -> str:
    """The button's words for a next step."""
    if step.kind == "switch-model" and step.model is not None:
        size = window_label(step.model.context)
        if f"({size})" in step.model.name:  # "Mock model (128K)" says it already
            return f"Switch to {step.model.name}"
        return f"Switch to {step.model.name} (reads {size})"
    if step.kind == "new-chat":
        return "Start a new chat with this message"
    if step.kind in ("retry", "wait"):
        return "Try again"
    if step.kind == "open-settings":
        return step.label or "Open Settings"
    return step.label


def step_for(problem: TurnProblem, message_text: str) -> NextStep | None:
    """The card's one next step; a too-long problem always has one."""
    step = problem.next_step
    if (
        problem.kind is ProblemKind.UNREACHABLE
        and step is not None
        and step.kind == "open-settings"
    ):
        # "Check that the server is running, then try again": once it runs, the button is
        # what sends the message again, as the words say (Settings stays one button over).
        return NextStep(kind="retry", label=step.label)
    if step is not None and step.kind != "none":
        return step
    if problem.kind is ProblemKind.TOO_LONG:
        return NextStep(
            kind="new-chat", label="Start a new chat with this message", text=message_text
        )
    return None


class ProblemCard(QFrame):
    """One failed answer's card.

    Signals:
        step_requested(NextStep): the person pressed the next step's button.
        reload_requested(ReloadOffer): the person pressed "Reload <model> with a … window".
        size_changed(): the details, a reload offer or its progress were shown or hidden.
    """

    step_requested = Signal(object)
    reload_requested = Signal(object)
    size_changed = Signal()

    def __init__(
        self, problem: TurnProblem, message_text: str = "", parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ProblemCard")
        self.setProperty("kind", problem.kind.value)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.problem = problem
        self.step = step_for(problem, message_text)

        given = problem.next_step
        # A step the card turned into "Try again": its words say what to do first.
        retold = (
            given is not None
            and given.kind == "open-settings"
            and self.step is not None
            and self.step.kind == "retry"
        )
        said = f"{problem.message} {given.label}." if retold and given and given.label else ""
        self.sentence = PlainLabel(said or problem.message, self)
        self.sentence.setObjectName("ProblemText")
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sentence.setAccessibleName("What went wrong")

        self.button: QPushButton | None = None
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        if self.step is not None:
            self.button = QPushButton(button_words(step_label(self.step)), self)
            self.button.setObjectName("NextStepButton")
            self.button.setProperty("variant", "primary")
            self.button.setAccessibleName(step_label(self.step))
            self.button.clicked.connect(self._pressed)
            buttons.addWidget(self.button)
            if self.step.kind == "wait" and self.step.seconds:
                self._wait(self.step.seconds)

        # A server that did not answer may also sit at another address: Settings, beside.
        self.settings_button: QPushButton | None = None
        if retold and given is not None and given.kind == "open-settings":
            page = given.text
            self.settings_button = QPushButton("Open Settings", self)
            self.settings_button.setObjectName("ProblemOtherButton")
            self.settings_button.setAccessibleName("Open Settings to check the server's address")
            self.settings_button.clicked.connect(
                lambda: self.step_requested.emit(
                    NextStep(kind="open-settings", label="Open Settings", text=page)
                )
            )
            buttons.addWidget(self.settings_button)

        self.offer: ReloadOffer | None = None
        self.reload_button = QPushButton(self)
        self.reload_button.setObjectName("NextStepButton")
        self.reload_button.setProperty("variant", "primary")
        self.reload_button.setVisible(False)
        self.reload_button.clicked.connect(self._reload_pressed)
        # On a row of its own: beside the other steps its long words ("Reload <model> with a
        # 16K window") were cut off in a chat's column.
        reload_row = QHBoxLayout()
        reload_row.setContentsMargins(0, 0, 0, 0)
        reload_row.addWidget(self.reload_button)
        reload_row.addStretch(1)
        self.reload_note = PlainLabel(self)
        self.reload_note.setObjectName("ReloadNote")
        self.reload_note.setWordWrap(True)
        self.reload_note.setVisible(False)
        self.reload_progress = QProgressBar(self)
        self.reload_progress.setObjectName("ReloadProgress")
        self.reload_progress.setRange(0, 0)  # a load says nothing until it is done
        self.reload_progress.setTextVisible(False)
        self.reload_progress.setMaximumHeight(6)
        self.reload_progress.setVisible(False)

        self.details_button: QToolButton | None = None
        self.details = outside_text(problem.detail, "ProblemDetail", self)
        self.details.setAccessibleName("What the server said")
        self.details.setVisible(False)
        if problem.detail:
            self.details_button = QToolButton(self)
            self.details_button.setText("Details")
            self.details_button.setCheckable(True)
            self.details_button.setAutoRaise(True)
            self.details_button.setAccessibleName("Show what the server said")
            self.details_button.toggled.connect(self._show_details)
            buttons.addWidget(self.details_button)
        buttons.addStretch(1)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(6)
        layout.addWidget(self.sentence)
        layout.addLayout(reload_row)
        layout.addLayout(buttons)
        layout.addWidget(self.reload_note)
        layout.addWidget(self.reload_progress)
        layout.addWidget(self.details)

    def _pressed(self) -> None:
        if self.step is not None:
            self.step_requested.emit(self.step)

    # --- reloading the model with a bigger window ---------------------------------------------

    def offer_reload(self, offer: ReloadOffer | None) -> None:
        """Offer (or, with None, stop offering) to reload the chat's model with a bigger
        window; only a too-long card takes the offer."""
        if self.problem.kind is not ProblemKind.TOO_LONG:
            return
        if offer == self.offer:
            return
        self.offer = offer
        shown = offer is not None
        if offer is not None:
            label = reload_label(offer)
            self.reload_button.setText(button_words(label))
            self.reload_button.setAccessibleName(label)
            self.reload_button.setEnabled(True)
            self.reload_note.setText(
                f"{offer.model.name} is loaded to read only {window_label(offer.model.context)} "
                "tokens at once, though it was made for more. " + memory_note(offer)
            )
        self.reload_button.setVisible(shown)
        self.reload_note.setVisible(shown)
        self.reload_progress.setVisible(False)
        if self.button is not None:
            # One primary button: with a reload on offer, the other step steps back.
            self.button.setObjectName("ProblemOtherButton" if shown else "NextStepButton")
            self.button.setProperty("variant", "" if shown else "primary")
            self.button.style().unpolish(self.button)
            self.button.style().polish(self.button)
        self.updateGeometry()
        self.size_changed.emit()

    def show_loading(self, text: str | None) -> None:
        """Say the model is loading (``text``, with a busy bar), or that it has stopped (None:
        the offer's button works again)."""
        loading = text is not None
        self.reload_progress.setVisible(loading)
        if loading:
            pause(self.reload_button, self)
        else:
            resume(self.reload_button, self)
        if text is not None:
            self.reload_note.setText(text)
            self.reload_note.setVisible(True)
        self.updateGeometry()
        self.size_changed.emit()

    def reload_failed(self, sentence: str) -> None:
        self.show_loading(None)
        self.reload_note.setText(sentence)

    def _reload_pressed(self) -> None:
        if self.offer is not None:
            self.reload_requested.emit(self.offer)

    def _show_details(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.updateGeometry()
        self.size_changed.emit()

    def _wait(self, seconds: float) -> None:
        # The provider asked for a pause: the button unlocks itself when it is over.
        assert self.button is not None
        button = self.button
        pause(button, self)
        QTimer.singleShot(int(seconds * 1000), self, lambda: resume(button, self))
