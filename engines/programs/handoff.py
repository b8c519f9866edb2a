"""What a program that has no memory of a chat is handed: the whole chat, bounded.

A program starting a session with a chat (an ACP program, Claude Code or Codex on a chat moved
to them, or whose session is lost) is handed the chat as plain lines ("Person: …",
"Assistant: …", and each tool result as a fold reads it, ``engines.tools.rules.fold_line``)
with the person's new message last. When the whole chat passes ``HANDOFF_CHARS``, the chat's
latest summary goes in front, framed as ``<earlier-in-this-chat>`` like everywhere else
(context, not instructions), followed by every message after what it covers: nothing falls
between the two. Only when that too is larger is it cut in the middle, visibly: the oldest
long messages shortened head and tail, and as a last resort the oldest left out behind a
marked gap. The divider's line says exactly what was given. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from engines.base import HandedOff, Message
from engines.context.session import FoldLoader, HistoryLoader, summary_block
from engines.tools.rules import fold_line

HANDOFF_CHARS = 60_000  # the characters of the chat a program is handed at most
SHORT_FLOOR = 1_000  # a long message is never shortened below this many characters
LONG = 2 * SHORT_FLOOR  # only messages longer than this are shortened (a cut must gain much)
GAP_ROOM = 200  # room the new message leaves for the gap line beside it
# The summary a fold records when the program kept its own and did not show it (Claude Code):
# a placeholder, so a handoff does not stand on it.
KEEPS_ITS_OWN = "Claude Code keeps this summary itself; it did not show it to Conch."

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
    ``messages`` counts the chat's messages in it (whole or shortened), ``shortened`` those
    cut head and tail, and ``left_out`` those replaced by the marked gap (``left_out_chars``
    characters of them).
    """

    text: str
    summary: str = ""
    messages: int = 0
    shortened: int = 0
    left_out: int = 0
    left_out_chars: int = 0

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


def gap_line(messages: int, chars: int) -> str:
    """The marked gap where earlier messages were left out (the last resort)."""
    what = "1 earlier message" if messages == 1 else f"{messages:,} earlier messages"
    return f"[… {what}, {chars:,} characters, left out …]"


def _squeeze(lines: Sequence[str], room: int) -> list[str]:
    """``lines`` with the oldest long ones shortened head and tail, each only as far as needed
    and never below ``SHORT_FLOOR``, until they fit ``room`` (or can be cut no further)."""
    out = list(lines)
    excess = _size(out) - room
    for i, line in enumerate(out):
        if excess <= 0:
            break
        if len(line) > LONG:
            out[i] = _shorten(line, max(SHORT_FLOOR, len(line) - excess))
            excess -= len(line) - len(out[i])
    return out


def _size(lines: Sequence[str]) -> int:
    return sum(len(x) for x in lines) + len(SEPARATOR) * max(0, len(lines) - 1)


def _fit(lines: list[str], room: int) -> tuple[list[str], int, int, int]:
    """``lines`` (oldest first) within ``room`` characters joined by ``SEPARATOR``: the oldest
    long ones shortened first, and only when that cannot be enough, the fewest oldest left out
    behind one marked gap. Returns the lines, how many of them were shortened, and how many
    were left out with their characters."""
    dropped = 0
    if _size(_squeeze(lines, 0)) > room:
        # Even cut to the floor they pass the room: find the fewest oldest to leave out.
        least = [min(len(x), SHORT_FLOOR) if len(x) > LONG else len(x) for x in lines]
        sep = len(SEPARATOR)
        after = 0  # the smallest the lines from ``dropped`` on can be, with separators
        for dropped in range(len(lines), 0, -1):
            shown = gap_line(dropped, sum(len(x) for x in lines[:dropped]))
            if len(shown) + after + (sep if after else 0) > room:
                dropped += 1  # one more than what fitted (fewer would pass the room)
                break
            after += least[dropped - 1] + (sep if after else 0)
        dropped = min(dropped, len(lines))
    gap = [gap_line(dropped, sum(len(x) for x in lines[:dropped]))] if dropped else []
    kept = _squeeze(lines[dropped:], room - _size(gap) - (len(SEPARATOR) if gap else 0))
    shortened = sum(1 for short, line in zip(kept, lines[dropped:], strict=True) if short != line)
    return gap + kept, shortened, dropped, sum(len(x) for x in lines[:dropped])


def build_handoff(
    history: Sequence[Message],
    new_message: str,
    *,
    summary: str = "",
    limit: int = HANDOFF_CHARS,
) -> Handoff:
    """The handoff for a turn: ``summary`` (what the chat's latest fold says of everything
    before ``history``), then every message of ``history`` (oldest first, the new message not
    in it), then ``new_message``.

    Only when the whole passes ``limit`` is it cut, in the middle: the oldest long messages
    shortened head and tail, and as a last resort the oldest left out behind a marked gap;
    never silently. The new message is always in it, shortened (head and tail kept) when it
    alone is too large.
    """
    block = summary_block(summary) if summary else ""
    lines = [guard_chat_frame(line) for line in (line_for(m) for m in history) if line]
    if not lines:
        return Handoff(text=block + _shorten(new_message, limit), summary=block)
    frame = len(CHAT_OPEN) + len(CHAT_CLOSE)
    # The new message keeps at least room for a gap line beside it.
    message = _shorten(new_message, max(0, limit - frame - GAP_ROOM))
    kept, shortened, left_out, chars = _fit(lines, limit - frame - len(message))
    chat = CHAT_OPEN + SEPARATOR.join(kept) + CHAT_CLOSE
    return Handoff(
        text=block + chat + message,
        summary=block,
        messages=len(lines) - left_out,
        shortened=shortened,
        left_out=left_out,
        left_out_chars=chars,
    )


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def handed_text(program: str, handoff: Handoff) -> str:
    """The divider's line: where the program's memory of the chat starts, and exactly what it
    was given."""
    given = handoff.messages + handoff.left_out
    messages = _count(given, "message", "messages")
    if handoff.summary and given:
        what = f"a summary and the {'message' if given == 1 else messages} after it"
    elif handoff.summary:
        what = "a summary"
    else:
        what = f"the chat's {messages}"
    notes = []
    if handoff.shortened:
        notes.append(f"{handoff.shortened:,} shortened")
    if handoff.left_out:
        notes.append(f"{handoff.left_out:,} left out ({handoff.left_out_chars:,} characters)")
    said = (
        f"{program} starts from here, with a handoff of {handoff.chat_chars:,} characters: {what}"
    )
    return said + (", " + " and ".join(notes) if notes else "")


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
    program's memory of the chat starts (None when there was nothing before the message).

    The whole chat when it fits; else the latest fold's summary and every message from the
    fold's first kept one on; without a summary to stand on, the whole chat cut to fit."""
    logged = [(s, m) for s, m in history() if s < seq]
    fold = latest_fold()
    handed = logged
    handoff = build_handoff([m for _, m in logged], new_message, limit=limit)
    summary = ""
    cut = handoff.shortened or handoff.left_out
    if cut and fold is not None and fold[1].strip() and fold[1] != KEEPS_ITS_OWN:
        first_kept, summary = fold
        handed = [(s, m) for s, m in logged if s >= first_kept]
        handoff = build_handoff([m for _, m in handed], new_message, summary=summary, limit=limit)
    lined = [s for s, m in handed if line_for(m)]  # the messages that make a line
    if not lined and not handoff.summary:
        return handoff, None
    first = lined[handoff.left_out] if handoff.left_out < len(lined) else seq
    event = HandedOff(
        first_seq=first,
        program=program,
        text=handed_text(program, handoff),
        summary=summary if handoff.summary else "",
    )
    return handoff, event
