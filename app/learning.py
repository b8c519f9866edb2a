"""Quiet learning: before a fold makes the model forget, read what the person said and keep the
durable facts as memories.

Rules, each enforced here whoever asks:
- only the person's own words are read (never the answers, attachments or tool results, nor
  a message that counts as pasted: a page, a log, a document, a long text; see app.trust);
- never a routine's run, never a chat with other people in it;
- a chat that read something untrusted (app.trust decides, the chat log keeps the mark),
  words imported from another app's export (each such message keeps its own mark), or
  "Remember things automatically" off: the new memories wait for the person's OK; a memory
  that gives the assistant orders always waits (app.memories);
- only the chat's own model reads the chat (a local chat never goes to a cloud model): when
  it is not ready the chat waits, nothing is marked read, and it is read as soon as that model
  is back (``catch_up``);
- what is sent is scrubbed of secrets first, and so is every memory;
- a per-chat read-until mark (and a ``learned`` time) means nothing is read twice, by the next
  fold or by the daily tidy-up; with no model, or an answer that cannot be read, nothing is
  marked read, so the tidy-up still has it;
- an empty list is an answer a model that cannot do the task gives too: when the person said
  something plainly about themselves there, the words stay unread, for ``EMPTY_TRIES`` looks
  at most; with nothing plain said, the empty list is believed and the words are read;
- a model's memory made of words or numbers the person never wrote (``made_up``) is left
  out: a small model held to a list's shape fills it with whatever it likes;
- when the model gives nothing usable (empty or unreadable), the person's own clear
  statements about themselves ("My name is…", "we decided…") are kept as they said them
  (``self_statements``), and always wait for their OK.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.health import Notes
from app.memories import LearningRun, MemoryBook, Source
from app.settings import Settings, SettingsStore
from app.store import Chat, ChatStore, StoredMessage
from app.trust import looks_pasted
from engines.resources import read_prompt
from engines.scrub import MARKER, scrub

log = logging.getLogger("conch.learning")

TIDY_EVERY = 24 * 60 * 60.0  # the daily tidy-up
PIECE_CHARS = 12_000  # the person's words read per request (smaller for small windows)
MESSAGE_CHARS = 4_000  # one message's share of a piece: head and tail beyond that
MAX_PER_ANSWER = 12
WAITING_KEY = "learning_waits_for_model"  # chats whose model was not ready (memories meta)
# An answer of "[]" over words where the person plainly said something about themselves: the
# words stay unread (a model that cannot do the task must not end the learning), but only for
# this many looks, so that a capable model that truly finds nothing does not re-read forever.
EMPTY_TRIES = 3
TRIES_KEY = "learning_empty_tries"  # chat id -> [first unread seq looked at, looks so far]


class Learner(Protocol):
    async def review(self, chat_id: str, before_seq: int) -> LearningRun | None: ...


class ModelCaller(Protocol):
    """Asks the chat's model: ``prompt`` is the instruction, ``text`` what to read.

    Returns the answer text, or None when no model could answer. ``model_key`` names the chat's
    model ("provider/id", may be empty) so the caller can pick the right adapter.
    """

    async def __call__(self, prompt: str, text: str, *, model_key: str = "") -> str | None: ...


# --- reading the model's answer ---------------------------------------------------------------

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_ITEM_KEYS = ("text", "fact", "memory", "content")
_LIST_KEYS = ("memories", "facts", "items", "result")


def _items_of(value: Any) -> list[str] | None:
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if isinstance(value.get(key), list):
                return _items_of(value[key])
        return None
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for item in value:
        if isinstance(item, str):
            text = item
        elif isinstance(item, dict):
            found = next((item[k] for k in _ITEM_KEYS if isinstance(item.get(k), str)), None)
            if found is None:
                continue
            text = found
        else:
            continue
        text = " ".join(text.split())
        if text:
            out.append(text)
    if value and not out:
        return None  # a list, but of nothing that reads as a memory
    return out


def parse_memories(answer: str | None) -> list[str] | None:
    """The memories in a model's answer: a JSON array of strings, found tolerantly.

    Code fences and text around the array are fine. ``[]`` gives an empty list (read, nothing
    worth keeping); an answer with no readable array gives None (nothing may be marked read).
    """
    if answer is None:
        return None
    text = answer.strip()
    if not text:
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        start = 0
        for _ in range(20):  # a bounded number of tries: "[" can appear in prose
            i = min(
                (p for p in (candidate.find("[", start), candidate.find("{", start)) if p >= 0),
                default=-1,
            )
            if i < 0:
                break
            try:
                value, _end = decoder.raw_decode(candidate, i)
            except (ValueError, RecursionError):
                start = i + 1
                continue
            items = _items_of(value)
            if items is not None:
                return items[:MAX_PER_ANSWER]
            start = i + 1
    return None


# --- what is read -----------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = max(1, (limit - 40) // 2)
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters left out …]\n{text[-half:]}"


def person_lines(messages: Sequence[StoredMessage], limit: int = MESSAGE_CHARS) -> list[str]:
    """One block per person message: only their own words (no attachments, no pictures)."""
    return [f"Person: {_clip(m.text.strip(), limit)}" for m in messages]


def per_message_chars(piece_chars: int) -> int:
    return max(200, min(MESSAGE_CHARS, piece_chars))


def pieces(messages: Sequence[StoredMessage], piece_chars: int) -> list[list[StoredMessage]]:
    """Person messages in order, grouped so each group's text fits ``piece_chars``."""
    per_message = per_message_chars(piece_chars)
    groups: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    size = 0
    for m in messages:
        n = min(len(m.text.strip()), per_message) + 12
        if current and size + n > piece_chars:
            groups.append(current)
            current, size = [], 0
        current.append(m)
        size += n
    if current:
        groups.append(current)
    return groups


# --- the extractive pass ----------------------------------------------------------------------
# When the model gives nothing usable (the bundled 135M model answers "[]" to almost anything),
# the person's clearest statements about themselves and what they decided are kept as they
# said them, to wait for their OK. A statement counts only where a clause starts with it: a
# question, a request ("write a letter saying my name is …"), a quote or a hypothetical ("if
# I live in …") does not.

EXTRACT_MAX = 8  # statements kept from one look at a chat
_STATEMENT_CHARS = 240  # a longer sentence is not a clear statement
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Where a clause ends inside a sentence: a new statement may start after it.
_CLAUSE_END = re.compile(
    r"\s*[,;]\s*(?:and|but|so)\s+|\s*;\s*|\s+but\s+|,?\s+and\s+(?=(?:i|my|we)\b)", re.IGNORECASE
)
_RELATIONS = (
    r"wife|husband|partner|fianc[eé]e?|spouse|son|daughter|kids|children|child|boyfriend|"
    r"girlfriend|mother|mum|mom|father|dad|parents|brother|sister|boss|manager|dog|cat|"
    r"budget|deadline|birthday|team|company|employer|landlord|doctor|rent|mortgage|salary|"
    r"address|flat|house"
)
_I_AM = r"i(?:['’]m|\s+am)"
# (a clause's start, and the fact about "the person" it makes; "" keeps the person's words)
_STATEMENTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), t)
    for p, t in (
        (r"my\s+name\s+is\s+(?P<x>.+)", "The person's name is {x}."),
        (rf"(?:{_I_AM}|i\s+was)\s+called\s+(?P<x>.+)", "The person is called {x}."),
        (r"i\s+live\s+in\s+(?P<x>.+)", "The person lives in {x}."),
        (rf"{_I_AM}\s+(?:based|living)\s+in\s+(?P<x>.+)", "The person lives in {x}."),
        (rf"{_I_AM}\s+from\s+(?P<x>.+)", "The person is from {x}."),
        (rf"{_I_AM}\s+allergic\s+to\s+(?P<x>.+)", "The person is allergic to {x}."),
        (r"i\s+work\s+(?P<how>as|at|for|in)\s+(?P<x>.+)", "The person works {how} {x}."),
        (
            rf"{_I_AM}\s+(?P<a>an?)\s+"
            r"(?!(?:bit|little|lot|tad|while|moment|second|few|big\s+fan)\b)(?P<x>.+)",
            "The person is {a} {x}.",
        ),
        (
            rf"(?:my|our)\s+(?P<rel>{_RELATIONS})(?P<poss>['’]s)?\s+(?P<x>.+)",
            "The person's {rel}{poss} {x}.",
        ),
        (r"(?:we|i)\s+(?:have\s+|['’]ve\s+)?(?:decided|agreed|settled\s+on|chose)\b.+", ""),
        (r"i\s+(?:will|['’]ll|am\s+going\s+to|['’]m\s+going\s+to)\s+\w+(?:\s+\S+){2,}", ""),
    )
)
# First-person words: an object holding one is not rewritten, it is kept as said.
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|we|us|our|ours)\b|\bi['’]\w+", re.IGNORECASE)
# About the conversation, not the person ("I'm a big fan of your answers", "I'll let you know").
_ABOUT_CHAT = re.compile(
    r"\b(?:you|your|yours|yourself|try|think|let\s+\w+\s+know|get\s+back|be\s+right\s+back|"
    r"look\s+into|check\s+(?:it|that|this))\b",
    re.IGNORECASE,
)
# Words earlier in a sentence that make what follows something other than a fact about the
# person ("imagine a story where…, and my name is…").
_NOT_A_FACT = re.compile(
    r"\b(?:if|whether|suppose|supposing|imagine|pretend|say|saying|write|draft|letter|e-?mail|"
    r"story|example|translate|roleplay|character|unless|what\s+if)\b",
    re.IGNORECASE,
)
# A word that points back to something said earlier in the sentence.
_POINTS_BACK = re.compile(r"\b(?:it|its|this|that|these|those|them|there)\b", re.IGNORECASE)
_QUOTES = re.compile(r"[\"“”«»„]|(?:^|\s)'|'(?:\s|$)")
_OPENER = re.compile(
    r"^(?:(?:hi|hey|hello|well|so|ok|okay|also|and|btw|oh|yes|yeah|anyway|actually)\b[\s,!.-]*)+",
    re.IGNORECASE,
)


def _quoted(text: str) -> str:
    return f"The person said: “{text[:1].upper()}{text[1:]}.”"


def _fact_of(clause: str) -> str | None:
    """The memory one clause makes, or None when it is not a clear statement about the person.
    Rewritten to a fact about "the person" only when the rest is a few plain words."""
    text = clause.strip().rstrip(" .!")
    for pattern, template in _STATEMENTS:
        m = pattern.fullmatch(text)
        if m is None:
            continue
        if _ABOUT_CHAT.search(text):
            return None
        if not template:
            return _quoted(text)
        x = m.group("x").strip()
        if not x or len(x.split()) > 10 or _FIRST_PERSON.search(x):
            return _quoted(text)
        values = {k: (v or "").lower() for k, v in m.groupdict().items()}
        values["x"] = x
        return template.format(**values)
    return None


def self_statements(messages: Sequence[StoredMessage], limit: int = EXTRACT_MAX) -> list[str]:
    """The person's clear statements about themselves and what they decided in ``messages``
    (which must be their own typed words), scrubbed; a statement holding a secret is left out
    whole, since what is left of it would not be worth keeping."""
    found: list[str] = []
    seen: set[str] = set()
    for m in messages:
        for raw in _SENTENCE_END.split(m.text[:MESSAGE_CHARS]):
            sentence = " ".join(raw.split())
            if not sentence or sentence.endswith("?") or len(sentence) > _STATEMENT_CHARS:
                continue
            if _QUOTES.search(sentence):
                continue
            clean = scrub(sentence)
            if MARKER in clean or clean != sentence:
                continue
            before = ""
            for clause in (c for c in _CLAUSE_END.split(sentence.rstrip(".!")) if c):
                lead = _OPENER.sub("", clause.strip(" \t,-–—")).strip()
                fact = None if _NOT_A_FACT.search(before) else _fact_of(lead)
                if fact is not None and before.strip() and _POINTS_BACK.search(lead):
                    # "…firmware v2.4.1; we agreed not to update it": without the start of
                    # the sentence, "it" is nothing. Keep the sentence as they said it.
                    fact = _quoted(sentence.rstrip(" .!"))
                before += " " + clause
                if fact is None or fact.casefold() in seen:
                    continue
                seen.add(fact.casefold())
                found.append(fact)
                if len(found) >= limit:
                    return found
    return found


# --- a model's memory must come from the person's words ------------------------------------

_CONTENT = re.compile(r"[^\W\d_]{4,}")
_DIGITS = re.compile(r"\d+")
# Words any memory may use that the person need not have said.
_ANY_MEMORY_WORDS = (
    "person people their they them this that with from have been what when where which would "
    "could should about also just like likes really very much more most some into only other "
    "than then there these those your yours will over such prefers wants named called lives "
    "works uses keeps always never"
)
_ANY_MEMORY = frozenset(_ANY_MEMORY_WORDS.split())


def made_up(memory: str, said: str) -> bool:
    """True when ``memory`` holds a number the person never wrote in ``said``, or words of
    which none is theirs (a word counts by its first four letters: "lives" is "live")."""
    if set(_DIGITS.findall(memory)) - set(_DIGITS.findall(said)):
        return True
    words = {w for w in _CONTENT.findall(memory.lower()) if w not in _ANY_MEMORY}
    heard = {w[:4] for w in _CONTENT.findall(said.lower())}
    return bool(words) and not any(w[:4] in heard for w in words)


# --- the learner ------------------------------------------------------------------------------


class QuietLearning:
    """Reads what the person said in a chat and keeps durable facts (see the module doc)."""

    def __init__(
        self,
        store: ChatStore,
        book: MemoryBook,
        settings: SettingsStore | Settings,
        ask_model: ModelCaller | None,
        *,
        health: Notes | None = None,
        piece_chars: int | Callable[[Chat], int] = PIECE_CHARS,
        clock: Callable[[], float] = time.time,
        model_ready: Callable[[Chat], bool] | None = None,
        no_model: Callable[[Chat], bool] | None = None,
    ) -> None:
        self.store = store
        self.book = book
        self.settings = settings
        self.ask_model = ask_model
        # Whether the chat's own model can be asked now; None: always (tests, the mock).
        self.model_ready = model_ready
        # Whether no model of Conch's may ever read the chat (a program keeps it: its words
        # go only to that program). Such a chat keeps the person's plain statements, to wait
        # for their OK, and is marked read: it never waits for a model that cannot come.
        self.no_model = no_model
        self.health = health
        self.piece_chars = piece_chars
        self.clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._prompt: str | None = None

    # -- public --

    async def review(self, chat_id: str, before_seq: int) -> LearningRun | None:
        """After a fold: read what the person said before ``before_seq`` and not yet read."""
        return await self._review(chat_id, before_seq, "fold")

    def due_for_tidy(self, now: float | None = None) -> bool:
        last = self.book.last_tidy
        when = self.clock() if now is None else now
        return last is None or when - last >= TIDY_EVERY or when < last

    async def tidy_if_due(self) -> list[LearningRun]:
        """The daily tidy-up when it is due; between two, the chats that waited for their model."""
        if self.due_for_tidy():
            return await self.tidy_up()
        return await self.catch_up()

    async def catch_up(self) -> list[LearningRun]:
        """Read the chats that waited because their model was not ready, if it is now."""
        runs: list[LearningRun] = []
        for chat_id in sorted(self._waiting()):
            chat = self.store.get_chat(chat_id)
            if chat is None or not self._may_learn(chat) or not self._unread_person(chat):
                self._set_waiting(chat_id, False)
                continue
            if not self._ready(chat):
                continue
            try:
                run = await self._review(chat_id, None, "tidy")
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad chat must not stop the others
                log.exception("catching up failed for a chat")
                continue
            if run is not None:
                runs.append(run)
        return runs

    async def tidy_up(self) -> list[LearningRun]:
        """The daily tidy-up (and "Tidy up memories now"): every chat with unread words."""
        runs: list[LearningRun] = []
        for chat in self.store.list_chats():
            if not self._may_learn(chat) or not self._unread_person(chat):
                continue
            try:
                run = await self._review(chat.id, None, "tidy")
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad chat must not stop the others
                log.exception("tidy-up failed for a chat")
                continue
            if run is not None:
                runs.append(run)
        self.book.last_tidy = self.clock()
        return runs

    # -- internals --

    def _remember_automatically(self) -> bool:
        s = self.settings.settings if isinstance(self.settings, SettingsStore) else self.settings
        return s.remember_automatically

    def _ready(self, chat: Chat) -> bool:
        """Whether the chat can be read now: its own model is ready, or no model may read it
        (a program chat, read without one)."""
        if self.no_model is not None and self.no_model(chat):
            return True
        return self.model_ready is None or self.model_ready(chat)

    def _waiting(self) -> set[str]:
        raw = self.book.get_meta(WAITING_KEY)
        try:
            found = json.loads(raw) if raw else []
        except ValueError:
            return set()
        return {str(x) for x in found} if isinstance(found, list) else set()

    def _set_waiting(self, chat_id: str, waits: bool) -> None:
        ids = self._waiting()
        if (chat_id in ids) == waits:
            return
        ids = ids | {chat_id} if waits else ids - {chat_id}
        self.book.set_meta(WAITING_KEY, json.dumps(sorted(ids)))

    def _tries(self) -> dict[str, list[int]]:
        raw = self.book.get_meta(TRIES_KEY)
        try:
            found = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        if not isinstance(found, dict):
            return {}
        return {
            str(k): [int(v[0]), int(v[1])]
            for k, v in found.items()
            if isinstance(v, list) and len(v) == 2 and all(isinstance(n, int) for n in v)
        }

    def _gave_up(self, chat: Chat, seq: int) -> bool:
        """Count one more look at the words from ``seq`` that gave nothing usable; True once
        there have been ``EMPTY_TRIES`` of them (so the words are marked read after all)."""
        tries = self._tries()
        at, n = tries.get(chat.id, [seq, 0])
        n = n + 1 if at == seq else 1
        if n >= EMPTY_TRIES:
            tries.pop(chat.id, None)
        else:
            tries[chat.id] = [seq, n]
        self.book.set_meta(TRIES_KEY, json.dumps(tries, sort_keys=True))
        return n >= EMPTY_TRIES

    def _forget_tries(self, chat_id: str) -> None:
        tries = self._tries()
        if tries.pop(chat_id, None) is not None:
            self.book.set_meta(TRIES_KEY, json.dumps(tries, sort_keys=True))

    def _keep_as_said(
        self, chat: Chat, person: Sequence[StoredMessage], last_seq: int, source: Source
    ) -> LearningRun | None:
        """A chat no model may read: the person's own clear statements, waiting for their OK,
        and the chat read up to ``last_seq``."""
        said = self_statements(person)
        run = None
        if said:
            run = self.book.add_run(
                chat.id,
                said,
                seq_from=person[0].seq,
                seq_to=person[-1].seq,
                waiting=True,
                source=source,
                held=said,
            )
        self.store.set_read_until(chat.id, last_seq, self.clock())
        self._set_waiting(chat.id, False)
        self._forget_tries(chat.id)
        return run

    @staticmethod
    def _may_learn(chat: Chat) -> bool:
        return chat.deleted_at is None and not chat.routine and not chat.others

    def _unread_person(self, chat: Chat) -> bool:
        return any(
            m.role == "user" for m in self.store.messages(chat.id, start=chat.read_until + 1)
        )

    def _piece_chars(self, chat: Chat) -> int:
        size = self.piece_chars(chat) if callable(self.piece_chars) else self.piece_chars
        return max(500, int(size))

    def _learn_prompt(self) -> str:
        if self._prompt is None:
            self._prompt = read_prompt("learn.txt")
        return self._prompt

    def _note(self, text: str, chat: Chat) -> None:
        if self.health is not None:
            self.health.add("learning", text, model=chat.model_key)

    async def _ask(self, prompt: str, text: str, chat: Chat) -> str | None:
        assert self.ask_model is not None
        try:
            return await self.ask_model(prompt, text, model_key=chat.model_key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the caller should not raise, but a bug must not spread
            log.warning("asking the model to learn failed: %s", type(exc).__name__)
            return None

    async def _review(self, chat_id: str, end: int | None, source: Source) -> LearningRun | None:
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        async with lock:
            # Read the chat again inside the lock: a fold and the tidy-up may have raced here.
            chat = self.store.get_chat(chat_id)
            if chat is None or not self._may_learn(chat):
                return None
            start = chat.read_until + 1
            if end is not None and end <= start:
                return None
            limit = None if end is None else end - start
            unread = self.store.messages(chat_id, start=start, limit=limit)
            if end is not None:
                unread = [m for m in unread if m.seq < end]
            if not unread:
                return None
            last_seq = unread[-1].seq
            said = [m for m in unread if m.role == "user" and m.text.strip()]
            # A pasted page, log or document is not the person's word: it is left out. (Its
            # chat was marked untrusted when it was saved; one kept before that was recorded
            # waits all the same.)
            person = [m for m in said if not looks_pasted(m.text)]
            pasted = len(person) < len(said)
            if not person:
                # Nothing of theirs to read here: mark it so no one looks again.
                self.store.set_read_until(chat_id, last_seq, self.clock())
                self._set_waiting(chat_id, False)
                return None
            if self.no_model is not None and self.no_model(chat):
                return self._keep_as_said(chat, person, last_seq, source)
            if self.ask_model is None:
                return None  # no model: the daily tidy-up will try again
            if not self._ready(chat):
                # Only the chat's own model may read it: wait for it, read nothing.
                self._set_waiting(chat_id, True)
                return None

            # Words brought in from another app's export are the person's, but not typed here:
            # what is learned from them waits, whatever mark their chat has.
            imported = any(m.imported for m in person)
            waiting = pasted or imported or chat.untrusted or not self._remember_automatically()
            prompt = self._learn_prompt()
            found: list[str] = []
            kept_as_said: list[str] = []  # from the extractive pass: these always wait
            read_to: int | None = None
            looked_to: int | None = None  # the last seq any memory may have come from
            size = self._piece_chars(chat)
            groups = pieces(person, size)
            for i, group in enumerate(groups):
                text = scrub("\n\n".join(person_lines(group, per_message_chars(size))))
                answer = await self._ask(prompt, text, chat)
                if answer is None:
                    self._note(
                        f"Learning from “{chat.title}” stopped: no model answered. "
                        "Those messages stay unread for the next tidy-up.",
                        chat,
                    )
                    break
                items = parse_memories(answer)
                usable = [s for s in (scrub(item).strip() for item in items or ()) if s]
                # A small model held to a list's shape may fill it with what nobody said.
                usable = [s for s in usable if not made_up(s, text)]
                looked_to = group[-1].seq
                # The last piece covers the answers after it too: nothing of the person's is left.
                group_end = last_seq if i == len(groups) - 1 else group[-1].seq
                if usable:
                    found.extend(usable)
                    read_to = group_end
                    continue
                # Nothing usable: keep the person's own clear statements, to wait for their OK.
                said_here = self_statements(group)
                kept_as_said.extend(said_here[: max(0, EXTRACT_MAX - len(kept_as_said))])
                if items is not None and (not said_here or self._gave_up(chat, group[0].seq)):
                    # "[]" and nothing clear said either: a capable model found nothing to
                    # keep. Or the model has missed what the person plainly said too many
                    # times: what was kept as said waits on the card, so move on.
                    read_to = group_end
                    continue
                if items is None:
                    # An empty list from a small model is its usual answer, not worth a note.
                    self._note(
                        f"Learning from “{chat.title}” stopped: its answer was not a list. "
                        "Those messages stay unread for the next tidy-up.",
                        chat,
                    )
                break
            if read_to is None and not kept_as_said:
                return None
            if read_to == last_seq:
                self._forget_tries(chat_id)
            run = self.book.add_run(
                chat_id,
                [*found, *kept_as_said],
                seq_from=person[0].seq,
                # Statements kept as said may come from past the read mark.
                seq_to=max(read_to if read_to is not None else -1, looked_to or -1)
                if kept_as_said
                else (read_to if read_to is not None else person[-1].seq),
                waiting=waiting,
                source=source,
                held=kept_as_said,
            )
            if run is not None:
                log.info(
                    "learned %d memories from a chat (%d of them kept as said), %d waiting",
                    run.learned,
                    len(kept_as_said),
                    run.waiting_count,
                )
            if read_to is None:
                return run
            self.store.set_read_until(chat_id, read_to, self.clock())
            self._set_waiting(chat_id, False)
            return run
