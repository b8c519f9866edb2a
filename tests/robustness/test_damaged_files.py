"""Damaged SQLite files on disk: Conch sets them aside, keeps what can be read, and goes on.

Each test writes a real chat log or memories file through Conch's own stores, closes it, then
damages the bytes the way disks and crashes do: a page in the middle overwritten, the file cut
short, a scribbled header. Opening must never fail, must keep the damaged file exactly as it
was beside the new one, and must copy every row that is still readable.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.memories import MemoryBook
from app.services import build_services, build_system_prompt
from app.sqlite import DamagedFileError
from app.store import ChatStore
from engines.base import ModelInfo

# Every test here damages a file on purpose; setting it aside is logged.
pytestmark = pytest.mark.allow_log("conch.sqlite")

ROOT = Path(__file__).resolve().parents[2]
TABLE_LEAF = 0x0D  # the first byte of a page that holds a table's rows (SQLite file format)
MODEL = ModelInfo(provider="mock", id="mock-model", label="Mock", context=32_768, local=True)


# --- writing real files, and damaging them ----------------------------------------------------


def _words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    vocab = ["garden", "larch", "budget", "library", "Marta", "soil", "beds", "water", "tools"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def write_chat_log(data_dir: Path, messages: int = 240) -> dict[tuple[str, int], str]:
    """Three chats with long messages; returns every message's text by (chat, seq)."""
    store = ChatStore.in_dir(data_dir)
    chats = [store.create_chat(f"Chat {i}") for i in range(3)]
    written: dict[tuple[str, int], str] = {}
    for n in range(messages):
        chat = chats[n % 3]
        text = f"message {n}: {_words(150, n)}"
        saved = store.append_message(chat.id, "user" if n % 2 == 0 else "assistant", text)
        written[(chat.id, saved.seq)] = text
    store.close()
    assert not (data_dir / (ChatStore.FILE_NAME + "-wal")).exists()  # all in the main file
    return written


def write_memories(data_dir: Path, count: int = 200) -> list[str]:
    book = MemoryBook.in_dir(data_dir)
    texts = [f"Memory {n}: the person said {_words(40, 1000 + n)}." for n in range(count)]
    for text in texts:
        book.add(text)
    book.close()
    return [m for m in texts]


def _page_size(data: bytes) -> int:
    size = int.from_bytes(data[16:18], "big")
    return 65_536 if size == 1 else size


def table_leaves(path: Path) -> list[int]:
    """Page numbers (1-based) of the pages that hold table rows."""
    data = path.read_bytes()
    size = _page_size(data)
    return [n for n in range(2, len(data) // size + 1) if data[(n - 1) * size] == TABLE_LEAF]


def scribble_page(path: Path, page: int) -> None:
    size = _page_size(path.read_bytes())
    with path.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(random.Random(page).randbytes(size))


def scribble_middle(path: Path) -> bytes:
    """Overwrite the middle page of table rows; returns the damaged file's bytes."""
    leaves = table_leaves(path)
    assert len(leaves) > 10, "the test file is too small to damage in the middle"
    scribble_page(path, leaves[len(leaves) // 2])
    return path.read_bytes()


def aside_of(path: Path) -> Path:
    kept = sorted(path.parent.glob(path.name + ".broken-*"))
    assert len(kept) == 1, kept
    return kept[0]


def read_all(store: ChatStore) -> dict[tuple[str, int], str]:
    return {(m.chat_id, m.seq): m.text for c in store.list_chats() for m in store.messages(c.id)}


# --- a damaged chat log at start ----------------------------------------------------------------


def test_a_damaged_page_in_the_chat_log_keeps_every_readable_message(data_dir: Path) -> None:
    written = write_chat_log(data_dir)
    path = data_dir / ChatStore.FILE_NAME
    damaged = scribble_middle(path)

    store = ChatStore.in_dir(data_dir)
    aside = aside_of(path)
    assert aside.read_bytes() == damaged  # kept exactly as it was
    assert store.problem.startswith("Your chat log file was damaged")
    assert aside.name in store.problem and "nothing was deleted" in store.problem

    recovered = read_all(store)
    lost = len(written) - len(recovered)
    assert 1 <= lost <= 8, f"one damaged page holds a few messages, {lost} were lost"
    assert all(written[key] == text for key, text in recovered.items())
    assert f"with the {len(recovered)} messages it could still read" in store.problem
    assert sorted(c.title for c in store.list_chats()) == ["Chat 0", "Chat 1", "Chat 2"]

    # The new file takes new messages after the last recovered one, and opens quietly.
    chat = store.list_chats()[0]
    last = max(seq for (cid, seq) in recovered if cid == chat.id)
    assert store.append_message(chat.id, "user", "still here").seq == last + 1
    store.close()
    again = ChatStore.in_dir(data_dir)
    assert again.problem == ""
    assert len(read_all(again)) == len(recovered) + 1


def test_a_chat_log_cut_short_keeps_the_messages_before_the_cut(data_dir: Path) -> None:
    written = write_chat_log(data_dir)
    path = data_dir / ChatStore.FILE_NAME
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size * 6 // 10)
    cut = path.read_bytes()

    store = ChatStore.in_dir(data_dir)
    assert aside_of(path).read_bytes() == cut
    recovered = read_all(store)
    assert len(written) // 3 < len(recovered) < len(written)
    assert all(written[key] == text for key, text in recovered.items())
    assert "messages it could still read" in store.problem


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An SQLite varint at ``at``: its value and where the next field starts."""
    value = 0
    for k in range(9):
        byte = data[at + k]
        if k == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + k + 1
    raise AssertionError("unreachable")


def message_cells(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, rowid) in the file of each row on the last page of whole messages."""
    data = path.read_bytes()
    size = _page_size(data)
    for page in reversed(table_leaves(path)):
        base = (page - 1) * size
        count = int.from_bytes(data[base + 3 : base + 5], "big")
        cells = []
        for n in range(count):
            at = base + int.from_bytes(data[base + 8 + 2 * n : base + 10 + 2 * n], "big")
            payload, after = _varint(data, at)
            rowid, after = _varint(data, after)
            cells.append((at, after + payload, rowid))
        if len(cells) >= 3 and all(end - start > 500 for start, end, _ in cells):
            return sorted(cells)
    raise AssertionError("no page of long messages")


def test_a_message_the_cut_goes_through_is_left_out_and_those_before_it_kept(
    data_dir: Path,
) -> None:
    # SQLite reads the missing end of a cut page as zeros: the message the cut goes through
    # would come back with zeros for its last words, as if nothing had happened to it.
    written = write_chat_log(data_dir)
    path = data_dir / ChatStore.FILE_NAME
    with sqlite3.connect(path) as db:
        by_rowid = {
            r[0]: (r[1], r[2]) for r in db.execute("SELECT rowid, chat_id, seq FROM messages")
        }
    db.close()
    cells = message_cells(path)
    start, end, cut_through = cells[1]  # one whole message lies before it in the file
    with path.open("r+b") as f:
        f.truncate((start + end) // 2)

    store = ChatStore.in_dir(data_dir)
    recovered = read_all(store)
    assert all(written[key] == text for key, text in recovered.items())
    assert by_rowid[cut_through] not in recovered
    before = [by_rowid[rowid] for s, e, rowid in cells if e <= start]
    assert before and all(key in recovered for key in before)


def test_a_scribbled_header_keeps_every_message_behind_it(data_dir: Path) -> None:
    written = write_chat_log(data_dir, messages=30)
    path = data_dir / ChatStore.FILE_NAME
    with path.open("r+b") as f:
        f.write(b"\x00garbage" * 12)  # the first 96 bytes: SQLite's header, nothing else
    scribbled = path.read_bytes()

    store = ChatStore.in_dir(data_dir)
    assert aside_of(path).read_bytes() == scribbled  # kept exactly as it was
    assert store.problem.startswith("Your chat log file was damaged")
    assert f"with the {len(written)} messages it could still read" in store.problem
    assert read_all(store) == written  # the rows behind the header were all whole
    chat = store.list_chats()[0]
    assert store.append_message(chat.id, "user", "hello").seq > 0


def test_a_file_that_is_all_junk_is_set_aside_and_a_new_chat_log_started(data_dir: Path) -> None:
    write_chat_log(data_dir, messages=30)
    path = data_dir / ChatStore.FILE_NAME
    path.write_bytes(random.Random(7).randbytes(path.stat().st_size))
    junk = path.read_bytes()

    store = ChatStore.in_dir(data_dir)
    assert aside_of(path).read_bytes() == junk
    assert "Your chat log file could not be read" in store.problem
    assert "nothing was deleted" in store.problem
    assert store.list_chats() == []
    chat = store.create_chat("fresh")
    assert store.append_message(chat.id, "user", "hello").seq == 0


def test_messages_whose_chat_was_lost_come_back_under_a_recovered_chat(data_dir: Path) -> None:
    written = write_chat_log(data_dir, messages=60)
    path = data_dir / ChatStore.FILE_NAME
    db = sqlite3.connect(path)
    (chats_root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chats'").fetchone()
    db.close()
    scribble_page(path, chats_root)  # every chat row is gone, the messages are not

    store = ChatStore.in_dir(data_dir)
    chats = store.list_chats()
    assert len(chats) == 3 and {c.title for c in chats} == {"Recovered chat"}
    assert read_all(store) == written


# --- a damaged memories file ------------------------------------------------------------------


async def test_a_damaged_memories_file_keeps_its_readable_memories_in_the_prompt(
    data_dir: Path,
) -> None:
    texts = write_memories(data_dir)
    path = data_dir / MemoryBook.FILE_NAME
    damaged = scribble_middle(path)

    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        assert aside_of(path).read_bytes() == damaged
        (problem,) = services.startup_problems
        assert problem.startswith("Your memories file was damaged")
        kept = [m.text for m in services.memories.list()]
        assert 0 < len(kept) < len(texts) and set(kept) <= set(texts)
        prompt = build_system_prompt(MODEL, services.memories)
        assert kept[-1] in prompt
    finally:
        await services.aclose()


# --- damage found while Conch runs ------------------------------------------------------------


def _damage_under(path: Path) -> None:
    """Damage a page while a store has the file open, as a failing disk would.

    Another connection then writes (as ``conch ask`` beside the window does), so the store's
    connection reads the file again instead of the pages it already holds.
    """
    scribble_middle(path)
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE IF NOT EXISTS touched (x)")
    other.commit()
    other.close()


def test_damage_found_later_fails_one_call_then_the_chat_log_works(data_dir: Path) -> None:
    written = write_chat_log(data_dir)
    store = ChatStore.in_dir(data_dir)
    assert store.problem == ""
    _damage_under(data_dir / ChatStore.FILE_NAME)

    with pytest.raises(DamagedFileError) as failed:
        read_all(store)
    sentence = str(failed.value)
    assert sentence.startswith("Your chat log file was damaged")
    assert aside_of(data_dir / ChatStore.FILE_NAME).name in sentence

    recovered = read_all(store)  # the next call runs on the recovered file
    assert 0 < len(written) - len(recovered) <= 8
    assert all(written[key] == text for key, text in recovered.items())
    chat = store.list_chats()[0]
    store.append_message(chat.id, "user", "after the repair")
    store.close()
    assert ChatStore.in_dir(data_dir).problem == ""


def test_damage_found_later_in_memories_does_not_fail_every_turn(data_dir: Path) -> None:
    texts = write_memories(data_dir)
    book = MemoryBook.in_dir(data_dir)
    assert texts[-1] in build_system_prompt(MODEL, book)
    _damage_under(data_dir / MemoryBook.FILE_NAME)

    with pytest.raises(DamagedFileError, match="Your memories file was damaged"):
        book.list()
    kept = [m.text for m in book.list()]
    assert 0 < len(kept) < len(texts) and set(kept) <= set(texts)
    assert kept[-1] in build_system_prompt(MODEL, book)


# --- conch ask, twice, on a damaged chat log --------------------------------------------------


def _ask(data_dir: Path, home: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.main", "ask", "--mock", "--data-dir", str(data_dir), text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: a run takes a few seconds
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"},
    )


def test_conch_ask_answers_on_a_damaged_chat_log_and_says_so_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    write_chat_log(data_dir)
    scribble_middle(data_dir / ChatStore.FILE_NAME)

    first = _ask(data_dir, tmp_path, "Is the garden still on?")
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr
    assert "Your chat log file was damaged" in first.stderr
    assert first.stdout.strip()

    second = _ask(data_dir, tmp_path, "And the budget?")
    assert second.returncode == 0, second.stderr
    assert "damaged" not in second.stderr and "Traceback" not in second.stderr
