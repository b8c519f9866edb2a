"""Healing: a too-long refusal, an empty answer after a fold, a message cut to fit.

A "too long" refusal before any answer text heals itself once: everything but the current turn
is folded, the turn is shortened harder and sent again. An empty answer right after a fold is
counted: an overflow is healed, a silent model asked once more. Where a server streams no
usage, its own tokenizer counts the request once per fold and near the budget to correct the
estimate (``engines.context.calibrate``). A message cut to less than half of what the person
wrote is said in the turn (``Shortened``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator

from engines.base import (
    Event,
    Healed,
    NextStep,
    Note,
    Problem,
    ProblemKind,
    Shortened,
    TurnInput,
    TurnProblem,
)
from engines.context.calibrate import Calibrated, count_request, needs_calibration
from engines.context.protocols import FinishTurn
from engines.context.sending import Attempt, Sending, chat_request, silent
from engines.providers.base import ProviderAdapter, ProviderError
from engines.tools.rules import shorten_turn_tools_first
from engines.tools.rules import tool_list_tokens as _tools_tokens
from engines.window import TURN_ROOM, budget, estimate_message, estimate_tokens, update_factor

HEALED_TEXT = "Folded the chat and shortened the message after a too-long refusal."


CUT_SHARE = 0.5  # sending less than this share of the person's message is said in the turn
# A refusal for the answer's room heals with a shorter answer while this many tokens are left
# for it (a few paragraphs); with less, the chat is folded as for any too-long refusal.
ANSWER_USEFUL = 256
ANSWER_MARGIN = 16  # tokens kept back for what the server adds around the answer
SILENT_OVERFLOW = 0.95  # an empty answer to a prompt this full of the window was an overflow
_MARKER = re.compile(r"\n\n\[… [\d,]+ characters left out …\]\n\n")


class Healing(Sending):
    """What a turn does when the request did not fit, or came back empty."""

    _finish: FinishTurn  # the turn driver's (``ApiSession``)

    def _shorter_answer(
        self, turn: TurnInput, err: ProviderError
    ) -> tuple[TurnInput, Note] | ProviderError:
        """For a refusal of the answer's room (vLLM, TGI: the prompt fits, the prompt and
        ``max_tokens`` together do not): the turn asking for the answer that fits, and the
        Health note saying so; or, when too little room is left for a useful answer, the
        refusal as a too-long one naming its window, to heal by folding."""
        assert err.answer_room is not None
        window, given = err.answer_room
        room = window - given - ANSWER_MARGIN
        if room < ANSWER_USEFUL:
            return ProviderError(
                ProblemKind.TOO_LONG, err.detail, status=err.status, too_long=True, window=window
            )
        note = Note(
            topic="other",
            text=f"{turn.model.name} had room for {room:,} tokens of answer beside this chat "
            f"({given:,} of its {window:,}), so Conch asked for an answer that fits.",
        )
        return turn.model_copy(update={"max_answer_tokens": room}), note

    async def _calibrate(
        self, turn: TurnInput, adapter: ProviderAdapter, window: int, b: int, *, force: bool = False
    ) -> bool:
        """Count the request as it would be sent now with the server's own tokenizer, where
        the server reports no usage, when it matters (``needs_calibration``; ``force``: now);
        True when the count raised the factor."""
        transcript = self._ledger.tokens + self._summary_tokens  # uncorrected
        fold = self._first_kept_seq()  # changes exactly at a fold
        if not force and not needs_calibration(transcript, b, self._factor, fold, self._calibrated):
            return False
        real = await count_request(adapter, self._request(turn, window))
        if real is None:
            return False
        before = self._factor
        self._factor = update_factor(self._factor, real, self._sent_estimate(turn))
        self._calibrated = Calibrated(fold, transcript)
        return self._factor > before

    async def _saved_shortened(
        self, turn: TurnInput, whole: str, window: int
    ) -> list[Note | Shortened]:
        """Save the transcript once the current turn is shortened; what to tell of it: a note
        when the save failed, and the cut when less than half of the message is sent."""
        told = [await self._persist(), self._cut_notice(turn, whole, window)]
        return [ev for ev in told if ev is not None]

    def _cut_notice(self, turn: TurnInput, whole: str, window: int) -> Shortened | None:
        """Says so when less than half of what the person wrote is being sent."""
        start = self._current_turn_start()
        if start >= len(self._messages) or not whole:
            return None
        person = self._messages[start]
        if person.role != "user" or person.text == whole:
            return None
        sent = len(_MARKER.sub("", person.text))
        total = len(whole)
        if sent >= CUT_SHARE * total:
            return None
        text = (
            f"Conch sent the first and last {sent:,} characters of your message "
            f"({total:,} in all): {turn.model.name} cannot read more at once."
        )
        needed = int(estimate_message(person.model_copy(update={"text": whole})) * self._factor)
        step = self._bigger_model(turn, window, needed)
        if step is not None and step.model is not None:
            text += f" {step.model.name} can read all of it."
        seq = self._seqs[-1] if self._seqs else turn.seq
        return Shortened(seq=seq, sent_chars=sent, total_chars=total, text=text, next_step=step)

    async def _after_silence(
        self,
        turn: TurnInput,
        adapter: ProviderAdapter,
        window: int,
        turn_tokens: int,
        whole: str,
    ) -> AsyncGenerator[Event, None]:
        """The first request after a fold came back empty: an overflow the server did not
        call one (heal it), or a model that really said nothing (try once more, then say so;
        the fold stays)."""
        real = await count_request(adapter, self._request(turn, window))
        if real is not None:
            self._factor = update_factor(self._factor, real, self._sent_estimate(turn))
            self._calibrated = Calibrated(
                self._first_kept_seq(), self._ledger.tokens + self._summary_tokens
            )
            if real >= SILENT_OVERFLOW * window:
                err = ProviderError(
                    ProblemKind.TOO_LONG,
                    f"an empty answer to {real:,} tokens in a {window:,}-token window",
                    too_long=True,
                )
                async for ev in self._heal(turn, adapter, err, turn_tokens, whole):
                    yield ev
                return
        # The prompt is in the server's cache now: a second try costs only the answer.
        again = Attempt()
        async with contextlib.aclosing(self._send(turn, adapter, window, again)) as events:
            async for ev in events:
                yield ev
        if silent(again):
            yield Problem(
                problem=TurnProblem.of(
                    ProblemKind.REFUSED,
                    again.error.detail if again.error is not None else "an empty answer",
                    NextStep(kind="retry", label="Try again"),
                    message=(
                        "The model wrote nothing, twice, after Conch summarised the start of "
                        "this chat. The summary is kept; try sending your message again."
                    ),
                )
            )
            return
        async for ev in self._finish(turn, again, window, turn_tokens, adapter):
            yield ev

    async def _try_anyway(
        self, turn: TurnInput, adapter: ProviderAdapter, window: int, turn_tokens: int
    ) -> AsyncGenerator[Event, None]:
        """Nothing fits by the estimate, which may be wrong (a miscounted prompt, a window
        listed too small): send this turn alone, shortened, once, and let the provider say.

        The transcript is left as it is (no fold for a request that will likely be refused).
        """
        start = self._current_turn_start()
        messages = shorten_turn_tools_first(self._messages[start:], TURN_ROOM)
        request = chat_request(turn, window, messages)
        sent = (
            estimate_tokens(turn.system)
            + _tools_tokens(turn.tools)
            + sum(estimate_message(m) for m in messages)
        )
        out = Attempt()
        async with contextlib.aclosing(self._attempt(adapter, request, sent, out)) as events:
            async for ev in events:
                yield ev
        if out.error is not None and out.error.too_long and not out.began:
            detail = out.error.detail or "no room left in the window"
            yield self._too_long(turn, window, turn_tokens, detail=detail)
            return
        async for ev in self._finish(turn, out, window, turn_tokens, adapter):
            yield ev

    async def _heal(
        self,
        turn: TurnInput,
        adapter: ProviderAdapter,
        err: ProviderError,
        turn_tokens: int,
        whole: str,
    ) -> AsyncGenerator[Event, None]:
        model = turn.model
        learned = self._learn_window(turn, err.window)
        if learned is not None:
            yield learned
        window = self._window(model, estimate_tokens(turn.system), _tools_tokens(turn.tools))
        b = self._budget(window, turn.system, turn.tools, turn.max_answer_tokens)
        if b <= 0:
            yield self._too_long(turn, window, turn_tokens, detail=err.detail)
            return
        start = self._current_turn_start()
        async for ev in self._fold(start, model):
            yield ev
        start = self._current_turn_start()
        current = sum(estimate_message(m) for m in self._messages[start:])

        def target() -> int:
            aim = self._fold_target(b)
            if err.window is None:
                # The refusal named no window, so the estimate was wrong somewhere: cut deeper.
                aim = min(aim, current // 2)
            return aim

        self._replace_current_turn(target())
        # Counted every time here: the estimate has just been shown wrong.
        for _ in range(3):
            if not await self._calibrate(turn, adapter, window, b, force=True):
                break
            if not self._replace_current_turn(target()):
                break
        for ev in await self._saved_shortened(turn, whole, window):
            yield ev

        out = Attempt()
        healed = False
        async with contextlib.aclosing(self._send(turn, adapter, window, out)) as events:
            async for ev in events:
                if not healed:
                    healed = True
                    yield Healed(model=model.name, window=err.window, what=HEALED_TEXT)
                yield ev
        refused = out.error
        if refused is not None and (refused.too_long or refused.answer_room is not None):
            # Still no room, for the chat or for its answer: the too-long card's next step.
            yield self._too_long(
                turn, window, turn_tokens, detail=refused.detail, partial=out.began
            )
            return
        if out.error is None and not healed:
            yield Healed(model=model.name, window=err.window, what=HEALED_TEXT)
        async for ev in self._finish(turn, out, window, turn_tokens, adapter):
            yield ev

    def _too_long(
        self,
        turn: TurnInput,
        window: int,
        turn_tokens: int,
        *,
        detail: str = "",
        partial: bool = False,
    ) -> Problem:
        step = self._bigger_model(turn, window, turn_tokens)
        if step is None:
            step = NextStep(
                kind="new-chat", label="Start a new chat with this message", text=turn.text
            )
        return Problem(problem=TurnProblem.of(ProblemKind.TOO_LONG, detail, step, partial=partial))

    def _bigger_model(self, turn: TurnInput, window: int, turn_tokens: int) -> NextStep | None:
        """The ready model that reads clearly more than ``window`` and fits the turn."""
        if self.directory is None:
            return None
        try:
            models = list(self.directory.ready_models())
        except Exception:  # the directory is the app's; a failure only loses the suggestion
            return None
        sys_tokens = estimate_tokens(turn.system)
        tools_tokens = _tools_tokens(turn.tools)
        fits = [
            m
            for m in models
            if m.ready
            and m.key != turn.model.key
            and m.context >= 1.5 * window
            and budget(m.context, sys_tokens, tools_tokens, turn.max_answer_tokens) >= turn_tokens
        ]
        if not fits:
            return None
        best = min(fits, key=lambda m: (not m.local, m.context, m.key))
        return NextStep(kind="switch-model", label=f"Switch to {best.name}", model=best)
