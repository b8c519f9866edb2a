"""The saved chat states on disk: which one a request may use, which files are set aside with a
note, and the cap that keeps them from filling the disk (the least recently used go first).

The state files here are plain bytes written the way llama.cpp's slot save leaves them (a file
under the states folder); the real save and restore run in tests/integration/test_bundled_slots.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from engines.local.slot_states import (
    PART_SUFFIX,
    Saved,
    StateStore,
    chat_slot_of,
    common_start,
)

CHAT = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
MB = 1024 * 1024


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(64))
    return path


def store_for(tmp_path: Path, model: Path, **kwargs: object) -> StateStore:
    return StateStore(tmp_path / "states", model, 8_192, **kwargs)  # type: ignore[arg-type]


def saved_state(store: StateStore, text: str, size: int = 1_000) -> Saved:
    """A state as the chat slot keeps one after llama.cpp wrote it."""
    store.folder.mkdir(parents=True, exist_ok=True)
    name = store.new_name()
    part = store.folder / f"{name}{PART_SUFFIX}"
    part.write_bytes(os.urandom(size))
    kept = store.keep(part, name, text, tokens=size // 10)
    assert kept is not None
    return kept


def test_the_longest_state_that_starts_the_request_is_the_one_used(
    tmp_path: Path, model: Path
) -> None:
    store = store_for(tmp_path, model)
    other = saved_state(store, "<|im_start|>system\nSomething else entirely.")
    chat = saved_state(store, CHAT)
    request = CHAT + "<|im_start|>assistant\nHi!<|im_end|>\n<|im_start|>user\nMore?"
    matching, notes = store.best(request)
    assert [s.name for s in matching] == [chat.name] and not notes
    assert store.best("<|im_start|>system\nSomething else entirely. And more.")[0][0] == other
    assert store.best("A chat nobody saved")[0] == []


def test_a_chat_saved_again_replaces_its_shorter_state(tmp_path: Path, model: Path) -> None:
    store = store_for(tmp_path, model)
    first = saved_state(store, CHAT)
    later = saved_state(store, CHAT + "<|im_start|>assistant\nHi!<|im_end|>\n")
    found, _ = store.scan()
    assert [s.name for s in found] == [later.name]
    assert not store.state_path(first.name).exists()


def test_the_cap_removes_the_least_recently_used_states_first(tmp_path: Path, model: Path) -> None:
    store = store_for(tmp_path, model, cap=3 * MB + MB // 2)
    oldest = saved_state(store, "chat one", MB)
    middle = saved_state(store, "chat two", MB)
    newest = saved_state(store, "chat three", MB)
    store.touch(oldest)  # reopened: now the most recently used
    saved_state(store, "chat four", MB)  # a fourth does not fit: the least recent goes
    names = {s.name for s in store.scan()[0]}
    assert middle.name not in names
    assert {oldest.name, newest.name} <= names and len(names) == 3
    assert sum(s.size for s in store.scan()[0]) <= store.cap


def test_the_cap_is_a_tenth_of_the_free_disk_when_that_is_less(tmp_path: Path, model: Path) -> None:
    # 20 MB free besides the states: they may take a tenth of what they would leave free.
    store = store_for(tmp_path, model, disk_free=lambda _folder: 20 * MB)
    for index in range(4):
        saved_state(store, f"chat {index}", MB)
    found = store.scan()[0]
    assert len(found) == 2  # 2 MB held: a tenth of 20 MB free plus the 2 MB
    assert sum(s.size for s in found) <= store.limit(sum(s.size for s in found))


def test_a_state_for_another_model_or_window_is_never_used_but_counts_for_the_cap(
    tmp_path: Path, model: Path
) -> None:
    saved = saved_state(store_for(tmp_path, model), CHAT, MB)
    other_window = StateStore(tmp_path / "states", model, 4_096, cap=MB + MB // 2)
    assert other_window.best(CHAT + "more") == ([], [])
    assert store_for(tmp_path, model).best(CHAT + "more")[0] == [saved]  # still there

    model.write_bytes(b"GGUF" + bytes(128))  # the model file was replaced by another
    replaced = store_for(tmp_path, model, cap=MB + MB // 2)
    assert replaced.best(CHAT + "more") == ([], [])
    # The next state saved for this model needs the room: the unusable one goes.
    fresh = saved_state(replaced, "another chat", MB)
    assert [s.name for s in replaced.scan()[0]] == [fresh.name]


def test_a_foreign_file_is_removed_with_one_note(tmp_path: Path, model: Path) -> None:
    store = store_for(tmp_path, model)
    kept = saved_state(store, CHAT)
    (store.folder / "slot0.bin").write_bytes(b"written by someone else")
    matching, notes = store.best(CHAT + "more")
    assert [s.name for s in matching] == [kept.name]
    assert len(notes) == 1 and "slot0.bin" in notes[0] and "did not write" in notes[0]
    assert store.best(CHAT + "more")[1] == []  # said once: the file is gone


def test_a_damaged_record_or_state_is_removed_with_one_note(tmp_path: Path, model: Path) -> None:
    store = store_for(tmp_path, model)
    garbled = saved_state(store, CHAT)
    store.sidecar_path(garbled.name).write_text("{not json", encoding="utf-8")
    matching, notes = store.best(CHAT + "more")
    assert matching == [] and len(notes) == 1 and "damaged" in notes[0]
    assert not store.state_path(garbled.name).exists()

    cut = saved_state(store, CHAT)
    with open(store.state_path(cut.name), "r+b") as f:
        f.truncate(cut.size // 2)  # a copy cut short
    matching, notes = store.best(CHAT + "more")
    assert matching == [] and len(notes) == 1

    flipped = saved_state(store, CHAT)
    data = bytearray(store.state_path(flipped.name).read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size, one byte changed
    store.state_path(flipped.name).write_bytes(bytes(data))
    assert store.best(CHAT + "more")[0] == [flipped]  # found by its record...
    assert not store.intact(flipped)  # ...and refused before llama.cpp reads it


def test_only_requests_to_the_chats_slot_are_followed() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "id_slot": 0, "stream": True}
    assert chat_slot_of(json.dumps(body).encode()) is not None
    assert chat_slot_of(json.dumps({**body, "id_slot": 1}).encode()) is None
    assert chat_slot_of(json.dumps({"messages": []}).encode()) is None
    assert chat_slot_of(b"not json, id_slot") is None


def test_common_start() -> None:
    assert common_start("abcdef", "abcxyz") == 3
    assert common_start("", "abc") == 0
    assert common_start("abc", "abc") == 3


def test_a_save_cut_short_leaves_no_note_and_is_cleared_once_old(
    tmp_path: Path, model: Path
) -> None:
    # The runtime ended part-way through a save: llama.cpp's part file, or the record written
    # before the state was put under its name. Neither is a foreign file.
    store = store_for(tmp_path, model)
    kept = saved_state(store, CHAT)
    part = store.folder / f"{store.new_name()}{PART_SUFFIX}"
    part.write_bytes(b"half a state")
    lone = store.sidecar_path(store.new_name())
    lone.write_text(store.sidecar_path(kept.name).read_text(), encoding="utf-8")
    assert store.scan() == ([kept], [])
    assert part.exists() and lone.exists()  # perhaps a save under way in another runtime
    old = time.time() - 3_600
    for path in (part, lone):
        os.utime(path, (old, old))
    assert store.scan() == ([kept], [])
    assert not part.exists() and not lone.exists()
