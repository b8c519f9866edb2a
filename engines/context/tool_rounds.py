"""The chat's tools in a turn: the tool list sent (every schema, or lean mode's small tools),
the calls the model makes run and answered, and the model's next answer after them."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncGenerator

from engines.base import Done, Event, Message, ModelInfo, Note, ProblemKind, TurnInput
from engines.context.heal import Healing
from engines.context.protocols import AnswerTurn
from engines.context.tool_loop import (
    MAX_ROUNDS,
    NO_TOOLS_MODEL,
    ROUNDS_TEXT,
    CallOutcome,
    not_run,
    run_call,
    server_names,
    specs_for,
    stopped,
    unavailable,
)
from engines.providers.base import ProviderAdapter, ProviderError
from engines.tools.catalogue import Catalogue
from engines.tools.lean import lean_for
from engines.tools.rules import result_cap
from engines.tools.rules import tool_list_tokens as _tools_tokens
from engines.window import estimate_tokens

log = logging.getLogger("conch.context.session")


async def _can_use_tools(adapter: ProviderAdapter, model: ModelInfo) -> bool:
    """Whether ``model`` may be sent tools: an adapter that can tell (Ollama, by the model's
    capabilities) is asked; the others take tools from every model."""
    check = getattr(adapter, "tool_support", None)
    if check is None:
        return True
    try:
        return bool(await check(model.id))
    except Exception:  # the server could not say: no tools rather than a refused request
        log.warning("could not learn whether %s can use tools", model.key, exc_info=True)
        return False


_TOOLS_WORDS = re.compile(r"\btools?\b|\bfunction[ _-]?call|\bjinja\b", re.IGNORECASE)


def refused_tools(err: ProviderError) -> bool:
    """The server refused the request because of its tool list (not for its length)."""
    if err.too_long or err.kind not in (ProblemKind.REFUSED, ProblemKind.SERVER_ERROR):
        return False
    return bool(_TOOLS_WORDS.search(err.detail or ""))


def one_line(text: str) -> str:
    return " ".join(text.split())


class ToolRounds(Healing):
    """Offering the chat's tools and running the calls an answer ends with."""

    _answer: AnswerTurn  # the turn driver's (``ApiSession``)

    async def _with_tools(
        self, turn: TurnInput, adapter: ProviderAdapter
    ) -> tuple[TurnInput, list[Note]]:
        """The turn with the tool list this chat really sends (every schema, or lean mode's
        small tools on a window of 8K or less), and notes about tools for the turn."""
        self._round = 0
        self._catalogue = Catalogue()
        host = self.tools
        if host is None:
            self._sent_tools = turn.tools
            return turn, []
        notes: list[Note] = []
        try:
            catalogue = await host.catalogue()
        except Exception as exc:  # the servers are the app's; a failure only loses the tools
            log.warning("listing the chat's tools failed", exc_info=True)
            notes.append(
                Note(
                    topic="tools",
                    text=f"Conch could not list this chat's tools ({type(exc).__name__}), so "
                    "the model answers without them.",
                )
            )
            catalogue = Catalogue()
        for sid, text in unavailable(host.runner, host.allowed).items():
            if self._servers_told.get(sid) != text:  # each failure said once
                self._servers_told[sid] = text
                notes.append(Note(topic="tools", text=text))
        model = turn.model
        if model.key in self._tools_refused:
            catalogue = Catalogue()
        elif len(catalogue) and not await _can_use_tools(adapter, model):
            if model.key not in self._no_tools_told:
                self._no_tools_told.add(model.key)
                notes.append(Note(topic="tools", text=NO_TOOLS_MODEL.format(model=model.name)))
            catalogue = Catalogue()
        self._catalogue = catalogue
        self._lean_tools = turn.lean or lean_for(self.window_for(model), catalogue)
        specs = specs_for(catalogue, host.loaded, lean_mode=self._lean_tools)
        self._sent_tools = specs
        return turn.model_copy(update={"tools": specs}), notes

    def _without_tools(self, turn: TurnInput) -> TurnInput:
        """The turn with no tools, and none offered to its model again in this chat."""
        self._tools_refused.add(turn.model.key)
        self._catalogue = Catalogue()
        self._sent_tools = ()
        return turn.model_copy(update={"tools": ()})

    def _result_cap(self, b: int) -> int:
        """Tokens one tool result may take as sent now: a share of what the budget has free."""
        used = int(self._ledger.tokens * self._factor) + self._reserved()
        return max(0, int(result_cap(b, used) / self._factor))

    async def _tool_round(
        self,
        turn: TurnInput,
        adapter: ProviderAdapter,
        window: int,
        turn_tokens: int,
        answer: Message,
    ) -> AsyncGenerator[Event, None]:
        """Run the calls ``answer`` ends with, send their results, and go on with the model's
        next answer (which may call tools again, up to ``MAX_ROUNDS`` rounds a turn)."""
        calls = answer.tool_calls
        b = self._budget(window, turn.system, turn.tools, turn.max_answer_tokens)
        if self._round >= MAX_ROUNDS:
            for call in calls:
                outcome = not_run(call, self._round, self._result_cap(b))
                self._append(outcome.message)
                yield outcome.event
            async for ev in self._answered():
                yield ev
            yield Note(topic="tools", text=ROUNDS_TEXT.format(n=MAX_ROUNDS))
            self._prepare_next_fold(turn.model, window, b, self._request(turn, window))
            yield Done(stop_reason="tool-rounds")
            return
        self._round += 1
        host = self.tools
        names = server_names(host.runner) if host is not None else {}
        answered = 0
        try:
            for call in calls:
                outs: list[CallOutcome] = []
                running = run_call(
                    host,
                    self._catalogue,
                    call,
                    lean_mode=self._lean_tools,
                    cap=self._result_cap(b),
                    servers=names,
                    out=outs,
                )
                async with contextlib.aclosing(running) as events:
                    async for started in events:
                        yield started
                self._append(outs[0].message)
                answered += 1
                yield outs[0].event
        finally:
            # Stopped (or the window went away) in the middle: the calls not answered yet get
            # an answer saying so, so the transcript still pairs every call with its result.
            for call in calls[answered:]:
                self._append(stopped(call, self._result_cap(b)).message)
        note = await self._persist()
        if note is not None:
            yield note

        if host is not None and self._lean_tools:
            # A schema the model fetched is sent in full from now on.
            specs = specs_for(self._catalogue, host.loaded, lean_mode=True)
            if specs != turn.tools:
                turn = turn.model_copy(update={"tools": specs})
                self._sent_tools = specs
                tools_tokens = _tools_tokens(specs)
                window = self._window(turn.model, estimate_tokens(turn.system), tools_tokens)
                b = self._budget(window, turn.system, turn.tools, turn.max_answer_tokens)
        # The results made the transcript bigger: fold earlier turns when it no longer fits,
        # and when this turn alone does not, shorten its tool results before the person's words.
        plan = self._plan(b)
        if plan.drop:
            drop = self._drop_for(plan.drop)
            async for ev in self._fold(drop, turn.model):
                yield ev
            plan = self._plan(b)
        if plan.shorten_to is not None:
            self._replace_current_turn(int((b - self._reserved()) / self._factor))
            note = await self._persist()
            if note is not None:
                yield note

        going_on = self._answer(turn, adapter, window, turn_tokens, self._whole)
        async with contextlib.aclosing(going_on) as events:
            async for ev in events:
                yield ev
