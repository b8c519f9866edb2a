"""Search with snippets against a real chat log."""

from __future__ import annotations

from pathlib import Path

from app.search import SNIPPET_CHARS, search, snippet_of
from app.store import ChatStore


def test_a_hit_names_the_newest_message_that_matches_with_the_match_in_its_snippet(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Garden")
    store.append_message(chat.id, "user", "Slugs ate the lettuce again.")
    store.append_message(chat.id, "assistant", "Try COPPER tape around the beds.")
    store.append_message(chat.id, "user", "Where do I buy copper tape?")
    store.append_message(chat.id, "assistant", "A hardware shop.")
    store.create_chat("Budget")

    [hit] = search(store, "copper  tape")

    assert (hit.chat_id, hit.seq) == (chat.id, 2)
    assert hit.snippet == "Where do I buy copper tape?"
    assert hit.snippet[hit.start : hit.end] == "copper tape"


def test_a_title_match_lists_the_chat_without_a_snippet(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Budget 2027")
    store.append_message(chat.id, "user", "Numbers please")

    [hit] = search(store, "budget")

    assert hit.chat_id == chat.id and hit.seq is None and hit.snippet == ""


def test_deleted_chats_deleted_messages_and_set_aside_versions_are_not_found(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    gone = store.create_chat("One")
    store.append_message(gone.id, "user", "marmalade")
    store.delete_chat(gone.id)
    chat = store.create_chat("Two")
    store.append_message(chat.id, "user", "a question")
    first = store.append_message(chat.id, "assistant", "marmalade first")
    store.append_message(chat.id, "assistant", "jam second", version_of=first.seq)
    store.set_shelved(chat.id, first.seq, True)
    deleted = store.append_message(chat.id, "user", "marmalade deleted")
    store.delete_messages(chat.id, [deleted.seq])

    assert search(store, "marmalade") == []
    assert search(store, "100%") == []  # LIKE's wildcards are only characters here


def test_a_long_message_is_cut_around_the_match_at_word_boundaries() -> None:
    text = " ".join(f"word{i}" for i in range(200)) + " needle " + "tail " * 100

    snippet, start, end = snippet_of(text, "NEEDLE")

    assert snippet.startswith("…word") and snippet.endswith("tail…")
    assert snippet[start:end] == "needle"
    assert len(snippet) <= SNIPPET_CHARS + 2
    assert "  " not in snippet and "\n" not in snippet


def test_a_hit_in_a_tool_result_says_so_in_its_snippet(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Shopping")
    store.append_message(chat.id, "user", "What is on my list?")
    store.append_message(chat.id, "tool", "Eggs, flour and two lemons.")
    store.append_message(chat.id, "assistant", "Eggs and flour.")

    [hit] = search(store, "lemons")

    assert hit.seq == 1 and hit.role == "tool"
    assert hit.snippet == "Tool result: Eggs, flour and two lemons."
    assert hit.snippet[hit.start : hit.end] == "lemons"
    [said] = search(store, "and flour.")  # the model's own words read as before
    assert said.seq == 2 and said.snippet == "Eggs and flour."
