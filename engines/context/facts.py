"""The fact keeper: facts a person would hate to lose from a summary, kept word for word.

A cheap model writing a summary drops the exact things people come back for: the file name,
the amount, the date, the link. This is a deterministic pass over the folded text that finds
those facts, and appends the ones a summary left out under a short heading. It runs on text
that has already been scrubbed, so a secret left out stays left out; the list itself is
scrubbed once more item by item (it is sent on every later turn), and so is a list carried
over from an earlier summary, which may predate a scrubbing rule.

What it keeps is ranked by whose words a fact came from, then by kind. The person's own names,
files, links, amounts, dates and decisions come first (the earliest of them first: who the
person is and works with comes up at the start of a chat); then what the assistant said (a
model may have made it up); then what the person pasted (a log, a table, code, an attached
file); numbers and code names from pastes, and whatever tools returned, come last. The list is
capped at ``FACTS_SHARE`` of the budget, counted the way tokenizers count digits (one each),
and when the cap leaves facts out a line under the list says how many and of which kind, so
the summary line in the chat can show it. Room left under the cap turns the person's bare facts
into the short sentences they said them in ("Priya Raman chairs the garden committee"): a small
model answers from those, where a bare name tells it nothing (bench.recall's control).

Every pattern starts only at a token boundary and uses bounded or unambiguous quantifiers, so a
huge paste costs linear time.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from engines.scrub import scrub
from engines.window import budget

HEADING = "Kept word for word:"
LEFT_OUT = "(Left out of this list to keep it short:"  # starts the line naming what the cap cut
FACTS_SHARE = 0.10  # of a request's budget the kept list may take

# Kinds of fact. The rank a fact is kept by comes from its kind and from whose words it is in.
_LINK, _WHEN, _NUMBER, _CODE, _NAME, _DECISION, _SENTENCE = 0, 1, 2, 3, 4, 5, 6

# Whose words a fact is in.
PERSON, CARRIED, ASSISTANT, PASTED, TOOL = "person", "carried", "assistant", "pasted", "tool"
# Within a tier: decisions and names with files, links, dates and money, then numbers with a
# unit, then code names and plain numbers.
_KIND_ORDER = {_DECISION: 0, _SENTENCE: 0, _NAME: 0, _LINK: 0, _WHEN: 0, _NUMBER: 1, _CODE: 2}
_NOISY_KINDS = frozenset({_WHEN, _NUMBER, _CODE})  # a log's timestamps, a table's cells


@dataclass(frozen=True)
class Fact:
    text: str
    rank: int  # its kind
    pos: int
    origin: str = PERSON  # whose words it came from

    @property
    def tier(self) -> int:
        """Lower is kept first: the person's own words, then the assistant's (and the noisier
        kinds of an earlier list), then the names and links of pasted text, then the rest."""
        noisy = self.rank in _NOISY_KINDS
        if self.origin == PERSON:
            return 0
        if self.origin == CARRIED:
            return 1 if noisy else 0
        if self.origin == ASSISTANT:
            return 1
        if self.origin == PASTED and not noisy:
            return 2
        return 3


def facts_cap(window: int) -> int:
    """Tokens the kept list may take in a summary for a model with ``window``."""
    return max(16, int(budget(window) * FACTS_SHARE))


def list_tokens(text: str) -> int:
    """Tokens ``text`` costs, a digit counted as one (both tokenizers of the bundled models
    spend a token per digit; characters ÷ 4 under-counts a list of numbers several times)."""
    digits = sum(c.isdigit() for c in text)
    rest = len(text) - digits
    ascii_rest = len(text.encode("ascii", "ignore")) - digits
    return digits + -(-ascii_rest // 4) + (rest - ascii_rest)


# --- patterns, most specific first (a later one never takes text an earlier one found) ------

_EXT = (
    r"(?:pdf|docx?|xlsx?|pptx?|odt|ods|csv|tsv|txt|md|rst|rtf|json|jsonl|ya?ml|toml|ini|cfg|conf"
    r"|env|log|xml|html?|css|scss|js|jsx|mjs|ts|tsx|py|pyi|ipynb|rs|go|java|kt|swift|c|h|cc|cpp"
    r"|hpp|cs|rb|php|lua|sh|bash|zsh|ps1|bat|sql|db|sqlite|png|jpe?g|gif|webp|svg|ico|mp3|wav"
    r"|mp4|mov|mkv|zip|tar|gz|tgz|bz2|xz|7z|rar|dmg|exe|msi|deb|rpm|apk|iso|gguf|safetensors"
    r"|bin|onnx|pt|ckpt|lock|qss|ui|spec|desktop|service|plist|epub|key|pem|crt)"
)
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t|tember)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_BACKTICKS = re.compile(r"`([^`\r\n]{1,120})`")
_PATTERNS: tuple[tuple[int, re.Pattern[str]], ...] = (
    # links and addresses
    (_LINK, re.compile(r"(?<![\w@])(?:https?|ftp|file)://[^\s<>\"'`\])}]{2,2000}")),
    (_LINK, re.compile(r"(?<![\w./@-])www\.[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+[^\s<>\"'`\])}]*")),
    (
        _LINK,
        re.compile(
            r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*"
            r"\.[A-Za-z]{2,24}\b"
        ),
    ),
    # paths: Windows, home/relative/absolute Unix, bare file names with a known extension
    (_LINK, re.compile(r"(?<![\w])[A-Za-z]:\\(?:[^\\\s/:*?\"<>|]{1,255}\\)*[^\\\s/:*?\"<>|,;]*")),
    (_LINK, re.compile(r"(?<![\w./~-])(?:~|\.{1,2})/(?:[\w.@+-]+/)*[\w.@+-]*")),
    (_LINK, re.compile(r"(?<![\w./:~-])/(?:[\w.@+-]+/)+[\w.@+-]*")),
    (_LINK, re.compile(r"(?<![\w./:~-])/[\w@+-]+\." + _EXT + r"\b")),
    (
        _LINK,
        re.compile(r"(?<![\w./:~@+-])[\w@+-]+(?:/[\w.@+-]+)*/[\w@+-][\w.@+-]*\." + _EXT + r"\b"),
    ),
    (_LINK, re.compile(r"(?<![\w./:~@+-])[\w@+-]+(?:\.[\w@+-]+)*\." + _EXT + r"\b")),
    (
        _LINK,
        re.compile(
            r"(?<![\w.@/-])(?:[a-z0-9][a-z0-9\-]*\.)+"
            r"(?:com|org|net|io|dev|ai|app|co|uk|de|fr|nl|eu|edu|gov|info|me|so|sh|xyz|cloud)\b"
            r"(?![.\w]*\()"
        ),
    ),
    # phone numbers: a leading +country, (area) or 0, or the US 555-123-4567 shape
    (
        _LINK,
        re.compile(
            r"(?<![\w+.(])(?:(?:\+\d{1,3}[ -]?|\(\d{2,5}\)[ -]?|0)\d{2,5}[ -]\d{3,8}"
            r"(?:[ -]\d{2,6})?|\d{3}-\d{3}-\d{4})(?![\w-])"
        ),
    ),
    # references that mix letters and digits: GR-2026-0417, INV-2041, AB12345
    (
        _LINK,
        re.compile(
            r"(?<![\w/.-])(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])"
            r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+(?![\w/-])"
            r"|(?<![\w/.-])[A-Z]{1,5}\d{3,}[A-Z0-9]*(?![\w/-])"
        ),
    ),
    # money
    (
        _WHEN,
        re.compile(
            r"(?<![\w$€£¥])(?:US\$|C\$|A\$|[$€£¥₹])\s?\d[\d,.]*\d?"
            r"(?:\s?(?:k|K|m|M|bn|million|billion|thousand)\b)?"
        ),
    ),
    (
        _WHEN,
        re.compile(
            r"(?<![\w.,])\d[\d,.]*\d?\s?"
            r"(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|SEK|NOK|DKK|PLN|CNY|dollars?|euros?|pounds?)\b"
        ),
    ),
    # dates
    (_WHEN, re.compile(r"(?<![\w-])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w-])")),
    (
        _WHEN,
        re.compile(r"(?<![\w])\d{1,2}(?:st|nd|rd|th)?\s" + _MONTH + r"\.?(?:,?\s\d{4})?\b"),
    ),
    (
        _WHEN,
        re.compile(r"\b" + _MONTH + r"\.?\s\d{1,2}(?:st|nd|rd|th)?(?:,?\s\d{4})?(?!\d)"),
    ),
    (_WHEN, re.compile(r"(?<![\w/.])\d{1,2}/\d{1,2}/\d{2,4}(?![\w/])")),
    (_WHEN, re.compile(r"(?<![\w:])\d{1,2}:\d{2}\s?(?:[ap]\.?m\.?|AM|PM)?(?![\w:])")),
    # numbers: with a unit, a percentage, a version
    (
        _NUMBER,
        re.compile(
            r"(?<![\w.,])[-+]?\d[\d,]*(?:\.\d+)?\s?(?:%|°[CF]|"
            r"(?:[kKMGT]i?B|[kMG]Hz|Hz|kWh|kW|mAh|W|V|ms|µs|ns|fps|dpi|px|pt|rpm|mph|km/h"
            r"|kg|mg|g|lbs?|oz|km|cm|mm|m|mi|ft|ml|L|l|sec|secs|seconds?|min|mins|minutes?"
            r"|h|hrs?|hours?|days?|weeks?|months?|years?|tokens?|words?|characters?|chars"
            r"|pages?|lines?|messages?|files?|items?|people|persons?|users?|steps?|turns?"
            r"|nights?|rooms?|guests?|adults?|kids|children|tickets?|seats?|copies|kcal|calories"
            r"|cores?|threads?|bits?|bytes?|times|x|k|K|M|B|bn|million|billion|thousand)\b)"
        ),
    ),
    (_NUMBER, re.compile(r"(?<![\w.])(?:v|version\s)\d+(?:\.\d+){1,3}\b", re.IGNORECASE)),
    (_NUMBER, re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?:[-.][A-Za-z0-9]+)?(?![\w.])")),
    (_NUMBER, re.compile(r"(?<![\w#])#\d{2,}\b")),
)

# Code identifiers and plain numbers come after names, so "Priya McDonald" stays one name.
_CODE_PATTERNS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (
        _CODE,
        re.compile(
            r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\(\)?"
            r"|(?<![\w.])[A-Za-z_][A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]*){2,}(?![\w.])"
        ),
    ),
    (_CODE, re.compile(r"(?<![\w.])_{0,2}[a-z][a-z0-9]*(?:_[a-z0-9]+)+_{0,2}(?![\w])")),
    (_CODE, re.compile(r"(?<![\w.])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w])")),
    (_CODE, re.compile(r"(?<![\w.])[a-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w])")),
    (_CODE, re.compile(r"(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+){1,}(?![\w])")),
    # plain numbers that carry meaning: 2,000 / 3.14 / 48213
    # (a comma or full stop after one ends the sentence; only a digit after it continues it)
    (_CODE, re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\w|,\d)")),
    (_CODE, re.compile(r"(?<![\w.,])\d+\.\d+(?!\w|\.\d)|(?<![\w.,#])\d{3,}(?!\w|[.,]\d)")),
)

# Names: two or more capitalised words on one line ("Priya Raman", "Bank of America").
_WORD = r"[A-ZÀ-ÖØ-ÞĀ-ſ](?:[^\W\d_]|['’\-](?=[^\W\d_]))*"
_NAME_RE = re.compile(
    rf"(?<![\w'’-]){_WORD}"
    rf"(?:(?: (?:of|de|van|von|der|den|du|da|del|di|la|le|bin|al))? {_WORD})+"
    r"(?![\w'’-])"
)
# Capitalised because they start a sentence or are ordinary words, not because they name anyone.
_NOT_NAME_WORDS = (
    "a an the this that these those it its i i'm i've i'd we you he she they my our your "
    "his her their me us them here there what which who whom whose why how where when while "
    "if then so and but or nor yet also as at by for from in into of on onto to with without "
    "about after before since because although though until unless over under between during "
    "please thanks thank hi hello hey dear sure yes no ok okay great good well now today "
    "tomorrow yesterday tonight maybe perhaps just only even still next last first second "
    "third finally however note let let's can could would should will shall may might must do "
    "does did is are was were be been being have has had get got make made use used using see "
    "look try all any some every each both either neither not never always often sometimes "
    "person assistant tool result summary kept word remember use call send add check book ask "
    "tell keep find show give take put set read write open close buy pay meet visit email plan "
    "fix run install update change move copy delete remove create start stop go come say said"
)
_NOT_NAME = frozenset(_NOT_NAME_WORDS.split())

_MAX_FACTS = 4000  # a pathological paste must stay cheap; no summary could list more
_CLOSERS = {")": "(", "]": "[", "}": "{"}


def _clean(raw: str) -> str:
    """Trailing sentence punctuation is not part of a fact; the ")" of a call is."""
    text = raw.strip()
    while text and text[-1] in ".,;:!?'\"’”)]}":
        last = text[-1]
        if last in _CLOSERS and text.count(last) <= text.count(_CLOSERS[last]):
            break
        text = text[:-1]
    return text


class _Spans:
    """Disjoint spans already claimed by a fact, for overlap checks in log time."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self.starts, start)
        if i > 0 and self.ends[i - 1] > start:
            return True
        return i < len(self.starts) and self.starts[i] < end

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, end)

    def add_many(self, spans: list[tuple[int, int]]) -> None:
        # Two sorted runs: one sort merges them in linear time.
        merged = sorted([*zip(self.starts, self.ends, strict=True), *spans])
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]


def _usable(value: str) -> bool:
    """Long enough to mean something, and never a scrubbed secret's placeholder."""
    return len(value) >= 2 and "[secret" not in value


def _at_sentence_start(text: str, pos: int) -> bool:
    i = pos - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in ".!?:;\n\"“(['*•>#-"


def _scan(
    text: str,
    patterns: tuple[tuple[int, re.Pattern[str]], ...],
    spans: _Spans,
    found: dict[str, Fact],
) -> None:
    for rank, pattern in patterns:
        fresh: list[tuple[int, int]] = []
        for m in pattern.finditer(text):
            if len(found) >= _MAX_FACTS:
                break
            value = _clean(m.group(0))
            if not _usable(value) or spans.overlaps(m.start(), m.end()):
                continue
            _add(found, Fact(value, rank, m.start()))
            fresh.append((m.start(), m.end()))
        # Matches of one pattern never overlap each other, so they join the spans together.
        if fresh:
            spans.add_many(fresh)


def _add(found: dict[str, Fact], fact: Fact) -> None:
    """Keep each fact once, at its first appearance, in the best tier it was seen in."""
    key = _norm(fact.text)
    if not key:
        return
    old = found.get(key)
    if old is None:
        found[key] = fact
    elif fact.pos < old.pos or fact.rank < old.rank or fact.tier < old.tier:
        first = fact if fact.pos < old.pos else old
        best = fact if fact.tier < old.tier else old
        found[key] = Fact(first.text, min(fact.rank, old.rank), first.pos, best.origin)


def _names(text: str, spans: _Spans, found: dict[str, Fact]) -> None:
    ordinary: set[str] | None = None  # lower-case words the text uses, built on first need
    for m in _NAME_RE.finditer(text):
        if len(found) >= _MAX_FACTS:
            return
        if spans.overlaps(m.start(), m.end()):
            continue
        words = m.group(0).split(" ")
        start = m.start()
        # A sentence's first word is capitalised anyway: drop it when the text also uses it in
        # lower case ("Remember Priya Raman" when "remember" appears elsewhere).
        if _at_sentence_start(text, start):
            if ordinary is None:
                ordinary = set(re.findall(r"(?<![\w'’])[a-z][a-z'’]+", text))
            if words[0].lower() in ordinary:
                start += len(words[0]) + 1
                words = words[1:]
        while words and words[0].lower() in _NOT_NAME:
            start += len(words[0]) + 1
            words = words[1:]
        while words and words[-1].lower() in _NOT_NAME:
            words = words[:-1]
        if sum(w[:1].isupper() and any(c.islower() for c in w) for w in words) < 2:
            continue
        name = " ".join(words)
        _add(found, Fact(name, _NAME, start))
        spans.add(start, start + len(name))


def _facts(text: str) -> list[Fact]:
    """Every fact in ``text`` once, with its rank and first position, in order."""
    found: dict[str, Fact] = {}
    spans = _Spans()
    for m in _BACKTICKS.finditer(text):
        if len(found) >= _MAX_FACTS:
            break
        value = m.group(1).strip()
        if _usable(value):
            _add(found, Fact(value, min(_CODE, _rank_of(value)), m.start()))
            spans.add(m.start(), m.end())
    _scan(text, _PATTERNS, spans, found)
    _names(text, spans, found)
    _scan(text, _CODE_PATTERNS, spans, found)
    return sorted(found.values(), key=lambda f: f.pos)


def _plain(text: str) -> str:
    """Fold case, spacing and thousands separators so "2,000 Tokens" matches "2000 tokens"."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"(?<=\d)[,  '_](?=\d{3}(?!\d))", "", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip().rstrip("/")


def _joined(plain: str) -> str:
    """Also "12 kg" == "12kg" (only for matching: it would glue "on 2026-11-29 with")."""
    return re.sub(r"(?<=\d) (?=[^\W\d_]|%)", "", plain)


@functools.lru_cache(maxsize=4096)
def _norm(text: str) -> str:
    """The key a fact is deduplicated by."""
    return _joined(_plain(text))


def extract_facts(text: str) -> list[str]:
    """The facts in ``text`` (names, numbers, dates, money, paths, links, e-mails, code
    identifiers), in order of first appearance, each once."""
    return [f.text for f in _facts(text)]


def _haystack(summary: str) -> tuple[str, str]:
    plain = _plain(summary)
    return plain, _joined(plain)


def _found(needle: str, hay: str) -> bool:
    # Whole-token match: "12 kg" is not in "112 kg".
    left = r"(?<![^\W_])" if needle[0].isalnum() else ""
    right = r"(?![^\W_])" if needle[-1].isalnum() else ""
    return re.search(left + re.escape(needle) + right, hay) is not None


def _present(fact: str, haystack: tuple[str, str]) -> bool:
    plain = _plain(fact)
    if not plain:
        return True
    return _found(plain, haystack[0]) or _found(_joined(plain), haystack[1])


def missing_facts(facts: list[str], summary: str) -> list[str]:
    """The facts ``summary`` does not mention, compared without case, spacing or separators."""
    haystack = _haystack(summary)
    return [f for f in facts if not _present(f, haystack)]


def _is_note(line: str) -> bool:
    return line.strip().startswith(LEFT_OUT)


def split_kept(summary: str) -> tuple[str, list[str]]:
    """The summary without an earlier "Kept word for word:" list (nor the line saying what it
    left out), and that list's items."""
    body, items, _note = kept_parts(summary)
    return body, items


def kept_parts(summary: str) -> tuple[str, list[str], str]:
    """(the summary's own words, the items kept word for word, the line saying what the cap
    left out or "")."""
    lines = summary.rstrip().splitlines()
    note = next((x.strip() for x in lines if _is_note(x)), "")
    lines = [x for x in lines if not _is_note(x)]
    for i, line in enumerate(lines):
        if line.strip() == HEADING:
            items: list[str] = []
            j = i + 1
            while j < len(lines) and lines[j].lstrip().startswith("- "):
                items.append(lines[j].strip()[2:].strip())
                j += 1
            rest = lines[:i] + lines[j:]
            return "\n".join(rest).rstrip(), [x for x in items if x], note
    return "\n".join(lines).rstrip(), [], note


def _block(items: list[str], note: str = "") -> str:
    block = HEADING + "\n" + "\n".join(f"- {x}" for x in items)
    return f"{block}\n{note}" if note else block


# --- whose words: the person's, the assistant's, pasted, a tool's -----------------------------

# The lines ``summarise.render`` writes: each message starts with who said it.
_SPEAKER = re.compile(
    r"(?m)^(?:(Person)|(Assistant)(?: used [^:\n]{1,80})?|(Tool result)(?: \([^)\n]{0,80}\))?): "
)
_FENCE = re.compile(r"^\s{0,3}(?:```|~~~)")
_FRAME_OPEN = re.compile(r"^\s*<attached-file\b")
_FRAME_CLOSE = re.compile(r"</attached-file>\s*$")
# A line of a log or a table: a timestamp or level first, or cells between separators.
_LOG_START = re.compile(
    r"\s*(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}"
    r"|\[?(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b)"
)
_PASTE_LINES = 3  # a block of this many lines or more ...
_PASTE_BLOCK_CHARS = 300  # ... and this long reads as pasted, not typed
_LONG_MESSAGE = 2_000  # in a message this long, every block of several lines reads as pasted
_LONG_LINE = 2_000  # one line this long (a minified file) reads as pasted


def _blocks(text: str, start: int, end: int) -> list[tuple[int, int, bool]]:
    """The blank-line separated blocks of ``text[start:end]`` as (start, end, fenced): a code
    fence or an attached file's frame counts as one fenced block, blank lines and all."""
    out: list[tuple[int, int, bool]] = []
    pos = start
    block_start: int | None = None
    fence_start: int | None = None
    closer: re.Pattern[str] | None = None
    while pos < end:
        nl = text.find("\n", pos, end)
        line_end = end if nl < 0 else nl
        line = text[pos:line_end]
        if fence_start is not None and closer is not None:
            if closer.search(line):
                out.append((fence_start, line_end, True))
                fence_start, closer = None, None
        elif _FENCE.match(line) or _FRAME_OPEN.match(line):
            if block_start is not None:
                out.append((block_start, pos, False))
                block_start = None
            fence_start = pos
            closer = _FENCE if _FENCE.match(line) else _FRAME_CLOSE
            if closer is _FRAME_CLOSE and _FRAME_CLOSE.search(line):
                out.append((pos, line_end, True))
                fence_start, closer = None, None
        elif not line.strip():
            if block_start is not None:
                out.append((block_start, pos, False))
                block_start = None
        elif block_start is None:
            block_start = pos
        pos = line_end + 1
    if fence_start is not None:
        out.append((fence_start, end, True))
    elif block_start is not None:
        out.append((block_start, end, False))
    return out


def _row(line: str) -> bool:
    """A line of a log (a timestamp or a level first) or of a table (cells between
    separators, numbers among them)."""
    if _LOG_START.match(line):
        return True
    cells = max(line.count(","), line.count("|"), line.count("\t"), line.count(";"))
    return cells >= 3 and any(c.isdigit() for c in line)


def _pasted_block(text: str, start: int, end: int, long_message: bool) -> bool:
    lines = text[start:end].split("\n")
    if any(len(x) >= _LONG_LINE for x in lines):
        return True
    if len(lines) < 2:
        return False
    if long_message:
        return True
    if len(lines) >= _PASTE_LINES and end - start >= _PASTE_BLOCK_CHARS:
        return True
    rows = sum(1 for x in lines if _row(x))
    return len(lines) >= _PASTE_LINES and 2 * rows >= len(lines)


class _Origins:
    """Whose words each position of a rendered chat is in."""

    def __init__(self, text: str, before: str = CARRIED) -> None:
        self.starts: list[int] = [0]
        self.origins: list[str] = [before]
        speakers = list(_SPEAKER.finditer(text))
        for k, m in enumerate(speakers):
            end = speakers[k + 1].start() if k + 1 < len(speakers) else len(text)
            who = PERSON if m.group(1) else ASSISTANT if m.group(2) else TOOL
            self._mark(m.start(), who)
            if who == TOOL:
                continue
            long_message = end - m.end() >= _LONG_MESSAGE
            for b_start, b_end, fenced in _blocks(text, m.end(), end):
                if fenced or (who == PERSON and _pasted_block(text, b_start, b_end, long_message)):
                    self._mark(b_start, PASTED)
                    self._mark(b_end, who)
        if not speakers and before == PERSON:
            # Text that is not a rendered chat (a test, a caller's own text): the person's.
            for b_start, b_end, fenced in _blocks(text, 0, len(text)):
                long_message = len(text) >= _LONG_MESSAGE
                if fenced or _pasted_block(text, b_start, b_end, long_message):
                    self._mark(b_start, PASTED)
                    self._mark(b_end, PERSON)

    def _mark(self, pos: int, origin: str) -> None:
        if self.starts[-1] == pos:
            self.origins[-1] = origin
        elif pos > self.starts[-1]:
            self.starts.append(pos)
            self.origins.append(origin)

    def at(self, pos: int) -> str:
        return self.origins[bisect.bisect_right(self.starts, pos) - 1]

    def typed(self) -> list[tuple[int, int, str]]:
        """The spans the person typed, and an earlier list's items: (start, end, origin)."""
        ends = [*self.starts[1:], -1]
        return [
            (s, e, o)
            for s, e, o in zip(self.starts, ends, self.origins, strict=True)
            if o in (PERSON, CARRIED)
        ]


# A decision in the person's own words: "we decided …", "I'll go with …", "decision: …".
_DECIDED = re.compile(
    r"(?i)\b(?:we|i|they)(?:'ve|’ve| have)?\s+(?:decided|agreed|chose|settled on|opted)\b"
    r"|\b(?:let'?s|let’s|we(?:'ll|’ll| will)|i(?:'ll|’ll| will))\s+go\s+with\b"
    r"|\bdecision\s*:"
)
_DECISION_CHARS = 200  # a decision longer than this is kept from its start, cut at a word
_SENTENCE_END = ".!?;"  # followed by a space (so "v2.4.1" is one word), or a line's end


def _ends_sentence(text: str, at: int) -> bool:
    """Whether a sentence ends at ``text[at]`` (its last character)."""
    if text[at] == "\n":
        return True
    return text[at] in _SENTENCE_END and (at + 1 >= len(text) or text[at + 1].isspace())


def _decisions(text: str, origins: _Origins) -> list[Fact]:
    """The sentences where the person says what was decided, word for word."""
    out: list[Fact] = []
    for span_start, span_end, origin in origins.typed():
        end_of_span = len(text) if span_end < 0 else span_end
        for m in _DECIDED.finditer(text, span_start, end_of_span):
            start = m.start()
            floor = max(span_start, start - _DECISION_CHARS)
            while start > floor and not _ends_sentence(text, start - 1):
                start -= 1
            while start < m.start() and text[start].isspace():
                start += 1
            head = _SPEAKER.match(text, start)
            if head is not None:
                start = head.end()
            stop = m.end()
            ceiling = min(end_of_span, start + _DECISION_CHARS)
            while stop < ceiling and not _ends_sentence(text, stop):
                stop += 1
            sentence = text[start:stop].strip()
            if stop >= ceiling and stop < end_of_span and not _ends_sentence(text, stop):
                sentence = sentence.rsplit(" ", 1)[0]  # cut at a word, not inside one
            if len(sentence) >= 8 and _usable(sentence):
                out.append(Fact(sentence, _DECISION, start, origin))
    return out


# --- choosing what to keep ----------------------------------------------------------------------

_WHOSE = {
    PERSON: "from the person's messages",
    CARRIED: "from earlier summaries",
    ASSISTANT: "from the assistant's answers",
    PASTED: "from pasted text",
    TOOL: "from tool results",
}


def _left_out(facts: list[Fact]) -> str:
    """The line saying what the cap left out, in words."""
    counts: dict[str, int] = {}
    for f in facts:
        counts[f.origin] = counts.get(f.origin, 0) + 1
    parts = [
        f"{n} {_WHOSE[origin]}"
        for origin, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    total = len(facts)
    noun = "fact" if total == 1 else "facts"
    if len(counts) == 1:
        return f"{LEFT_OUT} {total} more {noun} {_WHOSE[next(iter(counts))]}.)"
    return f"{LEFT_OUT} {total} more {noun}, " + ", ".join(parts) + ".)"


def _cost(text: str) -> tuple[int, int]:
    """(characters, tokens) one line of the list takes."""
    line = f"- {text}\n"
    return len(text) + 3, list_tokens(line)


class _Packer:
    """The lines of the list being chosen, within its limits: each entry is [the fact, the line
    that keeps it] (the fact itself, or the short sentence it was said in), most important
    first, with what they cost so far (the heading included)."""

    def __init__(self, limit_chars: int, limit_tokens: int) -> None:
        self.limit_chars = limit_chars
        self.limit_tokens = limit_tokens
        self.chosen: list[list[Any]] = []
        self.size, self.tokens = len(HEADING), list_tokens(HEADING + "\n")
        self._hay = _haystack("")

    def covered(self, fact: Fact) -> bool:
        """A line kept already holds ``fact``: it needs no line of its own."""
        return bool(self.chosen) and _present(fact.text, self._hay)

    def fits(self, chars: int, tokens: int) -> bool:
        return self.size + chars <= self.limit_chars and self.tokens + tokens <= self.limit_tokens

    def kept(self) -> set[Fact]:
        return {e[0] for e in self.chosen}

    def add(self, fact: Fact) -> None:
        chars, cost = _cost(fact.text)
        self.chosen.append([fact, fact.text])
        self._count(chars, cost)

    def pop(self) -> None:
        """The least important line goes."""
        _fact, line = self.chosen.pop()
        chars, cost = _cost(line)
        self._count(-chars, -cost)

    def widening(self, entry: list[Any], sentence: str, inside: list[list[Any]]) -> tuple[int, int]:
        """(characters, tokens) keeping ``entry`` by ``sentence`` adds, the lines it holds
        (``inside``) gone."""
        chars, tokens = _cost(sentence)
        for e in [entry, *inside]:
            c, t = _cost(e[1])
            chars, tokens = chars - c, tokens - t
        return chars, tokens

    def widen(
        self, entry: list[Any], sentence: str, inside: list[list[Any]], cost: tuple[int, int]
    ) -> None:
        """``entry`` is kept by ``sentence`` instead, and the lines it holds go."""
        entry[1] = sentence
        self.chosen[:] = [e for e in self.chosen if not any(e is x for x in inside)]
        self._count(*cost)

    def _count(self, chars: int, tokens: int) -> None:
        self.size += chars
        self.tokens += tokens
        self._hay = _haystack("\n".join(e[1] for e in self.chosen))


def _candidates(
    earlier: list[str], folded_text: str, minor_text: str
) -> tuple[dict[str, Fact], _Origins]:
    """Every fact the list may keep (an earlier list's items, the folded text's facts and
    decisions, then what only tools returned), and whose words each position is in."""
    # Items an earlier pass kept stay candidates even if this text no longer holds them.
    found: dict[str, Fact] = {}
    for i, item in enumerate(earlier):
        clean = scrub(item)
        if _usable(clean):
            _add(found, Fact(clean, _rank_of(clean), i - len(earlier), CARRIED))
    first = _SPEAKER.search(folded_text)
    origins = _Origins(folded_text, CARRIED if first is not None else PERSON)
    if first is not None:
        # An earlier list's items come first, one a line: each stays a candidate whole (a
        # sentence kept with its fact must not come back as the bare fact).
        at = 0
        for line in folded_text[: first.start()].split("\n"):
            item = line.strip().removeprefix("- ").strip()
            if _usable(item) and item != HEADING and not _is_note(item):
                _add(found, Fact(item, _rank_of(item), at - first.start(), CARRIED))
            at += len(line) + 1
    for fact in _facts(folded_text):
        _add(found, Fact(fact.text, fact.rank, fact.pos, origins.at(fact.pos)))
    for fact in _decisions(folded_text, origins):
        _add(found, fact)
    if minor_text:
        offset = len(folded_text) + 1
        for fact in _facts(minor_text):
            if _norm(fact.text) not in found:
                _add(found, Fact(fact.text, fact.rank, offset + fact.pos, TOOL))
    return found, origins


def _note_room(packer: _Packer, order: list[Fact]) -> str:
    """The line naming what was left out, for which a fact of anyone's but the person's own
    words makes room; else at least how many ("" when everything is kept, or nothing fits)."""
    while True:
        kept = packer.kept()
        left = [f for f in order if f not in kept and not packer.covered(f)]
        if not left:
            return ""
        full, short = _left_out(left), f"{LEFT_OUT} {len(left)} more.)"
        fitting = [x for x in (full, short) if packer.fits(len(x) + 1, list_tokens(x + "\n"))]
        if full in fitting or not packer.chosen or packer.chosen[-1][0].tier == 0:
            return fitting[0] if fitting else ""
        packer.pop()  # the least important makes room for the line


def _in_sentences(
    packer: _Packer, order: list[Fact], folded_text: str, origins: _Origins, note: str
) -> None:
    """While there is room, a bare "Priya Raman" (who is she?) becomes the short sentence the
    person said it in; the facts that sentence holds need no lines of their own."""
    sentences = [f.text for f in order if f.rank == _SENTENCE]
    note_chars = len(note) + 1 if note else 0
    note_tokens = list_tokens(note + "\n") if note else 0
    for entry in list(packer.chosen):
        fact = entry[0]
        if entry not in packer.chosen or fact.rank == _DECISION:
            continue
        if fact.origin == PERSON:
            sentence = _sentence_around(folded_text, fact, origins)
        else:
            sentence = next((x for x in sentences if _present(fact.text, _haystack(x))), None)
        if sentence is None or not _usable(sentence) or scrub(sentence) != sentence:
            continue  # never a line with a secret's placeholder: say only the fact
        hay = _haystack(sentence)
        inside = [e for e in packer.chosen if e is not entry and _present(e[1], hay)]
        chars, tokens = packer.widening(entry, sentence, inside)
        if packer.fits(chars + note_chars, tokens + note_tokens):
            packer.widen(entry, sentence, inside, (chars, tokens))


def keep_facts(
    summary: str,
    folded_text: str,
    limit_chars: int,
    *,
    minor_text: str = "",
    limit_tokens: int | None = None,
) -> str:
    """``summary`` with every fact from ``folded_text`` it left out appended under
    "Kept word for word:".

    ``folded_text`` is the folded turns as ``summarise.render`` writes them ("Person: …",
    "Assistant: …", "Tool result: …"; text before the first of those is an earlier list's
    items); text without those marks counts as the person's. The appended block (heading
    and the line naming what was left out included) is at most ``limit_chars`` long and, when
    given, ``limit_tokens`` (digits counted one a token). What goes first when everything
    does not fit: see the module's docstring. Facts found only in ``minor_text`` (what tools
    returned) come last. An earlier "Kept word for word:" list in ``summary`` is merged, not
    repeated. The texts must already be scrubbed: this only ever copies from them.
    """
    body, earlier = split_kept(summary)
    found, origins = _candidates(earlier, folded_text, minor_text)
    candidates = sorted(found.values(), key=lambda f: f.pos)
    haystack = _haystack(body)
    missing = [
        f for f in candidates if not _present(f.text, haystack) and scrub(f.text) == f.text
    ]  # the list goes out on every turn: never a secret in it
    if not missing or limit_chars <= len(HEADING) + 4:
        return body
    # Most important first; the person's earliest words first (who they are, who they work
    # with), elsewhere the newest (likelier to matter next).
    order = sorted(
        missing,
        key=lambda f: (f.tier, _KIND_ORDER.get(f.rank, 2), f.pos if f.tier <= 1 else -f.pos),
    )
    packer = _Packer(limit_chars, limit_tokens if limit_tokens is not None else 1 << 30)
    # An earlier list's sentences first count as the bare facts they hold (which are
    # candidates of their own), so old sentences never crowd out new facts; they come back
    # whole below while there is room.
    for fact in order:
        if not packer.covered(fact) and fact.rank != _SENTENCE and packer.fits(*_cost(fact.text)):
            packer.add(fact)
    note = _note_room(packer, order)
    _in_sentences(packer, order, folded_text, origins, note)
    if note:
        # A sentence may hold facts the note counted.
        kept = packer.kept()
        left = [f for f in order if f not in kept and not packer.covered(f)]
        if not left:
            note = ""
        elif note.endswith(" more.)"):
            note = f"{LEFT_OUT} {len(left)} more.)"
        else:
            note = _left_out(left)
    if not packer.chosen:
        return body
    lines_kept: list[str] = []
    for _fact, line in sorted(packer.chosen, key=lambda e: e[0].pos):
        if line not in lines_kept:
            lines_kept.append(line)
    block = _block(lines_kept, note)
    return f"{body}\n\n{block}" if body else block


_CONTEXT_CHARS = 140  # a sentence longer than this is not kept whole; its fact is, bare


def _sentence_around(text: str, fact: Fact, origins: _Origins) -> str | None:
    """The sentence of the person's own words that ``fact`` is in, when it is short."""
    pos = fact.pos
    if pos >= len(text) or origins.at(pos) != PERSON:
        return None
    start, stop = pos, pos + len(fact.text)
    floor = max(0, pos - _CONTEXT_CHARS)
    while start > floor and not _ends_sentence(text, start - 1):
        start -= 1
    if start == floor and start > 0 and not _ends_sentence(text, start - 1):
        return None
    head = _SPEAKER.match(text, start)
    if head is not None:
        start = head.end()
    ceiling = min(len(text), start + _CONTEXT_CHARS + 1)
    while stop < ceiling and not _ends_sentence(text, stop):
        stop += 1
    if stop >= ceiling and stop < len(text):
        return None
    if origins.at(start) != PERSON or origins.at(max(start, stop - 1)) != PERSON:
        return None
    sentence = _clean(text[start:stop])
    if fact.text not in sentence or sentence == fact.text or "\n" in sentence:
        return None
    return sentence


def _rank_of(item: str) -> int:
    """The kind of a fact seen on its own (an item of an earlier list, a backticked span)."""
    if _DECIDED.search(item):
        return _DECISION
    if item.count(" ") >= 3:
        return _SENTENCE  # a fact kept with the words it was said in
    found: dict[str, Fact] = {}
    _scan(item, _PATTERNS, _Spans(), found)
    return min((f.rank for f in found.values()), default=_NAME)
