"""The chat log against real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.search import search
from app.store import _STEPS, ChatStore, StoreError
from engines.base import Attachment, Picture, ProblemKind, TurnProblem


def test_messages_get_consecutive_seqs_and_survive_reopening(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Trip", model_key="ollama/llama3")
    a = store.append_message(chat.id, "user", "Plan a trip to Lisbon")
    b = store.append_message(chat.id, "assistant", "Sure — when?", thinking="hmm")
    c = store.append_message(
        chat.id,
        "user",
        "In May",
        pictures=[Picture(name="map.png", data="aGk=")],
        attachments=[Attachment(name="notes.txt", text="budget 900 EUR")],
    )
    assert (a.seq, b.seq, c.seq) == (0, 1, 2)
    store.close()

    again = ChatStore.in_dir(data_dir)
    msgs = again.messages(chat.id)
    assert [m.text for m in msgs] == ["Plan a trip to Lisbon", "Sure — when?", "In May"]
    assert msgs[1].thinking == "hmm"
    assert msgs[2].pictures[0].name == "map.png"
    assert msgs[2].attachments[0].text == "budget 900 EUR"
    assert again.get_chat(chat.id) is not None
    assert again.message_count(chat.id) == 3


def test_partial_answer_keeps_its_problem(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    problem = TurnProblem.of(ProblemKind.BROKEN_STREAM, partial=True)
    m = store.append_message(chat.id, "assistant", "Half an ans", partial=True, problem=problem)
    got = store.message(chat.id, m.seq)
    assert got is not None and got.partial
    assert got.problem is not None and got.problem.kind is ProblemKind.BROKEN_STREAM
    store.update_message(chat.id, m.seq, text="Half an answer", problem=None, partial=False)
    got = store.message(chat.id, m.seq)
    assert got is not None and got.text == "Half an answer" and got.problem is None


def test_delete_is_soft_and_undoable_and_search_finds_text(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    a = store.create_chat("Groceries")
    b = store.create_chat("Work")
    store.append_message(b.id, "user", "The invoice number is INV-2041")
    assert {c.id for c in store.search_chats("inv-2041")} == {b.id}
    assert {c.id for c in store.search_chats("grocer")} == {a.id}
    assert [c.id for c in store.search_chats("100%")] == []
    store.delete_chat(b.id)
    assert b.id not in {c.id for c in store.list_chats()}
    assert store.message_count(b.id) == 1  # nothing is lost
    store.restore_chat(b.id)
    assert b.id in {c.id for c in store.list_chats()}


def test_compactions_latest_wins_and_read_mark_never_goes_back(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    assert store.latest_compaction(chat.id) is None
    store.add_compaction(chat.id, 10, "first summary", "Llama 3")
    store.add_compaction(chat.id, 24, "second summary", "Llama 3")
    latest = store.latest_compaction(chat.id)
    assert latest is not None and (latest.first_kept_seq, latest.summary) == (24, "second summary")
    store.set_read_until(chat.id, 20)
    store.set_read_until(chat.id, 5)
    got = store.get_chat(chat.id)
    assert got is not None and got.read_until == 20 and got.learned_at is not None


@pytest.mark.allow_log("conch.sqlite")  # the damaged file set aside is logged
def test_a_corrupt_chat_log_is_set_aside_whole_and_a_new_one_started(data_dir: Path) -> None:
    path = data_dir / ChatStore.FILE_NAME
    path.write_bytes(b"this is not a database" * 100)
    before = path.read_bytes()
    store = ChatStore(path)
    assert "chat log file could not be read" in store.problem
    kept = list(data_dir.glob(ChatStore.FILE_NAME + ".broken-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == before
    assert store.list_chats() == []


def test_an_unopenable_chat_log_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    with pytest.raises(StoreError, match="could not be opened"):
        ChatStore(blocker / ChatStore.FILE_NAME)


def test_wal_mode_is_on(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    store.close()
    db = sqlite3.connect(data_dir / ChatStore.FILE_NAME)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_a_new_chat_is_untitled_and_shown_as_new_chat_until_named(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat()
    assert chat.untitled and chat.title == "New chat"
    store.rename_chat(chat.id, "New chat")  # the person may name a chat so on purpose
    named = store.get_chat(chat.id)
    assert named is not None and not named.untitled and named.title == "New chat"
    assert [hit.title for hit in search(store, "new chat")] == ["New chat"]


def test_an_untitled_chat_from_before_step_six_reads_as_untitled(data_dir: Path) -> None:
    path = data_dir / ChatStore.FILE_NAME
    with sqlite3.connect(path) as db:  # as the Conch before step 6 kept an unnamed chat
        for step in _STEPS[:5]:
            db.executescript(step)
        db.execute(
            "INSERT INTO chats (id, title, created, updated) VALUES ('old', 'New chat', 1, 1)"
        )
        db.execute("PRAGMA user_version = 5")
    db.close()
    store = ChatStore.in_dir(data_dir)
    chat = store.get_chat("old")
    assert chat is not None and chat.untitled and chat.title == "New chat"
    store.close()
