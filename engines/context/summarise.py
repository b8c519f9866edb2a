"""The summariser: folds the turns a chat no longer sends into a short summary.

Which model writes it: the chat provider's cheapest model, then its small one, then the chat's
own model; a server on this computer only ever uses the chat's own model, because loading a
second model would evict the one the person is chatting with.

How: the folded turns are read back as plain lines ("Person: ...", "Assistant: ...", "Tool
result (name): ..."), scrubbed of secrets, and cut into pieces small enough that no request
ever exceeds the summarising model's window. Each piece is folded into the summary so far. A
reply that is not a summary (a refusal, a tool call, nothing, an echo, a runaway, a word or
line over and over, code or markup, another language than the chat's, names and numbers the
chat never had, a bare list of numbers) is thrown away and the next model tries. The fact
keeper then writes the summary in its four parts, keeping word for word the person's own
statements and every name, number, date, amount, path or link the summary left out
(``engines.context.facts``).

A summary is a help, never a gate: provider failures and timeouts give ``text=None`` with the
reason in words, never an exception. The one exception is ``GaveWayError``: a summary written in
the background (``engines.local.gate.background``) stopped for the person's turn, and its
caller tries again later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from engines.base import Event, Message, ModelInfo, TextDelta, ToolCall, Usage
from engines.context.facts import (
    IMPORTED_SPEAKER,
    PASTED_SPEAKER,
    compose,
    facts_cap,
    keep_facts,
    parts,
    split_kept,
)
from engines.context.protocols import SummaryResult
from engines.local.gate import GaveWayError
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError, closing_stream
from engines.resources import read_prompt
from engines.scrub import MARKER, scrub
from engines.tools.rules import fold_line
from engines.window import LEAN_WINDOW, budget, estimate_tokens, unknown_window

log = logging.getLogger("conch.summarise")

PIECE_CHARS = 24_000  # the most a piece ever holds, whatever the window
ANSWER_MAX = 1_024  # tokens a summary reply may take
ANSWER_MIN = 128
MIN_PIECE_TOKENS = 150  # below this a window cannot hold a useful piece
SMALL_WINDOW_CHARS = 6_000  # a summary for an 8K model stays under this
FACTS_MAX_CHARS = 3_000  # the lines Conch keeps word for word never grow past this
MESSAGE_CHARS = 24_000  # so is anything else longer than a whole piece
OVERHEAD_TOKENS = 48  # chat template, role markers, the frame's own words


def _tokens(text: str) -> int:
    """A cautious count: the app's estimate and a third more (prose at three characters a
    token), so a summary request is never the one a server refuses."""
    return -(-4 * estimate_tokens(text) // 3)


def answer_room(window: int) -> int:
    """Tokens a summary reply may use in a request to a model with ``window``."""
    return max(ANSWER_MIN, min(ANSWER_MAX, int(window * 0.15)))


# --- reading the turns back -------------------------------------------------------------------


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    left_out = len(text) - head - tail
    return f"{text[:head]}\n[… {left_out:,} characters left out …]\n{text[-tail:]}"


def _raw_text(message: Message) -> str:
    """The text blocks of a provider-native message whose plain text field is empty."""
    parts: list[str] = []
    for block in message.raw or ():
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def render(folded: Sequence[Message]) -> str:
    """The folded turns as plain lines: thinking left out, pictures named, tool calls named."""
    lines: list[str] = []
    for m in folded:
        text = (m.text or (_raw_text(m) if m.raw else "")).strip()
        pictures = " ".join(f"[picture: {p.name or 'picture'}]" for p in m.pictures)
        if m.role == "user":
            body = " ".join(x for x in (_shorten(text, MESSAGE_CHARS), pictures) if x)
            if body:
                lines.append(f"Person: {body}")
        elif m.role == "assistant":
            if text:
                lines.append(f"Assistant: {_shorten(text, MESSAGE_CHARS)}")
            for call in m.tool_calls:
                args = json.dumps(call.arguments, ensure_ascii=False, default=str)
                lines.append(f"Assistant used {call.name}: {_shorten(args, 400)}")
        else:
            # One labelled entry whose own lines cannot pose as the chat's, nor close a frame.
            lines.append(
                fold_line(m.tool_name or "tool", " ".join(x for x in (text, pictures) if x))
            )
    return "\n".join(lines)


def _cut(text: str, pos: int, room_tokens: int) -> int:
    """Where the piece that starts at ``pos`` ends: within ``room_tokens``, at a line if it can."""
    end = min(len(text), pos + min(PIECE_CHARS, room_tokens * 3))
    while end > pos + 1 and _tokens(text[pos:end]) > room_tokens:
        # Text outside ASCII counts a token a character: shrink in proportion until it fits.
        end = pos + max(1, (end - pos) * room_tokens // _tokens(text[pos:end]))
    if end >= len(text):
        return len(text)
    floor = pos + (end - pos) // 2
    for sep in ("\n", " "):
        at = text.rfind(sep, floor, end)
        if at > pos:
            return at + 1
    return end


# --- checking a reply -------------------------------------------------------------------------

_REFUSAL = re.compile(
    r"^\W{0,8}(?:I['’]m sorry|I am sorry|sorry[,.!]|I can['’]?t\b|I cannot|I can not|I won['’]t"
    r"|I will not|I['’]m (?:unable|not able)|I am (?:unable|not able)|As an AI|As a language model"
    r"|I apologi[sz]e|Unfortunately,? I)",
    re.IGNORECASE,
)
_PREAMBLE = re.compile(
    r"^\s*(?:(?:here(?:['’]s| is) (?:the |an |a |your )?(?:updated |new |revised )?summary"
    r"[^\n]{0,60})|(?:updated |new )?summary)\s*:?\s*\n",
    re.IGNORECASE,
)
_ROLE = re.compile(r"^(?:Person|Assistant|Tool result[^:\n]{0,80}|Assistant used [^:\n]{1,80}): ")


def _strip_thinking(text: str) -> str:
    """Some local models write their thinking into the answer between <think> tags."""
    while True:
        start = text.find("<think>")
        if start < 0:
            return text
        end = text.find("</think>", start)
        if end < 0:
            return text[:start]
        text = text[:start] + text[end + len("</think>") :]


def _tidy(reply: str) -> str:
    text = _strip_thinking(reply).strip()
    text = _PREAMBLE.sub("", text, count=1).strip()
    return text


def _echo(summary: str, piece: str) -> bool:
    """True when the reply mostly copies the chat instead of summarising it."""
    if _ROLE.match(summary.lstrip()):
        return True
    piece_lines: set[str] = set()
    for line in piece.splitlines():
        line = line.strip()
        if line:
            piece_lines.add(line)
            piece_lines.add(_ROLE.sub("", line, count=1).strip())
    long_lines = [
        x.strip().lstrip("-*• ").strip() for x in summary.splitlines() if len(x.strip()) >= 20
    ]
    if not long_lines:
        return False
    copied = sum(x in piece_lines for x in long_lines)
    return copied / len(long_lines) > 0.8


_WORD = re.compile(r"[^\W\d_]{4,}")
# Words a summary may use that need not come from the chat: its own scaffolding.
_SCAFFOLD = frozenset(
    [
        "about",
        "after",
        "also",
        "asked",
        "assistant",
        "before",
        "being",
        "chat",
        "could",
        "decided",
        "discussed",
        "done",
        "each",
        "earlier",
        "facts",
        "from",
        "have",
        "into",
        "keep",
        "kept",
        "later",
        "like",
        "more",
        "most",
        "much",
        "need",
        "needs",
        "open",
        "other",
        "person",
        "people",
        "said",
        "should",
        "since",
        "some",
        "still",
        "summary",
        "than",
        "that",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "wants",
        "want",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "word",
        "would",
        "your",
    ]
)


# The markers of ``_frame`` (or a small model's variation on them) coming back in a reply.
_FRAME_ECHO = re.compile(
    r"<\s*/?\s*(?:summary|next-part)[\w-]*\s*>|\(none yet\)|write the new summary now",
    re.IGNORECASE,
)


def _off_topic(summary: str, source: str) -> bool:
    """True when the reply is mostly about something the chat never mentioned.

    A summary reuses the chat's own words (names, things, places); a tiny model that rambles
    on about something else uses almost none of them.
    """
    body, _kept = split_kept(summary)
    words = [w for w in _WORD.findall(body.lower()) if w not in _SCAFFOLD]
    if len(words) < 12:
        return False
    known = set(_WORD.findall(source.lower()))
    return sum(w in known for w in words) / len(words) < 0.2


# --- junk a small model writes --------------------------------------------------------------
# Seen on 135M-270M models: one word 24 times, a <script> block, a reply in another language,
# a story with names and years the chat never had. Each check errs on the side of keeping a
# summary: it turns a reply down only when the junk is plain.

_TOKEN = re.compile(r"\w+")
_SENTENCE = re.compile(r"[^.!?\n]+")


def _sentences(text: str) -> Counter[str]:
    return Counter(
        " ".join(_TOKEN.findall(x.lower())) for x in _SENTENCE.findall(text) if len(x.strip()) >= 12
    )


def _repeats(body: str, source: str) -> bool:
    """True when a word, a phrase or a sentence comes back over and over: many more times than
    the folded text and the summary so far have it."""
    words = [w.lower() for w in _TOKEN.findall(body)]
    said = [w.lower() for w in _TOKEN.findall(source)]
    if len(words) >= 8:
        counts = Counter(words)
        word, top = counts.most_common(1)[0]
        # One word is more than 30% of the reply.
        if top >= 8 and top * 10 > len(words) * 3 and top - Counter(said)[word] >= 6:
            return True
        for w in {a for a, b in pairwise(words) if a == b and not a.isdigit()}:
            four = re.compile(rf"\b(?:{re.escape(w)}\W+){{3}}{re.escape(w)}\b", re.IGNORECASE)
            if four.search(body) and not four.search(source):
                return True  # the same word four times in a row
        known = Counter(zip(said, said[1:], said[2:], strict=False))
        # One phrase is more than 40% of the reply, or of one of its lines (a four-part
        # summary's part can loop while the other parts are fine).
        lines = [words] + [[w.lower() for w in _TOKEN.findall(x)] for x in body.splitlines()]
        for part in lines:
            if len(part) < 8:
                continue
            grams = Counter(zip(part, part[1:], part[2:], strict=False))
            gram, n = grams.most_common(1)[0]  # eight words or more: there is one
            if n >= 4 and n * 3 * 10 > len(part) * 4 and n - known[gram] >= 3:
                return True
    known_sentences = _sentences(source)
    # Copies the reply itself added (a summary folding piece after piece may add one).
    return any(n >= 3 and n - known_sentences[x] >= 2 for x, n in _sentences(body).items())


_TAG_NAMES = (
    r"script|style|html|head|body|div|span|p|a|iframe|img|svg|table|tr|td|th|ul|ol|li|h[1-6]|br|"
    r"hr|form|input|button|meta|link|code|pre|b|i|em|strong|object|embed|xml|\?php|template|"
    r"noscript|video|audio|source|base"
)
_TAG = re.compile(
    rf"(?i)<\s*/?\s*({_TAG_NAMES})\b[^<>\n]{{0,200}}>|\bjavascript:"
    r"|\bon(?:click|error|load|mouseover|focus|submit)\s*=\s*[\"']"
)
_CODE_LINE = re.compile(
    r"^\s*(?:def\s+\w+\s*\(|class\s+\w+[\s:({]|function\b|import\s+\w|from\s+\S+\s+import\b|"
    r"#include\b|(?:public|private|static|var|let|const)\s+\w|return\b[^.]*[;)]|"
    r"(?:if|for|while)\s*\(|console\.\w+\(|print\(|echo\s+\$)|[;{]\s*$|^\s*}\s*$",
)


def _markup(text: str, source: str) -> bool:
    """True when the reply carries code or markup that was not in the folded text."""
    low = source.lower()
    if "```" in text and "```" not in source:
        return True
    for m in _TAG.finditer(text):
        name = (m.group(1) or m.group(0)).lower()
        if f"<{name}" not in low and m.group(0).lower() not in low:
            return True
    lines = [x for x in text.splitlines() if _CODE_LINE.search(x) and x.strip() not in source]
    return len(lines) >= 2


def _script(ch: str) -> str:
    o = ord(ch)
    if o < 0x250 or 0x1E00 <= o <= 0x1EFF:
        return "latin"
    for lo, hi, name in _SCRIPTS:
        if lo <= o <= hi:
            return name
    return "other"


_SCRIPTS = (
    (0x370, 0x3FF, "greek"),
    (0x400, 0x52F, "cyrillic"),
    (0x590, 0x5FF, "hebrew"),
    (0x600, 0x6FF, "arabic"),
    (0x750, 0x77F, "arabic"),
    (0x900, 0x97F, "devanagari"),
    (0xE00, 0xE7F, "thai"),
    (0x1100, 0x11FF, "hangul"),
    (0x3040, 0x30FF, "cjk"),
    (0x3400, 0x4DBF, "cjk"),
    (0x4E00, 0x9FFF, "cjk"),
    (0xAC00, 0xD7AF, "hangul"),
)
# A few words each language uses all the time and the others rarely do.
_STOPWORDS: Mapping[str, frozenset[str]] = {
    lang: frozenset(words.split())
    for lang, words in {
        "en": "the and is are of with that this for was has have wants to it not",
        "de": "der die das und ist nicht ich mit eine auf für sie den dem auch",
        "fr": "les et est une des pour pas avec dans sur du je il elle au",
        "es": "el los las y es para con por del una pero muy está lo su",
        "it": "il gli è per che con non della sono di una anche nel ma questo",
        "pt": "os é um uma para com não do da em que mas muito está",
        "nl": "het een en van niet met voor op dat ik zijn ook wat naar de",
        "pl": "w nie się na jest że z do jak co ale to od przez dla",
    }.items()
}
_PROMPT_LANGUAGE = "en"  # the summary prompt's own: a summary in it is always fine


def _shares(counts: Counter[str]) -> tuple[str, float, Counter[str]]:
    total = sum(counts.values())
    if not total:
        return "", 0.0, counts
    top, n = counts.most_common(1)[0]
    return top, n / total, counts


def _scripts(text: str) -> tuple[str, float, Counter[str]]:
    return _shares(Counter(_script(ch) for ch in text if ch.isalpha()))


def _languages(text: str) -> Counter[str]:
    words = [w.lower() for w in _TOKEN.findall(text)]
    return Counter({lang: sum(w in stop for w in words) for lang, stop in _STOPWORDS.items()})


def _other_language(body: str, piece: str) -> bool:
    """True when the reply is plainly in another language than the chat (English, the
    prompt's language, is always allowed): first by script, then by common words."""
    script, share, _ = _scripts(body)
    if sum(ch.isalpha() for ch in body) < 20 or share < 0.6:
        return False
    chat_script, _, chat_counts = _scripts(piece)
    if script != chat_script:
        if script == "latin":
            return _latin_language(body) not in ("", _PROMPT_LANGUAGE)
        # A script the chat hardly used at all.
        return chat_counts[script] < 0.2 * sum(chat_counts.values())
    if script != "latin":
        return False
    said = _latin_language(body)
    if said in ("", _PROMPT_LANGUAGE):
        return False
    # The chat's language is the person's too, when long tool results are in another one.
    person = "\n".join(x for x in piece.splitlines() if x.startswith("Person: "))
    for text in (piece, person):
        counts = _languages(text)
        top = max(counts.values(), default=0)
        if top < 4 or counts[said] * 4 >= top:
            return False  # too little to say, or the chat uses that language too
    return True


def _latin_language(text: str) -> str:
    """The language ``text`` is plainly in, or "" when that is not plain."""
    counts = _languages(text).most_common(2)
    (first, n1), (_, n2) = counts[0], counts[1]
    return first if n1 >= 4 and n1 >= 2 * n2 else ""


_NAMEISH = re.compile(r"[^\W\d_][\w'’-]*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# Capitalised words a summary may use that need not come from the chat.
_ALLOWED_CAPS = frozenset(
    ["i", "i'm", "ai", "ok", "api", "url", "pdf", "json", "conch", "person", "assistant"]
)
INVENTED_TOLERANCE = 2  # below this many invented names or numbers, a summary passes


def _numbers(text: str) -> set[str]:
    out: set[str] = set()
    for m in _NUMBER.finditer(text):
        whole = re.sub(r"[.,]", "", m.group(0))
        out.add(whole)
        out.update(re.findall(r"\d+", m.group(0)))
    return out


def _invented(body: str, source: str) -> bool:
    """True when the reply names people, places or numbers the folded text never had, beyond
    a small tolerance (a model may spell a thing its own way)."""
    known_words = {
        w.lower().removesuffix("'s").removesuffix("’s") for w in _NAMEISH.findall(source)
    }
    known_numbers = _numbers(source)
    seen: set[str] = set()
    invented: set[str] = set()
    for m in _NAMEISH.finditer(body):
        word = m.group(0)
        if not word[0].isupper():
            continue
        before = body[: m.start()].rstrip()
        if not before or not (before[-1].isalnum() or before[-1] in ",'’"):
            continue  # a sentence's, a line's or a heading's first word
        key = word.lower().removesuffix("'s").removesuffix("’s")
        if key in _ALLOWED_CAPS or key in _SCAFFOLD:
            continue
        seen.add(key)
        if key not in known_words:
            invented.add(key)
    for m in _NUMBER.finditer(body):
        whole = re.sub(r"[.,]", "", m.group(0))
        if len(whole) < 2:
            continue
        seen.add(whole)
        parts = [p for p in re.findall(r"\d+", m.group(0)) if len(p) >= 2]
        if whole not in known_numbers and not (parts and all(p in known_numbers for p in parts)):
            invented.add(whole)
    n = len(invented)
    return n >= 5 or (n >= INVENTED_TOLERANCE and n * 4 > len(seen))


def _bare_list(body: str) -> bool:
    """True when the reply is a list of numbers, dates or amounts with hardly a word to say
    what they are."""
    tokens = _TOKEN.findall(body)
    if len(tokens) < 5:
        return False
    numeric = sum(any(c.isdigit() for c in t) for t in tokens)
    worded = sum(len(t) >= 3 and t.isalpha() for t in tokens)
    if numeric >= 5 and worded * 3 < numeric:
        return True
    lines = [x.strip().lstrip("-*• ").strip() for x in body.splitlines() if x.strip()]
    bare = [x for x in lines if any(c.isdigit() for c in x) and len(_WORD.findall(x)) <= 1]
    return len(lines) >= 4 and len(bare) * 10 >= len(lines) * 6


def judge(
    reply: str, piece: str, previous: str, answer_tokens: int, focus: str = ""
) -> tuple[str | None, str]:
    """(the summary, "") or (None, why this reply is not a summary). ``focus``: what the
    person asked to keep, which the summary may name too."""
    text = _tidy(reply)
    if not text:
        return None, "gave an empty reply"
    if _REFUSAL.match(text):
        return None, "refused"
    if _echo(text, piece):
        return None, "copied the chat instead of summarising it"
    # Headings on a tiny input may make a fair summary a little longer: allow that much.
    if len(text) > len(piece) + len(previous) + 400:
        return None, "wrote more than it was given"
    if len(text) > 10 * answer_tokens * 4:
        return None, "wrote far more than a summary"
    if _FRAME_ECHO.search(text):
        # A small model may wrap its summary in the request's markers: keep what is inside.
        text = _tidy(_FRAME_ECHO.sub("", text))
        if len(_WORD.findall(text)) < 3:
            return None, "repeated the request's frame instead of summarising"
    source = "\n".join((piece, previous, focus))
    # Lines copied from the summary it was given are not the model's own words.
    body, _kept = split_kept(text, trusted=split_kept(previous)[1])
    if _bare_list(body):
        return None, "wrote a bare list instead of a summary"
    if _markup(text, source):
        return None, "wrote code or markup the chat never had"
    # "[secret left out]" is Conch's own and may stand many times in a fair summary.
    if _repeats(body.replace(MARKER, ""), source.replace(MARKER, "")):
        return None, "repeated itself instead of summarising"
    if _other_language(body, piece):
        return None, "wrote in another language than the chat's"
    if _invented(body, source):
        return None, "named people, places or numbers the chat never mentioned"
    if _off_topic(body, piece + "\n" + previous):
        return None, "wrote about something the chat never mentioned"
    return text, ""


# --- the size of the result -------------------------------------------------------------------


def summary_cap(window: int) -> tuple[int, int]:
    """(tokens, characters) a summary for a chat model with ``window`` may take.

    A quarter of that model's budget, and at most 6,000 characters for a window of 8K or less.
    """
    cap_tokens = max(64, budget(window) // 4)
    cap_chars = cap_tokens * 4
    if window <= LEAN_WINDOW:
        cap_chars = min(cap_chars, SMALL_WINDOW_CHARS)
    return cap_tokens, cap_chars


def fit(summary: str, cap_tokens: int, cap_chars: int) -> str:
    """``summary`` within the cap, still in its four parts: the kept lines stay (the earliest
    first, at most half the cap), and the newest of the model's lines."""
    if len(summary) <= cap_chars and estimate_tokens(summary) <= cap_tokens:
        return summary
    model, kept, note, _trimmed = parts(summary)
    empty: list[list[str]] = [[], [], [], []]

    def over(text: str, share: int = 1) -> bool:
        return len(text) > cap_chars // share or estimate_tokens(text) > cap_tokens // share

    while kept and over("\n".join(["- " + x for x in kept] + [note]), 2):
        kept = kept[:-1]  # the newest kept lines go first: the person's earliest stay
        note = ""
    # What the result costs before any of the model's lines: the four headings, the kept
    # lines, who wrote what (one short model line stands in for an empty summary's frame).
    frame = [[], [], [], ["."]] if not kept else empty
    base = compose(frame, kept, note, trimmed=True)
    room_chars = cap_chars - len(base)
    room_tokens = cap_tokens - estimate_tokens(base)
    lines = [(i, x) for i, part in enumerate(model) for x in part]
    chosen: list[tuple[int, str]] = []
    used_chars = used_tokens = 0
    for i, line in reversed(lines):
        cost_c, cost_t = len(line) + 1, estimate_tokens(line) + 1
        if used_chars + cost_c > room_chars or used_tokens + cost_t > room_tokens:
            break
        chosen.append((i, line))
        used_chars += cost_c
        used_tokens += cost_t
    chosen.reverse()
    if not chosen and lines and room_chars > 0 and room_tokens > 0:
        i, line = lines[-1]
        chosen = [(i, line[-max(1, min(room_chars, room_tokens * 3) - 2) :])]
    kept_model: list[list[str]] = [[], [], [], []]
    for i, line in chosen:
        kept_model[i].append(line)
    out = compose(kept_model, kept, note, trimmed=True)
    while over(out) and any(kept_model):
        first = next(p for p in kept_model if p)
        first.pop(0)
        out = compose(kept_model, kept, note, trimmed=True)
    return out


def _keeper_text(messages: Sequence[Message]) -> str:
    """``render``'s lines, a person message the chat log marks pasted or attached named so."""
    lines: list[str] = []
    for m in messages:
        text = render([m])
        if m.role == "user" and m.untrusted and text.startswith("Person: "):
            text = PASTED_SPEAKER + text.removeprefix("Person: ")
        elif m.role == "user" and m.imported and text.startswith("Person: "):
            text = IMPORTED_SPEAKER + text.removeprefix("Person: ")
        if text:
            lines.append(text)
    return "\n".join(lines)


def facts_kept(summary: str, before: str, folded: Sequence[Message], window: int) -> str:
    """``summary`` in its four parts with the facts of ``folded`` it lacks kept word for word,
    within the cap for a chat model with ``window``; ``before`` is the summary the folded
    turns were folded into (``summary`` is ``before`` when no model wrote a new one).

    What a fold keeps when no model summary came (in time): the old summary plus the facts.
    """
    cap_tokens, cap_chars = summary_cap(window)
    limit = min(FACTS_MAX_CHARS, cap_chars * 4 // 5)
    # What the person and the assistant said comes before what tools returned.
    said = scrub(_keeper_text([m for m in folded if m.role != "tool"]))
    returned = scrub(render([m for m in folded if m.role == "tool"]))
    # Only the earlier summary's kept lines carry over, not its prose: a fact a model made up
    # there must not become "kept word for word".
    _prose, carried = split_kept(before)
    result = keep_facts(
        summary,
        "\n".join([*carried, said]),
        limit,
        minor_text=returned,
        limit_tokens=facts_cap(window),
        trusted=None if summary == before else carried,
    )
    return fit(result, cap_tokens, cap_chars) if result else result


# --- talking to the models --------------------------------------------------------------------


@dataclass
class _Reply:
    text: str | None
    tokens: int
    why: str = ""
    window: int | None = None  # a too-long refusal named this window


@dataclass(frozen=True)
class _Plan:
    system: str
    answer: int
    room: int  # tokens left for the piece
    previous: str  # the summary so far, shortened if the window needed it


def _frame(previous: str, piece: str, focus: str) -> str:
    parts = [
        "<summary-so-far>\n" + (previous or "(none yet)") + "\n</summary-so-far>",
        "<next-part-of-the-chat>\n" + piece + "\n</next-part-of-the-chat>",
    ]
    if focus:
        parts.append(f"Keep especially: {focus}")
    parts.append("Write the new summary now.")
    return "\n\n".join(parts)


def _prompt(window: int) -> str:
    # The prompts ship with Conch (resources/prompts); one copy each, no built-in twin.
    return read_prompt("summarise_lean.txt" if window <= LEAN_WINDOW else "summarise.txt")


class ModelSummariser:
    """``Summariser`` that asks the chat provider's models, cheapest first."""

    def __init__(
        self,
        adapters: Mapping[str, ProviderAdapter],
        windows: Callable[[str, str], int | None] | None = None,
        timeout: float = 120.0,
    ) -> None:
        self._adapters = adapters
        self._windows = windows
        self._timeout = timeout
        self._learned: dict[tuple[str, str], int] = {}  # windows named by too-long refusals

    # --- choices ------------------------------------------------------------------------------

    def candidates(self, model: ModelInfo) -> list[str]:
        """Model ids to try, in order, for a chat on ``model``."""
        adapter = self._adapters.get(model.provider)
        if adapter is None:
            return []
        if adapter.local:
            return [model.id]
        try:
            cheap = list(adapter.cheap_models())
        except Exception:  # an adapter's bug must not cost the summary: use the chat's model
            log.exception("cheap_models() failed for %s", model.provider)
            cheap = []
        out: list[str] = []
        for model_id in [*cheap, model.id]:
            if model_id and model_id not in out:
                out.append(model_id)
        return out

    def window_of(self, model: ModelInfo, model_id: str) -> int:
        """The window to plan a request to ``model_id`` (on the chat's provider) against."""
        adapter = self._adapters.get(model.provider)
        local = bool(adapter is not None and adapter.local) or model.local
        known: list[int] = []
        if model_id == model.id and model.context > 0:
            known.append(model.context)
        if self._windows is not None:
            try:
                told = self._windows(model.provider, model_id)
            except Exception:
                log.exception("windows() failed for %s/%s", model.provider, model_id)
                told = None
            if told:
                known.append(told)
        learned = self._learned.get((model.provider, model_id))
        if learned:
            known.append(learned)
        if not known:
            known.append(unknown_window(local))
        return max(1, min(known))

    def _plan(self, window: int, previous: str, focus: str) -> _Plan | None:
        system = _prompt(window)
        answer = answer_room(window)
        usable = int(window * 0.9) - answer - OVERHEAD_TOKENS
        usable -= _tokens(system) + _tokens(_frame("", "", focus))
        if usable < MIN_PIECE_TOKENS:
            return None
        # The summary so far may take up to 40% of what is left; shorten it if it must.
        share = max(0, int(usable * 0.4))
        if _tokens(previous) > share:
            previous = fit(previous, share * 3 // 4, share * 3)
            while previous and _tokens(previous) > share:
                previous = previous[len(previous) // 4 :]
        room = usable - _tokens(previous)
        if room < MIN_PIECE_TOKENS:
            return None
        return _Plan(system, answer, room, previous)

    # --- the work -----------------------------------------------------------------------------

    async def summarise(
        self,
        folded: Sequence[Message],
        previous: str,
        *,
        model: ModelInfo,
        focus: str = "",
    ) -> SummaryResult:
        adapter = self._adapters.get(model.provider)
        if adapter is None:
            return SummaryResult(text=None, problem=f"no connection to {model.provider}")
        text = scrub(render(folded))
        if not text.strip():
            return SummaryResult(text=None, problem="there was nothing to summarise")
        before = scrub(previous.strip())
        focus = scrub(focus.strip())[:2_000]
        summary = before
        candidates = self.candidates(model)
        problems: list[str] = []
        tokens = 0
        used = ""
        retried: set[str] = set()
        pos = 0
        index = 0
        while pos < len(text):
            if index >= len(candidates):
                why = scrub("; ".join(problems) or "no model to ask")
                # No model wrote (all of) it: what was summarised so far plus the facts kept
                # word for word still beats losing them; with no facts there is no summary.
                kept = self._with_facts(summary, before, folded, model)
                if split_kept(kept) == split_kept(summary):
                    return SummaryResult(text=None, tokens=tokens, problem=why)
                return SummaryResult(text=kept, tokens=tokens, model=used, problem=why)
            model_id = candidates[index]
            window = self.window_of(model, model_id)
            plan = self._plan(window, summary, focus)
            if plan is None:
                problems.append(f"{model_id}: its window ({window:,} tokens) is too small")
                index += 1
                continue
            end = _cut(text, pos, plan.room)
            piece = scrub(text[pos:end])
            if _tokens(piece) > plan.room:  # scrubbing at a new edge grew it: never overflow
                piece = piece[: plan.room]
            reply = await self._ask(adapter, model_id, window, plan, piece, focus)
            tokens += reply.tokens
            if reply.text is None:
                if reply.window and reply.window < window and model_id not in retried:
                    # The provider named a smaller window: plan against it and ask again once.
                    retried.add(model_id)
                    self._learned[(model.provider, model_id)] = reply.window
                    continue
                problems.append(f"{model_id} {reply.why}")
                index += 1
                continue
            summary = scrub(reply.text)
            used = model_id
            pos = end
        result = self._with_facts(summary, before, folded, model)
        return SummaryResult(text=result, tokens=tokens, model=used)

    def _with_facts(
        self, summary: str, before: str, folded: Sequence[Message], model: ModelInfo
    ) -> str:
        """``summary`` with the folded turns' facts it lacks kept word for word, within the cap."""
        return facts_kept(summary, before, folded, self.window_of(model, model.id))

    async def _ask(
        self,
        adapter: ProviderAdapter,
        model_id: str,
        window: int,
        plan: _Plan,
        piece: str,
        focus: str,
    ) -> _Reply:
        user = _frame(plan.previous, piece, focus)
        request = ChatRequest(
            model=model_id,
            system=plan.system,
            messages=(Message(role="user", text=user),),
            max_output_tokens=plan.answer,
            window=window,
        )
        sent = estimate_tokens(plan.system) + estimate_tokens(user)
        usage = [0, 0]
        try:
            async with asyncio.timeout(self._timeout):
                collected, tool_call = await _collect(adapter.stream(request), usage)
        except GaveWayError:
            raise  # background work stopped for the person's turn: the caller tries later
        except ProviderError as exc:
            detail = f"failed ({exc.kind.value}): {exc.detail[:200]}".rstrip(": ")
            return _Reply(None, usage[0] + usage[1], detail, exc.window if exc.too_long else None)
        except TimeoutError:
            return _Reply(None, usage[0] + usage[1], f"did not answer within {self._timeout:g} s")
        except Exception as exc:  # an adapter's bug: log it, and let the next model try
            log.exception("summarising with %s failed", model_id)
            return _Reply(None, usage[0] + usage[1], f"failed ({type(exc).__name__})")
        spent = usage[0] + usage[1]
        if spent == 0:
            spent = sent + estimate_tokens(collected)
        if tool_call:
            return _Reply(None, spent, "called a tool instead of writing a summary")
        text, why = judge(collected, piece, plan.previous, plan.answer, focus)
        return _Reply(text, spent, why)


async def _collect(stream: AsyncIterator[Event], usage: list[int]) -> tuple[str, bool]:
    """The reply's text (thinking ignored), and whether it called a tool instead."""
    parts: list[str] = []
    async with closing_stream(stream) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, ToolCall):
                return "".join(parts), True
            elif isinstance(event, Usage):
                usage[0] += event.input_tokens
                usage[1] += event.output_tokens
    return "".join(parts), False
