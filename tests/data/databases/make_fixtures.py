"""Write the three SQLite files Conch keeps, through Conch's own stores, as test fixtures.

Each schema version of Conch gets a folder of files written by that version's code, so a
later Conch is tested on what earlier ones really wrote (tests/app/test_sqlite_versions.py).
Run it once per version, with that version's code, and commit the output:

    .venv/bin/python -m tests.data.databases.make_fixtures tests/data/databases/v1

``v1`` was written by Conch before its files carried a version (``PRAGMA user_version`` 0),
which a versioned Conch recognises as version 1. ``expected.json`` beside the files says what
was written, in the terms the stores read it back in. Never rewrite an existing folder: it
stands for files already on people's disks.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from app.health import HealthLog
from app.memories import MemoryBook
from app.store import ChatStore
from engines.base import Attachment, Picture, ProblemKind, TurnProblem

# A 1×1 transparent PNG, base64: a picture as the chat log stores one.
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


CHAT_IDS = ("garden000001", "tools0000002", "shared000003", "deleted00004")


def write_chat_log(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    garden = store.create_chat("Garden plans", "ollama:llama3.2", chat_id="garden000001")
    store.append_message(
        garden.id,
        "user",
        "Which beds get the most sun? Here is a photo.",
        pictures=[Picture(name="beds.png", mime="image/png", data=PIXEL)],
    )
    store.append_message(
        garden.id,
        "assistant",
        "The south beds, from the shadows in the photo.",
        thinking="Shadows point north, so the sun is in the south.",
        model_key="ollama:llama3.2",
    )
    store.append_message(
        garden.id,
        "user",
        "And my notes on soil, attached.",
        attachments=[Attachment(name="soil.txt", text="Clay in the north bed; sand by the gate.")],
    )
    store.append_message(
        garden.id,
        "assistant",
        "Clay holds water, so",
        partial=True,
        problem=TurnProblem.of(ProblemKind.BROKEN_STREAM, "the stream ended early", partial=True),
        model_key="ollama:llama3.2",
    )
    store.add_compaction(
        garden.id, 2, "The person asked which beds get sun; the south ones do.", "llama3.2"
    )
    store.set_read_until(garden.id, 1, learned_at=1_700_000_000.0)

    tools = store.create_chat("Weather lookup", "openai:gpt-4.1-mini", chat_id="tools0000002")
    store.append_message(tools.id, "user", "Will it rain tomorrow in Lyon?")
    store.append_message(tools.id, "tool", "forecast: rain 80% after 14:00")
    store.append_message(tools.id, "assistant", "Likely, in the afternoon.")

    shared = store.create_chat("Team notes", chat_id="shared000003")
    store.append_message(shared.id, "user", "Notes from Tuesday's meeting with Marta.")
    store.mark_chat(shared.id, others=True, routine=True)

    gone = store.create_chat("Deleted chat", chat_id="deleted00004")
    store.append_message(gone.id, "user", "This chat was deleted but can be restored.")
    store.delete_chat(gone.id)
    store.close()


def describe_chat_log(data_dir: Path) -> dict[str, Any]:
    """What the chat log holds, as ``ChatStore`` reads it."""
    expected: dict[str, Any] = {"chats": [], "compactions": {}}
    store = ChatStore.in_dir(data_dir)
    for cid in CHAT_IDS:
        chat = store.get_chat(cid)
        assert chat is not None
        expected["chats"].append(
            {
                "id": chat.id,
                "title": chat.title,
                "model_key": chat.model_key,
                "deleted": chat.deleted_at is not None,
                "untrusted": chat.untrusted,
                "others": chat.others,
                "routine": chat.routine,
                "read_until": chat.read_until,
                "learned_at": chat.learned_at,
                "messages": [
                    {
                        "seq": m.seq,
                        "role": m.role,
                        "text": m.text,
                        "thinking": m.thinking,
                        "pictures": [p.model_dump() for p in m.pictures],
                        "attachments": [a.model_dump() for a in m.attachments],
                        "partial": m.partial,
                        "problem": m.problem.model_dump(mode="json") if m.problem else None,
                        "model_key": m.model_key,
                    }
                    for m in store.messages(cid)
                ],
            }
        )
        compaction = store.latest_compaction(cid)
        if compaction is not None:
            expected["compactions"][cid] = {
                "first_kept_seq": compaction.first_kept_seq,
                "summary": compaction.summary,
                "model": compaction.model,
            }
    store.close()
    return expected


def write_memories(data_dir: Path) -> None:
    book = MemoryBook.in_dir(data_dir)
    book.add("The person's name is Sam.")
    run = book.add_run(
        "garden000001",
        ["Sam grows tomatoes in the south beds.", "Sam's north bed is clay."],
        seq_from=0,
        seq_to=2,
        waiting=False,
        source="fold",
    )
    assert run is not None
    waiting = book.add_run(
        "tools0000002",
        ["Sam lives in Lyon."],
        seq_from=0,
        seq_to=2,
        waiting=True,
        source="fold",
    )
    assert waiting is not None
    undone = book.add_run(
        "garden000001", ["Sam dislikes slugs."], seq_from=3, seq_to=3, waiting=False, source="tidy"
    )
    assert undone is not None
    book.undo_run(undone.id)
    turned_down = book.add("Sam works nights.", status="waiting")
    book.discard(turned_down.id)
    book.last_tidy = 1_700_000_500.0
    book.close()


def describe_memories(data_dir: Path) -> dict[str, Any]:
    """What the memories file holds, as ``MemoryBook`` reads it."""
    book = MemoryBook.in_dir(data_dir)
    expected = {
        "memories": [
            {"text": m.text, "status": m.status, "chat_id": m.chat_id, "run_id": m.run_id}
            for m in book.list()
        ],
        "runs": [
            {
                "id": r.id,
                "chat_id": r.chat_id,
                "waiting": r.waiting,
                "source": r.source,
                "memories": [m.text for m in r.memories],
            }
            for r in book.runs()
        ],
        "last_tidy": book.last_tidy,
    }
    book.close()
    return expected


def write_health(data_dir: Path) -> None:
    health = HealthLog.in_dir(data_dir)
    health.add("healed", "A too-long refusal was healed by summarising.", "llama3.2", 8192)
    health.add("unreachable", "LM Studio at http://127.0.0.1:1234 did not answer.")
    health.add("summary-failed", "No model summarised the start of the chat.", "gpt-4.1-mini")
    health.mark_unreachable("http://127.0.0.1:1234")
    health.close()


def describe_health(data_dir: Path) -> dict[str, Any]:
    """What the health notes file holds, as ``HealthLog`` reads it."""
    health = HealthLog.in_dir(data_dir)
    expected: dict[str, Any] = {
        "notes": [
            {"topic": n.topic, "text": n.text, "model": n.model, "window": n.window}
            for n in health.notes()
        ],
    }
    health.close()
    # HealthLog has no reader for these (it only asks "was it already marked?", which writes).
    db = sqlite3.connect(data_dir / HealthLog.FILE_NAME)
    try:
        rows = db.execute("SELECT server FROM unreachable_servers ORDER BY server").fetchall()
    finally:
        db.close()
    expected["unreachable"] = [str(r[0]) for r in rows]
    return expected


def describe(data_dir: Path) -> dict[str, Any]:
    """What the three files hold, by file name: the content of ``expected.json``."""
    return {
        ChatStore.FILE_NAME: describe_chat_log(data_dir),
        MemoryBook.FILE_NAME: describe_memories(data_dir),
        HealthLog.FILE_NAME: describe_health(data_dir),
    }


def write_all(data_dir: Path) -> None:
    write_chat_log(data_dir)
    write_memories(data_dir)
    write_health(data_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.data.databases.make_fixtures OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.exists() and any(out.iterdir()):
        print(f"{out} is not empty; fixtures of a released version are never rewritten.")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    write_all(out)
    expected = describe(out)
    for name in expected:
        for side in ("-wal", "-shm"):
            assert not (out / (name + side)).exists(), f"{name}{side} left beside the fixture"
    (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
