"""What the wait before an answer's first word says: "Reading the chat… 35%".

A long chat on a local model can take minutes before the first word, all of it spent reading
the prompt. Once that wait passes ``READING_AFTER_S``, the answer's placeholder in the window
and ``conch ask``'s stderr say so, in the same words (``ReadingWait.words``): the share read
when the server reports it (``Reading`` events, llama.cpp's), else the prompt's estimated
size and the seconds so far. A program (Claude Code, an ACP agent) does more than read while
it is quiet, so its wait says nothing here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.conversation import Conversation
from engines.base import Reading, TextDelta, ThinkingDelta, ToolCall, ToolResult
from engines.programs.catalogue import PROVIDER as PROGRAMS

log = logging.getLogger("conch.reading")

READING_AFTER_S = 2.0  # a shorter wait is an ordinary one and says nothing
# A summary the person waits for: /compact, or ``conch ask`` finishing a fold's summary
# before it ends (a turn never waits for one).
SUMMARISING = "Summarising the start of this chat…"


def about(tokens: int) -> str:
    """An estimate rounded as it deserves: 12,400 rather than 12,437."""
    if tokens >= 1_000:
        tokens = round(tokens, -2)
    elif tokens >= 100:
        tokens = round(tokens, -1)
    return f"{tokens:,}"


def percent(reading: Reading) -> int:
    """The share read as a whole percentage, never rounded up to a 100 not yet reached."""
    if reading.total <= 0:
        return 100
    return min(100, reading.done * 100 // reading.total)


def elapsed_words(seconds: float) -> str:
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60} s"


@dataclass
class ReadingWait:
    """One turn's wait for its first word (or for the next request's, after a tool ran).

    ``size``: the prompt's estimated tokens (None: unknown), asked each time the words are,
    since the engine takes in the person's message after the wait has begun. Feed it every
    event of the turn (``observe``); ``words`` is what the placeholder says now, "" while
    nothing needs saying.
    """

    size: Callable[[], int | None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    reading: Reading | None = field(default=None, init=False)
    answering: bool = field(default=False, init=False)  # words, thinking or a tool call came

    def __post_init__(self) -> None:
        self.started = self.clock()

    def observe(self, event: object) -> None:
        if isinstance(event, Reading):
            self.reading = event
        elif isinstance(event, TextDelta | ThinkingDelta | ToolCall):
            self.answering = True
        elif isinstance(event, ToolResult):
            # The tool's result goes back to the model: a new request, read from the start.
            self.started = self.clock()
            self.reading = None
            self.answering = False

    def words(self, after: float = READING_AFTER_S) -> str:
        """What the wait says after ``after`` seconds without a first word; "" before, and
        once the model has begun."""
        waited = self.clock() - self.started
        if self.answering or waited < after:
            return ""
        if self.reading is not None:
            return f"Reading the chat… {percent(self.reading)}%"
        tokens = self._size()
        if tokens:
            return f"Reading about {about(tokens)} tokens… {elapsed_words(waited)}"
        return f"Reading the chat… {elapsed_words(waited)}"

    def _size(self) -> int | None:
        try:
            return self.size()
        except Exception:  # the figure is a hint: a wait without it still says so
            log.debug("no estimate of the prompt's size", exc_info=True)
            return None


def prompt_size(conversation: Conversation) -> Callable[[], int | None]:
    """The conversation's own estimate of what its next request sends."""

    def size() -> int | None:
        usage = conversation.context_usage()
        return usage[0] if usage is not None else None

    return size


def reading_wait(conversation: Conversation) -> ReadingWait | None:
    """A wait for the conversation's next answer, or None when its model is a program."""
    if conversation.model.provider == PROGRAMS:
        return None
    return ReadingWait(size=prompt_size(conversation))
