"""Agreeing with the chat log and the transcript file: read, check, rebuild, save.

The chat log is the source of truth. Before each turn the transcript is checked against it (the
turns it keeps, their words and answers, the summary against the log's latest fold) and rebuilt
from the log where they disagree: after a failed save, another process on the same chat, or a
damaged file. A fold's summary written late by another process is taken from the log, and a
save another process got in before is joined with its file where the two copies only differ by
that summary or by newer turns, so neither copy is left behind the log. Windows learned in an
earlier session are read back as hints only.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import time
from collections.abc import AsyncGenerator, Mapping, Sequence

from engines.base import Event, Message, Note, SummaryWritten, ToolCallData, Usage
from engines.context import transcript as tfile
from engines.context.state import Fold, SessionState, summary_block
from engines.tools.rules import RESULT_MIN_TOKENS, shorten_tool_result
from engines.window import Ledger, estimate_tokens

log = logging.getLogger("conch.context.session")

WINDOW_HINT_MAX_AGE = 30 * 24 * 3600.0  # seconds a learned window is remembered as a hint
# How often a save that another process got in before is joined with its file and tried again.
JOINS = 3
HEAD = 64  # characters of a logged message the transcript must hold to count as having it


def _same_start(kept: str, logged: str) -> bool:
    """Whether a kept person message is the logged one (maybe shortened, maybe with later
    messages joined on)."""
    head = logged[:HEAD]
    if kept.startswith(head):
        return True
    cut = kept.find("\n\n[… ")
    return cut >= 0 and logged.startswith(kept[:cut])


def _answers_disagree(
    words: Sequence[str],
    answers: Sequence[tuple[int, str]],
    answer_seqs: Sequence[int],
    seq: int,
    until: float,
) -> str | None:
    """Whether the answers the log has between ``seq`` and ``until`` (``answers``: each with
    its first ``HEAD`` characters; ``answer_seqs``: their seqs) are the ones a kept turn holds
    (``words``)."""
    said = "\n".join(words) + "\n" + "".join(words)
    i = bisect.bisect_right(answer_seqs, seq)
    logged = 0
    while i < len(answers) and answers[i][0] < until:
        if answers[i][1] not in said:
            return "it misses an answer the log has"
        logged += 1
        i += 1
    if not logged and any(w.strip() for w in words):
        # The person deleted the answer (or it was never kept): the model must not go on
        # reading words the chat no longer shows.
        return "it holds an answer the log no longer has"
    return None


def _from_log(
    rows: Sequence[tuple[int, Message]], start: int, limit: float
) -> tuple[list[Message], list[int], list[int]]:
    """The transcript the log's rows from ``start`` to ``limit`` make: (messages, the seqs of
    its turns, the seqs of person messages joined onto the one before)."""
    messages: list[Message] = []
    seqs: list[int] = []
    joined: list[int] = []
    for seq, m in rows:
        if not start <= seq < limit or (not messages and m.role != "user"):
            continue
        last = messages[-1] if messages else None
        if m.role == "tool":
            messages.extend(_paired_result(seq, m))
        elif last is not None and m.role == last.role == "user":
            # As in a live turn: a message after an unanswered one joins it.
            messages[-1] = last.model_copy(
                update={
                    "text": f"{last.text}\n\n{m.text}" if last.text else m.text,
                    "pictures": last.pictures + m.pictures,
                }
            )
            joined.append(seq)
        elif last is not None and m.role == last.role == "assistant":
            # Two answers in a row (two processes) would break strict chat templates.
            messages[-1] = last.model_copy(
                update={
                    "text": "\n\n".join(t for t in (last.text, m.text) if t),
                    "thinking": "\n\n".join(t for t in (last.thinking, m.thinking) if t),
                }
            )
        else:
            messages.append(m)
            if m.role == "user":
                seqs.append(seq)
    return messages, seqs, joined


def _paired_result(seq: int, m: Message) -> tuple[Message, Message]:
    """A logged tool result with the call it answers written again before it.

    Every provider wants a result paired with its call: the log keeps the result (and, beside
    it, the tool's name), so the call is written again, without its arguments. A long result
    comes back as head and tail.
    """
    call_id = m.tool_call_id or f"conch-log-{seq}"
    name = m.tool_name or "tool"
    call = Message(role="assistant", tool_calls=(ToolCallData(id=call_id, name=name),))
    result = m.model_copy(
        update={
            "tool_call_id": call_id,
            "tool_name": name,
            "text": shorten_tool_result(m.text, 4 * RESULT_MIN_TOKENS),
            "untrusted": True,
        }
    )
    return call, result


class LogSync(SessionState):
    """Reading, checking against the chat log, rebuilding and saving the transcript."""

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        self._read_file()

    def _read_file(self) -> None:
        """Read the transcript file into memory (at the start, or after another process
        changed it)."""
        if self.data_dir is None or not self._writable:
            return
        try:
            loaded = tfile.load_transcript(self.data_dir, self.chat_id)
        except tfile.TranscriptError as exc:
            # The broken file could not be moved aside: never overwrite it.
            self._writable = False
            self._notes.append(
                Note(
                    topic="transcript-recovered",
                    text=f"{exc} Conch keeps this chat's transcript in memory for now; "
                    "the chat log still has every message.",
                )
            )
            return
        t = loaded.transcript
        if loaded.recovered:
            self._notes.append(Note(topic="transcript-recovered", text=loaded.note))
        self._disk = loaded.signature
        self._summary = t.summary
        self._factor = max(self._factor, t.factor)
        # Windows learned in an earlier session are hints only: the server may have been
        # fixed, or the refusal was bogus. One refusal in this session makes them count again.
        now = time.time()
        for key, tokens in t.windows.items():
            learned_at = t.windows_learned.get(key, now)
            if key in self._windows or now - learned_at > WINDOW_HINT_MAX_AGE:
                continue
            self._hints[key] = tokens
            self._learned_at[key] = learned_at
        self._set_messages(t.messages, t.seqs, t.joined)
        # A fold's summary whose writing was cut off (the chat or the app closed first): it is
        # written again, on the same turns and the same summary before (``resume_writing``).
        self._late, self._late_base = list(t.late), t.late_base

    def _set_messages(
        self, messages: Sequence[Message], seqs: Sequence[int], joined: Sequence[int] = ()
    ) -> None:
        self._messages = list(messages)
        self._ledger = Ledger(self._messages)
        users = self._ledger.turns
        known = [int(s) for s in seqs][-users:] if users else []
        # An older file has no seqs: its turns get -1 (unknown), which a retry never matches
        # and a Compacted never names.
        self._seqs = [-1] * (users - len(known)) + known
        first = next((s for s in self._seqs if s >= 0), None)
        self._joined = [j for j in joined if first is not None and j > first]
        unanswered = self._messages and self._messages[-1].role == "user" and self._seqs
        last = self._seqs[-1] if self._seqs else -1
        self._unanswered = [last, *(j for j in self._joined if j > last)] if unanswered else []
        self._summary_tokens = estimate_tokens(summary_block(self._summary))
        # Another transcript: nothing counted or prepared for the old one applies to it.
        self._calibrated = None
        self._late = []
        self._prepared = None

    async def _catch_up(self, cutoff: int | None) -> None:
        """Make the transcript agree with the chat log before a turn (before ``cutoff``) or a
        fold: take another process's newer file, then rebuild from the log what disagrees."""
        self._sync_with_disk()
        history = self.history
        if history is None:
            return
        limit = cutoff if cutoff is not None else math.inf

        def read() -> tuple[list[tuple[int, Message]], Fold | None]:
            rows = sorted(history(), key=lambda r: r[0])
            return rows, self.latest_fold() if self.latest_fold is not None else None

        try:
            # A long chat log takes a while to read and check: off the event loop (the window's).
            rows, fold = await asyncio.to_thread(read)
            if fold is not None and self._written_elsewhere(fold):
                self._take_written(fold)
            why = await asyncio.to_thread(self._disagreement, rows, fold, limit)
        except Exception as exc:  # the chat log is the app's; its failure must not end the turn
            self._notes.append(Note(topic="other", text=f"Could not read the chat log: {exc}"))
            return
        if why is None:
            self._rebuild_told = False
            return
        had = bool(self._messages or self._summary)
        self._rebuild_from(rows, fold, limit)
        if had and not self._rebuild_told:
            self._rebuild_told = True
            self._notes.append(
                Note(
                    topic="transcript-recovered",
                    text=f"The model's copy of this chat did not match the chat log ({why}), "
                    "so Conch rebuilt it from the log. Nothing was lost.",
                )
            )

    def _written_elsewhere(self, fold: Fold | None) -> bool:
        """Whether the chat log's latest fold is this copy's fold with its late summary written
        (by another process on the chat): the same first kept turn, another summary than the
        one the late turns wait on."""
        return (
            bool(self._late and self._seqs)
            and fold is not None
            and bool(fold[1])
            and fold[0] == self._first_kept_seq()
            and fold[1] != self._summary
        )

    def _take_written(self, fold: Fold) -> None:
        """The late summary another process wrote becomes this copy's: its turns stay as they
        are (rebuilding them from the log would lose the provider's prompt cache). Listeners
        hear that the writing is over; the log has the summary already."""
        self._summary = fold[1]
        self._summary_tokens = estimate_tokens(summary_block(self._summary))
        self._late = []
        model = self._last_model.name if self._last_model is not None else ""
        self._tell(SummaryWritten(first_kept_seq=fold[0], summary="", model=model))

    def _tell(self, event: SummaryWritten) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # the listener is the app's; the summary stays the chat's
                log.exception("a listener failed to take a written summary")

    def _sync_with_disk(self) -> None:
        if self.data_dir is None or not self._writable or not self._loaded:
            return
        if tfile.file_signature(self.data_dir, self.chat_id) != self._disk:
            # Another process saved (or removed) the file since this session last saw it.
            self._read_file()

    def _disagreement(
        self, rows: Sequence[tuple[int, Message]], fold: Fold | None, limit: float
    ) -> str | None:
        """Why the transcript disagrees with the chat log before ``limit`` (None: it agrees)."""
        users = {s: m for s, m in rows if m.role == "user" and s < limit}
        return (
            self._shape_disagrees(fold)
            or self._turns_disagree(users, fold, limit)
            or self._words_disagree(rows, users, limit)
        )

    def _shape_disagrees(self, fold: Fold | None) -> str | None:
        """What makes the transcript wrong whatever the log holds: its start, unknown places,
        a summary other than the log's latest fold."""
        if self._messages and self._messages[0].role != "user":
            return "it starts with the model's words"
        if any(s < 0 for s in self._seqs):
            return "it does not say where its turns are in the log"
        if self.latest_fold is not None and self._summary != (fold[1] if fold else ""):
            return "its summary is not the log's" if fold else "the log has no summary for it"
        return None

    def _turns_disagree(
        self, users: Mapping[int, Message], fold: Fold | None, limit: float
    ) -> str | None:
        """Whether the transcript keeps exactly the person messages the log has from its start."""
        mine = sorted(s for s in (*self._seqs, *self._joined) if s < limit)
        # Where the model's word-for-word memory must start: the log's latest fold, or, with
        # no record of folds, wherever the transcript starts.
        start = mine[0] if mine else -1
        if self.latest_fold is not None:
            start = fold[0] if fold else -1
        expected = [s for s in users if s >= start]
        if mine == expected:
            return None
        if set(mine) - set(users):
            return "it holds messages the log does not have"
        return "it misses messages the log has"

    def _words_disagree(
        self, rows: Sequence[tuple[int, Message]], users: Mapping[int, Message], limit: float
    ) -> str | None:
        """Each kept turn: the person's words as logged, and every logged answer."""
        answers = [(s, m.text[:HEAD]) for s, m in rows if m.role == "assistant" and s < limit]
        answer_seqs = [s for s, _ in answers]
        starts = self._ledger.turn_starts
        for k, seq in enumerate(self._seqs):
            if seq >= limit:
                break
            end = starts[k + 1] if k + 1 < len(starts) else len(self._messages)
            turn = self._messages[starts[k] : end]
            if not _same_start(turn[0].text, users[seq].text):
                return "a message differs from the log"
            until = self._seqs[k + 1] if k + 1 < len(self._seqs) else math.inf
            # An answer that used tools is logged as one text, its rounds' words run together.
            words = [m.text for m in turn if m.role == "assistant"]
            why = _answers_disagree(words, answers, answer_seqs, seq, until)
            if why is not None:
                return why
        return None

    def _rebuild_from(
        self, rows: Sequence[tuple[int, Message]], fold: Fold | None, limit: float
    ) -> None:
        """The transcript the chat log implies: from the latest fold on, with its summary."""
        messages, seqs, joined = _from_log(rows, fold[0] if fold else -1, limit)
        self._summary = fold[1] if fold else ""
        self._set_messages(messages, seqs, joined)

    def _snapshot(self) -> tfile.TranscriptFile:
        windows = {**self._hints, **self._windows}
        return tfile.TranscriptFile(
            messages=list(self._messages),
            summary=self._summary,
            seqs=list(self._seqs),
            joined=list(self._joined),
            factor=self._factor,
            windows=windows,
            windows_learned={k: self._learned_at[k] for k in windows if k in self._learned_at},
            late=list(self._late),
            late_base=self._late_base if self._late else "",
        )

    async def _persist(self, joins: int = JOINS) -> Note | None:
        """Save the transcript; a Note when it could not be saved (the chat goes on). When
        another process saved first, its file and this copy are joined where they can be
        (``_join_saved``) and saved again."""
        if not self._writable or self.data_dir is None:
            return None
        data = tfile.encode(self._snapshot())
        self._save_generation += 1
        generation = self._save_generation
        data_dir = self.data_dir

        def write() -> tfile.Saved | None:
            with self._io_lock:
                # A save that finished after a newer one must not win.
                if generation < self._saved_generation:
                    return None
                saved = tfile.save_if_unchanged(data_dir, self.chat_id, data, self._disk)
                self._saved_generation = generation
                if saved.written or saved.problem:
                    # Not written and no problem: another process saved first. The file is
                    # left as it is unless the two copies join; else the next turn reads it
                    # and rebuilds what it misses.
                    self._disk = saved.signature
                return saved

        saved = await asyncio.to_thread(write)
        if saved is not None and saved.problem:
            return Note(topic="other", text=saved.problem)
        if joins > 0 and saved is not None and not saved.written and await self._join_saved():
            return await self._persist(joins - 1)
        return None

    async def _join_saved(self) -> bool:
        """After another process saved first: join its file and this copy when both keep the
        same fold, each has the chat log's summary for it or waits for it (a summary written
        late, which the other has), and one copy's turns include the other's. The joined copy
        keeps the larger copy's turns and the log's summary. True when joined (the file read is
        then the one to replace); else the next turn checks and rebuilds from the log."""
        data_dir, fold_of = self.data_dir, self.latest_fold
        if data_dir is None or not self._seqs or self._seqs[0] < 0:
            return False

        def read() -> tuple[tuple[tfile.TranscriptFile, tfile.Signature] | None, Fold | None]:
            return tfile.peek_signed(data_dir, self.chat_id), fold_of() if fold_of else None

        try:
            peeked, fold = await asyncio.to_thread(read)
        except Exception:  # the chat log is the app's: the next turn's check says what is wrong
            return False
        if peeked is None or fold is None:
            return False
        disk, signature = peeked
        start = self._seqs[0]
        if not disk.seqs or disk.seqs[0] != start or fold[0] != start:
            return False  # another fold (or none): not two copies of the same fold
        has = (
            self._summary == fold[1] and not self._late,
            disk.summary == fold[1] and not disk.late,
        )
        waits = (bool(self._late), bool(disk.late))
        if not any(has) or not all(h or w for h, w in zip(has, waits, strict=True)):
            return False
        mine, theirs = set(self._seqs), set(disk.seqs)
        if not (theirs <= mine or mine <= theirs):
            return False  # each has a turn the other lacks
        waiting = bool(self._late)
        if mine < theirs or (mine == theirs and len(disk.messages) > len(self._messages)):
            self._set_messages(disk.messages, disk.seqs, disk.joined)
        if waiting:
            self._take_written(fold)  # the summary this copy waited for
        self._disk = signature
        return True

    async def _answered(self) -> AsyncGenerator[Event, None]:
        """The turn is answered: what summarising it cost is reported and the transcript is
        saved (a note says so when saving failed)."""
        self._unanswered = []
        if self._pending_summary_tokens:
            extra, self._pending_summary_tokens = self._pending_summary_tokens, 0
            yield Usage(summary_tokens=extra)
        note = await self._persist()
        if note is not None:
            yield note
