""" "Too long" in any provider's words, and the window a refusal names.

A grammar, not a list of phrases. A refusal is "too long" when it says the *input* (prompt,
messages, context, the tokens of the request) is *beyond a limit* (exceeds, longer than, too
many, must be <= ...), and the limit is not only the output cap, a rate, a byte size, an image
or money. Wordings nobody has collected yet are recognised as long as they keep that shape.

The body is read as structure first: JSON (also JSON inside a JSON string, as OpenRouter's
``metadata.raw`` and every proxy that wraps an upstream error do), SSE ``data:`` lines, or plain
text. Each text leaf is one *unit*; a rate-limit or billing word vetoes only its own unit.

``window_in`` reads the number the limit names: a number after the relation or bound to a limit
noun ("maximum context length is N", "limit: N", "[1, N]", "n_ctx (N)"), never a number on the
subject side ("request (9412 tokens) exceeds ...", "... by 540451 tokens", "N + M > W").

Both functions read untrusted text of any size and never raise.
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from typing import Any

log = logging.getLogger("conch.providers.too_long")

# Statuses whose body never means "the prompt is too long": keys, payment, missing models and
# rate limits (OpenAI's 429 "Request too large ... tokens per min" is a rate limit, not a window).
_NEVER_STATUSES = frozenset({401, 402, 403, 404, 407, 408, 429})

# Error bodies are short; past these sizes only the head and tail can hold the words.
_HEAD_CHARS = 60_000
_TAIL_CHARS = 20_000
_UNIT_HEAD = 8_000  # a longer leaf is a stack trace or echoed content
_UNIT_TAIL = 2_000
_MAX_UNITS = 200
_MAX_NESTING = 4  # JSON inside a string inside JSON, and so on
# Keys whose strings echo what the user sent (pydantic's "input"), not what the server says.
_ECHO_KEYS = frozenset({"input", "inputs", "prompt", "messages", "content"})
_CACHED_UNITS = 64  # is_too_long and window_in read the same units one after the other
_JSON_ATTEMPTS = 6

# A window outside this range is a misread (a byte count, a year, an id), not a window.
_MIN_WINDOW = 16
_MAX_WINDOW = 100_000_000


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# --- vocabulary -------------------------------------------------------------------------------
# The topic a noun gives the phrase it heads. The nearest topic word before a relation is its
# subject; an input noun joined by "and"/"+"/"or" still makes it the input ("input length and
# max_tokens exceed context limit").
_INPUT, _OUTPUT, _MEDIA, _BYTES, _RATE, _MONEY, _OTHER = (
    "input",
    "output",
    "media",
    "bytes",
    "rate",
    "money",
    "other",
)
_NOT_INPUT = frozenset({_OUTPUT, _MEDIA, _BYTES, _RATE, _MONEY, _OTHER})
_TOPIC_WORDS = {
    _INPUT: "prompt prompts input inputs message messages context contexts conversation "
    "conversations history query queries question questions text texts prefill chat ctx "
    "window windows string strings",
    # "maxtokens" stands for every output-cap identifier (max_tokens, maxOutputTokens, ...).
    _OUTPUT: "completion completions output outputs generation generate generated response "
    "responses reply answer prediction predict sample maxtokens",
    _MEDIA: "image images img pixel pixels dimension dimensions video videos audio frame frames "
    "photo photos picture pictures file files attachment attachments pdf pages document "
    "documents",
    _BYTES: "byte bytes kb mb gb kib mib gib megabytes kilobytes payload body entity",
    _RATE: "tpm rpm tpd rpd rate rates throttle throttled throttling requests concurrent "
    "concurrency pending queue busy minute minutes hour hours day days month monthly daily",
    _MONEY: "credit credits balance billing afford quota payment funds insufficient spend budget",
    _OTHER: "tool tools function functions memory vram ram gpu cpu stop choices temperature "
    "logprobs seed retries attempts connections threads truncate value values integer "
    "parameter param argument uri url header headers cookie name username password title path "
    "filename key took take takes taking waited wait waiting idle lasted timed timeout duration "
    "time seconds",
}
_TOPIC = {word: topic for topic, words in _TOPIC_WORDS.items() for word in words.split()}

# Measure words: on their own they say "the tokens of the request" (weakly input).
_WEAK_INPUT = _words("length lengths token tokens len long")
_CONJUNCTIONS = _words("and + or & plus with")
_BOUNDARIES = _words(". ; ! ? 。 ； however") | {"\n"}

# Phrases that make a whole unit a rate limit, a time-window quota or a money problem.
_RATE_PHRASES = re.compile(
    r"rate[ -]?limit|per (?:min(?:ute)?|sec(?:ond)?|hour|day|month)\b|\b(?:tpm|rpm|tpd|rpd)\b"
    r"|throttl|too many requests|please wait|try again in \d|retry (?:in|after) \d"
    r"|\bmonthly\b|\bdaily\b|server busy|速率|频率|并发"
)
_MONEY_PHRASES = re.compile(
    r"\bcredits?\b|\bbalance\b|\bbilling\b|\bafford\b|\bquota\b|\bpayment\b|insufficient"
    r"|\bfunds\b|余额|欠费|配额"
)

# Relations that put the subject beyond a limit.
_BEYOND = _words("exceed exceeds exceeded exceeding overflow overflows overflowed overflowing")
_BEYOND |= _words("surpass surpasses surpassed beyond > >= ≥")
_COMPARATORS = _words("> >= ≥")
_TOO = _words("long large big many much lengthy high")
_LENGTH_WORDS = _words("long longer lengthy")
_MORE = _words("longer greater larger bigger more higher")
_LESSER = _words("less smaller lower fewer shorter other rather no")
_MODAL = _words("must should cannot can't can may shall need needs")
_AT_MOST = _words("<= < ≤ less smaller fewer under within lower")
_CJK_BEYOND = _words("超过 超出 超长 过长 超限 太长")
_LIMIT_NOUNS = _words(
    "max maximum limit limits context window allowed supported supports support capacity "
    "range ctx only upper configured"
)
_SHORTEN = _words("reduce shorten decrease trim cut lower compress shrink split")
_GROW = _words("increase increasing raise larger bigger longer extend expand")

# Chinese, the same grammar on characters: what stands before 超过/超长/... is the subject,
# what follows is the limit.
_CJK_RELATION = re.compile(r"超过|超出|超长|过长|超限|太长|大于")
_CJK_CLAUSE_END = re.compile(r"[，。,.;；!?！？\n]")
_CJK_INPUT = re.compile(
    r"输入|上下文|提示|对话|文本|内容|消息|问题|长度|(?<![a-z])(?:prompt|tokens?)(?![a-z])"
)
_CJK_NOT_INPUT = re.compile(
    r"输出|生成|回复|图片|图像|文件|余额|额度|配额|频率|速率|并发|次数|maxtokens"
)

_CJK_LIMIT_CUE = re.compile(r"最大|上限|限制|不超过|最多")
# A number right after these is what was sent; right after _LIMIT_CUES it is the limit.
_REQUEST_CUES = _words(
    "requested request requests resulted contains contain containing has have had got given "
    "received actual current used using provided sent estimated about approximately approx "
    "least ~ by total count prompt input inputs keep first quested required needs need"
)
_LIMIT_CUES = _words(
    "maximum max limit limits allowed allow window ctx capacity most upto up exceed exceeds "
    "exceeded exceeding than <= < ≤ > >= only supports supported len"
)
# "length"/"size"/"context" cue a limit only after one of these ("context length", "max size").
_LIMIT_QUALIFIERS = _words(
    "context max maximum model seq sequence allowed available configured ctx prompt input token"
)
# A number followed by one of these counts something other than tokens.
_NON_TOKEN_UNITS = _words(
    "bytes byte kb mb gb kib mib gib pixels pixel px characters character chars char items item "
    "elements seconds second ms s % images files requests messages"
)
_MAXIMA = _words("maximum max limit allowed only most upto")
_MINIMA = _words("minimum min least multiple small smaller set default")
_COUNT_LIMIT_WORDS = _words("string array characters chars items")  # "maximum length 128" items
_SUBJECT_OPERATORS = _words("+ > >= ≥ exceeds exceed exceeded too must")
_OPERAND_STOPS = _words("( : , [ = { ;")
# Words that leave a phrase without a subject of its own: "the request is too long".
_PLAIN_WORDS = _words(
    "the a an is are was were be been being it its this that your my request error errors "
    "exception warning failed invalid bad"
)
_SCALE = {"k": 1_000, "m": 1_000_000}
_WINDOW_KEYS = (
    "n ctx",
    "n ctx slot",
    "n ctx per seq",
    "context length",
    "context window",
    "max context length",
    "max model len",
    "max seq len",
    "context size",
    "num ctx",
    "max input tokens",
    "max prompt tokens",
    "input token limit",
)

# --- tokens -----------------------------------------------------------------------------------

# The output-cap parameters written as identifiers (max_tokens, maxOutputTokens, num_predict).
# Prose "max tokens supported is 226" is a limit on the prompt, so only identifiers count.
_OUTPUT_PARAM = re.compile(
    r"\b(?:max_?(?:new_?|completion_?|output_?)?tokens?(?:_?to_?sample)?|num_?predict"
    r"|max(?:New|Completion|Output)?Tokens)\b",
    re.IGNORECASE,
)
# A quoted key after "{" or "," in Python-repr or escaped JSON ({'message': ...). The key is a
# field name, not a subject; "Invalid 'tools': array too long" keeps its subject.
_QUOTED_KEY = re.compile(r"([{,]\s*)(['\"])[\w$.\-]{1,40}\2\s*:")
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_STATUS_TAG = re.compile(r"<\d{3}>")  # DashScope's "<400> InternalError"
_ERROR_CLASS = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Warning))\b")  # a label
_POSSESSIVE = re.compile(r"(?<=[A-Za-z])'s\b")  # "the model's context length"
_CAMEL = re.compile(r"([a-z])([A-Z])")
_UNDERSCORE = re.compile(r"(?<=[A-Za-z])_|_(?=[A-Za-z])")
_DIGIT_WORD = re.compile(r"(?<=\d)(?=[A-Za-z\u4e00-\u9fff])|(?<=[A-Za-z\u4e00-\u9fff])(?=\d)")
_SPACES = re.compile(r"[ \t\r\f\v]+")
_TOKEN = re.compile(
    r"\d{1,3}(?:[,_]\d{3})+(?!\d)|\d+(?:\.\d+)?|[a-z]+(?:'[a-z]+)?|[\u3400-\u9fff]+"
    r"|>=|<=|\n|[^\s\w]"
)


def _normalise(text: str) -> str:
    """Lower-case words with identifiers split ("context_length_exceeded" reads as words,
    "4104tokens" as "4104 tokens") and escapes undone, however many times the body was wrapped."""
    text = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)  # Go's \u003e is ">"
    text = text.replace("\\n", "\n").replace("\\r", " ").replace("\\t", " ")
    text = text.replace("\\u0027", "'").replace("\\'", "'").replace('\\"', '"').replace("\\", " ")
    text = _OUTPUT_PARAM.sub(" maxtokens ", text)
    text = _QUOTED_KEY.sub(r"\1 ; ", text)
    text = _STATUS_TAG.sub(" ", text)
    text = _ERROR_CLASS.sub(r"\1 ;", text)
    text = _CAMEL.sub(r"\1 \2", text)
    text = _UNDERSCORE.sub(" ", text)
    text = _DIGIT_WORD.sub(" ", text)
    for quote in '`"“”«»':
        text = text.replace(quote, " ")
    text = _POSSESSIVE.sub("", text.replace("’", "'").replace("‘", "'"))
    return _SPACES.sub(" ", text.lower())


def _tokens(text: str) -> list[str]:
    return [m.group(0) for m in _TOKEN.finditer(text)]


def _number(token: str) -> int | None:
    if not token[:1].isdigit() or "." in token or len(token) > 15:
        return None  # a window has at most nine digits; ids and hashes are longer
    return int(token.replace(",", "").replace("_", ""))


def _at(tokens: list[str], i: int) -> str:
    return tokens[i] if 0 <= i < len(tokens) else ""


# --- structure --------------------------------------------------------------------------------


def _parse_json(text: str) -> tuple[str, Any, str] | None:
    """The first JSON object (or array of objects) in ``text`` with the text around it."""
    start = -1
    for _ in range(_JSON_ATTEMPTS):
        brace, bracket = text.find("{", start + 1), text.find("[", start + 1)
        opens = [i for i in (brace, bracket) if i >= 0]
        if not opens:
            return None
        start = min(opens)
        try:
            parsed, end = json.JSONDecoder().raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if (isinstance(parsed, dict) and parsed) or (
            isinstance(parsed, list) and any(isinstance(item, dict) for item in parsed)
        ):
            return text[:start], parsed, text[end:]
    return None


def _leaves(value: Any, key: str, depth: int, out: list[tuple[str, Any]]) -> None:
    """(key, scalar) pairs of parsed JSON; a string holding JSON is opened as well."""
    stack: list[tuple[str, Any]] = [(key, value)]
    while stack and len(out) < _MAX_UNITS:
        k, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((str(kk), vv) for kk, vv in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((k, vv) for vv in reversed(v))
        elif isinstance(v, str):
            inner = _parse_json(v) if depth < _MAX_NESTING else None
            if inner is None:
                out.append((k, v))
                continue
            before, parsed, after = inner
            out.append((k, before))
            _leaves(parsed, k, depth + 1, out)
            out.append((k, after))
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append((k, v))


def _sse_payloads(body: str) -> str:
    """An SSE stream carries the error JSON after ``data:``; drop the framing around it."""
    if "data:" not in body:
        return body
    kept = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("data:"):
            kept.append(stripped[5:].strip())
        elif not stripped.startswith(("event:", "id:", "retry:")):
            kept.append(line)
    return "\n".join(kept)


def _units(body: str) -> tuple[list[str], dict[str, int]]:
    """The text units of a body, and its numeric JSON fields by key ("n ctx": 8192)."""
    if len(body) > _HEAD_CHARS + _TAIL_CHARS:
        body = body[:_HEAD_CHARS] + "\n" + body[-_TAIL_CHARS:]
    rest = _sse_payloads(body)
    leaves: list[tuple[str, Any]] = []
    while rest.strip() and len(leaves) < _MAX_UNITS:  # several documents: NDJSON, logs
        found = _parse_json(rest)
        if found is None:
            leaves.append(("", rest))
            break
        before, parsed, rest = found
        leaves.append(("", before))
        _leaves(parsed, "", 0, leaves)
    units: list[str] = []
    numbers: dict[str, int] = {}
    for key, value in leaves:
        if isinstance(value, int):
            numbers.setdefault(_normalise(key).strip(), value)
        elif value.strip() and key.lower() not in _ECHO_KEYS:
            if len(value) > _UNIT_HEAD + _UNIT_TAIL:
                value = value[:_UNIT_HEAD] + "\n" + value[-_UNIT_TAIL:]
            units.append(value)
    return units, numbers


# --- grammar: topics --------------------------------------------------------------------------


def _topic(tokens: list[str], i: int) -> str | None:
    word, following = tokens[i], _at(tokens, i + 1)
    if word == "request" and following == "body":
        return _BYTES
    if word == "input" and following == "request":
        return None  # Bedrock's "Malformed input request" is the request, not the prompt
    if word == "per":
        return _RATE if _TOPIC.get(following) == _RATE else None
    return _TOPIC.get(word)


def _phrase_topic(tokens: list[str], lo: int, hi: int, backwards: bool) -> tuple[str | None, bool]:
    """(head topic, measure word seen) of tokens[lo:hi]; backwards starts next to ``hi``."""
    order = range(hi - 1, lo - 1, -1) if backwards else range(lo, hi)
    head: str | None = None
    weak = joined = False
    for i in order:
        weak = weak or tokens[i] in _WEAK_INPUT
        topic = _topic(tokens, i)
        if topic is None:
            joined = joined or (head is not None and tokens[i] in _CONJUNCTIONS)
        elif head is None:
            head = topic
            if not backwards:
                break
        elif joined and topic == _INPUT:
            return _INPUT, weak
        else:
            joined = False
    return head, weak


def _clause_start(tokens: list[str], i: int, reach: int) -> int:
    lo = i
    while lo > 0 and i - lo < reach and tokens[lo - 1] not in _BOUNDARIES:
        lo -= 1
    return lo


def _clause_end(tokens: list[str], i: int, reach: int) -> int:
    hi, stop = i, min(len(tokens), i + reach)
    while hi < stop and tokens[hi] not in _BOUNDARIES and tokens[hi] != ",":
        hi += 1
    return hi


# --- grammar: relations -----------------------------------------------------------------------


def _relation_at(tokens: list[str], i: int) -> tuple[int, bool] | None:
    """(length in tokens, speaks of length) of a "beyond a limit" relation at ``i``."""
    word, following = tokens[i], _at(tokens, i + 1)
    ahead = tokens[i + 1 : i + 5]
    if word in _BEYOND:
        return (1, False) if word not in _COMPARATORS or _is_comparison(tokens, i) else None
    if word == "too" and following in _TOO:
        return 2, following in _LENGTH_WORDS
    if word in _CJK_BEYOND:
        return 1, True
    if following == "than" and word not in _LESSER:
        if _at(tokens, i - 1) == "be" and _at(tokens, i - 2) in _MODAL:
            return None  # "n_ctx must be greater than 0" asks for a minimum
        # "longer than", "greater than", even "gather than max context"
        if word in _MORE or any(t in _LIMIT_NOUNS for t in tokens[i + 2 : i + 6]):
            return 2, word in _LENGTH_WORDS
        return None
    if word == "full" and any(t in ("context", "window") for t in tokens[max(0, i - 3) : i]):
        return 1, False  # "context window full"
    if word in ("above", "over") and any(t in _LIMIT_NOUNS for t in ahead[:3]):
        return 1, False
    if word in _MODAL and _modal_at_most(tokens, i):
        return 1, False
    if (word, following) == ("not", "enough") or (word, following) in (("run", "out"),):
        return 2, False
    if word in ("ran", "runs", "running") and ahead[:2] == ["out", "of"]:
        return 3, False
    if word == "out" and following == "of" and _at(tokens, i + 2) in ("range", "bounds"):
        return 3, False
    if word in ("but", "while", "whereas") and _contrast_limit(tokens, i):
        return 1, False
    if word == "reached" and any(
        t in ("limit", "maximum", "max") for t in tokens[max(0, i - 3) : i + 6]
    ):
        return 1, False  # "token limit reached", "has reached its maximum length"
    if word == "fit" and _at(tokens, i - 1) in ("not", "cannot", "can't", "doesn't", "won't"):
        return 1, False  # "does not fit in the context window"
    if word == "is" and ahead[:2] == ["not", "less"]:
        return 3, False  # Bedrock: "N is not less or equal to M"
    return None


def _is_comparison(tokens: list[str], i: int) -> bool:
    """``>`` between two quantities, not an arrow or markup."""
    left, right = _at(tokens, i - 1), _at(tokens, i + 1)
    return (_number(left) is not None or left == ")" or left.isalpha()) and (
        _number(right) is not None or right.isalpha()
    )


def _modal_at_most(tokens: list[str], i: int) -> bool:
    """ "must be <= N", "must have less than N", "cannot exceed", "should be [1, N]"."""
    window = tokens[i + 1 : i + 6]
    if tokens[i] in ("cannot", "can't") or window[:1] == ["not"]:
        return any(t in ("exceed", "be", "greater", "more") for t in window[:3])
    for j, word in enumerate(window[:4]):
        if word in _AT_MOST or word == "[" or (word == "at" and _at(window, j + 1) == "most"):
            return True
    return False


def _contrast_limit(tokens: list[str], i: int) -> bool:
    """ "is 1251952 but model only supports up to 1048576", "is 42328 while limit is 40000"."""
    if not any(_number(t) is not None for t in tokens[max(0, i - 6) : i]):
        return False
    after = tokens[i + 1 : i + 8]
    return any(t in _LIMIT_NOUNS or t == "set" for t in after) and not any(
        t in ("afford", "provided") for t in after
    )


def _operand_bounds(tokens: list[str], start: int, end: int, lo: int, hi: int) -> tuple[int, int]:
    """A comparison's operands are short: "219898 tokens > 200000 maximum", "n_keep (15028) >=
    n_ctx (7424)"; "(64000 > 64001 - 24235)" names no topic at all."""
    left = start
    if left > lo and tokens[left - 1] == ")":
        while left > lo and tokens[left - 1] != "(":
            left -= 1
        left = max(lo, left - 1)
    for _ in range(3):
        if left <= lo or tokens[left - 1] in _OPERAND_STOPS:
            break
        left -= 1
    right = end
    for _ in range(4):
        if right >= hi or tokens[right] in _OPERAND_STOPS:
            break
        right += 1
    return left, right


def _relation_topic(tokens: list[str], start: int, end: int, length_ish: bool) -> str | None:
    """What the relation at tokens[start:end] puts beyond a limit, or None when unknown."""
    lo, hi = _clause_start(tokens, start, 16), _clause_end(tokens, end, 10)
    if tokens[start] in _COMPARATORS:
        lo, hi = _operand_bounds(tokens, start, end, lo, hi)
    subject, weak_subject = _phrase_topic(tokens, lo, start, backwards=True)
    if subject is not None:
        return subject
    limit, weak_limit = _phrase_topic(tokens, end, hi, backwards=False)
    if limit is not None:
        return limit
    if weak_subject or weak_limit:
        return _INPUT
    return _INPUT if length_ish and _bare_subject(tokens, lo, start) else None


def _bare_subject(tokens: list[str], lo: int, start: int) -> bool:
    """Whether "too long" has no subject but the request itself ("Request too long", "It is
    too long"); "Title too long" is about some other field."""
    for i in range(start - 1, lo - 1, -1):
        word = tokens[i]
        if word in _PLAIN_WORDS or not word.isalpha():
            continue
        return word in _WEAK_INPUT
    return True


def _asks_for_less(tokens: list[str]) -> bool:
    """ "Please reduce the length of the messages", "provide a shorter input", "try increasing
    the context size": the server asks for less input or a bigger window."""
    for i, word in enumerate(tokens):
        if word in _SHORTEN:
            for following in tokens[i + 1 : i + 6]:
                topic = _TOPIC.get(following)
                if topic == _INPUT and following not in ("window", "string", "strings"):
                    return True
                if topic in _NOT_INPUT:
                    break
        if word == "shorter" and any(_TOPIC.get(t) == _INPUT for t in tokens[i + 1 : i + 3]):
            return True
        if word in _GROW and any(t in ("context", "ctx") for t in tokens[i + 1 : i + 4]):
            return True
    return False


def _sent_more_than_limit(tokens: list[str]) -> bool:
    """A named limit and a larger amount sent ("maximum prompt length is 131072 but the request
    contains 136973 tokens"), or a named limit then "However," (OpenAI's wording)."""
    limit: int | None = None
    sent: list[int] = []
    for i, word in enumerate(tokens):
        value = _number(word)
        if value is None:
            continue
        if limit is None and _names_limit(tokens, i):
            limit = value
            if "however" in tokens[i + 1 : i + 5]:
                return True
        elif _names_amount_sent(tokens, i):
            sent.append(value)
    return limit is not None and any(value > limit for value in sent)


def _names_amount_sent(tokens: list[str], i: int) -> bool:
    for j in range(i - 1, max(-1, i - 4), -1):
        if tokens[j] in ("requested", "resulted", "contains", "containing", "has", "got"):
            return True
        if tokens[j] in ("is", "was") and _TOPIC.get(_at(tokens, j - 1)) == _INPUT:
            return True  # "the prompt is 9000 tokens"
        if _number(tokens[j]) is not None or tokens[j] in _BOUNDARIES:
            return False
    return False


@lru_cache(maxsize=_CACHED_UNITS)
def _read(text: str) -> tuple[str, list[str], bool]:
    """A unit's normalised text, its tokens, and whether a rate or money word vetoes it."""
    norm = _normalise(text)
    vetoed = _RATE_PHRASES.search(norm) is not None or _MONEY_PHRASES.search(norm) is not None
    return norm, _tokens(norm), vetoed


@lru_cache(maxsize=_CACHED_UNITS)
def _unit_too_long(text: str) -> bool:
    norm, tokens, vetoed = _read(text)
    if vetoed:
        return False
    topics = set()
    for i in range(len(tokens)):
        found = _relation_at(tokens, i)
        if found:
            topics.add(_relation_topic(tokens, i, i + found[0], found[1]))
    if _INPUT in topics or _cjk_too_long(norm):
        return True
    if _asks_for_less(tokens) or _sent_more_than_limit(tokens):
        return True
    # An error that only states the input's limit ("the max length of the question is 4800")
    # means the input went past it, unless it is about something else that was too big.
    return not topics & _NOT_INPUT and _states_input_limit(tokens)


def _cjk_too_long(norm: str) -> bool:
    """ "输入长度超过限制", "上下文长度超出", "超过最大长度", "prompt 超长"."""
    for match in _CJK_RELATION.finditer(norm):
        before = _CJK_CLAUSE_END.split(norm[max(0, match.start() - 16) : match.start()])[-1]
        after = _CJK_CLAUSE_END.split(norm[match.end() : match.end() + 12])[0]
        if _CJK_NOT_INPUT.search(before):
            continue
        if _CJK_INPUT.search(before) or (
            not before.strip() and _CJK_INPUT.search(after) and not _CJK_NOT_INPUT.search(after)
        ):
            return True
        if re.search(r"最大|上限|限制|窗口", after) and not _CJK_NOT_INPUT.search(after):
            return _CJK_INPUT.search(before + after) is not None
    return False


def _states_input_limit(tokens: list[str]) -> bool:
    """ "The max length of the current question is 4800": a maximum, of the input, stated."""
    for i, word in enumerate(tokens):
        if _number(word) is None or not _names_limit(tokens, i):
            continue
        clause = set(tokens[_clause_start(tokens, i, 10) : i])
        if (
            clause & _MAXIMA
            and not clause & _MINIMA
            and any(_TOPIC.get(t) == _INPUT for t in clause - _words("string strings window"))
        ):
            return True
    return False


def is_too_long(body: str, status: int | None = None) -> bool:
    """Whether ``body`` (and ``status``, when known) is a refusal because the input is too long."""
    try:
        return verdict(body, status)
    except Exception:  # a classifier must never take a turn down with it
        log.warning("could not tell whether a refusal means too long", exc_info=True)
        return False


def verdict(body: str, status: int | None = None) -> bool:
    """``is_too_long`` without its safety net, so the fuzz tests see any exception it hides."""
    if not isinstance(body, str) or not body:
        return False
    if status is not None and status in _NEVER_STATUSES:
        return False
    units, numbers = _units(body)
    prompt, ctx = numbers.get("n prompt tokens"), numbers.get("n ctx")
    if prompt is not None and ctx is not None and prompt > ctx > 0:
        return True  # llama-server names both counts
    return any(_unit_too_long(unit) for unit in units)


# --- the window -------------------------------------------------------------------------------


def _plausible(value: int | None) -> bool:
    return value is not None and _MIN_WINDOW <= value <= _MAX_WINDOW


def _on_subject_side(tokens: list[str], i: int) -> bool:
    """A number the relation is about: "9412 tokens) exceeds", "199759 + 8192 > 200000"."""
    j = i + 1
    while _at(tokens, j) in ("tokens", "token", ")", "]", "k", "m"):
        j += 1
    following = _at(tokens, j)
    if following == "-":
        return _number(_at(tokens, j + 1)) is not None  # "64001 - 24235"
    if following in ("is", "are"):
        return _at(tokens, j + 1) in _MORE | {"too", "over", "above", "beyond"}
    if following == ",":
        return _at(tokens, j + 1) == "too"  # "Prompt contains 65673 tokens, too large"
    return following in _SUBJECT_OPERATORS


def _names_limit(tokens: list[str], i: int) -> bool:
    """Whether the number at ``tokens[i]`` is named as the limit."""
    following = _at(tokens, i + 1)
    if _on_subject_side(tokens, i) or following in _NON_TOKEN_UNITS:
        return False
    if _TOPIC.get(following) == _OUTPUT:
        return False  # "supports at most 4096 completion tokens"
    lo = _clause_start(tokens, i, 14)
    if any(t in _COUNT_LIMIT_WORDS for t in tokens[lo:i]):
        return False  # "string with maximum length 1048576" counts characters
    if following in ("maximum", "max") and _at(tokens, i - 1) not in _REQUEST_CUES:
        return True  # "> 200000 maximum", "with 32768 maximum context length", "8192 max"
    if _CJK_LIMIT_CUE.search(_at(tokens, i - 1)[-8:]):
        return True  # "最大上下文长度 32768", "最大为8192"
    cue = None
    for j in range(i - 1, max(lo, i - 9) - 1, -1):
        word = tokens[j]
        if _number(word) is not None or word == ",":
            break
        if word in _LIMIT_CUES or (
            word in ("length", "size", "context", "len")
            and any(t in _LIMIT_QUALIFIERS for t in tokens[max(0, j - 2) : j])
        ):
            cue = j
            break
        if word in _REQUEST_CUES and not (word == "current" and _at(tokens, j + 1) in _TOPIC):
            return False  # "current length is N" is sent; "the current question" is not
    if cue is None:
        return False
    if _at(tokens, i - 1) == "(" and tokens[cue] in ("limit", "limits") and following != "tokens":
        return False  # MiniMax "context window exceeds limit (2013)": a code, not a size
    head, _ = _phrase_topic(tokens, _clause_start(tokens, cue, 30), cue + 1, backwards=True)
    return head not in _NOT_INPUT


def _range_limit(tokens: list[str]) -> int | None:
    """ "Range of input length should be [1, 30720]"."""
    for i in range(len(tokens) - 4):
        if tokens[i] != "[" or tokens[i + 2] != "," or tokens[i + 4] != "]":
            continue
        low, high = _number(tokens[i + 1]), _number(tokens[i + 3])
        output = any(_TOPIC.get(t) == _OUTPUT for t in tokens[max(0, i - 8) : i])
        if low is not None and high is not None and low < high and _plausible(high) and not output:
            return high
    return None


def _limit_in_unit(text: str) -> int | None:
    _, tokens, vetoed = _read(text)
    if vetoed:
        return None
    for i, word in enumerate(tokens):
        value = _number(word)
        if value is not None:
            value *= _SCALE.get(_at(tokens, i + 1), 1)  # "128k"
            if _plausible(value) and _names_limit(tokens, i):
                return value
    return _range_limit(tokens)


def window_in(body: str) -> int | None:
    """The context window (tokens) a refusal names, or None when it names none.

    Reads the window, never the prompt size: "request (9412 tokens) exceeds the available
    context size (8192 tokens)" gives 8192.
    """
    try:
        if not isinstance(body, str) or not body:
            return None
        units, numbers = _units(body)
        for key in _WINDOW_KEYS:
            if _plausible(numbers.get(key)):
                return numbers[key]
        # The unit that says "too long" names the window; another may hold unrelated numbers.
        ordered = sorted(units, key=lambda unit: not _unit_too_long(unit))
        for unit in ordered:
            found = _limit_in_unit(unit)
            if found is not None:
                return found
        return None
    except Exception:  # see is_too_long
        log.warning("could not read the window a refusal names", exc_info=True)
        return None


# --- the answer's room ----------------------------------------------------------------------------

# A server that refuses because the prompt fits but the prompt and the answer asked for
# (max_tokens) together do not. vLLM: "'max_tokens' or 'max_completion_tokens' is too large:
# 1000. This model's maximum context length is 4096 tokens and your request has 3500 input
# tokens (1000 > 4096 - 3500)." Hugging Face TGI: "`inputs` tokens + `max_new_tokens` must be
# <= 4096. Given: 3900 `inputs` tokens and 500 `max_new_tokens`". Earlier vLLM and servers that
# copy OpenAI's old words: "maximum context length is 4096 tokens. However, you requested 4200
# tokens (3200 in the messages, 1000 in the completion)".
_ROOM_PATTERNS = (
    re.compile(
        r"maximum context length is (?P<window>\d[\d,]*) tokens and your request has "
        r"(?P<input>\d[\d,]*) input tokens",
        re.IGNORECASE,
    ),
    re.compile(
        r"tokens \+ `?max_new_tokens`? must be <= (?P<window>\d[\d,]*)\. Given: "
        r"(?P<input>\d[\d,]*) `?inputs`? tokens",
        re.IGNORECASE,
    ),
    re.compile(
        r"maximum context length is (?P<window>\d[\d,]*) tokens\. However, you requested "
        r"\d[\d,]* tokens \((?P<input>\d[\d,]*) in the messages, \d[\d,]* in the completion\)",
        re.IGNORECASE,
    ),
)


def answer_room_in(body: str) -> tuple[int, int] | None:
    """(window, input tokens) when ``body`` refuses an answer length the prompt leaves no room
    for, naming both; None otherwise. The prompt then fits: a smaller ``max_tokens`` heals it,
    where a fold would only lose what the chat said."""
    for pattern in _ROOM_PATTERNS:
        found = pattern.search(body)
        if found is None:
            continue
        window = int(found.group("window").replace(",", ""))
        given = int(found.group("input").replace(",", ""))
        if 0 < given < window and _plausible(window):
            return window, given
    return None
