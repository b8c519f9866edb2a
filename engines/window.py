"""The arithmetic of fitting a chat into a model's window: estimates, the budget, fold plans.

No I/O here. The numbers: text is counted the way byte-pair tokenizers split it (four letters
in a row a token, a digit a token, a run of punctuation a token or two, one token for any
non-ASCII character; ``estimate_tokens``), 1,600 for a picture; the transcript gets 90% of the
window less room for the answer, the real system prompt and the real tools, and never more
than 100,000 tokens.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engines.base import Message

PICTURE_TOKENS = 1600
TRANSCRIPT_CAP = 100_000  # tokens of transcript sent per turn, whatever the window
ANSWER_MIN = 1_024
ANSWER_MAX = 16_384
FACTOR_CAP = 4.0
FACTOR_MIN = 0.25  # an exact count below this share of the estimate is not believed

# The window assumed when nobody says, and where lean mode begins: at or below
# LEAN_WINDOW the short system and summary prompts are used and tools come on demand.
UNKNOWN_WINDOW_API = 128_000  # a model API whose list does not say
UNKNOWN_WINDOW_LOCAL = 8_192  # a server on this computer that does not say
LEAN_WINDOW = 8_192

# Fold triggers, and the targets a fold drops down to.
FOLD_MESSAGES = 600
KEEP_MESSAGES = 300
FOLD_BYTES = 8 * 1024 * 1024
KEEP_BYTES = 4 * 1024 * 1024


# --- the estimate ------------------------------------------------------------------------------

# Text is counted the way byte-pair tokenizers split it before merging: four letters in a row a
# token, a little more for each word (a short word costs less than its token, a long one more:
# over prose they even out), each digit a token (Llama, SmolLM2, Gemma and Qwen never merge
# digits, or group at most three), a space before a digit one more, a run of punctuation a token
# or two, a line break and the indentation after it less than one, and any non-ASCII character
# one. Weights are in tenths of a token, fitted on English, code, JSON and number tables against
# SmolLM2's and Gemma 3's tokenizers (``python -m bench.estimate``); what is left over (a script
# or a code base unlike these) the chat's factor corrects from real counts. A long run of
# letters is still four characters a token.
LETTERS = 10  # per four letters in a row
WORD = 4  # a word after a space
NAME = 3  # a word after punctuation (a name in code: ``self.name``, ``(value``)
DIGIT = 10
SPACE_DIGIT = 10  # a space before a digit is a token of its own (digits take none)
PUNCT = 12  # a run of punctuation
PUNCT_PAIR = 4  # and per two characters of it
INDENT = 4  # per four spaces
LINE = 8  # a line break
OTHER = 10  # a non-ASCII character


def _byte_class(b: int) -> str:
    if b >= 0xC0:
        return "u"  # the first byte of a non-ASCII character
    if b >= 0x80:
        return "c"  # a continuation byte (never counted)
    ch = chr(b)
    if ch.isalpha():
        return "a"
    if ch.isdigit():
        return "0"
    if ch in " \t":
        return " "
    if ch in "\r\n\v\f":
        return "\n"
    return "!"


# Every byte of UTF-8 mapped to its class, so each count below is one pass in C.
_CLASSES = bytes(ord(_byte_class(b)) for b in range(256))
# Classes to punctuation or "." (every other class), so a run of punctuation starts at "." + "!".
_PUNCT_ONLY = bytes(b if b == ord("!") else ord(".") for b in range(256))


class _Classes:
    """A text's bytes by class, counted on any byte range without copying (for ``estimate``,
    and for finding how much of a text fits a number of tokens)."""

    def __init__(self, text: str) -> None:
        # surrogatepass: a lone surrogate (pasted from a broken file) is still one character.
        self.classes = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
        self.punct = self.classes.translate(_PUNCT_ONLY)
        self.size = len(self.classes)

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """The estimate of the bytes ``start:end`` (at least 1 for any non-empty range)."""
        e = self.size if end is None else end
        if e <= start:
            return 0
        c, p = self.classes, self.punct
        tenths = (
            LETTERS * c.count(b"aaaa", start, e)
            + WORD * c.count(b" a", start, e)
            + NAME * c.count(b"!a", start, e)
            + DIGIT * c.count(b"0", start, e)
            + SPACE_DIGIT * c.count(b" 0", start, e)
            + PUNCT * (p.startswith(b"!", start, e) + p.count(b".!", start, e))
            + PUNCT_PAIR * c.count(b"!!", start, e)
            + INDENT * c.count(b"    ", start, e)
            + LINE * c.count(b"\n", start, e)
            + OTHER * c.count(b"u", start, e)
        )
        return max(1, -(-tenths // 10))

    def chars(self, start: int, end: int) -> int:
        """Characters in the bytes ``start:end`` (whole characters)."""
        return end - start - self.classes.count(b"c", start, end)

    def boundary(self, at: int, step: int) -> int:
        """``at`` moved by ``step`` (-1 or 1) to the nearest start of a character."""
        while 0 < at < self.size and self.classes[at] == ord("c"):
            at += step
        return at


def estimate_tokens(text: str) -> int:
    """About what a byte-pair tokenizer makes of ``text`` (the weights above); at least 1 for
    any text. Linear and fast enough for a 5 MB paste: every count is one pass in C."""
    if not text:
        return 0
    return _Classes(text).tokens()


def unknown_window(local: bool) -> int:
    """The window assumed for a model nobody gave one: 8,192 on this computer, else 128,000."""
    return UNKNOWN_WINDOW_LOCAL if local else UNKNOWN_WINDOW_API


def answer_reserve(window: int, asked: int | None = None) -> int:
    """Room kept for the answer: 15% of the window, between 1,024 and 16,384 tokens; or the
    answer length the person ``asked`` for in the chat's settings, which is also the limit
    sent, within half of the 90% of the window a request may fill (the rest is the chat's)."""
    w = max(0, int(window))
    if asked is not None and asked > 0:
        return max(1, min(int(asked), 9 * w // 20))
    # Integer arithmetic (round half up) so the figure never depends on float rounding.
    return min(ANSWER_MAX, max(ANSWER_MIN, (15 * w + 50) // 100))


def budget(
    window: int, system_tokens: int = 0, tools_tokens: int = 0, answer_tokens: int | None = None
) -> int:
    """Tokens of transcript one request may carry; 0 when the window cannot hold any.
    ``answer_tokens``: the answer length the person asked for (``answer_reserve``)."""
    try:
        w = int(window)
    except (TypeError, ValueError, OverflowError):
        return 0
    if w <= 0:
        return 0
    reserve = answer_reserve(w, answer_tokens)
    room = 9 * w // 10 - reserve - max(0, system_tokens) - max(0, tools_tokens)
    return max(0, min(TRANSCRIPT_CAP, room))


TURN_ROOM = 256  # tokens of transcript a window must leave beside the system prompt and tools
WINDOW_MIN = 1_024  # no window a refusal names is believed below this


def smallest_window(system_tokens: int = 0, tools_tokens: int = 0, room: int = TURN_ROOM) -> int:
    """The smallest plausible window: at least 1,024 and with ``room`` tokens of budget left
    beside the system prompt and tools (a window that cannot hold one turn is not believed)."""
    lo = WINDOW_MIN
    # Past this the budget certainly has the room (0.9W - 16,384 - system - tools >= room).
    hi = max(lo, -(-10 * (room + ANSWER_MAX + max(0, system_tokens) + max(0, tools_tokens)) // 9))
    while lo < hi:
        mid = (lo + hi) // 2
        if budget(mid, system_tokens, tools_tokens) >= room:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _json(value: Any) -> str:
    # Sorted keys and fixed separators: the same message always gives the same figure.
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def estimate_message(m: Message) -> int:
    """Tokens one message costs: its text, thinking, tool calls and 1,600 per picture.

    An assistant message with ``raw`` blocks is sent as those blocks (they already hold its text
    and thinking, plus signatures), so they are counted instead of the plain fields.
    """
    tokens = PICTURE_TOKENS * len(m.pictures)
    if m.raw is not None:
        return tokens + estimate_tokens(_json(list(m.raw)))
    tokens += estimate_tokens(m.text) + estimate_tokens(m.thinking) + estimate_tokens(m.tool_name)
    for call in m.tool_calls:
        tokens += estimate_tokens(call.name) + estimate_tokens(_json(call.arguments))
    return tokens


def message_bytes(m: Message) -> int:
    """UTF-8 size of the message as the transcript file stores it (the 8 MiB / 4 MiB limits)."""
    return len(m.model_dump_json().encode("utf-8"))


def update_factor(
    factor: float, real: int | float, estimated: int | float, *, exact: bool = False
) -> float:
    """Correct the chat's estimate factor from a real count of the input that was estimated.

    ``exact``: the count is the whole input by the server's own tokenizer (a tokenize
    endpoint, or usage that includes cached tokens), so the factor follows it both ways (a
    count below ``FACTOR_MIN`` of the estimate is not believed). Otherwise never downward,
    because Ollama reports only what it did not cache. Capped at 4.0 either way: one bogus
    report (a server counting the whole cache, or an estimate of nearly nothing) must not make
    the chat fold on every later turn.
    """
    base = factor if factor > 0 and factor == factor else 1.0  # also rejects NaN
    if not (real > 0 and estimated > 0):
        return base
    ratio = float(real) / float(estimated)
    if ratio != ratio:
        return base
    if exact:
        # Below FACTOR_MIN no tokenizer counts that little: a report of some other figure.
        return min(ratio, FACTOR_CAP) if ratio >= FACTOR_MIN else base
    return max(base, min(ratio, FACTOR_CAP))


# --- fold planning ----------------------------------------------------------------------------

FoldReason = Literal["", "budget", "messages", "bytes", "forced"]


@dataclass(frozen=True)
class FoldPlan:
    """What to do before a request: drop ``drop`` messages from the front (a turn boundary).

    ``shorten_to`` is the token target for the current turn when it alone is too big.
    """

    drop: int = 0
    reason: FoldReason = ""
    kept_tokens: int = 0
    shorten_to: int | None = None

    @property
    def due(self) -> bool:
        return self.drop > 0 or self.shorten_to is not None


class Ledger:
    """Per-message token and byte figures with running sums, for planning folds cheaply.

    Appending is O(1) and dropping from the front O(1) amortised; ``plan`` is O(log n), so a
    chat of 100,000 messages plans as fast as one of 100. Indexes given out are relative to
    the first kept message.
    """

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        # Running sums are absolute since the ledger began (index 0 = nothing): differences
        # stay right after dropping from the front, so nothing is recomputed.
        self._tok: list[int] = [0]
        self._byt: list[int] = [0]
        self._users: list[int] = []  # absolute positions of the person's messages
        # The running sums where each turn starts, so the cut is found by bisect in C.
        self._turn_tok: list[int] = []
        self._turn_byt: list[int] = []
        self._base = 0  # absolute position of the first kept message (index into the lists)
        self._first_user = 0  # index into _users of the first user message still kept
        for m in messages:
            self.append(m)

    def append(self, m: Message) -> None:
        self.append_figures(estimate_message(m), message_bytes(m), user=m.role == "user")

    def append_figures(self, tokens: int, size: int, *, user: bool) -> None:
        if user:
            self._users.append(len(self._tok) - 1)
            self._turn_tok.append(self._tok[-1])
            self._turn_byt.append(self._byt[-1])
        self._tok.append(self._tok[-1] + max(0, tokens))
        self._byt.append(self._byt[-1] + max(0, size))

    def __len__(self) -> int:
        return len(self._tok) - 1 - self._base

    @property
    def tokens(self) -> int:
        return self._tok[-1] - self._tok[self._base]

    @property
    def size(self) -> int:
        return self._byt[-1] - self._byt[self._base]

    def tokens_from(self, index: int) -> int:
        """Tokens of the kept messages from ``index`` (relative) to the end."""
        return self._tok[-1] - self._tok[self._base + max(0, min(index, len(self)))]

    @property
    def turn_starts(self) -> list[int]:
        """Relative indexes where kept turns start (the person's messages). O(turns)."""
        return [u - self._base for u in self._users[self._first_user :]]

    @property
    def turns(self) -> int:
        return len(self._users) - self._first_user

    def last_turn_start(self) -> int:
        """Relative index of the current turn (0 when nothing was said by the person)."""
        if self.turns == 0:
            return 0
        return self._users[-1] - self._base

    def drop_front(self, n: int) -> None:
        n = max(0, min(n, len(self)))
        self._base += n
        self._first_user = bisect_left(self._users, self._base, lo=self._first_user)
        # Reclaim memory now and then; each element is copied at most once per halving, so
        # dropping stays O(1) amortised.
        if self._base > 4096 and self._base * 2 > len(self._tok):
            self._compact()

    def pop_back(self, n: int) -> None:
        """Forget the newest ``n`` messages (to replace the current turn with a shortened one)."""
        n = max(0, min(n, len(self)))
        if n == 0:
            return
        end = len(self._tok) - 1 - n
        del self._tok[end + 1 :]
        del self._byt[end + 1 :]
        while len(self._users) > self._first_user and self._users[-1] >= end:
            self._users.pop()
            self._turn_tok.pop()
            self._turn_byt.pop()

    def clear(self) -> None:
        self.drop_front(len(self))

    def _compact(self) -> None:
        b = self._base
        self._tok = self._tok[b:]
        self._byt = self._byt[b:]
        first = self._first_user
        self._users = [u - b for u in self._users[first:]]
        self._turn_tok = self._turn_tok[first:]
        self._turn_byt = self._turn_byt[first:]
        self._first_user = 0
        self._base = 0

    def plan(
        self, budget: int, factor: float = 1.0, reserved: int = 0, force: bool = False
    ) -> FoldPlan:
        """Whether to fold before the next request, and how far.

        Folds when tokens x factor + reserved passes ``budget``, or past 600 messages or
        8 MiB; then drops whole turns until what is kept fits half the budget, 300 messages
        and 4 MiB. The current turn always stays; ``force`` drops everything before it.
        """
        f = factor if factor > 0 and factor == factor else 1.0
        b = max(0, budget)
        r = max(0, reserved)
        end = len(self._tok) - 1
        tokens = self.tokens

        def over(tok: int, limit: float) -> bool:
            return tok * f + r > limit

        reason: FoldReason = ""
        if force:
            reason = "forced"
        elif over(tokens, b):
            reason = "budget"
        elif len(self) > FOLD_MESSAGES:
            reason = "messages"
        elif self.size > FOLD_BYTES:
            reason = "bytes"
        if not reason:
            return FoldPlan(kept_tokens=tokens)

        last = self._base + self.last_turn_start()
        start = last
        if not force and self.turns > 1:
            start = self._first_fitting(end, b / 2, f, r, last)
        kept = self._tok[end] - self._tok[start]
        shorten_to = None
        if over(kept, b):
            shorten_to = max(0, int((b - r) / f))
        return FoldPlan(
            drop=start - self._base, reason=reason, kept_tokens=kept, shorten_to=shorten_to
        )

    def near(self, budget: int, factor: float = 1.0, reserved: int = 0, share: float = 1.0) -> bool:
        """Whether the transcript has passed ``share`` of any fold trigger (tokens x factor +
        reserved against ``budget``, messages, bytes)."""
        f = factor if factor > 0 and factor == factor else 1.0
        return (
            self.tokens * f + max(0, reserved) > share * max(0, budget)
            or len(self) > share * FOLD_MESSAGES
            or self.size > share * FOLD_BYTES
        )

    def recent_person_tokens(
        self, turns: int = 4, *, largest: bool = False, folded: bool = False
    ) -> int:
        """The mean (or ``largest``) estimate of the person's message in the newest ``turns``
        turns (0 with none): how much the next message may bring. ``folded``: turns a fold
        dropped count too (what this ledger still knows of them: right after a fold at a
        small window, the one turn kept says little of how big messages come)."""
        lowest = 0 if folded else self._first_user
        first = max(lowest, len(self._users) - max(1, turns))
        sizes = [self._tok[u + 1] - self._tok[u] for u in self._users[first:]]
        if not sizes:
            return 0
        return max(sizes) if largest else sum(sizes) // len(sizes)

    def cut_ahead(self, budget: int, factor: float = 1.0, reserved: int = 0, ahead: int = 0) -> int:
        """How many messages (whole turns) the next fold would drop if the next message added
        ``ahead`` tokens: the B/2 rule applied now, with that message's room kept free.

        The newest turn is never counted in: the person may still answer it, retry it or add to
        it. 0 when nothing before it would go.
        """
        if self.turns < 2:
            return 0
        f = factor if factor > 0 and factor == factor else 1.0
        r = max(0, reserved)
        end = len(self._tok) - 1
        last = self._base + self.last_turn_start()
        half = max(0, budget) / 2 - max(0, ahead) * f
        return self._first_fitting(end, half, f, r, last) - self._base

    def keeps_nothing(
        self, budget: int, factor: float = 1.0, reserved: int = 0, ahead: int = 0
    ) -> bool:
        """Whether a next message of ``ahead`` tokens would bring a fold that keeps nothing
        before it: the transcript with it passes ``budget``, and the newest turn with it does
        not fit half of it (the B/2 rule then drops every turn the transcript has now)."""
        if self.turns < 1:
            return False
        f = factor if factor > 0 and factor == factor else 1.0
        r = max(0, reserved)
        more = max(0, ahead)
        if (self.tokens + more) * f + r <= max(0, budget):
            return False
        return (self.tokens_from(self.last_turn_start()) + more) * f + r > max(0, budget) / 2

    def _first_fitting(self, end: int, half: float, f: float, r: int, last: int) -> int:
        """The earliest kept turn start from which the rest fits the fold targets.

        Each target only gets easier as the cut moves later, so each is one bisect (in C) over
        the turn starts; the latest of the three cuts meets all of them.
        """
        users, lo, hi = self._users, self._first_user, len(self._users)
        if users[lo] == self._base:
            lo += 1  # a cut at the very front drops nothing
        room = (half - r) / f
        i = max(
            bisect_left(self._turn_tok, self._tok[end] - room, lo, hi),
            bisect_left(users, end - KEEP_MESSAGES, lo, hi),
            bisect_left(self._turn_byt, self._byt[end] - KEEP_BYTES, lo, hi),
        )

        def fits(k: int) -> bool:
            pos = users[k]
            return (
                (self._tok[end] - self._tok[pos]) * f + r <= half
                and end - pos <= KEEP_MESSAGES
                and self._byt[end] - self._byt[pos] <= KEEP_BYTES
            )

        # The token bound above was divided out in floats; settle its last step exactly.
        while i > lo and fits(i - 1):
            i -= 1
        while i < hi and not fits(i):
            i += 1
        return users[i] if i < hi else last


# --- shortening -------------------------------------------------------------------------------


def _marker(left_out: int) -> str:
    return f"\n\n[… {left_out:,} characters left out …]\n\n"


# Past this many characters a token no text reaches (three spaces and a three-letter word cost
# 0.4 of one); only where the search starts, so a text that goes beyond it is still measured right.
_CHARS_PER_TOKEN_MAX = 16


def _last_fitting(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest n in lo..hi with ``fits(n)``, given ``fits(lo)`` and that it stays true
    below any n where it holds."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _within(text: str, tokens: int, *, tail: bool) -> _Classes:
    """The classes of the shortest head (or tail) of ``text`` that is all of it or costs more
    than ``tokens``: what fits lies inside, and a huge paste is never read whole."""
    span = _CHARS_PER_TOKEN_MAX * (tokens + 1)
    while True:
        c = _Classes(text[-span:] if tail else text[:span])
        if span >= len(text) or c.tokens() > tokens:
            return c
        span *= 2


def _prefix_within(text: str, tokens: int) -> int:
    """The longest n with estimate_tokens(text[:n]) <= tokens."""
    if tokens <= 0 or not text:
        return 0
    c = _within(text, tokens, tail=False)
    end = _last_fitting(lambda e: c.tokens(0, e) <= tokens, 0, c.size)
    # A cut inside a character's bytes moves back to its start (fewer bytes never cost more).
    end = c.boundary(end, -1)
    return c.chars(0, end)


def _suffix_within(text: str, tokens: int) -> int:
    """The longest n with estimate_tokens(text[-n:]) <= tokens."""
    if tokens <= 0 or not text:
        return 0
    c = _within(text, tokens, tail=True)
    size = _last_fitting(lambda n: c.tokens(c.size - n) <= tokens, 0, c.size)
    start = c.boundary(c.size - size, 1)
    return c.chars(start, c.size)


def shorten_text(text: str, max_tokens: int) -> str:
    """Keep the head and tail of ``text`` within ``max_tokens``; mark the middle left out.

    The marker always shows, so a text shortened to (almost) nothing still says how much
    went. Texts that already fit come back unchanged.
    """
    if estimate_tokens(text) <= max_tokens:
        return text
    # The marker's own cost, with the largest possible count, comes out of the allowance.
    room = max(0, max_tokens - estimate_tokens(_marker(len(text))))
    head = _prefix_within(text, (room + 1) // 2)
    tail = _suffix_within(text[head:], room - estimate_tokens(text[:head]))
    left_out = len(text) - head - tail
    return text[:head] + _marker(left_out) + text[len(text) - tail :]


def shorten_turn(
    messages: Sequence[Message], max_tokens: int, roles: tuple[str, ...] = ("user", "tool")
) -> tuple[Message, ...]:
    """Shorten the longest texts of ``roles`` (the person's and the tools') in one turn until it
    fits ``max_tokens``.

    The model's own messages are never touched (their raw blocks are sent back as they came).
    Stops when the turn fits or nothing more can be cut.
    """
    out = list(messages)
    excess = sum(estimate_message(m) for m in out) - max(0, max_tokens)
    if excess <= 0:
        return tuple(out)
    order = sorted(
        (i for i, m in enumerate(out) if m.role in roles and m.text),
        key=lambda i: (-estimate_tokens(out[i].text), i),
    )
    for i in order:
        if excess <= 0:
            break
        m = out[i]
        current = estimate_tokens(m.text)
        shorter = shorten_text(m.text, max(0, current - excess))
        saved = current - estimate_tokens(shorter)
        if saved > 0:
            out[i] = m.model_copy(update={"text": shorter})
            excess -= saved
    return tuple(out)
