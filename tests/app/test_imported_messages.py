"""Each imported message keeps its own mark in the chat log (schema step 9): what another app's
export holds was not typed here, so what is learned from it waits for the person's OK, in its
chat, in a fork of it, and after the chat log is upgraded from an older version.

Real SQLite files in a temp dir; learning asks a loopback fake Ollama.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.forks import fork_from
from app.importers import ImportedChat, ImportedMessage, save
from app.learning import QuietLearning
from app.memories import MemoryBook
from app.settings import SettingsStore
from app.store import _STEPS, ChatStore
from tests.loopback_chat import ollama_services

OLD_CHAT = ImportedChat(
    title="Allotment",
    messages=(
        ImportedMessage("user", "My name is Alina Kowalczyk and I live in Gdańsk."),
        ImportedMessage("assistant", "Nice to meet you, Alina."),
        ImportedMessage("user", "What should I sow in March?"),
        ImportedMessage("assistant", "Broad beans and early peas."),
    ),
)


def test_imported_messages_keep_their_mark_and_typed_ones_do_not(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        (chat_id,) = save(store, data_dir, [OLD_CHAT])
        store.append_message(chat_id, "user", "I moved the beans to bed four today.")
        fork = fork_from(store, chat_id, 4)
    finally:
        store.close()
    store = ChatStore.in_dir(data_dir)  # as read again after a restart
    try:
        for cid in (chat_id, fork.id):
            marks = [(m.seq, m.imported) for m in store.messages(cid)]
            assert marks == [(0, True), (1, True), (2, True), (3, True), (4, False)]
            chat = store.get_chat(cid)
            assert chat is not None and chat.untrusted
    finally:
        store.close()


def test_an_older_chat_log_is_upgraded_with_a_copy_and_its_rows_read_as_typed(
    data_dir: Path,
) -> None:
    path = data_dir / ChatStore.FILE_NAME
    with sqlite3.connect(path) as db:  # as the Conch before step 9 kept a chat
        for step in _STEPS[:8]:
            db.executescript(step)
        db.execute("PRAGMA user_version = 8")
        db.execute(
            "INSERT INTO chats (id, title, created, updated, untrusted) "
            "VALUES ('old', 'Imported long ago', 1, 1, 1)"
        )
        db.execute(
            "INSERT INTO messages (chat_id, seq, role, text, created) "
            "VALUES ('old', 0, 'user', 'My name is Alina Kowalczyk.', 1)"
        )
    db.close()

    store = ChatStore.in_dir(data_dir)
    try:
        assert store.problem == ""
        (old,) = store.messages("old")
        # Nothing says where an older row came from: it reads as typed here, and its chat keeps
        # the untrusted mark it had.
        assert old.text == "My name is Alina Kowalczyk." and not old.imported
        chat = store.get_chat("old")
        assert chat is not None and chat.untrusted
        (new_id,) = save(store, data_dir, [OLD_CHAT])
        assert all(m.imported for m in store.messages(new_id))
    finally:
        store.close()
    copy = data_dir / f"{ChatStore.FILE_NAME}.before-v{len(_STEPS)}"
    assert copy.exists()
    with sqlite3.connect(copy) as db:  # the file as it was, before the upgrade
        assert db.execute("PRAGMA user_version").fetchone() == (8,)
        columns = [r[1] for r in db.execute("PRAGMA table_info(messages)")]
        assert "imported" not in columns
        assert db.execute("SELECT text FROM messages").fetchall() == [
            ("My name is Alina Kowalczyk.",)
        ]
    db.close()


async def test_learning_reads_each_messages_own_mark_not_only_its_chats(
    data_dir: Path,
) -> None:
    """A fork of an imported chat, its chat-wide marks reset by hand (no path in the app does
    that): the imported words it holds still teach only what waits for the OK."""
    store = ChatStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    settings = SettingsStore.in_dir(data_dir)
    settings.update(remember_automatically=True)

    async def ask(prompt: str, text: str, *, model_key: str = "") -> str | None:
        return '["The person\'s name is Alina Kowalczyk."]' if "Alina" in text else "[]"

    try:
        (chat_id,) = save(store, data_dir, [OLD_CHAT])
        fork = fork_from(store, chat_id, 3)
        # Unread, and no chat-wide mark: only the messages' own marks say where they came from.
        store.write("UPDATE chats SET read_until = -1, untrusted = 0 WHERE id = ?", (fork.id,))
        learner = QuietLearning(store, book, settings, ask)
        run = await learner.review(fork.id, before_seq=4)
        assert run is not None and run.waiting
        assert [(m.text, m.status) for m in run.memories] == [
            ("The person's name is Alina Kowalczyk.", "waiting")
        ]
        assert "Alina" not in book.kept_for_prompt(4_000)
    finally:
        book.close()
        store.close()


@pytest.mark.parametrize(
    ("answer", "memories"),
    [
        (
            '["The person\'s name is Alina Kowalczyk.", "The person lives in Gdańsk."]',
            {"The person's name is Alina Kowalczyk.", "The person lives in Gdańsk."},
        ),
        # The small model's usual empty list: the person's own statements, as said.
        ("[]", {"The person's name is Alina Kowalczyk.", "The person lives in Gdańsk."}),
    ],
)
async def test_an_imported_my_name_is_becomes_a_memory_that_waits_for_the_ok(
    data_dir: Path, answer: str, memories: set[str]
) -> None:
    # Learning is automatic: what the person typed here would be kept at once.
    async with ollama_services(data_dir, answer) as (ollama, services):
        (chat_id,) = save(services.store, data_dir, [OLD_CHAT])
        services.store.set_model(chat_id, "ollama/smollm2:latest")
        run = await services.learner.review(chat_id, before_seq=4)
        assert run is not None and run.waiting
        assert {m.text for m in run.memories} == memories
        assert {m.status for m in run.memories} == {"waiting"}
        assert services.memories.kept_for_prompt(4_000) == ""  # never saved directly
        # The card's Keep saves them.
        services.memories.keep_run(run.id)
        assert "Alina Kowalczyk" in services.memories.kept_for_prompt(4_000)
    asked = [b for b in ollama.chat_requests() if "format" in b]
    assert asked and "Alina Kowalczyk" in str(asked[0]["messages"])
