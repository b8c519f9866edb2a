"""Prepared folds: the next fold's summary, written before it is needed.

A fold drops whole turns from the front of the transcript and sends a summary of them instead.
Summarising at the fold makes the person wait (a local model on a CPU needs most of a minute),
so once the transcript passes ``PREPARE_AT`` of the budget the session asks its summariser, in
the background, for a summary of the turns the next fold will drop — the same whole turns the
B/2 rule chooses, with room kept for one more message of the usual size. It is extended once
more when the next message will likely bring the fold, so it covers what the fold drops. The
summary is held, not sent, so requests stay byte-identical until the fold; at the fold it is
used when it covers the start of the dropped turns (what the fold drops beyond it is folded in
then).

What a prepared summary covers is written down as *marks*: each turn's position in the chat log
and a fingerprint of its messages. A summary whose marks are not the start of the transcript
any more (an edit, a retry, a rebuild from the chat log), or that was written on another
summary than the one the chat now has, is thrown away.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from engines.base import Message
from engines.local.gate import GaveWayError
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError, closing_stream

PREPARE_AT = 0.8  # share of the budget (or of the message and size limits) that starts one
WARM_TOKENS = 1  # the answer of a request sent only so the server evaluates its prompt
RECENT_TURNS = 4  # the next message is taken to be as big as the mean of this many recent ones
# The deeper fold read ahead is for a message this much bigger than the biggest recent one: a
# pasted page is often somewhat longer than the last (at 8K, one 17% longer went a turn deeper
# than a fold read ahead for the last one's size, and read 1,500 tokens while the person waited).
DEEPER_MARGIN = 1.5
# ... than the biggest of the person's last this many messages (folded ones too): a page pasted
# now and then comes back after more turns than RECENT_TURNS (at 8K, one 268 tokens long five
# turns after one of 309 went past every fold read ahead for the 68 of the four before it).
PAGE_TURNS = 12
PREPARE_TRIES = 2  # a summary written ahead that is turned down is written once more

log = logging.getLogger("conch.context.prepare")

# What the model reads of the dropped turns while their summary is written, when the summary
# before and the dropped turns' facts are both empty: a fold always leaves a summary, so the
# chat log keeps the fold (an empty one reads as withdrawn).
WRITING_SUMMARY = "Earlier messages of this chat are left out here; their summary is being written."

Mark = tuple[int, str]  # (the turn's seq in the chat log, fingerprint of its messages)


def fingerprint(messages: Sequence[Message]) -> str:
    """A short digest of ``messages`` as sent (any change of text, answer or shortening shows)."""
    digest = hashlib.blake2b(digest_size=12)
    for m in messages:
        digest.update(m.model_dump_json().encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def marks(messages: Sequence[Message], starts: Sequence[int], seqs: Sequence[int]) -> list[Mark]:
    """The marks of the whole turns in ``messages`` (``starts``: where each turn starts)."""
    out: list[Mark] = []
    for k, start in enumerate(starts):
        if start >= len(messages):
            break
        end = starts[k + 1] if k + 1 < len(starts) else len(messages)
        out.append((seqs[k] if k < len(seqs) else -1, fingerprint(messages[start:end])))
    return out


def is_prefix(head: Sequence[Mark], marks_now: Sequence[Mark]) -> bool:
    return len(head) <= len(marks_now) and tuple(marks_now[: len(head)]) == tuple(head)


@dataclass(frozen=True)
class Job:
    """One piece of background summarising: fold ``messages`` into ``previous``."""

    base: str  # the chat's summary when the job was made (what the result replaces)
    pending: str  # fingerprint of the folded-but-unsummarised messages it takes in
    covers: tuple[Mark, ...]  # every turn the result covers, oldest first
    messages: tuple[Message, ...]  # what is still to be summarised
    previous: str  # the summary they are folded into: ``base``, or a prepared one extended
    fold: int  # the chat's fold when the job was made (its first kept seq)
    spent: int = 0  # tokens already spent on the prepared summary it extends


@dataclass(frozen=True)
class Prepared:
    """A summary written ahead of the next fold."""

    base: str
    pending: str
    covers: tuple[Mark, ...]
    text: str
    tokens: int  # spent writing it (counted in the usage of the turn that uses it)
    model: str
    # No model summary: every try was turned down, and this is the summary the fold builds
    # then (the summary before, with the facts of the turns it covers), held only so the
    # fold's request can be read ahead. The fold builds it again and writes a model's
    # summary after the turn, as without it.
    facts_only: bool = False

    def valid(self, base: str, pending: str, marks_now: Sequence[Mark]) -> bool:
        """Whether it still describes the start of the transcript the chat has now."""
        return self.base == base and self.pending == pending and is_prefix(self.covers, marks_now)


def warm_request(template: ChatRequest, block: str, kept: Sequence[Message]) -> ChatRequest | None:
    """The request a fold to ``kept`` (with ``block``, the framed summary, in front of its
    first person message) will send, minus the next message; None when nothing is kept."""
    messages = list(kept)
    i = next((k for k, m in enumerate(messages) if m.role == "user"), None)
    if i is None:
        return None
    if block:
        messages[i] = messages[i].model_copy(update={"text": block + messages[i].text})
    return template.model_copy(
        update={"messages": tuple(messages), "max_output_tokens": WARM_TOKENS}
    )


async def warm(adapter: ProviderAdapter, request: ChatRequest) -> bool:
    """Send ``request`` and read its answer to the end (call it inside ``background()``);
    whether the server got through it. Failing is harmless: the fold evaluates it then."""
    try:
        async with closing_stream(adapter.stream(request)) as events:
            async for _event in events:
                pass
    except GaveWayError:
        return False
    except ProviderError as exc:
        log.info("evaluating the next fold's prompt ahead failed: %s", exc)
        return False
    return True
