"""The fact keeper: facts a person would hate to lose from a summary, kept word for word.

A cheap model writing a summary drops the exact things people come back for: the file name,
the amount, the date, the link. This is a deterministic pass over the folded text that finds
those facts, and appends the ones a summary left out under a short heading. It runs on text
that has already been scrubbed, so a secret left out stays left out; the list itself is
scrubbed once more item by item (it is sent on every later turn), and so is a list carried
over from an earlier summary, which may predate a scrubbing rule.

Every pattern starts only at a token boundary and uses bounded or unambiguous quantifiers, so a
huge paste costs linear time.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass

from engines.api.scrub import scrub

HEADING = "Kept word for word:"

# Importance: lower is kept first when the list must be shortened.
_LINK, _WHEN, _NUMBER, _CODE, _NAME = 0, 1, 2, 3, 4
_MINOR = 5  # added to the rank of a fact only a tool result holds


@dataclass(frozen=True)
class Fact:
    text: str
    rank: int
    pos: int


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
    """Keep each fact once, at its first appearance."""
    key = _norm(fact.text)
    if not key:
        return
    old = found.get(key)
    if old is None:
        found[key] = fact
    elif fact.pos < old.pos or fact.rank < old.rank:
        first = fact if fact.pos < old.pos else old
        found[key] = Fact(first.text, min(fact.rank, old.rank), first.pos)


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


def split_kept(summary: str) -> tuple[str, list[str]]:
    """The summary without an earlier "Kept word for word:" list, and that list's items."""
    lines = summary.rstrip().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == HEADING:
            items: list[str] = []
            j = i + 1
            while j < len(lines) and lines[j].lstrip().startswith("- "):
                items.append(lines[j].strip()[2:].strip())
                j += 1
            rest = lines[:i] + lines[j:]
            return "\n".join(rest).rstrip(), [x for x in items if x]
    return summary.rstrip(), []


def _block(items: list[str]) -> str:
    return HEADING + "\n" + "\n".join(f"- {x}" for x in items)


def keep_facts(summary: str, folded_text: str, limit_chars: int, *, minor_text: str = "") -> str:
    """``summary`` with every fact from ``folded_text`` it left out appended under
    "Kept word for word:".

    The appended block (heading included) is at most ``limit_chars`` long. When everything
    does not fit, names are left out first, then code identifiers and plain numbers, then
    numbers with units, then dates and money; links, paths and e-mail addresses stay longest.
    Within one rank the oldest go first. Facts found only in ``minor_text`` (what tools
    returned) rank after all of those. An earlier "Kept word for word:" list in ``summary``
    is merged, not repeated. The texts must already be scrubbed: this only ever copies from
    them.
    """
    body, earlier = split_kept(summary)
    # Items an earlier pass kept stay candidates even if this text no longer holds them.
    found: dict[str, Fact] = {}
    for i, item in enumerate(earlier):
        clean = scrub(item)
        if _usable(clean):
            _add(found, Fact(clean, _rank_of(clean), i - len(earlier)))
    for fact in _facts(folded_text):
        _add(found, fact)
    if minor_text:
        offset = len(folded_text) + 1
        for fact in _facts(minor_text):
            if _norm(fact.text) not in found:
                _add(found, Fact(fact.text, fact.rank + _MINOR, offset + fact.pos))
    candidates = sorted(found.values(), key=lambda f: f.pos)
    haystack = _haystack(body)
    missing = [f for f in candidates if not _present(f.text, haystack)]
    if not missing or limit_chars <= len(HEADING) + 4:
        return body
    # Most important first; among equals the newest first (they are likelier to matter next).
    order = sorted(missing, key=lambda f: (f.rank, -f.pos))
    chosen: list[Fact] = []
    size = len(HEADING)
    for fact in order:
        cost = len(fact.text) + 3
        if size + cost > limit_chars:
            continue
        if scrub(fact.text) != fact.text:
            continue  # the list goes out on every turn: never a secret in it
        chosen.append(fact)
        size += cost
    if not chosen:
        return body
    chosen.sort(key=lambda f: f.pos)
    block = _block([f.text for f in chosen])
    return f"{body}\n\n{block}" if body else block


def _rank_of(item: str) -> int:
    """The rank of a fact seen on its own (an item of an earlier list, a backticked span)."""
    found: dict[str, Fact] = {}
    _scan(item, _PATTERNS, _Spans(), found)
    return min((f.rank for f in found.values()), default=_NAME)
