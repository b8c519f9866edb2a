"""A damaged SQLite file is set aside (never deleted) and Conch still starts and says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.health import HealthLog
from app.memories import MemoryBook
from app.services import build_services
from app.sqlite import open_database
from app.store import ChatStore

ROOT = Path(__file__).resolve().parents[2]
JUNK = b"definitely not SQLite " * 200


@pytest.mark.parametrize(
    ("name", "what"),
    [
        (ChatStore.FILE_NAME, "chat log"),
        (MemoryBook.FILE_NAME, "memories"),
        (HealthLog.FILE_NAME, "health notes"),
    ],
)
@pytest.mark.allow_log("conch.sqlite")  # the damaged file set aside is logged
async def test_services_start_with_a_damaged_file_and_keep_it(
    data_dir: Path, name: str, what: str
) -> None:
    (data_dir / name).write_bytes(JUNK)
    services = build_services(data_dir, mock=True)
    try:
        assert len(services.startup_problems) == 1
        problem = services.startup_problems[0]
        assert f"Your {what} file could not be read" in problem and "nothing was deleted" in problem
        kept = list(data_dir.glob(f"{name}.broken-*"))
        assert len(kept) == 1 and kept[0].read_bytes() == JUNK
        # The fresh file works: the demo chat was seeded and a chat can be written.
        chat = services.store.create_chat("after the repair")
        services.store.append_message(chat.id, "user", "still here")
        assert services.store.message_count(chat.id) == 1
        assert any(n.topic == "storage" for n in services.health.notes())
    finally:
        await services.aclose()


def test_a_busy_database_is_not_mistaken_for_damage(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "x.sqlite3"
    first = open_database(path, "CREATE TABLE IF NOT EXISTS t (x)", what="test")
    first.db.execute("BEGIN EXCLUSIVE")
    first.db.execute("INSERT INTO t VALUES (1)")
    try:
        with pytest.raises(sqlite3.OperationalError):
            db = sqlite3.connect(path, timeout=0.1)
            db.execute("PRAGMA busy_timeout=100")
            db.execute("INSERT INTO t VALUES (2)")
    finally:
        first.db.execute("ROLLBACK")
    again = open_database(path, "CREATE TABLE IF NOT EXISTS t (x)", what="test")
    assert again.problem == ""
    assert not list(tmp_path.glob("*.broken-*"))


def test_the_cli_says_what_happened_to_a_damaged_file(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / MemoryBook.FILE_NAME).write_bytes(JUNK)
    done = subprocess.run(
        [sys.executable, "-m", "app.main", "models", "--mock", "--data-dir", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"},
    )
    assert done.returncode == 0, done.stderr
    assert "Your memories file could not be read" in done.stderr
