"""The context rules for tools: what a tool list costs, how big a result may be, how a result is
read back when it is folded, and how its text is kept from posing as Conch's own frame.

No I/O. Shortening reuses ``engines.window.shorten_text`` (and so its marker), so a
shortened tool result reads exactly like any other shortened text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from engines.base import Message
from engines.window import TRANSCRIPT_CAP, estimate_tokens, shorten_text, shorten_turn

RESULT_SHARE = 0.25  # of the budget still free in the turn, the most one tool result may take
RESULT_MIN_TOKENS = 256  # however full the turn, a result keeps at least this much
# The most any model is ever sent of one result (a share of the largest budget); the chat log
# keeps no more than this either, so a 20 MB result does not make it 20 MB bigger.
KEPT_RESULT_TOKENS = int(RESULT_SHARE * TRANSCRIPT_CAP)
FOLD_RESULT_TOKENS = 2_000  # a folded result is read back to the summariser at most this long
FRAME_TAG = "earlier-in-this-chat"  # the frame the summary of folded turns is carried in
NAME_CHARS = 60

# Any spelling of the frame's tags a model might take for the real thing: other case, spaces.
_FRAME = re.compile(r"<\s*(/?)\s*" + re.escape(FRAME_TAG) + r"\s*>", re.IGNORECASE)


def tool_list_tokens(specs: Sequence[dict[str, Any]]) -> int:
    """Tokens the tool list costs, estimated over its JSON the way it is sent (compact, the
    same bytes every time)."""
    if not specs:
        return 0
    return estimate_tokens(
        json.dumps(list(specs), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    )


def result_cap(budget_tokens: int, used_tokens: int = 0) -> int:
    """The most tokens one tool result may take before it is shortened: a share of what the
    budget still has free after ``used_tokens`` (the turn so far), never below a floor."""
    free = max(0, budget_tokens - max(0, used_tokens))
    return max(RESULT_MIN_TOKENS, int(free * RESULT_SHARE))


def guard_frame(text: str) -> str:
    """``text`` unable to open or close the ``<earlier-in-this-chat>`` frame: each of its tags,
    in any spelling, gets a zero-width space that a person does not see and a model does."""
    if "<" not in text:
        return text
    return _FRAME.sub(lambda m: f"<{m.group(1)}{FRAME_TAG}\u200b>", text)


def shorten_tool_result(text: str, max_tokens: int) -> str:
    """A tool result ready to send: frame tags disarmed, then head and tail kept within
    ``max_tokens`` with the middle replaced by the marker saying how much was left out.

    A result that fits comes back as it was (apart from disarmed tags).
    """
    return shorten_text(guard_frame(text), max(0, max_tokens))


def kept_result(text: str) -> str:
    """What the chat log keeps of a tool result: all of it when it is no bigger than any model
    is ever sent, else its head and tail with the marker saying how much was left out."""
    return shorten_text(text, KEPT_RESULT_TOKENS)


def shorten_turn_tools_first(messages: Sequence[Message], max_tokens: int) -> tuple[Message, ...]:
    """One turn shortened to fit ``max_tokens``: its tool results first (the largest first),
    and only then what the person wrote; the model's own messages never."""
    return shorten_turn(shorten_turn(messages, max_tokens, roles=("tool",)), max_tokens)


def _name(name: str) -> str:
    # One line, no colon or parenthesis that would end the "Tool result (NAME):" label early.
    clean = " ".join(re.sub(r"[:()\[\]]", " ", name).split())
    return clean[:NAME_CHARS] or "tool"


def fold_line(name: str, text: str, max_tokens: int = FOLD_RESULT_TOKENS) -> str:
    """A folded tool result as the summariser reads it: ``Tool result (NAME): …``.

    Its own lines are indented, so a line in a result can never pass for a "Person:" or
    "Assistant:" line of the chat.
    """
    body = shorten_tool_result(text.strip(), max_tokens).strip() or "(empty)"
    body = "\n".join(
        line if i == 0 else f"  {line}" for i, line in enumerate(body.splitlines()) if line.strip()
    )
    return f"Tool result ({_name(name)}): {body}"


def unknown_tool(name: str, names: Sequence[str]) -> str:
    """What the model is told when it calls a tool that does not exist."""
    shown = ", ".join(names[:30]) + (" …" if len(names) > 30 else "")
    if not names:
        return f"There is no tool called “{name}”, and no tools are available in this chat."
    return f"There is no tool called “{name}”. The tools are: {shown}."
