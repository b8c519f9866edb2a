"""The fact keeper: what a person would hate to lose from a summary, kept word for word, and
the summary's four parts.

A cheap model writing a summary drops the exact things people come back for: who they are,
the amount, the date, the decision. This is a deterministic pass over the folded text that
finds those facts and keeps the ones a summary left out. It runs on text that has already been
scrubbed, so a secret left out stays left out; the kept lines are scrubbed once more (they are
sent on every later turn), and so are lines carried over from an earlier summary.

What it keeps is ranked by whose words a fact came from, then by what it is about. The
person's own statements about themselves and the people, places, money and dates of their
life, their decisions ("we decided…", "I will…"), then their names, files, links, amounts and
dates come first (the earliest of them first: who the person is comes up at the start of a
chat); then what the assistant said (a model may have made it up); then what the person pasted
(a message the chat log marks pasted, or a block that reads as a log, a table or code); what
tools returned comes last. Each fact is kept with the few words that say what it is ("Our rent
is 3,100 zloty, due on the 10th", not "3,100"), bare only when those do not fit. The numbers
and dates of a pasted table or log are one line saying its shape ("Pasted: a table of 90 rows
(date, kwh), 2026-01-01 to 2026-12-06"), never a list. The kept lines are capped at
``FACTS_SHARE`` of the budget, counted by the window's estimate (a digit a token, as
tokenizers count them), and when the cap leaves facts out a line says how many and of which
kind.

The summary is always written in the seed's four parts (``SECTIONS``): what the person wants,
what was decided or done, facts to keep, what is still open. The model's lines (when its
summary passed ``summarise.judge``) stand plain under the part it wrote them in; the lines
Conch kept start with "- " under the part they belong to; a part with neither says "(nothing
noted)"; the last line says who wrote what (``compose``, read back by ``kept_parts``).

Every pattern starts only at a token boundary and uses bounded or unambiguous quantifiers, so a
huge paste costs linear time.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from engines.scrub import scrub
from engines.window import budget, estimate_tokens

HEADING = "Kept word for word:"  # an older summary's list (before the four parts): still read
LEFT_OUT = "(Left out of this list to keep it short:"  # starts the line naming what the cap cut
FACTS_SHARE = 0.20  # of a request's budget the kept lines may take

# The summary's four parts, in the seed's order. Every summary shows all four, whatever the
# model wrote: its lines under the part they belong to, plain; the lines Conch kept from the
# chat under theirs, each starting with "- "; a part with neither says so.
WANTS, DONE, FACTS, OPEN = 0, 1, 2, 3
SECTIONS = ("What the person wants:", "Decided or done:", "Facts to keep:", "Still open:")
NOTHING = "(nothing noted)"
# The last line says who wrote what (the person reads it in the divider, the model reads it too).
BY_BOTH = (
    '(Plain lines are the model\'s summary; lines starting with "- " Conch kept from the chat.)'
)
BY_CONCH = "(Every line kept by Conch from the chat; no summary by the model is used here.)"
BY_MODEL = "(Written by the model.)"
TRIMMED = "(Earlier details were left out to keep this summary short.)"
SHAPE = "Pasted: "  # starts a line saying what a pasted table or log held, not its numbers

# Kinds of fact. The rank a fact is kept by comes from its kind and from whose words it is in.
_LINK, _WHEN, _NUMBER, _CODE, _NAME, _DECISION, _SENTENCE = 0, 1, 2, 3, 4, 5, 6
# The person's statement about themselves, what they want, what is still open, a paste's shape.
_SELF, _WANT, _OPEN, _SHAPE = 7, 8, 9, 10

# Whose words a fact is in.
PERSON, CARRIED, ASSISTANT, PASTED, TOOL = "person", "carried", "assistant", "pasted", "tool"
IMPORTED = "imported"  # the person's words in another app's export: theirs, not typed here
# Within a tier: decisions and names with files, links, dates and money, then numbers with a
# unit, then code names and plain numbers.
_KIND_ORDER = {
    _SELF: 0,
    _DECISION: 0,
    _SENTENCE: 0,
    _SHAPE: 0,
    _NAME: 0,
    _LINK: 0,
    _WHEN: 0,
    _WANT: 1,
    _OPEN: 1,
    _NUMBER: 1,
    _CODE: 2,
}
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
        if self.origin == IMPORTED:
            return 1 if not noisy else 2
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
            r"(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|SEK|NOK|DKK|PLN|CNY|dollars?|euros?|pounds?"
            r"|zlotys?|złoty|zł|kronor|kroner|krona|francs?|yen|rupees?|pesos?|lira|reais|rand"
            r"|forints?|korun[ay]?)(?!\w)"
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


def split_kept(summary: str, trusted: Collection[str] | None = None) -> tuple[str, list[str]]:
    """The summary's own words (the model's, under their parts), and the lines Conch kept
    word for word. ``trusted``: see ``keep_facts``."""
    body, items, _note = kept_parts(summary, trusted)
    return body, items


def kept_parts(summary: str, trusted: Collection[str] | None = None) -> tuple[str, list[str], str]:
    """(the summary's own words, the lines kept word for word, the line saying what the cap
    left out or "")."""
    model, items, note = _parse(summary, trusted)
    body = "\n".join("\n".join([SECTIONS[i], *lines]) for i, lines in enumerate(model) if lines)
    return body, items, note


# --- whose words: the person's, the assistant's, pasted, a tool's -----------------------------

# The lines ``summarise.render`` writes: each message starts with who said it.
_SPEAKER = re.compile(
    r"(?m)^(?:(Person)( \((?:pasted|imported)\))?|(Assistant)(?: used [^:\n]{1,80})?"
    r"|(Tool result)(?: \([^)\n]{0,80}\))?): "
)
PASTED_SPEAKER = "Person (pasted): "  # a person message the chat log marks pasted or attached
IMPORTED_SPEAKER = "Person (imported): "  # a person message from another app's export
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
            tag = m.group(2) or ""
            who = (
                (IMPORTED if "imported" in tag else PASTED if tag else PERSON)
                if m.group(1)
                else ASSISTANT
            )
            who = TOOL if m.group(4) else who
            self._mark(m.start(), who)
            if who in (TOOL, PASTED):
                continue
            long_message = end - m.end() >= _LONG_MESSAGE
            for b_start, b_end, fenced in _blocks(text, m.end(), end):
                typed = who in (PERSON, IMPORTED)
                if fenced or (typed and _pasted_block(text, b_start, b_end, long_message)):
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

    def spans(self, *kinds: str) -> list[tuple[int, int]]:
        """The (start, end) of each stretch in ``kinds`` of words (end -1: the text's end)."""
        ends = [*self.starts[1:], -1]
        return [
            (s, e) for s, e, o in zip(self.starts, ends, self.origins, strict=True) if o in kinds
        ]

    def typed(self) -> list[tuple[int, int, str]]:
        """The spans the person typed, and an earlier list's items: (start, end, origin)."""
        ends = [*self.starts[1:], -1]
        return [
            (s, e, o)
            for s, e, o in zip(self.starts, ends, self.origins, strict=True)
            if o in (PERSON, CARRIED, IMPORTED)
        ]


# A decision in the person's own words: "we decided …", "I'll go with …", "I will …".
_DECIDED = re.compile(
    r"(?i)\b(?:we|i|they)(?:'ve|’ve| have)?\s+(?:decided|agreed|chose|settled on|opted)\b"
    r"|\b(?:let'?s|let’s|we(?:'ll|’ll| will)|i(?:'ll|’ll| will))\s+go\s+with\b"
    r"|\b(?:i|we)\s+will\s+(?!be\b|have\b|see\b|try\b|think\b|let\b|need\b)\w+"
    r"|\bdecision\s*:"
)
# What the person says about themselves and the people, places, money and dates of their life.
_RELATIONS = (
    r"wife|husband|partner|fianc[eé]e?|spouse|son|daughter|kids|children|child|boyfriend|"
    r"girlfriend|mother|mum|mom|father|dad|parents|brother|sister|boss|manager|dog|cat|"
    r"landlord|landlady|doctor|rent|mortgage|salary|budget|deadline|birthday|address|flat|"
    r"house|team|company|employer|school|neighbou?r"
)
_SELF_RE = re.compile(
    r"(?i)\bmy\s+name\s+is\b|\bi(?:['’]m|\s+am)\s+called\b|\bcall\s+me\s+[A-Z]"
    r"|\bi\s+live\s+(?:in|at|on|near)\b|\bi(?:['’]m|\s+am)\s+(?:from|based\s+in|living\s+in)\b"
    r"|\bi\s+(?:work|study)\s+(?:as|at|for|in)\b|\bi(?:['’]m|\s+am)\s+(?:a|an)\s+\w+"
    r"|\bi(?:['’]m|\s+am)\s+allergic\b|\bi\s+(?:was\s+born|grew\s+up)\b"
    rf"|\b(?:my|our)\s+(?:{_RELATIONS})\b"
)
# What the person wants, and what they say is still open.
_WANTS_RE = re.compile(
    r"(?i)\b(?:i|we)(?:['’]d|\s+would)?\s+(?:want|need|would\s+like|like\s+to|hope)\s+to\b"
    r"|\b(?:i|we)(?:['’]m|\s+am|['’]re|\s+are)\s+(?:trying|looking|planning|hoping)\s+to\b"
    r"|\b(?:my|our)\s+(?:goal|aim|plan)\s+is\b|\bhelp\s+me\s+\w+"
)
_OPEN_RE = re.compile(
    r"(?i)\bstill\s+(?:need|have\s+to|waiting|open|undecided|to\s+\w+)\b|\bnot\s+(?:yet\s+)?"
    r"(?:decided|sure|booked|sorted)\b|\bhaven['’]t\s+(?:yet\s+)?(?:decided|found|booked|chosen|"
    r"heard)\b|\byet\s+to\b|\bnext\s+step\b|\bto\s+do\s*:|\bopen\s+question\b"
)
_SAID_KINDS = (
    (_DECIDED, _DECISION, 0),
    (_SELF_RE, _SELF, 0),
    (_WANTS_RE, _WANT, 2),  # the first two: the person's aim is said early
    (_OPEN_RE, _OPEN, -2),  # the last two: what is open now
)
_DECISION_CHARS = 200  # a decision longer than this is kept from its start, cut at a word
_SENTENCE_END = ".!?;"  # followed by a space (so "v2.4.1" is one word), or a line's end


def _ends_sentence(text: str, at: int) -> bool:
    """Whether a sentence ends at ``text[at]`` (its last character)."""
    if text[at] == "\n":
        return True
    return text[at] in _SENTENCE_END and (at + 1 >= len(text) or text[at + 1].isspace())


def _sentence_at(
    text: str, m_start: int, m_end: int, span_start: int, span_end: int
) -> tuple[int, str]:
    """(where it starts, the sentence around ``text[m_start:m_end]``), within the span."""
    start = m_start
    floor = max(span_start, start - _DECISION_CHARS)
    while start > floor and not _ends_sentence(text, start - 1):
        start -= 1
    while start < m_start and text[start].isspace():
        start += 1
    head = _SPEAKER.match(text, start)
    if head is not None:
        start = head.end()
    stop = m_end
    ceiling = min(span_end, start + _DECISION_CHARS)
    while stop < ceiling and not _ends_sentence(text, stop):
        stop += 1
    sentence = text[start:stop].strip()
    if stop >= ceiling and stop < span_end and not _ends_sentence(text, stop):
        sentence = sentence.rsplit(" ", 1)[0]  # cut at a word, not inside one
    return start, sentence


def _said(text: str, origins: _Origins) -> list[Fact]:
    """The sentences of the person's own words that say what was decided, something about
    themselves, what they want or what is still open, word for word."""
    out: list[Fact] = []
    for pattern, kind, keep in _SAID_KINDS:
        of_kind: list[Fact] = []
        seen: set[int] = set()
        for span_start, span_end, origin in origins.typed():
            end_of_span = len(text) if span_end < 0 else span_end
            for m in pattern.finditer(text, span_start, end_of_span):
                start, sentence = _sentence_at(text, m.start(), m.end(), span_start, end_of_span)
                if start in seen or sentence.endswith("?"):
                    continue  # a question says nothing about the person yet
                seen.add(start)
                if len(sentence) >= 8 and _usable(sentence):
                    of_kind.append(Fact(sentence, kind, start, origin))
        if keep > 0:
            of_kind = of_kind[:keep]
        elif keep < 0:
            of_kind = of_kind[keep:]
        out.extend(of_kind)
    return out


# --- choosing what to keep ----------------------------------------------------------------------

_WHOSE = {
    PERSON: "from the person's messages",
    CARRIED: "from earlier summaries",
    ASSISTANT: "from the assistant's answers",
    PASTED: "from pasted text",
    IMPORTED: "from imported chats",
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
    return len(text) + 3, estimate_tokens(line)


_FRAME = "\n".join([*SECTIONS, BY_BOTH, ""])


class _Packer:
    """The lines of the list being chosen, within its limits: each entry is [the fact, the line
    that keeps it] (the fact itself, or the short sentence it was said in), most important
    first, with what they cost so far (the heading included)."""

    def __init__(self, limit_chars: int, limit_tokens: int) -> None:
        self.limit_chars = limit_chars
        self.limit_tokens = limit_tokens
        self.chosen: list[list[Any]] = []
        # The parts' headings and the line saying who wrote what count in the summary's cap
        # (their tokens: punctuation and quotes cost more than four characters a token).
        self.size, self.tokens = len(HEADING), estimate_tokens(_FRAME)
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

    def try_line(self, fact: Fact, line: str) -> bool:
        """Keep ``fact`` by ``line`` if it fits (the lines it holds go); whether it did."""
        hay = _haystack(line)
        inside = [e for e in self.chosen if _present(e[1], hay)]
        entry = [fact, fact.text]
        chars, tokens = self.widening(entry, line, inside)
        chars, tokens = chars + _cost(fact.text)[0], tokens + _cost(fact.text)[1]
        if not self.fits(chars, tokens):
            return False
        self.chosen.append(entry)
        entry[1] = line
        self.chosen[:] = [e for e in self.chosen if not any(e is x for x in inside)]
        self._count(chars, tokens)
        return True

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
    the person's sentences, then what only tools returned), and whose words each position is
    in. The numbers and dates of a pasted table or log, and of a tool's result, come as one
    line saying what it held (``_shapes``), not one by one."""
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
            if item in _OWN_LINES or _PART_RE.match(item) or _is_note(item):
                pass  # a summary's own frame, not a fact
            elif _usable(item):
                _add(found, Fact(item, _rank_of(item), at - first.start(), CARRIED))
            at += len(line) + 1
    # A shape line an earlier pass kept stays whole: its dates are not facts of their own.
    # A message shortened for the summary says how much it left out: not a fact.
    scanned = _CUT_MARK.sub(lambda m: " " * len(m.group(0)), folded_text)
    if first is not None:
        head = _SHAPE_LINE.sub(lambda m: " " * len(m.group(0)), folded_text[: first.start()])
        scanned = head + scanned[first.start() :]
    facts = [Fact(f.text, f.rank, f.pos, origins.at(f.pos)) for f in _facts(scanned)]
    shapes, shaped = _shapes(folded_text, origins.spans(PASTED, TOOL), facts, 0)
    for fact in facts:
        if fact.pos not in shaped:
            _add(found, fact)
    for fact in [*_said(folded_text, origins), *shapes]:
        _add(found, fact)
    if minor_text:
        offset = len(folded_text) + 1
        minor = [Fact(f.text, f.rank, offset + f.pos, TOOL) for f in _facts(minor_text)]
        entries = [(m.start(), -1) for m in _SPEAKER.finditer(minor_text)] or [(0, -1)]
        bounds = [
            (s, entries[i + 1][0] if i + 1 < len(entries) else -1)
            for i, (s, _e) in enumerate(entries)
        ]
        shapes, shaped = _shapes(minor_text, bounds, minor, offset)
        for fact in [*minor, *shapes]:
            if fact.pos not in shaped and _norm(fact.text) not in found:
                _add(found, fact)
    return found, origins


_CUT_MARK = re.compile(r"\[… [\d,]+ characters left out …\]")
_SHAPE_LINE = re.compile(r"(?m)^(?:- )?(?:Pasted|Tool result): [^\n]*$")
SHAPE_MIN = 6  # a pasted block with this many numbers and dates is described, not listed
_ISO_DAY = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_CELLS = re.compile(r"[,|\t;]")


def _shapes(
    text: str, spans: list[tuple[int, int]], facts: list[Fact], offset: int
) -> tuple[list[Fact], set[int]]:
    """One line for each pasted block (or tool result) holding ``SHAPE_MIN`` numbers and dates
    or more ("Pasted: a table of 90 rows (date, kwh), 2026-01-01 to 2026-12-31"), and the
    positions of the facts it stands for. ``facts``' positions are ``offset`` past ``text``'s."""
    out: list[Fact] = []
    shaped: set[int] = set()
    noisy = [f for f in facts if f.rank in _NOISY_KINDS]
    starts = [f.pos - offset for f in noisy]
    for start, end in spans:
        stop = len(text) if end < 0 else end
        lo, hi = bisect.bisect_left(starts, start), bisect.bisect_left(starts, stop)
        inside = noisy[lo:hi]
        if len(inside) < SHAPE_MIN:
            continue
        block = text[start:stop]
        head = _SPEAKER.match(block)
        if head is not None:
            block = block[head.end() :]
        lines = [x.strip() for x in block.splitlines() if x.strip()]
        logged = sum(1 for x in lines if _LOG_START.match(x))
        tabled = sum(1 for x in lines if _CELLS.search(x) and any(c.isdigit() for c in x))
        columns = ""
        if lines and _CELLS.search(lines[0]) and not any(c.isdigit() for c in lines[0]):
            cells = [c.strip() for c in _CELLS.split(lines[0]) if c.strip()]
            columns = f" ({', '.join(cells[:6])}{', …' if len(cells) > 6 else ''})"
            lines = lines[1:]
        if 2 * logged >= len(lines):
            what = f"a log of {len(lines)} lines"
        elif 2 * tabled >= len(lines):
            what = f"a table of {len(lines)} rows{columns}"
        else:
            what = f"{len(lines)} lines with {len(inside)} numbers and dates"
        days = sorted(set(_ISO_DAY.findall(block)))
        when = f", {days[0]} to {days[-1]}" if len(days) > 1 else ""
        label = "Tool result" if head is not None and head.group(4) else "Pasted"
        line = scrub(f"{label}: {what}{when}")[:200]
        out.append(Fact(line, _SHAPE, offset + start, PASTED if label == "Pasted" else TOOL))
        shaped.update(f.pos for f in inside)
    return out, shaped


def _note_room(packer: _Packer, order: list[Fact]) -> str:
    """The line naming what was left out, for which a fact of anyone's but the person's own
    words makes room; else at least how many ("" when everything is kept, or nothing fits)."""
    while True:
        kept = packer.kept()
        left = [f for f in order if f not in kept and not packer.covered(f)]
        if not left:
            return ""
        full, short = _left_out(left), f"{LEFT_OUT} {len(left)} more.)"
        fitting = [x for x in (full, short) if packer.fits(len(x) + 1, estimate_tokens(x + "\n"))]
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
    note_tokens = estimate_tokens(note + "\n") if note else 0
    for entry in list(packer.chosen):
        fact = entry[0]
        if entry not in packer.chosen or fact.rank in (_DECISION, _SELF, _WANT, _OPEN, _SHAPE):
            continue
        if fact.origin in (PERSON, IMPORTED):
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
    trusted: Collection[str] | None = None,
) -> str:
    """``summary`` in its four parts, with the facts of ``folded_text`` it left out kept.

    ``folded_text`` is the folded turns as ``summarise.render`` writes them ("Person: …",
    "Person (pasted): …", "Assistant: …", "Tool result: …"; text before the first of those is
    an earlier list's items); text without those marks counts as the person's. The kept lines
    (and the line naming what was left out) are at most ``limit_chars`` long and, when given,
    ``limit_tokens`` (by ``estimate_tokens``). What goes first when everything does not
    fit: see the module's docstring. Facts found only in ``minor_text`` (what tools returned)
    come last. The lines an earlier pass kept in ``summary`` are merged, not repeated;
    ``trusted``: when ``summary`` is a model's reply, the kept lines it may have copied from
    the summary it was given (its other "- " lines are its own words). The texts must
    already be scrubbed: this only ever copies from them.
    """
    model, earlier, _note = _parse(summary, trusted)
    body = "\n".join(x for part in model for x in part)
    found, origins = _candidates(earlier, folded_text, minor_text)
    candidates = sorted(found.values(), key=lambda f: f.pos)
    haystack = _haystack(body)
    missing = [
        f
        for f in candidates
        if (_own_line(f) or not _present(f.text, haystack)) and scrub(f.text) == f.text
    ]  # the list goes out on every turn: never a secret in it
    if not missing or limit_chars <= len(HEADING) + 4:
        return compose(model, [], "")
    # Most important first; the person's earliest words first (who they are, who they work
    # with), elsewhere the newest (likelier to matter next).
    order = sorted(
        missing,
        key=lambda f: (f.tier, _KIND_ORDER.get(f.rank, 2), f.pos if f.tier <= 1 else -f.pos),
    )
    packer = _Packer(limit_chars, limit_tokens if limit_tokens is not None else 1 << 30)
    sentences = [f.text for f in order if f.rank == _SENTENCE]
    # An earlier list's sentences first count as the facts they hold (which are candidates of
    # their own), so old sentences never crowd out new facts. Each fact is kept with the few
    # words around it that say what it is ("rent 3,100 zloty due on the 10th"), bare only when
    # those do not fit.
    for fact in order:
        if packer.covered(fact) or fact.rank == _SENTENCE:
            continue
        line = _line_for(fact, folded_text, origins, sentences)
        if line != fact.text and scrub(line) == line and packer.try_line(fact, line):
            continue
        if packer.fits(*_cost(fact.text)):
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
    lines_kept: list[str] = []
    for _fact, line in sorted(packer.chosen, key=lambda e: e[0].pos):
        if line not in lines_kept:
            lines_kept.append(line)
    # A model line that only copies a kept line says it twice: the kept line stays.
    copies = {_norm(x).rstrip(".!") for x in lines_kept}
    model = [[x for x in part if _norm(x).rstrip(".!") not in copies] for part in model]
    return compose(model, lines_kept, note)


def _own_line(fact: Fact) -> bool:
    """The person's statement about themselves or a decision, in their words: it gets a line
    of its own even when the model's summary says it too. Only the lines are carried into the
    next fold (never the model's words), so a fact the model said once and then dropped would
    be gone for good."""
    return fact.rank in (_SELF, _DECISION) and fact.origin in (PERSON, IMPORTED, CARRIED)


_PHRASE_CHARS = 110  # a sentence up to this long is kept whole with its fact
_PHRASE_WORDS = 5  # else this many words either side of it, within its sentence


def _line_for(fact: Fact, text: str, origins: _Origins, sentences: list[str]) -> str:
    """The line that keeps ``fact`` with the words that say what it is: its short sentence,
    a few words either side, the earlier line that held it, or the fact itself."""
    if fact.rank in (_DECISION, _SELF, _WANT, _OPEN, _SHAPE, _SENTENCE):
        return fact.text
    if fact.origin in (PERSON, IMPORTED):
        found = _sentence_around(text, fact, origins, _PHRASE_CHARS) or _words_around(
            text, fact, origins
        )
        return found or fact.text
    if fact.origin in (ASSISTANT, PASTED):  # never a bare number: the words beside it
        return _words_around(text, fact, origins) or fact.text
    if fact.origin == CARRIED:
        hay = [
            x for x in sentences if len(x) <= _CONTEXT_CHARS and _present(fact.text, _haystack(x))
        ]
        return hay[0] if hay else fact.text
    return fact.text


def _words_around(text: str, fact: Fact, origins: _Origins) -> str | None:
    """``fact`` with up to ``_PHRASE_WORDS`` words either side, within its sentence and its
    speaker's words."""
    pos, end = fact.pos, fact.pos + len(fact.text)
    if end > len(text) or text[pos:end] != fact.text:
        return None
    who = origins.at(pos)
    left = text[max(0, pos - 80) : pos]
    for stop in ("\n", ". ", "! ", "? ", "; ", ": "):
        at = left.rfind(stop)
        if at >= 0:
            left = left[at + len(stop) :]
    head = _SPEAKER.match(left)
    if head is not None:
        left = left[head.end() :]
    right = text[end : end + 80]
    cut = min(
        (
            i
            for i in (right.find(x) for x in ("\n", ". ", "! ", "? ", "; ", " — ", " – "))
            if i >= 0
        ),
        default=len(right),
    )
    right = right[:cut]
    words = left.split()
    before = words[-_PHRASE_WORDS:]
    if len(words) > len(before) and any(c.isdigit() for c in words[-len(before) - 1]):
        before = words[-len(before) - 1 :]  # "420 m of larch", not "m of larch"
    # A sum's signs stay ("5 l ≈ 216 litres"); a table's pipes and stray marks do not.
    after = [w for w in right.split() if any(c.isalnum() for c in w) or set(w) <= _SIGNS]
    after = after[:_PHRASE_WORDS]
    while after and set(after[-1]) <= _SIGNS:
        after.pop()
    if not before and not after:
        return None
    start = pos - len(" ".join(before)) - (1 if before else 0)
    if origins.at(max(0, start)) != who or origins.at(max(pos, end + len(right) - 1)) != who:
        return None
    phrase = _clean(" ".join([*before, fact.text]) + (" " + " ".join(after) if after else ""))
    line = text[text.rfind("\n", 0, pos) + 1 : pos]
    phrase = _readable(phrase, row=line.lstrip().startswith("|"))
    return phrase if fact.text in phrase else None


_EMPHASIS = re.compile(r"\*\*|__|`")
_SIGNS = frozenset("=≈×+−/<>≤≥~→")


def _readable(phrase: str, row: bool = False) -> str:
    """Words from a Markdown answer as a person reads them: no bold or code marks, and a
    table row's cells (``row``: the phrase is from one) as "item: value" rather than between
    pipes."""
    text = _EMPHASIS.sub("", phrase)
    if row or text.lstrip().startswith("|"):  # a table row (a pipe elsewhere may be a shell's)
        cells = [c.strip() for c in text.split("|") if c.strip()]
        text = f"{cells[0]}: {', '.join(cells[1:])}" if len(cells) > 1 else "".join(cells)
    return _clean(" ".join(text.split()))


# --- the summary's four parts ------------------------------------------------------------------

_PART_RE = re.compile(
    r"^[\s#*_>•-]*(what the person wants|decided or done|facts to keep|still open)\b"
    r"[^:\n]{0,60}:[\s*_]*(.*)$",
    re.IGNORECASE,
)
_PARTS = {x.lower().rstrip(":"): i for i, x in enumerate(SECTIONS)}
_OWN_LINES = frozenset({BY_BOTH, BY_CONCH, BY_MODEL, TRIMMED, NOTHING, HEADING})


def _parse(
    summary: str, trusted: Collection[str] | None = None
) -> tuple[list[list[str]], list[str], str]:
    """(the model's lines under each of the four parts, the lines Conch kept, the line naming
    what was left out). ``trusted``: see ``keep_facts`` (None: every "- " line is Conch's)."""
    model: list[list[str]] = [[], [], [], []]
    kept: list[str] = []
    note = ""
    part = DONE  # a model's summary without parts says what happened
    in_old_list = False
    trusted_keys = None if trusted is None else {_norm(x) for x in trusted}
    for raw in summary.splitlines():
        line = raw.strip()
        if not line or line in _OWN_LINES:
            in_old_list = in_old_list and line == HEADING
            if line == HEADING:
                in_old_list = True
            continue
        if _is_note(line):
            note = line
            continue
        m = _PART_RE.match(line)
        if m is not None:
            part = _PARTS[m.group(1).lower()]
            in_old_list = False
            rest = m.group(2).strip()
            if rest and rest != NOTHING:
                model[part].append(rest)
            continue
        if line.startswith("- ") or line.startswith("-\t"):
            item = line[2:].strip()
            if not item:
                continue
            if in_old_list or trusted_keys is None or _norm(item) in trusted_keys:
                kept.append(item)
                continue
            line = item  # the model's own bullet: its words
        else:
            in_old_list = False
        model[part].append(line.lstrip("*• ").strip())
    return [[x for x in p if x] for p in model], kept, note


def _part_of(line: str) -> int:
    """Which of the four parts a kept line belongs under."""
    if line.startswith(SHAPE) or line.startswith("Tool result: "):
        return FACTS
    if _DECIDED.search(line):
        return DONE
    if _SELF_RE.search(line):
        return FACTS
    if _OPEN_RE.search(line):
        return OPEN
    if _WANTS_RE.search(line):
        return WANTS
    return FACTS


def compose(model: list[list[str]], kept: list[str], note: str, trimmed: bool = False) -> str:
    """The summary as the divider shows it and the model reads it: the four parts, the
    model's lines plain, Conch's kept lines after "- ", and who wrote what ("" when there is
    nothing at all)."""
    if not any(model) and not kept:
        return ""
    kept_in: list[list[str]] = [[], [], [], []]
    for line in kept:
        kept_in[_part_of(line)].append(line)
    out = [TRIMMED] if trimmed else []
    for i, head in enumerate(SECTIONS):
        lines = [*model[i], *(f"- {x}" for x in kept_in[i])]
        if i == FACTS and note:
            lines.append(note)
        if model[i]:  # the model's first line goes beside the heading, as a model writes it
            out.extend([f"{head} {lines[0]}", *lines[1:]])
        else:
            out.extend([head, *lines] if lines else [f"{head} {NOTHING}"])
    by_model, by_conch = any(model), bool(kept)
    out.append(BY_BOTH if by_model and by_conch else BY_CONCH if by_conch else BY_MODEL)
    return "\n".join(out)


def parts(summary: str) -> tuple[list[list[str]], list[str], str, bool]:
    """(the model's lines under each part, Conch's kept lines, the left-out line, whether an
    earlier trim left details out) of a summary this module wrote (or an older one)."""
    model, kept, note = _parse(summary)
    return model, kept, note, TRIMMED in summary.splitlines()


_CONTEXT_CHARS = 140  # a sentence longer than this is not kept whole; its fact is, bare


def _sentence_around(
    text: str, fact: Fact, origins: _Origins, limit: int = _CONTEXT_CHARS
) -> str | None:
    """The sentence of the person's (or the assistant's) own words that ``fact`` is in, when
    it is at most ``limit`` characters."""
    pos = fact.pos
    if pos >= len(text):
        return None
    who = origins.at(pos)
    if who not in (PERSON, IMPORTED, ASSISTANT):
        return None
    start, stop = pos, pos + len(fact.text)
    floor = max(0, pos - limit)
    while start > floor and not _ends_sentence(text, start - 1):
        start -= 1
    if start == floor and start > 0 and not _ends_sentence(text, start - 1):
        return None
    head = _SPEAKER.match(text, start)
    if head is not None:
        start = head.end()
    ceiling = min(len(text), start + limit + 1)
    while stop < ceiling and not _ends_sentence(text, stop):
        stop += 1
    if stop >= ceiling and stop < len(text):
        return None
    if origins.at(start) != who or origins.at(max(start, stop - 1)) != who:
        return None
    sentence = _clean(text[start:stop])
    if fact.text not in sentence or sentence == fact.text or "\n" in sentence:
        return None
    return sentence


def _rank_of(item: str) -> int:
    """The kind of a fact seen on its own (an item of an earlier list, a backticked span)."""
    if item.startswith(SHAPE) or item.startswith("Tool result: "):
        return _SHAPE
    if _DECIDED.search(item):
        return _DECISION
    if _SELF_RE.search(item):
        return _SELF
    if _OPEN_RE.search(item):
        return _OPEN
    if _WANTS_RE.search(item) and item.count(" ") >= 3:
        return _WANT
    if item.count(" ") >= 3:
        return _SENTENCE  # a fact kept with the words it was said in
    found: dict[str, Fact] = {}
    _scan(item, _PATTERNS, _Spans(), found)
    return min((f.rank for f in found.values()), default=_NAME)
