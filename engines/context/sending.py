"""One request as the transcript stands, streamed: what the person sees is passed on, what came
back is collected. Between folds every request starts with the same bytes, so providers' prompt
caches keep working."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.base import (
    AssistantRaw,
    Done,
    Event,
    Message,
    ModelInfo,
    Problem,
    ProblemKind,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallData,
    TurnInput,
    Usage,
)
from engines.context.continuation import continuing, prefills
from engines.context.facts import split_kept
from engines.context.folding import Folding
from engines.context.state import summary_block
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError
from engines.providers.tokens import usage_is_whole
from engines.tools.rules import tool_list_tokens as _tools_tokens
from engines.window import LEAN_WINDOW, answer_reserve, budget, estimate_tokens, update_factor

# At a window this small (a small model's), the lines the summary kept word for word are sent
# once more just before the newest message: after the kept turns (a paste, long answers)
# SmolLM2-135M no longer finds them in the summary at the front, and after the question it
# carries on with its own earlier answers instead (``bench.recall --person --reask``). Only
# the newest message carries them, so a server's cached prefix holds everything before the
# message before it; a larger window's request is left as it was (API prompt caches).
REMIND_WINDOW = LEAN_WINDOW
REMIND_SHARE = 0.10  # of the budget those lines may take (the first ones: the person's first)


def reminder(summary: str, window: int) -> str:
    """The summary's kept lines framed as the summary is, as many as fit ``REMIND_SHARE`` of
    ``window``'s budget ("" when it kept none)."""
    _body, kept = split_kept(summary)
    room = int(budget(window) * REMIND_SHARE)
    lines: list[str] = []
    for line in kept:
        block = summary_block("\n".join([*lines, f"- {line}"]))
        if lines and estimate_tokens(block) > room:
            break
        lines.append(f"- {line}")
    return summary_block("\n".join(lines)) if lines else ""


def _again(messages: Sequence[Message], summary: str, window: int) -> str:
    """What ``arrange`` puts in front of the newest person message ("" when nothing)."""
    if window > REMIND_WINDOW:
        return ""
    users = [k for k, m in enumerate(messages) if m.role == "user"]
    if len(users) < 2:
        return ""  # the newest is the first: the summary is in front of it already
    return reminder(summary, window)


def arrange(messages: Sequence[Message], summary: str, window: int) -> list[Message]:
    """``messages`` as sent: the summary in front of the first person message, and at a small
    ``window`` its kept lines again in front of the newest person message's text
    (``reminder``). At request time only: the stored messages stay the person's own words."""
    return _placed(messages, summary, _again(messages, summary, window) if summary else "")


def _placed(messages: Sequence[Message], summary: str, again: str) -> list[Message]:
    """``arrange`` with ``again``, what goes in front of the newest person message, given."""
    out = list(messages)
    block = summary_block(summary)
    users = [k for k, m in enumerate(out) if m.role == "user"]
    if not block or not users:
        return out
    first, newest = users[0], users[-1]
    out[first] = out[first].model_copy(update={"text": block + out[first].text})
    if again:
        out[newest] = out[newest].model_copy(update={"text": again + out[newest].text})
    return out


def silent(out: Attempt) -> bool:
    """Nothing came back: no text, no tool call, and no failure but a stream that ended before
    its first word."""
    if out.calls or "".join(out.text).strip():
        return False
    if out.error is None:
        return True
    return out.error.kind is ProblemKind.BROKEN_STREAM and not out.began


def chat_request(turn: TurnInput, window: int, messages: tuple[Message, ...]) -> ChatRequest:
    """The request for ``turn`` with ``messages``, leaving room in ``window`` for the answer."""
    return ChatRequest(
        model=turn.model.id,
        system=turn.system,
        messages=messages,
        tools=turn.tools,
        max_output_tokens=answer_reserve(window, turn.max_answer_tokens),
        temperature=turn.temperature,
        window=window,
    )


@dataclass
class Attempt:
    """What one request to the provider produced."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[ToolCallData] = field(default_factory=list)
    raw: tuple[dict[str, Any], ...] | None = None
    began: bool = False  # some answer (text, thinking or a tool call) arrived
    done: Done | None = None
    error: ProviderError | None = None
    read: int = 0  # input tokens the server read, by an exact count (0: none given)


class Sending(Folding):
    """Building the request for the transcript as it stands and streaming it."""

    _again_tokens = 0  # what the last request built put in front of the newest message
    _again_of: tuple[str, int, int] = ("", 0, 0)  # (a summary, a window, its reminder's tokens)

    def _reserved(self) -> int:
        """The summary's tokens, and at a small window its kept lines sent again."""
        model = self._last_model
        again = self._again_for(self.window_for(model)) if model is not None else 0
        return super()._reserved() + int(again * self._factor)

    def _again_for(self, window: int) -> int:
        """Tokens of the kept lines sent again at ``window`` (0 at a larger one)."""
        if not self._summary or window > REMIND_WINDOW:
            return 0
        if self._again_of[:2] != (self._summary, window):
            tokens = estimate_tokens(reminder(self._summary, window))
            self._again_of = (self._summary, window, tokens)
        return self._again_of[2]

    def context_usage(
        self, model: ModelInfo, system: str = "", answer_tokens: int | None = None
    ) -> tuple[int, int]:
        used, room = super().context_usage(model, system, answer_tokens)
        return used + self._again_for(self.window_for(model)), room

    def _request(self, turn: TurnInput, window: int) -> ChatRequest:
        # The kept lines sent again are worked out once: sent, and counted by ``_estimate``.
        again = _again(self._messages, self._summary, window) if self._summary else ""
        messages = _placed(self._messages, self._summary, again)
        self._again_tokens = estimate_tokens(again)
        if self._continuing(turn):
            messages = continuing(messages, turn.continue_from, prefill=self._prefills(turn))
        return chat_request(turn, window, tuple(messages))

    def _sent_estimate(self, turn: TurnInput) -> int:
        return (
            estimate_tokens(turn.system)
            + _tools_tokens(turn.tools)
            + self._ledger.tokens
            + self._summary_tokens
            + self._again_tokens
            + (estimate_tokens(turn.continue_from) if self._continuing(turn) else 0)
        )

    def _continuing(self, turn: TurnInput) -> bool:
        """The request goes on with a stopped answer (``continuation``): the transcript still
        ends with the person's message (the stopped words were never kept in it)."""
        return (
            bool(turn.continue_from) and bool(self._messages) and self._messages[-1].role == "user"
        )

    def _prefills(self, turn: TurnInput) -> bool:
        adapter = self.adapters.get(turn.model.provider)
        return prefills(adapter) and turn.model.key not in self._no_prefill

    async def _attempt(
        self, adapter: ProviderAdapter, request: ChatRequest, sent: int, out: Attempt
    ) -> AsyncGenerator[Event, None]:
        """Stream one request, forwarding what the person sees; errors land in ``out``."""
        stream = adapter.stream(request)
        try:
            async for ev in stream:
                if isinstance(ev, TextDelta):
                    out.began = True
                    out.text.append(ev.text)
                    yield ev
                elif isinstance(ev, ThinkingDelta):
                    out.began = True
                    out.thinking.append(ev.text)
                    yield ev
                elif isinstance(ev, ToolCall):
                    out.began = True
                    out.calls.append(ev.call)
                    yield ev
                elif isinstance(ev, Usage):
                    exact = usage_is_whole(adapter)  # its input_tokens hold the cached ones
                    real = ev.input_tokens if exact else ev.input_tokens + ev.cache_read_tokens
                    real += 0 if exact else ev.cache_write_tokens
                    self._factor = update_factor(self._factor, real, sent, exact=exact)
                    out.read = real if exact else 0
                    extra, self._pending_summary_tokens = self._pending_summary_tokens, 0
                    yield ev.model_copy(update={"summary_tokens": ev.summary_tokens + extra})
                elif isinstance(ev, AssistantRaw):
                    out.raw = ev.blocks
                elif isinstance(ev, Done):
                    out.done = ev
                    return
                elif isinstance(ev, Problem):
                    # Adapters raise rather than yield problems; pass one on as it came.
                    out.error = ProviderError(
                        ev.problem.kind, ev.problem.detail, partial=ev.problem.partial
                    )
                    return
                else:
                    yield ev
            out.error = ProviderError(
                ProblemKind.BROKEN_STREAM, "the stream ended before the answer was finished"
            )
        except ProviderError as exc:
            out.error = exc
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()

    async def _send(
        self, turn: TurnInput, adapter: ProviderAdapter, window: int, out: Attempt
    ) -> AsyncGenerator[Event, None]:
        """Send the request for the transcript as it stands now, forwarding what the person
        sees; what came back lands in ``out``."""
        request, sent = self._request(turn, window), self._sent_estimate(turn)
        async with contextlib.aclosing(self._attempt(adapter, request, sent, out)) as events:
            async for ev in events:
                yield ev
        if out.read:
            self._read_whole(turn.model, out.read)
