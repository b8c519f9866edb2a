"""The trash: deleted chats listed, restored, and deleted for good (real SQLite files)."""

from __future__ import annotations

from pathlib import Path

from app.store import ChatStore
from app.trash import empty_trash
from engines.context.transcript import transcript_path


def test_the_trash_lists_deleted_chats_newest_first_and_restores_them(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    kept = store.create_chat("Kept")
    first = store.create_chat("First gone")
    second = store.create_chat("Second gone")
    store.delete_chat(first.id)
    store.delete_chat(second.id)

    assert [c.title for c in store.deleted_chats()] == ["Second gone", "First gone"]
    store.restore_chat(first.id)
    assert [c.id for c in store.deleted_chats()] == [second.id]
    assert {c.id for c in store.list_chats()} == {kept.id, first.id}


def test_emptying_the_trash_deletes_everything_of_those_chats_for_good(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    gone = store.create_chat("Gone")
    store.append_message(gone.id, "user", "the secret garden plan")
    store.add_compaction(gone.id, 1, "A summary.", "m")
    kept = store.create_chat("Kept")
    store.append_message(kept.id, "user", "my own words")
    store.delete_chat(gone.id)
    transcript = transcript_path(data_dir, gone.id)
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text("{}", encoding="utf-8")

    empty_trash(store, data_dir, [gone.id])
    store.close()

    again = ChatStore.in_dir(data_dir)
    assert again.get_chat(gone.id) is None
    assert again.deleted_chats() == []
    assert again.message_count(gone.id) == 0
    assert again.latest_compaction(gone.id) is None
    assert again.search_chats("garden") == []
    assert not transcript.exists()
    assert [m.text for m in again.messages(kept.id)] == ["my own words"]


def test_a_chat_restored_before_the_trash_empties_is_left_alone(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Back again")
    store.append_message(chat.id, "user", "hello")
    store.delete_chat(chat.id)
    store.restore_chat(chat.id)

    empty_trash(store, data_dir, [chat.id])

    assert store.get_chat(chat.id) is not None
    assert store.message_count(chat.id) == 1
