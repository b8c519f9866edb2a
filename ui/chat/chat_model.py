"""The rows a chat view shows, read lazily from the chat log.

A chat opens on its newest page of messages; older pages are read from the store only when the
person scrolls up (``fetch_older``). Qt's own ``canFetchMore``/``fetchMore`` are not used: a view
calls them whenever its *last* row is visible, which in a chat is always, so they would read the
whole log. Besides messages, a row can be the summary divider (only the latest compaction),
a problem card after a failed answer, a memory card for a learning run, or the answer that is
streaming in right now. Every change is applied as the smallest insert/remove between the old
and new row lists, so the view keeps its scroll position and its size cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)

from app.answer_stats import AnswerStats, stats_book
from app.store import ChatStore, Compaction, StoredMessage, Versions
from app.tool_calls import tool_call_book
from engines.base import HandedOff, ProblemKind, ToolResult
from ui.chat.markdown import pieces_of
from ui.chat.tool_rows import stored_entry

PAGE = 40  # messages read per page; a screen shows far fewer
COLLAPSE_CHARS = 2_000  # a longer message shows its start and "Show all"
ROW_ROLE = int(Qt.ItemDataRole.UserRole) + 1

_Index = QModelIndex | QPersistentModelIndex


class RunSource(Protocol):
    def runs(self, chat_id: str | None = None) -> list[Any]: ...


class RowKind(StrEnum):
    MESSAGE = "message"
    STREAMING = "streaming"
    DIVIDER = "divider"
    PROBLEM = "problem"
    MEMORIES = "memories"
    TOOLS = "tools"  # an answer's tool calls (ui/chat/tool_rows.py)


WIDGET_KINDS = frozenset({RowKind.DIVIDER, RowKind.PROBLEM, RowKind.MEMORIES, RowKind.TOOLS})

# A message's hover buttons: what each action is called on its button.
ACTIONS = {
    "copy": "Copy",
    "edit": "Edit",
    "continue": "Continue",
    "regenerate": "Regenerate",
    "delete": "Delete",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One row. ``key`` identifies it across rebuilds; ``version`` changes with its content."""

    kind: RowKind
    key: tuple[Any, ...]
    message: StoredMessage | None = None
    compaction: Compaction | None = None
    writing: bool = False  # the divider's summary is still being written (after its turn)
    handoff: HandedOff | None = None  # a divider where a program's memory starts
    run: Any = None  # LearningRun
    text: str = ""  # the streaming answer so far
    thinking: str = ""
    thinking_open: bool = False
    version: int = 0
    who: str = ""  # the streaming row: the model that is answering
    status: str = ""  # the streaming row before its first word: "Reading the chat… 35%"
    expanded: bool = False  # a long message shown whole ("Show all" was clicked)
    stats: AnswerStats | None = None  # an answer's speed and tokens, shown under it
    versions: Versions | None = None  # a regenerated answer's versions ("‹ 2/3 ›")
    editing: bool = False  # the person's message is open for editing under it
    tools: tuple[Any, ...] = ()  # the TOOLS row: its calls (ui.chat.tool_rows.ToolEntry)
    continuable: bool = False  # the last answer, stopped by the person: "Continue" goes on
    # A long message shown whole is one row per piece (``ui.chat.markdown.split_long``): a row
    # has a height limit, and each piece is laid out on its own, a few per turn.
    part: int = 0
    parts: int = 1

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (
            *self.key,
            self.version,
            self.thinking_open,
            self.expanded,
            self.stats,
            self.versions,
            self.editing,
            self.continuable,
        )

    @property
    def first_part(self) -> bool:
        return self.part == 0

    @property
    def last_part(self) -> bool:
        return self.part == self.parts - 1

    @property
    def body(self) -> str:
        """The Markdown this row shows whole (a piece of a long message, or all of it)."""
        m = self.message
        text = m.text if m is not None else self.text
        return pieces_of(text)[self.part].text if self.parts > 1 else text

    @property
    def collapsible(self) -> bool:
        m = self.message
        return self.kind is RowKind.MESSAGE and m is not None and len(m.text) > COLLAPSE_CHARS


def preview(text: str, limit: int = COLLAPSE_CHARS) -> str:
    """The start of a long message: up to ``limit`` characters, cut after a paragraph, a line
    or at least a word when one ends in the second half (never inside a word)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for sep in ("\n\n", "\n", " "):
        cut = head.rfind(sep)
        if cut >= limit // 2:
            return head[:cut].rstrip()
    return head


def mark_for(message: StoredMessage) -> str:
    """The words under an answer that did not finish: "Stopped" (the person), the sentence
    saying Conch was closed before it finished, or "Cut off"."""
    if message.problem is None:
        return ""
    if message.problem.cut_by_closing:
        return message.problem.message
    if message.problem.kind is ProblemKind.CANCELLED:
        return "Stopped"
    return "Cut off" if message.text else ""


def stopped(message: StoredMessage) -> bool:
    """An answer the person stopped with words in it (one "Continue" can go on with)."""
    p = message.problem
    return (
        message.role == "assistant"
        and p is not None
        and p.kind is ProblemKind.CANCELLED
        and bool(message.text.strip())
    )


def _shows_card(message: StoredMessage) -> bool:
    p = message.problem
    return message.role == "assistant" and p is not None and p.kind is not ProblemKind.CANCELLED


def _visible_memories(run: Any) -> bool:
    return any(getattr(m, "status", "") in ("kept", "waiting") for m in run.memories)


class ChatModel(QAbstractListModel):
    """Rows of one chat (see module docstring). ``set_chat`` switches chats."""

    def __init__(
        self,
        store: ChatStore,
        runs: RunSource | None = None,
        *,
        model_name: Callable[[str], str] | None = None,
        page: int = PAGE,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._run_source = runs
        self._model_name = model_name or (lambda key: key.split("/", 1)[-1] or "the model")
        self._page = max(1, page)
        self._chat_id = ""
        self._messages: list[StoredMessage] = []
        self._compaction: Compaction | None = None
        self._writing = False  # the latest fold's summary is being written after its turn
        self._handoff: HandedOff | None = None
        self._runs: list[Any] = []
        self._open_thinking: set[int] = set()
        self._expanded: set[int] = set()  # seqs of long messages shown whole
        self._stats: dict[int, AnswerStats] = {}
        self._versions: dict[int, Versions] = {}
        self._tool_calls: dict[int, ToolResult] = {}  # how each loaded tool call went, by seq
        self._editing: int | None = None  # the seq of the message open for editing
        self._streaming = False
        self._continuing: int | None = None  # the stopped answer the stream goes on with
        self.continues_answers = False  # the chat's engine can go on with a stopped answer
        self._stream_text = ""
        self._stream_thinking = ""
        self._stream_open = False
        self._stream_version = 0
        self._stream_who = ""
        self._stream_status = ""
        self._stream_tools: tuple[Any, ...] = ()  # the running turn's tool calls so far
        self._rows: list[Row] = []

    # --- Qt model -------------------------------------------------------------------------

    def rowCount(self, parent: _Index | None = None) -> int:
        if parent is not None and parent.isValid():
            return 0
        return len(self._rows)

    def data(self, index: _Index, role: int = int(Qt.ItemDataRole.DisplayRole)) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == ROW_ROLE:
            return row
        if role == int(Qt.ItemDataRole.DisplayRole):
            return self.shown_text(row)
        if role == int(Qt.ItemDataRole.AccessibleTextRole):
            return self.spoken_text(row)
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    # --- reading --------------------------------------------------------------------------

    @property
    def chat_id(self) -> str:
        return self._chat_id

    @property
    def messages(self) -> list[StoredMessage]:
        """The loaded messages, oldest first."""
        return list(self._messages)

    @property
    def compaction(self) -> Compaction | None:
        return self._compaction

    @property
    def streaming(self) -> bool:
        return self._streaming

    def row(self, i: int) -> Row:
        return self._rows[i]

    def rows(self) -> list[Row]:
        return list(self._rows)

    def find(self, kind: RowKind, ident: Any = None) -> int:
        """The index of the first row of ``kind`` (and key ident), or -1."""
        for i, row in enumerate(self._rows):
            if row.kind is kind and (ident is None or row.key[1] == ident):
                return i
        return -1

    def actions(self, i: int) -> tuple[str, ...]:
        """The buttons row ``i`` offers (``ACTIONS`` names): copy on every message, edit on
        the person's, regenerate on the last answer, delete on each; none while answering."""
        row = self._rows[i]
        m = row.message
        if row.kind is not RowKind.MESSAGE or m is None or row.editing or not row.first_part:
            return ()
        if self._streaming:
            return ("copy",)
        out = ["copy"]
        if m.role == "user":
            out.append("edit")
        elif m.role == "assistant" and self._last_answer() == m.seq:
            if row.continuable:
                out.append("continue")
            out.append("regenerate")
        out.append("delete")
        return tuple(out)

    def _last_answer(self) -> int | None:
        return next((m.seq for m in reversed(self._messages) if m.role == "assistant"), None)

    def model_name(self, model_key: str) -> str:
        return self._model_name(model_key)

    def plain_text(self, row: Row) -> str:
        if row.kind is RowKind.MESSAGE and row.message is not None:
            return row.message.text
        if row.kind is RowKind.STREAMING:
            return row.text
        if row.kind is RowKind.DIVIDER and row.handoff is not None:
            return row.handoff.text
        if row.kind is RowKind.DIVIDER and row.compaction is not None:
            return f"Earlier messages are summarised for {row.compaction.model}"
        if row.kind is RowKind.PROBLEM and row.message is not None and row.message.problem:
            return row.message.problem.message
        if row.kind is RowKind.MEMORIES and row.run is not None:
            return "\n".join(m.text for m in row.run.memories)
        if row.kind is RowKind.TOOLS:
            return "\n".join(f"Tool call: {t.tool}" for t in row.tools)
        return ""

    def shown_text(self, row: Row) -> str:
        """The row's words as the person sees them: an answer that has none yet shows what
        the wait for them is (``plain_text`` is what Copy takes)."""
        if row.kind is RowKind.STREAMING and not row.text and not row.thinking:
            return row.status
        return self.plain_text(row)

    def spoken_text(self, row: Row) -> str:
        if row.kind is RowKind.MESSAGE and row.message is not None:
            m = row.message
            who = "You" if m.role == "user" else self.model_name(m.model_key)
            mark = mark_for(m)
            return f"{who}: {m.text}" + (f" ({mark})" if mark else "")
        if row.kind is RowKind.STREAMING:
            return f"Answer in progress: {self.shown_text(row)}"
        return self.plain_text(row)

    # --- loading --------------------------------------------------------------------------

    def set_chat(self, chat_id: str) -> None:
        """Show ``chat_id`` (its newest page); "" shows nothing."""
        self.beginResetModel()
        self._chat_id = chat_id
        self._open_thinking.clear()
        self._expanded.clear()
        self._editing = None
        self._handoff = None
        self._writing = False
        self._end_stream_state()
        if chat_id:
            count = self._store.message_count(chat_id)
            self._compaction = self._store.latest_compaction(chat_id)
            start = max(0, count - self._page)
            fold = self._compaction
            # Reach back to the summary line when it is only a little above the newest page.
            if fold is not None and start > fold.first_kept_seq >= count - 3 * self._page:
                start = max(0, fold.first_kept_seq - 1)
            self._messages = self._store.messages(chat_id, start=start)
            runs = self._run_source.runs(chat_id) if self._run_source is not None else []
            self._runs = [r for r in runs if _visible_memories(r)]
        else:
            self._messages = []
            self._compaction = None
            self._runs = []
        self._read_stats()
        self._rows = self._build()
        self.endResetModel()

    def can_fetch_older(self) -> bool:
        return bool(self._messages) and self._messages[0].seq > 0

    def fetch_older(self, count: int | None = None) -> int:
        """Read the page before the oldest loaded message; returns how many rows were added."""
        if not self.can_fetch_older():
            return 0
        n = count or self._page
        first = self._messages[0].seq
        start = max(0, first - n)
        older = self._store.messages(self._chat_id, start=start, limit=first - start)
        if not older:
            return 0
        before = len(self._rows)
        self._messages = older + self._messages
        self._read_stats()
        self._apply(self._build())
        return len(self._rows) - before

    def sync(self) -> None:
        """Pick up what the chat log gained (new messages, a fold) since the last look."""
        if not self._chat_id:
            return
        start = self._messages[-1].seq + 1 if self._messages else 0
        # Re-read the last loaded message too: a turn may have updated it.
        if self._messages:
            start -= 1
            fresh = self._store.messages(self._chat_id, start=start)
            self._messages = self._messages[:-1] + fresh
        else:
            self._messages = self._store.messages(self._chat_id, start=start)
        self._compaction = self._store.latest_compaction(self._chat_id)
        self._read_stats()
        self._apply(self._build())

    def reload(self) -> None:
        """Read the loaded messages again (one was edited, deleted, or another version of an
        answer shows), keeping the rows that did not change."""
        if not self._chat_id:
            return
        start = self._messages[0].seq if self._messages else 0
        self._messages = self._store.messages(self._chat_id, start=start)
        self._compaction = self._store.latest_compaction(self._chat_id)
        if self._editing is not None and all(m.seq != self._editing for m in self._messages):
            self._editing = None
        self._read_stats()
        self._apply(self._build())

    @property
    def editing(self) -> int | None:
        return self._editing

    def set_editing(self, seq: int | None) -> None:
        """Open the person's message at ``seq`` for editing (None: close it)."""
        self._editing = seq
        self._apply(self._build())

    def reload_message(self, seq: int) -> None:
        for i, m in enumerate(self._messages):
            if m.seq == seq:
                fresh = self._store.message(self._chat_id, seq)
                if fresh is not None:
                    self._messages[i] = fresh
                    self._apply(self._build())
                return

    def set_compaction(self, compaction: Compaction | None, writing: bool = False) -> None:
        """Show ``compaction`` as the divider; ``writing``: its summary is still being written
        (the divider says so, and is drawn again when it is done)."""
        self._compaction = compaction
        self._writing = writing
        self._handoff = None  # a fold after the handoff is where the memory starts now
        self._apply(self._build())

    @property
    def summary_writing(self) -> bool:
        return self._writing

    def set_handoff(self, handoff: HandedOff | None) -> None:
        """Show the divider where a program's memory starts (not saved: a program chat's
        latest handoff) in place of the summary line; None shows the summary line again."""
        self._handoff = handoff
        self._apply(self._build())

    def add_run(self, run: Any) -> None:
        """A learning run finished (or changed): show or refresh its card."""
        if run.chat_id != self._chat_id:
            return
        for i, old in enumerate(self._runs):
            if old.id == run.id:
                self._runs[i] = run
                break
        else:
            self._runs.append(run)
        self._apply(self._build())

    def reload_runs(self) -> None:
        """Read this chat's learning runs again (a memory was edited, kept or deleted
        elsewhere, say on the Memories page): each card shows what the book now says."""
        if not self._chat_id or self._run_source is None:
            return
        runs = self._run_source.runs(self._chat_id)
        self._runs = [r for r in runs if _visible_memories(r)]
        self._apply(self._build())

    # --- streaming ------------------------------------------------------------------------

    def start_stream(
        self, text: str = "", thinking: str = "", *, who: str = "", continues: int | None = None
    ) -> None:
        """A streaming row at the end; ``continues``: the stopped answer it goes on with,
        which it replaces on screen (one answer growing, not a second one)."""
        self._continuing = continues
        self._streaming = True
        self._stream_who = who
        self._stream_status = ""
        self._stream_text = text
        self._stream_thinking = thinking
        self._stream_open = False
        self._stream_version += 1
        self._apply(self._build())

    def update_stream(self, text: str, thinking: str) -> None:
        """New text for the streaming row: one dataChanged, no rebuild of the other rows."""
        if not self._streaming:
            return
        self._stream_text = text
        self._stream_thinking = thinking
        self._stream_version += 1
        i = self.find(RowKind.STREAMING)
        if i < 0:
            return
        self._rows[i] = self._stream_row()
        idx = self.index(i, 0)
        self.dataChanged.emit(idx, idx, [ROW_ROLE])

    def set_stream_status(self, words: str) -> None:
        """What the streaming row says while it has no words yet ("" for the plain "…");
        one dataChanged when it changes."""
        if not self._streaming or words == self._stream_status:
            return
        self._stream_status = words
        self._stream_version += 1
        i = self.find(RowKind.STREAMING)
        if i < 0:
            return
        self._rows[i] = self._stream_row()
        idx = self.index(i, 0)
        self.dataChanged.emit(idx, idx, [ROW_ROLE])

    @property
    def stream_status(self) -> str:
        return self._stream_status if self._streaming else ""

    def set_stream_tools(self, entries: tuple[Any, ...]) -> None:
        """The running turn's tool calls: one row of them just above the streaming answer."""
        if not self._streaming or entries == self._stream_tools:
            return
        self._stream_tools = tuple(entries)
        self._apply(self._build())

    def end_stream(self) -> None:
        if not self._streaming:
            return
        self._end_stream_state()
        self._apply(self._build())

    def _end_stream_state(self) -> None:
        self._streaming = False
        self._continuing = None
        self._stream_text = ""
        self._stream_thinking = ""
        self._stream_status = ""
        self._stream_open = False
        self._stream_tools = ()

    # --- thinking -------------------------------------------------------------------------

    def toggle_thinking(self, i: int) -> bool:
        """Open or close the "Thinking" part of row ``i``; False when it has none."""
        row = self._rows[i]
        if row.kind is RowKind.STREAMING and row.thinking:
            self._stream_open = not self._stream_open
            self._stream_version += 1
            self._rows[i] = self._stream_row()
            idx = self.index(i, 0)
            self.dataChanged.emit(idx, idx, [ROW_ROLE])
            return True
        if row.kind is not RowKind.MESSAGE or row.message is None or not row.message.thinking:
            return False
        seq = row.message.seq
        if seq in self._open_thinking:
            self._open_thinking.discard(seq)
        else:
            self._open_thinking.add(seq)
        self._apply(self._build())
        return True

    def _read_stats(self) -> None:
        """The figures of the loaded answers (one small query per page read), and which
        answers have versions."""
        first = self._messages[0].seq if self._messages else 0
        self._versions = self._store.all_versions(self._chat_id, first) if self._chat_id else {}
        self._read_tool_calls()
        book = stats_book(self._store) if self._chat_id and self._messages else None
        if book is None:
            self._stats = {}
            return
        self._stats = book.between(self._chat_id, self._messages[0].seq, self._messages[-1].seq)

    def _read_tool_calls(self) -> None:
        tools = [m.seq for m in self._messages if m.role == "tool"]
        book = tool_call_book(self._store) if tools else None
        self._tool_calls = book.between(self._chat_id, tools[0], tools[-1]) if book else {}

    # --- long messages --------------------------------------------------------------------

    def toggle_expanded(self, i: int) -> bool:
        """Show all of a long message at row ``i``, or its start again; False when short."""
        row = self._rows[i]
        if not row.collapsible or row.message is None:
            return False
        seq = row.message.seq
        if seq in self._expanded:
            self._expanded.discard(seq)
        else:
            self._expanded.add(seq)
        self._apply(self._build())
        return True

    def keep_expanded(self, seq: int) -> None:
        """Show message ``seq`` whole when it arrives (an answer the person just watched
        stream in does not fold away under them)."""
        self._expanded.add(seq)

    # --- building rows --------------------------------------------------------------------

    def _stream_row(self) -> Row:
        return Row(
            RowKind.STREAMING,
            ("s",),
            text=self._stream_text,
            thinking=self._stream_thinking,
            thinking_open=self._stream_open,
            version=self._stream_version,
            who=self._stream_who,
            status=self._stream_status,
        )

    def _build(self) -> list[Row]:
        rows: list[Row] = []
        msgs = self._messages
        at, divider = self._divider()
        runs = sorted(self._runs, key=lambda r: r.created)
        ri = 0
        first_loaded = msgs[0].created if msgs else 0.0
        # A run older than every loaded message belongs to the unloaded past: skip it for now.
        while (
            ri < len(runs) and msgs and self.can_fetch_older() and runs[ri].created < first_loaded
        ):
            ri += 1
        last = len(msgs) - 1
        for n, m in enumerate(msgs):
            if divider is not None and m.seq == at:
                rows.append(divider)
            if self._streaming and m.seq == self._continuing:
                continue  # the streaming row shows it, growing
            tool = m.role == "tool"
            if tool:  # a tool call's result: a line in the answer's tool calls
                entry = stored_entry(m, self._tool_calls.get(m.seq))
                if rows and rows[-1].kind is RowKind.TOOLS:
                    entries = (*rows[-1].tools, entry)
                    rows[-1] = Row(RowKind.TOOLS, rows[-1].key, tools=entries, version=len(entries))
                else:
                    rows.append(Row(RowKind.TOOLS, ("t", m.seq), tools=(entry,), version=1))
            card = n == last and not self._streaming and _shows_card(m)
            # A failed answer with nothing in it that was tried again (the answer after it
            # answers the same message): the new try stands in its place.
            retried = n < last and msgs[n + 1].role == "assistant" and _shows_card(m)
            if not tool and not ((card or retried) and not m.text and not m.thinking):
                open_ = m.seq in self._open_thinking
                whole = m.seq in self._expanded
                editing = m.seq == self._editing
                long = whole and not editing and len(m.text) > COLLAPSE_CHARS
                parts = len(pieces_of(m.text)) if long else 1
                for part in range(parts):
                    rows.append(
                        Row(
                            RowKind.MESSAGE,
                            ("m", m.seq, m, part) if part else ("m", m.seq, m),
                            message=m,
                            thinking_open=open_,
                            expanded=whole,
                            stats=self._stats.get(m.seq),
                            versions=self._versions.get(m.seq),
                            editing=editing,
                            continuable=self.continues_answers and n == last and stopped(m),
                            part=part,
                            parts=parts,
                        )
                    )
            if card:
                rows.append(Row(RowKind.PROBLEM, ("p", m.seq, m.problem), message=m))
            nxt = msgs[n + 1].created if n < last else float("inf")
            while ri < len(runs) and runs[ri].created < nxt:
                run = runs[ri]
                rows.append(Row(RowKind.MEMORIES, ("r", run.id, run), run=run))
                ri += 1
        if divider is not None and msgs and at > msgs[-1].seq:
            rows.append(divider)
        while ri < len(runs):
            run = runs[ri]
            rows.append(Row(RowKind.MEMORIES, ("r", run.id, run), run=run))
            ri += 1
        if self._streaming:
            if self._stream_tools:
                rows.append(Row(RowKind.TOOLS, ("t", "live"), tools=self._stream_tools))
            rows.append(self._stream_row())
        return rows

    def _divider(self) -> tuple[int, Row | None]:
        """The one divider row and the message it sits above."""
        handed = self._handoff
        if handed is not None:
            key: tuple[Any, ...] = ("d", "handoff", handed.first_seq, handed.text)
            return handed.first_seq, Row(RowKind.DIVIDER, key, handoff=handed)
        comp = self._compaction
        if comp is None:
            return -1, None
        key = ("d", comp.created, comp.first_kept_seq, self._writing)
        row = Row(RowKind.DIVIDER, key, compaction=comp, writing=self._writing)
        return comp.first_kept_seq, row

    def _apply(self, new: list[Row]) -> None:
        """Turn the current rows into ``new`` with one remove and one insert at most."""
        old = self._rows
        lo = min(len(old), len(new))
        p = 0
        while p < lo and old[p].key == new[p].key:
            p += 1
        s = 0
        while s < lo - p and old[len(old) - 1 - s].key == new[len(new) - 1 - s].key:
            s += 1
        old_end = len(old) - s
        new_end = len(new) - s
        if old_end > p:
            self.beginRemoveRows(QModelIndex(), p, old_end - 1)
            self._rows = old[:p] + old[old_end:]
            self.endRemoveRows()
        if new_end > p:
            self.beginInsertRows(QModelIndex(), p, new_end - 1)
            self._rows = new
            self.endInsertRows()
        # Rows kept by key may still look different (the streaming row's newer version, a
        # thinking part or a long message opened): refresh them, sizes included.
        current = self._rows
        changed = [
            i
            for i, row in enumerate(new)
            if i < len(current) and current[i] is not row and current[i].cache_key != row.cache_key
        ]
        self._rows = new
        for i in changed:
            idx = self.index(i, 0)
            self.dataChanged.emit(idx, idx, [ROW_ROLE])


__all__ = [
    "ACTIONS",
    "COLLAPSE_CHARS",
    "PAGE",
    "ROW_ROLE",
    "WIDGET_KINDS",
    "ChatModel",
    "Row",
    "RowKind",
    "mark_for",
    "preview",
    "stopped",
]
