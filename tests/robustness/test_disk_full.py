"""A full disk: Conch says so in plain words, loses nothing it had, and works once there is room.

Two ways to fill a disk. ``PRAGMA max_page_count`` makes one SQLite file unable to grow (SQLite
answers exactly as for a full disk) and runs anywhere. A tiny tmpfs filled to the last byte is
the real thing; it needs the right to mount (CI runs as root) and is skipped without it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.health import HealthLog
from app.memories import MemoryBook
from app.services import build_services
from app.sqlite import DiskFullError
from app.store import ChatStore, StoreError

ROOT = Path(__file__).resolve().parents[2]
NO_LIMIT = 1_073_741_823  # SQLite's own largest max_page_count


def _cap(db: object, pages: int) -> None:
    """Let the file behind a store's connection grow by no more than ``pages``."""
    conn = db._db  # type: ignore[attr-defined]
    (now,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {now + pages}")


def _uncap(db: object) -> None:
    db._db.execute(f"PRAGMA max_page_count = {NO_LIMIT}")  # type: ignore[attr-defined]


# --- a file that cannot grow (runs anywhere) --------------------------------------------------


def test_a_chat_log_that_cannot_grow_says_the_disk_is_full(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Garden")
    store.append_message(chat.id, "user", "first")
    _cap(store, 0)

    with pytest.raises(StoreError) as failed:
        store.append_message(chat.id, "user", "a long paste " * 2_000)
    sentence = str(failed.value)
    assert sentence.startswith(f"The disk that holds {data_dir} is full")
    assert "Free some space and try again." in sentence
    assert "rollback" not in sentence.lower()

    # Nothing half-written, no transaction left open: with room again the same message saves.
    assert [m.text for m in store.messages(chat.id)] == ["first"]
    _uncap(store)
    assert store.append_message(chat.id, "user", "a long paste " * 2_000).seq == 1


def test_memories_that_cannot_grow_say_the_disk_is_full(data_dir: Path) -> None:
    book = MemoryBook.in_dir(data_dir)
    book.add("The person grows tomatoes.")
    _cap(book, 0)
    facts = [f"The person said fact {n}: " + "detail " * 50 for n in range(40)]
    with pytest.raises(DiskFullError, match="is full, so Conch could not save to your memories"):
        book.add_run("c1", facts, seq_from=0, seq_to=3, waiting=False, source="fold")
    assert [m.text for m in book.list()] == ["The person grows tomatoes."]
    _uncap(book)
    run = book.add_run("c1", facts, seq_from=0, seq_to=3, waiting=False, source="fold")
    assert run is not None and len(run.memories) == 40


def test_a_health_note_that_cannot_be_written_never_breaks_anything(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    _cap(log, 0)
    text = " ".join(f"The server in room {i} did not answer." for i in range(40))
    added = [log.add("unreachable", f"{n}: {text}") for n in range(50)]
    assert None in added  # the file could not grow: notes were dropped, nothing raised
    _uncap(log)
    assert log.add("healed", "fine again") is not None


# --- a real disk with no room (a tiny tmpfs) --------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB filesystem of its own, unmounted afterwards."""
    if not sys.platform.startswith("linux"):
        pytest.skip("a tmpfs is a Linux thing")
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here ({exc})")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=60)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; returns the file that holds them."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0"):  # the last bytes of a partly used block
                pass
    finally:
        os.close(fd)
    return filler


def _conch(data_dir: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.main", *args, "--mock", "--data-dir", str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: a run takes a few seconds
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"},
    )


def _one_sentence_about_a_full_disk(stderr: str) -> None:
    assert "Traceback" not in stderr
    assert "disk I/O error" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "is full" in lines[0] and "Free some space" in lines[0]


def test_conch_ask_on_a_full_disk_says_so_in_one_sentence(small_disk: Path, tmp_path: Path) -> None:
    data_dir = small_disk / "data"
    data_dir.mkdir()
    fill(small_disk)
    done = _conch(data_dir, tmp_path, "ask", "hello")
    assert done.returncode == 1
    _one_sentence_about_a_full_disk(done.stderr)


async def test_a_disk_that_filled_up_since_the_last_run_is_named_then_all_is_there(
    small_disk: Path, tmp_path: Path
) -> None:
    data_dir = small_disk / "data"
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    chat = services.store.create_chat("Garden")
    services.store.append_message(chat.id, "user", "The beds are larch.")
    await services.aclose()
    services.store.close()

    filler = fill(small_disk)
    done = _conch(data_dir, tmp_path, "ask", "hello")
    assert done.returncode == 1
    _one_sentence_about_a_full_disk(done.stderr)

    filler.unlink()
    store = ChatStore.in_dir(data_dir)
    assert store.problem == ""
    assert [m.text for m in store.messages(chat.id)] == ["The beds are larch."]


def test_a_chat_log_on_a_disk_that_fills_up_says_so_and_keeps_what_it_had(
    small_disk: Path,
) -> None:
    store = ChatStore(small_disk / "data" / ChatStore.FILE_NAME)
    chat = store.create_chat("Garden")
    store.append_message(chat.id, "user", "The beds are larch.")
    filler = fill(small_disk)

    with pytest.raises(StoreError) as failed:
        for n in range(200):  # the WAL has a little room left in its last page
            store.append_message(chat.id, "user", f"{n}: " + "a long paste " * 500)
    assert str(failed.value).startswith(f"The disk that holds {small_disk / 'data'} is full")
    saved = store.messages(chat.id)
    assert saved[0].text == "The beds are larch."

    filler.unlink()
    after = store.append_message(chat.id, "user", "room again")
    assert after.seq == len(saved)
