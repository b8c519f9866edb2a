"""Leave secrets out of text before it goes to a summariser or into a memory.

Everything here is a plain regex pass with bounded or single-pass quantifiers, so a 5 MB paste
costs a few linear scans and nothing can backtrack catastrophically. The rules err on the side
of leaving a secret out, but they leave ordinary long words, URLs without credentials, git SHAs,
checksums and UUIDs alone: those are facts a person wants kept.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable
from itertools import pairwise

log = logging.getLogger("conch.scrub")

MARKER = "[secret left out]"

# --- keys with a known shape ------------------------------------------------------------------

# Each starts only where a token starts (a lookbehind on the token alphabet), so a long run of
# look-alike characters is tried once, not from every position inside it.
_T = r"A-Za-z0-9_\-"  # the alphabet most API keys use
_KEYS = re.compile(
    # One lookbehind for all: a key starts only where a token starts.
    rf"(?<![{_T}])(?:"
    + "|".join(
        (
            rf"sk-(?:proj-|ant-(?:api\d\d-)?|or-(?:v1-)?|svcacct-|admin-)?[{_T}]{{16,}}",
            r"gh[pousr]_[A-Za-z0-9]{20,}",
            r"github_pat_[A-Za-z0-9_]{20,}",
            rf"glpat-[{_T}]{{20,}}",
            r"gsk_[A-Za-z0-9]{20,}",
            r"xai-[A-Za-z0-9]{20,}",
            r"hf_[A-Za-z0-9]{20,}",
            rf"AIza[{_T}]{{30,}}",
            rf"(?:AKIA|ASIA)[A-Z0-9]{{16}}(?![{_T}])",
            r"xox[abposr]-[A-Za-z0-9\-]{10,}",
            r"[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}",
            # JSON web tokens: three base64url parts, the first two JSON
            rf"eyJ[{_T}]{{8,}}\.eyJ[{_T}]{{8,}}\.[{_T}]{{8,}}",
        )
    )
    + ")"
)

# --- headers and assignments ------------------------------------------------------------------

_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer|token)(\s+)([A-Za-z0-9._~+/=\-]{8,})")

_AUTH_HEADER = re.compile(
    r"(?i)(?<![A-Za-z0-9_\-])((?:proxy-)?authorization|x-api-key|api-key|x-auth-token)"
    r"(\"?\s*[:=]\s*\"?)"
    r"(?:(basic|bearer|digest|token|bot|apikey|key)(\s+))?"
    r"([A-Za-z0-9._~+/=\-]{6,})"
)

# Names whose value is a secret. The name may be the tail of a longer identifier
# (OPENAI_API_KEY, db_password) but must end there (max_tokens is not a token).
_SECRET_NAME = (
    r"(?:passwords?|passwd|pwd|passphrase|pass|secret|client[_-]?secret|secret[_-]?key"
    r"|api[_-]?key|apikey|access[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token"
    r"|id[_-]?token|session[_-]?token|token|private[_-]?key|credentials?)"
)
_ASSIGN = re.compile(
    r"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]{1,40}[_\-.])?" + _SECRET_NAME + r")(?![A-Za-z0-9])"
    r"([\"']?[ \t]{0,8}(?::=|=>|[:=])[ \t]{0,8})"
    r"(?:\"([^\"\r\n]{1,300})\"|'([^'\r\n]{1,300})'|([^\s\"'`,;()\[\]{}<>]{1,300}))"
)
# "my password is hunter2": only for password words, and only a value that is not plain prose
_PASSWORD_IS = re.compile(
    r"(?i)(?<![A-Za-z0-9])(passwords?|passwd|passphrase|pin)([ \t]+(?:is|was|=)[ \t]+)"
    r"([^\s\"'`,;()\[\]{}<>]{3,100})"
)
_PASSWORD_WORDS = {"password", "passwords", "passwd", "pwd", "pass", "passphrase", "pin"}

# user:password@host inside a URL
_URL_CREDENTIALS = re.compile(r"(?<=://)([^\s:/@]{1,200}:)([^\s/@]{1,200})(@)")

# --- private keys -----------------------------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# A block cut short: its header lines and base64 lines, up to the first line of anything else
_PEM_BODY = re.compile(
    r"(?:\r?\n[ \t]*(?:[A-Za-z0-9+/=]{4,}|[A-Za-z\-]{1,30}:[^\r\n]{0,200})[ \t]*(?=\r?\n|$))*"
)

# --- long random tokens -----------------------------------------------------------------------

_RUN = re.compile(r"(?<![A-Za-z0-9_\-+=])[A-Za-z0-9_\-+=]{32,}")
_B64_40 = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_HEX = re.compile(r"[0-9a-fA-F\-]+")
_PIECES = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# The letter pairs that make up 98% of those in English-ish technical text (counted once over
# the Python standard library's words). Words and identifiers are built of them; random keys
# are mostly built of the other ~400 pairs.
_COMMON_PAIRS = frozenset(
    re.findall(
        "..",
        "abacadafagaiakalamanaparasatauavawaxaybabcbebibjblbobrbsbubycacccechcickclcmcocrcsctcucy"
        "dadddedidldodpdrdsdtdudyeaebecedeeefegeielemeneoepeqeresetevewexeyfafefffiflfofrftfugage"
        "ggghgiglgngrgsguhahehihohrhtiaibicidieifigiliminioipirisitivixizjejokekikskwlaldlelflill"
        "lolplsltlulymambmdmemimmmompmsmunancndnenfngninknlnnnonpnsntnunvnyoaobocodofogoiokolomon"
        "oooporosotouovowoxpapdpepiplpoppprpsptpupyqurarcrdrergrirkrlrmrnrorrrsrtrurvrysascsesfsg"
        "shsiskslsmsospssstsusytatctdtetfthtitltmtotptrtstttutwtyuaubucudueufuguiulumunupurusutva"
        "veviwawewhwiwnwowrwsxaxcxexixpxtyiynyoypyrysytze",
    )
)


def _wordlike(piece: str) -> bool:
    """A run of letters that reads like (part of) a word rather than random letters."""
    if len(piece) < 3:
        return False
    low = piece.lower()
    if not any(c in "aeiouy" for c in low):
        return False
    pairs = [low[i : i + 2] for i in range(len(low) - 1)]
    return sum(p in _COMMON_PAIRS for p in pairs) / len(pairs) >= 0.75


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def looks_random(token: str, *, min_len: int = 32) -> bool:
    """True for a string that reads like a generated key rather than words, a hash or an id."""
    core = token.strip("=-_")
    if len(core) < min_len:
        return False
    if not any(c.isdigit() for c in core) or not any(c.isalpha() for c in core):
        return False
    # Hex is a digest or an id (git SHA, sha256, UUID, MD5): facts, not secrets. A hex key in
    # an assignment ("api_key = 3f9a...") is still caught by the assignment rule.
    if _HEX.fullmatch(core):
        return False
    wordy = sum(len(p) for p in _PIECES.findall(core) if _wordlike(p))
    if wordy / len(core) >= 0.45:
        return False
    # An alphabet or a counting run ("abcdef...0123456789") is a table, not a key.
    steps = sum(ord(b) - ord(a) == 1 for a, b in pairwise(core))
    if steps / len(core) > 0.5:
        return False
    return _entropy(core) >= 3.6


# --- the passes -------------------------------------------------------------------------------


def _sub_pem(text: str) -> str:
    if "PRIVATE KEY" not in text:
        return text
    out: list[str] = []
    pos = 0
    no_more_ends = False
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = None if no_more_ends else _PEM_END.search(text, begin.end())
        if end is None:
            # Once an END is missing it is missing for every later BEGIN too: never rescan.
            no_more_ends = True
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body else begin.end()
        else:
            stop = end.end()
        out.append(text[pos : begin.start()])
        out.append(MARKER)
        pos = stop
    out.append(text[pos:])
    return "".join(out)


def _sub_assign(m: re.Match[str]) -> str:
    name, sep = m.group(1), m.group(2)
    value = m.group(3) or m.group(4) or m.group(5) or ""
    if value.startswith(MARKER):
        return m.group(0)
    following = m.string[m.end() : m.end() + 1]
    if m.group(5) is not None and following in ("(", "[", "."):
        return m.group(0)  # code that reads a secret (os.environ["KEY"]), not the secret itself
    base = re.split(r"[_\-.]", name.lower())[-1]
    if base in _PASSWORD_WORDS or "pass" in base:
        if len(value) < 3 or value.lower() in {"none", "null", "true", "false", "required"}:
            return m.group(0)
    elif len(value) < 8 or value.replace(" ", "").isalpha():
        return m.group(0)  # keys have digits; "secret: keep it simple" is prose
    quote = '"' if m.group(3) is not None else "'" if m.group(4) is not None else ""
    return f"{name}{sep}{quote}{MARKER}{quote}"


def _sub_password_is(m: re.Match[str]) -> str:
    value = m.group(3)
    if value.startswith(MARKER):
        return m.group(0)
    # Prose ("password is required") has only letters; a real password rarely does.
    if value.isalpha():
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{MARKER}"


def _sub_bearer(m: re.Match[str]) -> str:
    value = m.group(3)
    # "Bearer authentication" and "token limit" are prose: a bearer token is not one short word.
    if value.isalpha() and len(value) < 24:
        return m.group(0)
    if m.group(1).lower() == "token" and len(value) < 16:
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{MARKER}"


def _sub_auth(m: re.Match[str]) -> str:
    value = m.group(5)
    if m.group(3) is None and (len(value) < 12 or value.isalpha()):
        return m.group(0)  # "Authorization: required" is prose
    scheme = f"{m.group(3)}{m.group(4)}" if m.group(3) else ""
    return f"{m.group(1)}{m.group(2)}{scheme}{MARKER}"


def _sub_random(m: re.Match[str]) -> str:
    return MARKER if looks_random(m.group(0)) else m.group(0)


def _sub_b64_40(m: re.Match[str]) -> str:
    value = m.group(0)
    if not ("/" in value or "+" in value):
        return value  # no slash or plus: the general rule already judged it
    has_all = (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )
    core = value.replace("/", "").replace("+", "")
    if has_all and looks_random(core, min_len=30):
        return MARKER
    return value


_PASSES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_URL_CREDENTIALS, lambda m: m.group(0) if m.group(2) == MARKER else f"{m[1]}{MARKER}{m[3]}"),
    (_KEYS, lambda m: MARKER),
    (_AUTH_HEADER, _sub_auth),
    (_BEARER, _sub_bearer),
    (_ASSIGN, _sub_assign),
    (_PASSWORD_IS, _sub_password_is),
    (_RUN, _sub_random),
    (_B64_40, _sub_b64_40),
)


def _one_pass(text: str) -> str:
    text = _sub_pem(text)
    for pattern, repl in _PASSES:
        text = pattern.sub(repl, text)
    return text


_CRUDE = re.compile(r"[A-Za-z0-9_\-+/=.]{20,}")


def scrub(text: str) -> str:
    """``text`` with every string that looks like a secret replaced by ``[secret left out]``.

    Never raises, and scrubbing twice changes nothing more.
    """
    try:
        # A replacement can expose a neighbour to a rule (rare); repeat until nothing changes.
        for _ in range(4):
            done = _one_pass(text)
            if done == text:
                return done
            text = done
        return text
    except Exception:  # a bug here must not leak the text nor crash the chat
        log.exception("scrubbing failed; leaving out every long token instead")
        return _CRUDE.sub(MARKER, text)


def contains_secret(text: str) -> bool:
    """True when ``scrub`` would leave something out of ``text``."""
    return scrub(text) != text
