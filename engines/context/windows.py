"""Windows a too-long refusal named: believed down to a plausible floor, and after a restart
only as a hint for healing the next refusal, so a bogus refusal never locks a chat.

The model directory (the app's catalogue) is told of each learned window
(``window_learned``), so that a server on this computer is listed with it in every process
from then on, and of each request a server read in full by its own exact count
(``window_answered``), which proves a smaller window wrong."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from engines.base import ModelInfo, Note, TurnInput
from engines.context import transcript as tfile
from engines.context.sync import WINDOW_HINT_MAX_AGE, LogSync
from engines.context.tool_loop import specs_for
from engines.tools.lean import lean_for
from engines.tools.rules import tool_list_tokens as _tools_tokens
from engines.window import estimate_tokens, smallest_window, unknown_window

log = logging.getLogger("conch.context.windows")


def listed_window(model: ModelInfo) -> int:
    """The model's own window, or the assumed one when it lists none."""
    return model.context if model.context > 0 else unknown_window(model.local)


def _hinted(window: int, hint: int | None) -> int:
    """``window``, or a smaller one an earlier session's refusal named (never below a floor)."""
    return min(window, max(hint, smallest_window())) if hint else window


def chat_window(data_dir: Path | None, chat_id: str, model: ModelInfo) -> int:
    """The window a request about the chat ``chat_id`` on ``model`` other than a turn (learning,
    a title) should plan against: the model's listed one, or a smaller one a refusal named for
    it in this chat (``LearnedWindows.reading_window`` of a session just opened), read from the
    chat's transcript file without changing it."""
    window = listed_window(model)
    saved = tfile.peek_transcript(data_dir, chat_id) if data_dir is not None else None
    if saved is None:
        return window
    now = time.time()
    if now - saved.windows_learned.get(model.key, now) > WINDOW_HINT_MAX_AGE:
        return window
    return _hinted(window, saved.windows.get(model.key))


class LearnedWindows(LogSync):
    """The window each request plans against, and what fits in it."""

    def learned_window(self, model: ModelInfo) -> int | None:
        """The window a refusal named for ``model`` (this session's, else a remembered hint)."""
        self._ensure_loaded()
        return self._windows.get(model.key, self._hints.get(model.key))

    def forget_window(self, model_key: str) -> None:
        """``model_key`` was loaded again with another window (the person asked): a window a
        refusal named before is stale, here and in the file from the next save on."""
        self._ensure_loaded()
        self._windows.pop(model_key, None)
        self._hints.pop(model_key, None)
        self._learned_at.pop(model_key, None)

    def window_for(self, model: ModelInfo) -> int:
        """The window to budget against: the model's, or a smaller one a refusal named."""
        return self._window(model, 0, 0)

    def reading_window(self, model: ModelInfo) -> int:
        """The window other requests about this chat (learning, a title) should plan against:
        the one turns use, or a smaller one a refusal named in an earlier session. Such a
        request is not healed when refused, and taking the hint costs it nothing."""
        return _hinted(self.window_for(model), self._hints.get(model.key))

    def _window(self, model: ModelInfo, system_tokens: int, tools_tokens: int) -> int:
        self._ensure_loaded()
        window = listed_window(model)
        learned = self._windows.get(model.key)
        if not learned:
            return window
        # A learned window is a hint, never a wall: never below what the system prompt, the
        # tools and one turn need.
        return min(window, max(learned, smallest_window(system_tokens, tools_tokens)))

    def _learn_window(self, turn: TurnInput, named: int | None) -> Note | None:
        """Remember the window a refusal named (or, naming none, the one an earlier session
        learned), never below what the system prompt, tools and one turn need."""
        model = turn.model
        learned = named if named is not None and named > 0 else self._hints.get(model.key)
        if learned is None:
            return None
        floor = smallest_window(estimate_tokens(turn.system), _tools_tokens(turn.tools))
        plausible = max(learned, floor)
        old = self._windows.get(model.key)
        if old is not None and plausible >= old:
            return None
        self._windows[model.key] = plausible
        self._hints.pop(model.key, None)
        self._learned_at[model.key] = time.time()
        self._tell_directory("window_learned", model, plausible)
        if plausible > learned:
            text = (
                f"{model.name} said it reads at most {learned:,} tokens at once, too few to be "
                f"right; Conch assumes {plausible:,} for now."
            )
        else:
            text = f"{model.name} reads at most {plausible:,} tokens at once."
        return Note(topic="window-learned", text=text)

    def _read_whole(self, model: ModelInfo, tokens: int) -> None:
        """The server read a request of ``tokens`` by its own exact count: a window learned
        smaller than that is wrong (or the server was started again with a larger one)."""
        learned = self._windows.get(model.key)
        if learned is not None and tokens > learned:
            self.forget_window(model.key)
        self._tell_directory("window_answered", model, tokens)

    def _tell_directory(self, name: str, model: ModelInfo, tokens: int) -> None:
        told = getattr(self.directory, name, None)
        if not callable(told):
            return
        try:
            told(model, tokens)
        except Exception:  # the directory is the app's; a failure only loses the fact
            log.exception("telling the model directory %s failed", name)

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        self._ensure_loaded()
        used = int(self._ledger.tokens * self._factor) + self._summary_tokens
        # The tool list the chat last sent is counted: the next request sends it again. Before
        # the first, the tools of the chat's servers that are running already.
        tools = self._sent_tools
        if tools is None:
            tools = ()
            if self.tools is not None:
                lean_mode = lean_for(self.window_for(model), self.tools.ready_catalogue())
                ready = self.tools.ready_catalogue()
                tools = specs_for(ready, self.tools.loaded, lean_mode=lean_mode)
        window = self._window(model, estimate_tokens(system), _tools_tokens(tools))
        return used, self._budget(window, system, tools, answer_tokens)
