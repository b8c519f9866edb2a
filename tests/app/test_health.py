"""Health notes: stored, newest first, never holding a key."""

from __future__ import annotations

import threading
from pathlib import Path

from app.health import KEEP, HealthLog
from app.services import build_services
from engines.base import Healed, Note, Problem, ProblemKind, TurnProblem


def test_notes_are_kept_newest_first_across_reopening(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    log.add("healed", "Refused as too long; sent again shorter.", model="qwen3:8b", window=8192)
    log.add("unreachable", "LM Studio did not answer at http://127.0.0.1:1234.")
    log.close()
    again = HealthLog.in_dir(data_dir)
    notes = again.notes()
    assert [n.topic for n in notes] == ["unreachable", "healed"]
    assert notes[1].model == "qwen3:8b" and notes[1].window == 8192
    assert again.notes(topic="healed")[0].text.startswith("Refused")
    again.close()


def test_keys_in_a_note_are_left_out(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    key = "sk-proj-" + "A1b2C3d4" * 5
    log.add("auth", f"The server said: invalid key {key}; Authorization: Bearer {key}")
    log.close()
    assert key not in log.path.read_bytes().decode("latin-1")
    for extra in data_dir.iterdir():
        assert key.encode() not in extra.read_bytes()


def test_engine_events_become_notes(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    log.add_event(Healed(model="llama3", window=4096, what="folded and sent again"))
    log.add_event(Note(topic="summary-failed", text="no summary came back"), model="llama3")
    log.add_event(Problem(problem=TurnProblem.of(ProblemKind.TOO_LONG)), model="llama3")
    topics = [n.topic for n in log.notes()]
    assert topics == ["too-long", "summary-failed", "healed"]
    log.close()


def test_appends_from_two_threads_all_land(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    other = HealthLog.in_dir(data_dir)  # a second process-like writer on the same file

    def write(target: HealthLog, tag: str) -> None:
        for i in range(50):
            target.add("other", f"{tag}-{i}")

    threads = [threading.Thread(target=write, args=(t, n)) for t, n in ((log, "a"), (other, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(log.notes()) == 100
    log.close()
    other.close()


def test_the_log_keeps_only_the_newest(data_dir: Path) -> None:
    log = HealthLog.in_dir(data_dir)
    for i in range(KEEP + 150):
        log.add("other", f"note {i}")
    notes = log.notes()
    assert len(notes) <= KEEP + 100
    assert notes[0].text == f"note {KEEP + 149}"
    log.close()


async def test_health_notes_that_cannot_be_opened_never_stop_conch(data_dir: Path) -> None:
    (data_dir / HealthLog.FILE_NAME).mkdir()  # something SQLite cannot open as a file
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        (problem,) = services.startup_problems
        assert problem.startswith("Conch could not open its health notes")
        assert "kept only while Conch is open" in problem
        # Notes still work for this session; the chat log is untouched.
        assert services.health.add("healed", "sent again shorter") is not None
        assert [n.text for n in services.health.notes(topic="healed")] == ["sent again shorter"]
        assert services.store.create_chat("still works").title == "still works"
    finally:
        await services.aclose()
