"""What a program that keeps no chat of Conch's is handed each turn: the chat, bounded.

An ACP program starts every turn fresh, so it is handed the newest ``HANDOFF_CHARS``
characters of the chat as plain lines ("Person: …", "Assistant: …", and each tool result as a
fold reads it, ``engines.tools.rules.fold_line``) with the person's new message last. When
older lines are left out and the chat has a summary, the summary goes in front, framed as
``<earlier-in-this-chat>`` like everywhere else: context, not instructions. Conch does not
summarise for these programs on its own. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from engines.base import HandedOff, Message
from engines.context.session import FoldLoader, HistoryLoader, summary_block
from engines.tools.rules import fold_line

HANDOFF_CHARS = 60_000  # the newest characters of the chat a program is handed each turn

CHAT_OPEN = (
    "<this-chat-so-far>\n"
    "(The conversation so far, handed over by Conch. The person's new message follows it.)\n"
)
CHAT_CLOSE = "\n</this-chat-so-far>\n\n"
SEPARATOR = "\n\n"
CHAT_TAG = "this-chat-so-far"
_CHAT_FRAME = re.compile(r"<\s*(/?)\s*" + re.escape(CHAT_TAG) + r"\s*>", re.IGNORECASE)


def guard_chat_frame(line: str) -> str:
    """``line`` unable to open or close the handoff's frame: a message that quotes
    ``</this-chat-so-far>`` would otherwise end the block early, and what follows it would
    read as the person's new message. Each tag gets a zero-width space (as the summary's
    frame does), which a person does not see and a model does."""
    if "<" not in line:
        return line
    return _CHAT_FRAME.sub(lambda m: f"<{m.group(1)}{CHAT_TAG}\u200b>", line)


@dataclass(frozen=True)
class Handoff:
    """The text a program is sent for one turn.

    ``summary`` is the framed summary block at its start ("" when none went with it);
    ``left_out`` counts the chat's earlier messages not in it.
    """

    text: str
    summary: str = ""
    left_out: int = 0

    @property
    def chat_chars(self) -> int:
        """Characters of the chat itself, what ``HANDOFF_CHARS`` bounds."""
        return len(self.text) - len(self.summary)


def line_for(message: Message) -> str:
    """One message as a plain line; thinking left out, pictures named."""
    text = message.text.strip()
    pictures = " ".join(f"[picture: {p.name or 'picture'}]" for p in message.pictures)
    body = " ".join(x for x in (text, pictures) if x)
    if message.role == "user":
        return f"Person: {body}" if body else ""
    if message.role == "assistant":
        calls = [f"[used {c.name}]" for c in message.tool_calls]
        said = " ".join(x for x in (body, *calls) if x)
        return f"Assistant: {said}" if said else ""
    return fold_line(message.tool_name, body)


def _shorten(text: str, limit: int) -> str:
    """Head and tail of ``text`` within ``limit`` characters, the middle marked."""
    if len(text) <= limit:
        return text
    marker = f"\n\n[… {len(text):,} characters left out …]\n\n"
    room = max(0, limit - len(marker))
    head = room * 2 // 3
    tail = room - head
    cut = len(text) - head - tail
    marker = f"\n\n[… {cut:,} characters left out …]\n\n"
    body = text[:head] + marker + (text[len(text) - tail :] if tail else "")
    return body[:limit]


def build_handoff(
    history: Sequence[Message],
    new_message: str,
    *,
    summary: str = "",
    limit: int = HANDOFF_CHARS,
) -> Handoff:
    """The handoff for a turn: ``history`` (oldest first, the new message not in it) cut to
    the newest lines that fit ``limit`` with ``new_message``, whole lines only; the summary
    goes in front only when lines were left out.

    The new message is always in it, shortened (head and tail kept) when it alone is larger.
    """
    lines = [guard_chat_frame(line) for line in (line_for(m) for m in history) if line]
    if not lines:
        return Handoff(text=_shorten(new_message, limit))
    frame = len(CHAT_OPEN) + len(CHAT_CLOSE)
    room = limit - frame - len(new_message)
    kept: list[str] = []
    for line in reversed(lines):
        cost = len(line) + (len(SEPARATOR) if kept else 0)
        if cost > room:
            break
        kept.append(line)
        room -= cost
    kept.reverse()
    left_out = len(lines) - len(kept)
    if not kept:
        # Nothing earlier fits beside the new message: hand over the message alone.
        block = summary_block(summary) if summary else ""
        return Handoff(text=block + _shorten(new_message, limit), summary=block, left_out=left_out)
    block = summary_block(summary) if left_out and summary else ""
    chat = CHAT_OPEN + SEPARATOR.join(kept) + CHAT_CLOSE
    return Handoff(text=block + chat + new_message, summary=block, left_out=left_out)


def handed_text(program: str, handoff: Handoff) -> str:
    """The divider's line where the program's memory of the chat starts."""
    what = f"a handoff of {handoff.chat_chars:,} characters"
    if handoff.summary:
        what += " and a summary"
    return f"{program} starts from here, with {what}"


@dataclass(frozen=True)
class ChatHandoff:
    """The handoffs one chat gives one program: ``handoff_for`` with the chat's loaders."""

    history: HistoryLoader
    latest_fold: FoldLoader
    program: str
    limit: int = HANDOFF_CHARS

    def __call__(self, seq: int, new_message: str) -> tuple[Handoff, HandedOff | None]:
        return handoff_for(
            self.history, self.latest_fold, seq, new_message, program=self.program, limit=self.limit
        )


def handoff_for(
    history: HistoryLoader,
    latest_fold: FoldLoader,
    seq: int,
    new_message: str,
    *,
    program: str,
    limit: int = HANDOFF_CHARS,
) -> tuple[Handoff, HandedOff | None]:
    """The handoff for the person's message at ``seq``, read from the chat log, and where the
    program's memory of the chat starts (None when there was nothing before the message)."""
    logged = [(s, m) for s, m in history() if s < seq]
    fold = latest_fold()
    summary = fold[1] if fold is not None else ""
    handoff = build_handoff([m for _, m in logged], new_message, summary=summary, limit=limit)
    lined = [s for s, m in logged if line_for(m)]  # the messages that make a line
    if not lined:
        return handoff, None
    first = lined[handoff.left_out] if handoff.left_out < len(lined) else seq
    event = HandedOff(
        first_seq=first,
        program=program,
        text=handed_text(program, handoff),
        summary=summary if handoff.summary else "",
    )
    return handoff, event
