"""Going on with an answer the person stopped ("Continue"), in each provider's terms.

A provider that continues a final assistant message (Anthropic's Messages API, Ollama's
/api/chat) gets the request ending with the stopped answer and writes on from its last word.
Elsewhere the stopped answer is followed by a short request to go on that the person never
sees and the transcript never keeps. OpenAI-style servers take that road: OpenAI itself starts
a new message after a final assistant one, and llama.cpp's server continues it only when
started without ``--no-prefill-assistant`` and not while the model thinks; a server that
refuses a final assistant message (newer Claude models do) gets the request on the next try.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.base import Message

CONTINUE_REQUEST = (
    "Continue exactly where you stopped, from the next word, without repeating anything you "
    "already wrote."
)


def prefills(adapter: object) -> bool:
    """Whether ``adapter``'s provider continues a final assistant message."""
    return bool(getattr(adapter, "continues_answer", False))


def continuing(messages: Sequence[Message], partial: str, *, prefill: bool) -> list[Message]:
    """``messages`` (ending with the person's message) followed by the stopped answer, and by
    the request to go on where the provider does not continue a final assistant message."""
    out = list(messages)
    # Anthropic refuses a final assistant message ending in white space; the words that follow
    # bring their own.
    head = partial.rstrip()
    if prefill and head:
        out.append(Message(role="assistant", text=head))
    else:
        out.append(Message(role="assistant", text=partial))
        out.append(Message(role="user", text=CONTINUE_REQUEST))
    return out


def join_answer(before: str, more: str) -> str:
    """``more`` (the first words of a continuation) as they follow ``before``: white space the
    model repeats at the join is dropped, so the answer reads as one."""
    if before[-1:].isspace():
        return more.lstrip()
    return more
