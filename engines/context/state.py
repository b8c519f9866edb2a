"""What every part of a chat's session shares: the transcript as it stands, and the sums over it.

``ApiSession`` (``engines.context.session``) is built in layers, each class on the one before
and all on this one, so they share one object's state, set up here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engines.base import FoldLoader, HistoryLoader, Message, ModelInfo, Note, SummaryListener
from engines.context import transcript as tfile
from engines.context.calibrate import Calibrated
from engines.context.prepare import Prepared
from engines.context.protocols import ModelDirectory, Summariser
from engines.context.tool_loop import ToolHost
from engines.providers.base import ProviderAdapter
from engines.tools.catalogue import Catalogue
from engines.tools.rules import FRAME_TAG, guard_frame, shorten_turn_tools_first
from engines.tools.rules import tool_list_tokens as _tools_tokens
from engines.window import FoldPlan, Ledger, budget, estimate_tokens

SUMMARY_OPEN = f"<{FRAME_TAG}>\n"
SUMMARY_CLOSE = f"\n</{FRAME_TAG}>\n\n"


Fold = tuple[int, str]  # the chat log's latest fold: (first kept seq, summary)


def summary_block(summary: str) -> str:
    """The framed summary put in front of the first kept person message ("" for none)."""
    if not summary.strip():
        return ""
    # The summary may quote what tools returned; it must not be able to close its own frame.
    body = guard_frame(summary.strip())
    return f"{SUMMARY_OPEN}{body}{SUMMARY_CLOSE}"


class SessionState:
    """The state of one chat's session (``ApiSession`` documents the arguments)."""

    def __init__(
        self,
        *,
        chat_id: str,
        data_dir: Path | None,
        adapters: Mapping[str, ProviderAdapter],
        summariser: Summariser | None = None,
        directory: ModelDirectory | None = None,
        history: HistoryLoader | None = None,
        latest_fold: FoldLoader | None = None,
        tools: ToolHost | None = None,
    ) -> None:
        self.chat_id = tfile.check_chat_id(chat_id)
        self.data_dir = data_dir
        self.adapters = adapters
        self.summariser = summariser
        self.directory = directory
        self.history = history
        self.latest_fold = latest_fold
        self._messages: list[Message] = []
        self._ledger = Ledger()
        self._seqs: list[int] = []
        self._joined: list[int] = []  # seqs of person messages joined onto the one before
        self._summary = ""
        self._summary_tokens = 0
        self._factor = 1.0
        self._windows: dict[str, int] = {}  # learned from a refusal in this session: applied
        self._hints: dict[str, int] = {}  # learned in an earlier session: used only to heal
        self._learned_at: dict[str, float] = {}
        self._loaded = False
        self._writable = data_dir is not None
        self._disk: tfile.Signature | None = None  # the file version this session last saw
        self._notes: list[Note] = []
        # Whether a rebuild from the chat log was told and the log has not agreed since: many
        # writers on one chat would otherwise repeat the same note every turn.
        self._rebuild_told = False
        self._last_model: ModelInfo | None = None
        self._lock = asyncio.Lock()
        self._io_lock = threading.Lock()  # saves run in worker threads
        self._save_generation = 0
        self._saved_generation = 0
        self._pending_summary_tokens = 0  # summarising spent this turn, not yet reported
        self._unanswered: list[int] = []  # seqs held in the current turn, still unanswered
        self._no_prefill: set[str] = set()  # models that refused to continue a stopped answer
        self._calibrated: Calibrated | None = None  # the last count of a request (this fold)
        # Folded in a turn that did not wait for their summary: written in the background after
        # the answer, on ``_late_base`` (the summary they extend), and then the chat's summary.
        # Saved with the transcript, so a session that opens it writes it if it was cut off.
        self._late: list[Message] = []
        self._late_base = ""
        self._listeners: list[SummaryListener] = []  # told when a late summary is written
        self._written = asyncio.Event()  # set each time a late summary is taken in
        self._prepared: Prepared | None = None  # the next fold's summary, written ahead
        self._prep_task: asyncio.Task[None] | None = None
        self._prep_failed: int | None = None  # the fold in which preparing failed: not retried
        # A local server evaluates the request a prepared fold will send ahead (bench.ttft
        # turns it off to measure the difference).
        self.warm_folds = True
        # The deeper fold read ahead for the prepared summary (a message as big as the biggest
        # recent one brings it): (that summary, where the fold cuts).
        self._deeper: tuple[Prepared, int] | None = None
        self._closed = False
        # The chat's tools (None: no tool is offered; a call the model makes anyway is told so).
        self.tools = tools
        self._catalogue = Catalogue()  # this turn's tools, as the model sees them
        self._lean_tools = False  # this turn sends lean mode's small tools, not every schema
        # The tool list the last request sent (None: no request yet).
        self._sent_tools: tuple[dict[str, Any], ...] | None = None
        self._round = 0  # tool rounds this turn has taken
        self._whole = ""  # the person's whole message this turn (for the cut notice)
        self._no_tools_told: set[str] = set()  # models already said to be unable to use tools
        self._servers_told: dict[str, str] = {}  # the failure last said for each tool server
        self._tools_refused: set[str] = set()  # models whose server refused a tool list

    @property
    def summary(self) -> str:
        return self._summary

    @property
    def factor(self) -> float:
        return self._factor

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    @property
    def seqs(self) -> tuple[int, ...]:
        return tuple(self._seqs)

    def _budget(
        self, window: int, system: str, tools: Sequence[dict[str, Any]], answer: int | None = None
    ) -> int:
        return budget(window, estimate_tokens(system), _tools_tokens(tools), answer)

    def _reserved(self) -> int:
        return int(self._summary_tokens * self._factor)

    def _current_turn_start(self) -> int:
        return self._ledger.last_turn_start()

    def _replace_current_turn(self, target: int) -> bool:
        """Shorten the current turn to ``target`` tokens; True if anything changed."""
        start = self._current_turn_start()
        turn = self._messages[start:]
        shorter = shorten_turn_tools_first(turn, max(0, target))
        if shorter == tuple(turn):
            return False
        self._messages[start:] = shorter
        self._ledger.pop_back(len(turn))
        for m in shorter:
            self._ledger.append(m)
        return True

    def _fold_target(self, b: int) -> int:
        """Tokens the current turn may keep when it must fit half the budget (healing)."""
        return max(0, int((b / 2 - self._reserved()) / self._factor))

    def _plan(self, b: int) -> FoldPlan:
        return self._ledger.plan(b, self._factor, self._reserved())

    def _first_kept_seq(self) -> int:
        """Where the model's word-for-word memory starts in the chat log."""
        return next((s for s in self._seqs if s >= 0), self._seqs[-1] if self._seqs else 0)

    def _append(self, message: Message) -> None:
        self._messages.append(message)
        self._ledger.append(message)
