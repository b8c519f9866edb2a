"""Per-chat settings in the chat log: kept across a restart, defaults when nothing was set, odd
values brought into range, and a chat log of the version before them upgraded with nothing lost.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from app.store import (
    _STEPS,
    ANSWER_TOKENS_MAX,
    ANSWER_TOKENS_MIN,
    TEMPERATURE_MAX,
    ChatSettings,
    ChatStore,
)
from tests.data.databases.make_fixtures import describe_chat_log

V3 = Path(__file__).resolve().parents[1] / "data" / "databases" / "v3"


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def every_table(
    path: Path, columns: dict[str, list[str]] | None = None
) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows; with ``columns``, only those tables and columns (what an older
    file had: a later step may add columns, never change what was there)."""
    names = [
        str(r[0])
        for r in rows(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    if columns is None:
        return {n: rows(path, f'SELECT * FROM "{n}" ORDER BY rowid') for n in names}
    return {
        n: rows(path, f'SELECT {", ".join(columns[n])} FROM "{n}" ORDER BY rowid')
        for n in names
        if n in columns
    }


def columns_of(path: Path) -> dict[str, list[str]]:
    names = [
        str(r[0])
        for r in rows(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    return {n: [str(c[1]) for c in rows(path, f'PRAGMA table_info("{n}")')] for n in names}


def test_a_chat_nobody_set_anything_for_has_the_defaults(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Plain")
    assert store.chat_settings(chat.id) == ChatSettings()
    assert store.chat_settings("no-such-chat") == ChatSettings()
    store.close()


def test_chat_settings_survive_a_restart_and_one_change_keeps_the_rest(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Pirate talk")
    other = store.create_chat("Other")
    store.set_chat_settings(
        chat.id,
        ChatSettings(
            system_prompt="Answer like a pirate.",
            temperature=0.3,
            max_answer_tokens=400,
            tool_servers=("files", "web"),
        ),
    )
    store.update_chat_settings(chat.id, tool_servers=("files",))
    store.close()

    again = ChatStore.in_dir(data_dir)
    assert again.chat_settings(chat.id) == ChatSettings(
        system_prompt="Answer like a pirate.",
        temperature=0.3,
        max_answer_tokens=400,
        tool_servers=("files",),
    )
    assert again.chat_settings(other.id) == ChatSettings()
    # None goes back to the default; "" is "no system prompt in this chat", not the default.
    again.update_chat_settings(chat.id, system_prompt="", temperature=None, tool_servers=())
    got = again.chat_settings(chat.id)
    assert (got.system_prompt, got.temperature, got.tool_servers) == ("", None, ())
    assert got.max_answer_tokens == 400
    again.close()


def test_values_out_of_range_are_read_within_it(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Odd")
    kept = store.set_chat_settings(
        chat.id, ChatSettings(temperature=9.0, max_answer_tokens=3, tool_servers=("a", "a", ""))
    )
    assert kept == ChatSettings(
        temperature=TEMPERATURE_MAX, max_answer_tokens=ANSWER_TOKENS_MIN, tool_servers=("a",)
    )
    store.close()
    # Written by hand (or by a newer Conch with wider ranges): read within this one's.
    db = sqlite3.connect(data_dir / ChatStore.FILE_NAME)
    db.execute(
        "UPDATE chat_settings SET temperature = -1, max_answer_tokens = 10000000, "
        "tool_servers = 'not json' WHERE chat_id = ?",
        (chat.id,),
    )
    db.commit()
    db.close()
    again = ChatStore.in_dir(data_dir)
    assert again.chat_settings(chat.id) == ChatSettings(
        temperature=0.0, max_answer_tokens=ANSWER_TOKENS_MAX, tool_servers=None
    )
    again.close()


def test_the_chat_log_from_before_chat_settings_upgrades_with_nothing_lost(data_dir: Path) -> None:
    path = data_dir / ChatStore.FILE_NAME
    shutil.copyfile(V3 / ChatStore.FILE_NAME, path)
    expected = json.loads((V3 / "expected.json").read_text())[ChatStore.FILE_NAME]
    before = every_table(path)
    had = columns_of(path)
    assert rows(path, "PRAGMA user_version") == [(3,)]

    store = ChatStore.in_dir(data_dir)
    assert store.problem == ""
    assert rows(path, "PRAGMA user_version") == [(len(_STEPS),)]
    for name, kept in before.items():
        assert every_table(path, had)[name] == kept, name
    copy = path.with_name(f"{path.name}.before-v{len(_STEPS)}")
    assert every_table(copy) == before
    # Every chat starts with the defaults, and a setting can be kept now.
    assert store.chat_settings("garden000001") == ChatSettings()
    store.set_chat_settings("garden000001", ChatSettings(system_prompt="Be brief."))
    store.close()

    assert describe_chat_log(data_dir) == expected
    again = ChatStore.in_dir(data_dir)
    assert again.chat_settings("garden000001").system_prompt == "Be brief."
    again.close()


def test_a_program_chats_mode_and_model_survive_a_restart_and_odd_ones_are_dropped(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("On Claude Code")
    store.update_chat_settings(chat.id, program_mode="plan", program_model="  opus ")
    store.update_chat_settings(chat.id, temperature=0.5)  # another change keeps them
    store.close()
    again = ChatStore.in_dir(data_dir)
    got = again.chat_settings(chat.id)
    assert (got.program_mode, got.program_model, got.temperature) == ("plan", "opus", 0.5)
    again.close()
    # A mode this Conch does not know (a newer one's, a hand edit) reads as the default.
    db = sqlite3.connect(data_dir / ChatStore.FILE_NAME)
    db.execute(
        "UPDATE chat_settings SET program_mode = 'yolo', program_model = '' WHERE chat_id = ?",
        (chat.id,),
    )
    db.commit()
    db.close()
    third = ChatStore.in_dir(data_dir)
    got = third.chat_settings(chat.id)
    assert (got.program_mode, got.program_model) == (None, None)
    third.close()
