"""Folders and pins in the chat log: kept across a restart, renamed as one, carried by Conch's
own export and import."""

from __future__ import annotations

import json
from pathlib import Path

from app.export import to_json
from app.importers import parse_bytes, save
from app.store import ChatStore


def test_folders_and_pins_survive_reopening_the_chat_log(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    garden = store.create_chat("Garden")
    taxes = store.create_chat("Taxes")
    store.create_chat("Loose")
    store.set_folder(garden.id, "  Home   and garden ")
    store.set_folder(taxes.id, "Money")
    store.set_pinned(taxes.id, True)
    store.close()

    again = ChatStore.in_dir(data_dir)
    try:
        assert again.folders() == ["Home and garden", "Money"]
        got = {c.title: (c.folder, c.pinned) for c in again.list_chats()}
        assert got == {
            "Garden": ("Home and garden", False),
            "Taxes": ("Money", True),
            "Loose": ("", False),
        }
    finally:
        again.close()


def test_renaming_a_folder_moves_every_chat_and_removing_it_keeps_the_chats(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        a = store.create_chat("A")
        b = store.create_chat("B")
        store.set_folder(a.id, "Work")
        store.set_folder(b.id, "Work")
        store.delete_chat(b.id)  # in the trash: it goes with the folder, and comes back into it

        store.rename_folder("Work", "Job")
        store.restore_chat(b.id)
        assert {c.title: c.folder for c in store.list_chats()} == {"A": "Job", "B": "Job"}

        store.rename_folder("Job", "")
        assert store.folders() == []
        assert sorted(c.title for c in store.list_chats()) == ["A", "B"]
    finally:
        store.close()


def test_a_folder_holding_only_deleted_chats_is_not_listed(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        a = store.create_chat("A")
        store.set_folder(a.id, "Old")
        store.delete_chat(a.id)
        assert store.folders() == []
    finally:
        store.close()


def test_conch_export_and_import_carry_the_folder_and_the_pin(tmp_path: Path) -> None:
    source = ChatStore.in_dir(tmp_path / "a")
    chat = source.create_chat("Taxes")
    source.append_message(chat.id, "user", "When is the deadline?")
    source.set_folder(chat.id, "Money")
    source.set_pinned(chat.id, True)
    exported = to_json(source, chat.id)
    source.close()
    assert json.loads(exported)["folder"] == "Money"

    target = ChatStore.in_dir(tmp_path / "b")
    try:
        parsed = parse_bytes(exported.encode())
        made = save(target, tmp_path / "b", parsed.chats)
        imported = target.get_chat(made[0])
        assert imported is not None
        assert (imported.title, imported.folder, imported.pinned) == ("Taxes", "Money", True)
    finally:
        target.close()
