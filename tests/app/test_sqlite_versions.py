"""Versioned SQLite files, on real files: each earlier Conch's files (tests/data/databases/) open
and read as they were written, an upgrade keeps every row and a copy of the file as it was, a
failed upgrade leaves the file as it was, and a file from a newer Conch is read but never written.

The upgrade tests pass a made-up next two versions of the chat log as data; the real
step lists are tested on each earlier version's files (older ones are brought up to date).
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.cli import FAILED, main
from app.health import _STEPS as HEALTH_STEPS
from app.health import HealthLog
from app.memories import _STEPS as MEMORY_STEPS
from app.memories import MemoryBook
from app.services import build_services
from app.sqlite import NewerFileError, StorageError, open_database
from app.store import _STEPS as CHAT_LOG_STEPS
from app.store import ChatStore
from tests.data.databases.make_fixtures import describe, describe_chat_log, write_all

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "databases"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name[1:].isdigit())
FILES = {  # file name → (its steps, what the person calls it)
    ChatStore.FILE_NAME: (CHAT_LOG_STEPS, "chat log"),
    MemoryBook.FILE_NAME: (MEMORY_STEPS, "memories"),
    HealthLog.FILE_NAME: (HEALTH_STEPS, "health notes"),
}
NEWER = "file was written by a newer Conch; it is open read-only. Update Conch to write to it."

# A made-up next two versions of the chat log. Step 3 backfills, holds a ";" inside a string
# and a trigger whose body has statements of its own: the upgrade runs scripts one statement
# at a time, and these are the statements that splitting on ";" alone would break.
STEP_2 = """
ALTER TABLE chats ADD COLUMN starred INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS tags (chat_id TEXT NOT NULL REFERENCES chats(id), tag TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tags_chat ON tags(chat_id);
"""
STEP_3 = """
UPDATE chats SET starred = 1 WHERE title = 'Garden plans';
INSERT INTO tags (chat_id, tag) SELECT id, 'garden; outdoors' FROM chats WHERE starred = 1;
CREATE TRIGGER IF NOT EXISTS tagged_is_starred AFTER INSERT ON tags BEGIN
    UPDATE chats SET starred = 1 WHERE id = NEW.chat_id;
END;
"""
NEXT_CHAT_LOG = (*CHAT_LOG_STEPS, STEP_2, STEP_3)
NEXT = len(NEXT_CHAT_LOG)


# --- reading files as SQLite sees them ---------------------------------------------------------


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def user_version(path: Path) -> int:
    return int(raw(path, "PRAGMA user_version")[0][0])


def snapshot(path: Path) -> dict[str, Any]:
    """Every table's columns and rows, and every table's, index's and trigger's SQL."""
    db = sqlite3.connect(path)
    try:
        schema = db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%' "
            "ORDER BY type, name"
        ).fetchall()
        tables: dict[str, Any] = {}
        for _, name, _ in (s for s in schema if s[0] == "table"):
            cols = [str(r[1]) for r in db.execute(f'PRAGMA table_info("{name}")')]
            rows = db.execute(f'SELECT {", ".join(cols)} FROM "{name}" ORDER BY rowid').fetchall()
            tables[name] = (cols, rows)
        return {"schema": schema, "tables": tables}
    finally:
        db.close()


def assert_every_row_kept(before: dict[str, Any], path: Path) -> None:
    for name, (cols, rows) in before["tables"].items():
        kept = raw(path, f'SELECT {", ".join(cols)} FROM "{name}" ORDER BY rowid')
        assert kept == rows, name


def copy_version(version: str, data_dir: Path) -> dict[str, Any]:
    """Copy one earlier version's files into ``data_dir``; what they hold (expected.json)."""
    for name in FILES:
        shutil.copyfile(FIXTURES / version / name, data_dir / name)
    expected: dict[str, Any] = json.loads((FIXTURES / version / "expected.json").read_text())
    return expected


def copies_beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(f"{path.name}.before-v*"))


@pytest.fixture(params=["v1 fixture", "written now"])
def chat_log(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[Path]:
    """A chat log with the fixtures' content: as the first Conch wrote it (version 0 in the
    file), or as this Conch writes it (version 1)."""
    if request.param == "v1 fixture":
        copy_version("v1", data_dir)
    else:
        write_all(data_dir)
        assert user_version(data_dir / ChatStore.FILE_NAME) == len(CHAT_LOG_STEPS)
    yield data_dir / ChatStore.FILE_NAME


def expected_chat_log() -> dict[str, Any]:
    chat_log: dict[str, Any] = json.loads((FIXTURES / "v1" / "expected.json").read_text())[
        ChatStore.FILE_NAME
    ]
    return chat_log


# --- every earlier version opens as it was --------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_each_earlier_versions_files_open_unchanged_and_read_as_written(
    data_dir: Path, version: str
) -> None:
    expected = copy_version(version, data_dir)
    before = {name: snapshot(data_dir / name) for name in FILES}
    # Each file's own version: the files of one folder move on at their own pace.
    was = {name: max(1, user_version(data_dir / name)) for name in FILES}

    assert describe(data_dir) == expected

    for name, (steps, _) in FILES.items():
        path = data_dir / name
        assert user_version(path) == len(steps)
        if was[name] >= len(steps):
            assert snapshot(path) == before[name]  # recognised, not changed
            assert copies_beside(path) == []
        else:  # a file of an older schema: brought up to date, every row kept, a copy beside
            assert_every_row_kept(before[name], path)
            assert copies_beside(path) == [f"{name}.before-v{len(steps)}"]


def test_a_new_file_starts_at_the_newest_version_without_a_copy(data_dir: Path) -> None:
    for store in (
        ChatStore.in_dir(data_dir),
        MemoryBook.in_dir(data_dir),
        HealthLog.in_dir(data_dir),
    ):
        assert store.problem == ""
        store.close()
    for name, (steps, _) in FILES.items():
        assert user_version(data_dir / name) == len(steps)
        assert copies_beside(data_dir / name) == []

    made_up = data_dir / "next.sqlite3"
    opened = open_database(made_up, NEXT_CHAT_LOG, what="chat log")
    opened.db.close()
    assert user_version(made_up) == NEXT and copies_beside(made_up) == []


# --- upgrading ------------------------------------------------------------------------------


def test_an_upgrade_keeps_every_row_and_a_copy_of_the_file_as_it_was(chat_log: Path) -> None:
    before = snapshot(chat_log)
    was = user_version(chat_log)

    opened = open_database(chat_log, NEXT_CHAT_LOG, what="chat log")
    assert opened.problem == ""
    opened.db.execute("INSERT INTO tags (chat_id, tag) VALUES ('tools0000002', 'weather')")
    opened.db.close()

    assert user_version(chat_log) == NEXT
    assert_every_row_kept(before, chat_log)
    starred = raw(chat_log, "SELECT id FROM chats WHERE starred = 1 ORDER BY id")
    assert starred == [("garden000001",), ("tools0000002",)]  # the backfill, then the trigger
    tags = raw(chat_log, "SELECT chat_id, tag FROM tags ORDER BY rowid")
    assert tags == [("garden000001", "garden; outdoors"), ("tools0000002", "weather")]

    # The file as it was, whole and on its own (no -wal beside it), under the name it was
    # promised.
    assert copies_beside(chat_log) == [f"conch.sqlite3.before-v{NEXT}"]
    copy = chat_log.with_name(f"conch.sqlite3.before-v{NEXT}")
    assert not copy.with_name(copy.name + "-wal").exists()
    assert raw(copy, "PRAGMA journal_mode") == [("delete",)]
    assert user_version(copy) == was and snapshot(copy) == before

    # Opened again (another Conch of the same version): nothing more to do, no second copy.
    again = open_database(chat_log, NEXT_CHAT_LOG, what="chat log")
    assert again.problem == ""
    again.db.close()
    assert copies_beside(chat_log) == [f"conch.sqlite3.before-v{NEXT}"]


def test_a_failed_upgrade_leaves_the_file_as_it_was_and_says_so(chat_log: Path) -> None:
    before = snapshot(chat_log)
    was = user_version(chat_log)
    broken = (*CHAT_LOG_STEPS, STEP_2, "INSERT INTO no_such_table VALUES (1);")

    with pytest.raises(StorageError) as failed:
        open_database(chat_log, broken, what="chat log")

    sentence = str(failed.value)
    assert sentence.startswith("Conch could not update your chat log file for this version (")
    assert "no such table: no_such_table" in sentence
    assert sentence.endswith("and left it as it was; close any other Conch and start Conch again.")
    # Step 2 had run before step 3 failed: all of it was rolled back, and the copy is gone.
    assert user_version(chat_log) == was
    assert snapshot(chat_log) == before
    assert copies_beside(chat_log) == []
    # This Conch still opens it as before.
    expected = expected_chat_log()
    if was == len(CHAT_LOG_STEPS):
        # Written by this Conch, which marks a chat holding an attached file untrusted as the
        # file arrives (app/trust.py); the first Conch did not, and its files keep their mark.
        for chat in expected["chats"]:
            chat["untrusted"] = chat["untrusted"] or chat["id"] == "garden000001"
    assert describe_chat_log(chat_log.parent) == expected


# --- a file from a newer Conch --------------------------------------------------------------------


@pytest.mark.allow_log("conch.sqlite")  # a newer file is logged
def test_an_older_conch_reads_a_newer_file_and_never_writes_to_it(chat_log: Path) -> None:
    newer = open_database(chat_log, NEXT_CHAT_LOG, what="chat log")
    newer.db.execute("INSERT INTO tags (chat_id, tag) VALUES ('garden000001', 'tomatoes')")
    # Out of WAL mode too, as a later Conch might leave it: opening must not even change that.
    newer.db.execute("PRAGMA journal_mode=DELETE")
    newer.db.close()
    before = chat_log.read_bytes()

    store = ChatStore.in_dir(chat_log.parent)
    assert store.problem == f"Your chat log {NEWER}"
    # It reads what it knows: every chat and message as they were written.
    assert [c.id for c in store.list_chats()] == ["shared000003", "tools0000002", "garden000001"]
    garden = store.messages("garden000001")
    assert [m.text for m in garden][:2] == [
        "Which beds get the most sun? Here is a photo.",
        "The south beds, from the shadows in the photo.",
    ]
    assert garden[0].pictures[0].name == "beds.png"
    # A write is refused with a sentence, and the next read still works.
    with pytest.raises(NewerFileError) as refused:
        store.append_message("garden000001", "user", "One more question")
    assert str(refused.value) == (
        "Conch did not save this: your chat log file was written by a newer Conch and is open "
        "read-only. Update Conch to write to it."
    )
    with pytest.raises(NewerFileError):
        store.rename_chat("garden000001", "Renamed")
    assert store.message_count("garden000001") == 4
    store.close()

    assert chat_log.read_bytes() == before
    assert not list(chat_log.parent.glob("*.broken-*"))  # read-only is not damage
    # The newer Conch goes on with it.
    later = open_database(chat_log, NEXT_CHAT_LOG, what="chat log")
    assert later.problem == ""
    later.db.close()


def make_newer(path: Path, steps: tuple[str, ...]) -> None:
    """What a newer Conch leaves: one more step, and a row in what that step added."""
    step = "CREATE TABLE IF NOT EXISTS later (x TEXT);"
    opened = open_database(path, (*steps, step), what="test")
    opened.db.execute("INSERT INTO later VALUES ('kept')")
    opened.db.close()


@pytest.mark.parametrize("name", list(FILES))
@pytest.mark.allow_log("conch.sqlite")  # a newer file is logged
async def test_services_say_once_that_a_file_is_newer_and_start(data_dir: Path, name: str) -> None:
    expected = copy_version("v1", data_dir)
    steps, what = FILES[name]
    make_newer(data_dir / name, steps)
    before = snapshot(data_dir / name)

    services = build_services(data_dir, mock=True)
    try:
        assert services.startup_problems == [f"Your {what} {NEWER}"]
        if name == HealthLog.FILE_NAME:
            # Notes never raise; the notice reaches the window and the CLI without them.
            assert services.health.add("other", "a note") is None
            assert [n.topic for n in services.health.notes()][-1] == "healed"
        else:
            assert any(n.topic == "storage" for n in services.health.notes())
        if name == MemoryBook.FILE_NAME:
            with pytest.raises(NewerFileError, match="your memories file was written by a newer"):
                services.memories.add("Sam has a cat.")
        if name == ChatStore.FILE_NAME:
            with pytest.raises(NewerFileError, match="your chat log file was written by a newer"):
                services.store.create_chat("A new chat")
    finally:
        await services.aclose()

    assert describe(data_dir)[name] == expected[name]
    assert snapshot(data_dir / name) == before and user_version(data_dir / name) == len(steps) + 1


@pytest.mark.allow_log("conch.sqlite")  # a newer file is logged
def test_the_cli_says_a_chat_log_is_newer_and_does_not_write_to_it(data_dir: Path) -> None:
    copy_version("v1", data_dir)
    make_newer(data_dir / ChatStore.FILE_NAME, CHAT_LOG_STEPS)
    before = snapshot(data_dir / ChatStore.FILE_NAME)

    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "--mock", "--data-dir", str(data_dir)], stdout=out, stderr=err) == 0
    assert err.getvalue().count(f"conch: Your chat log {NEWER}\n") == 1

    out, err = io.StringIO(), io.StringIO()
    code = main(["ask", "--mock", "--data-dir", str(data_dir), "Hello"], stdout=out, stderr=err)
    assert code == FAILED
    said = err.getvalue()
    assert said.count(f"conch: Your chat log {NEWER}\n") == 1
    assert "conch: Conch did not save this: your chat log file was written by a newer" in said
    assert "Traceback" not in said
    assert snapshot(data_dir / ChatStore.FILE_NAME) == before
