"""Settings: defaults, saving, a damaged file kept aside, keys never written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.settings import Settings, SettingsError, SettingsStore, parse_settings


def test_missing_file_gives_defaults_and_no_problem(data_dir: Path) -> None:
    store = SettingsStore.in_dir(data_dir)
    assert store.settings == Settings()
    assert store.problem is None
    assert not (data_dir / "settings.json").exists()


def test_saved_settings_come_back(data_dir: Path) -> None:
    store = SettingsStore.in_dir(data_dir)
    store.update(theme="dark", remember_automatically=False, default_model_key="ollama/qwen3:8b")
    again = SettingsStore.in_dir(data_dir)
    assert again.settings.theme == "dark"
    assert again.settings.remember_automatically is False
    assert again.settings.default_model_key == "ollama/qwen3:8b"
    assert again.problem is None
    # Atomic write leaves no temp files behind.
    assert sorted(p.name for p in data_dir.iterdir()) == ["settings.json"]


def test_listeners_hear_each_save_until_they_stop(data_dir: Path) -> None:
    store = SettingsStore.in_dir(data_dir)
    heard: list[str] = []
    stop = store.on_change(lambda s: heard.append(s.theme))
    store.update(theme="light")
    stop()
    store.update(theme="dark")
    assert heard == ["light"]


def test_a_bad_value_is_refused_and_nothing_changes(data_dir: Path) -> None:
    store = SettingsStore.in_dir(data_dir)
    with pytest.raises(SettingsError):
        store.update(theme="purple")
    with pytest.raises(SettingsError):
        store.update(api_key="sk-should-never-be-a-setting")
    assert store.settings.theme == "system"
    assert not (data_dir / "settings.json").exists()


def test_a_corrupt_file_is_kept_aside_and_its_readable_fields_kept(data_dir: Path) -> None:
    path = data_dir / "settings.json"
    cut_short = '{"theme": "dark", "remember_automa'
    path.write_text(cut_short, encoding="utf-8")
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.theme == "dark"
    assert store.settings.remember_automatically is True  # cut off: its default
    assert store.problem is not None
    assert "could not be read" in store.problem
    kept = list(data_dir.glob("settings.json.broken-*"))
    assert len(kept) == 1
    assert kept[0].name in store.problem
    # The old bytes are kept exactly: nothing is lost.
    assert kept[0].read_text(encoding="utf-8") == cut_short
    # The repaired settings were written, so the next start is quiet and the same.
    again = SettingsStore.in_dir(data_dir)
    assert again.problem is None
    assert again.settings == store.settings


def test_a_damaged_file_keeps_the_server_addresses_and_the_bundled_model_choice(
    data_dir: Path,
) -> None:
    path = data_dir / "settings.json"
    saved = SettingsStore.in_dir(data_dir)
    saved.update(
        ollama_url="http://10.0.0.5:11434",
        llamacpp_url="http://127.0.0.1:8081",
        base_urls={"openai": "https://gateway.example/v1"},
        bundled_model=False,
        theme="dark",
    )
    text = path.read_text(encoding="utf-8")
    # A crash mid-write elsewhere, a sync tool, a bad sector: the end of the file is garbage.
    path.write_bytes(text[: len(text) * 3 // 4].encode() + b"\x00\xff\x13 garbage")
    store = SettingsStore.in_dir(data_dir)
    assert store.problem is not None
    assert store.settings.ollama_url == "http://10.0.0.5:11434"
    assert store.settings.llamacpp_url == "http://127.0.0.1:8081"
    assert store.settings.base_urls == {"openai": "https://gateway.example/v1"}
    assert store.settings.bundled_model is False
    assert "ollama_url" in store.problem


@pytest.mark.parametrize(
    "damaged",
    [
        b"\x00" * 512,  # a file of zeros after a power cut
        b'{"theme": "dark", "bundled_model": tr',  # cut short inside the value
        b'{"theme": "dark", "bundled_model": "yes please"}',  # a value that is not a choice
    ],
)
def test_damage_never_turns_the_bundled_model_on(data_dir: Path, damaged: bytes) -> None:
    path = data_dir / "settings.json"
    SettingsStore.in_dir(data_dir).update(bundled_model=False)
    path.write_bytes(damaged)
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.bundled_model is False
    assert store.problem is not None
    assert "bundled model stays off until you turn it on in Settings" in store.problem
    # Written back: the next start does not turn it on either, and says nothing more.
    again = SettingsStore.in_dir(data_dir)
    assert again.settings.bundled_model is False and again.problem is None


def test_a_damaged_file_that_still_says_bundled_model_on_keeps_it_on(data_dir: Path) -> None:
    (data_dir / "settings.json").write_bytes(b'{"bundled_model": true, "theme": "da')
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.bundled_model is True
    assert store.problem is not None and "bundled model" not in store.problem


def test_an_unopenable_file_is_kept_aside_and_the_bundled_model_stays_off(
    data_dir: Path,
) -> None:
    path = data_dir / "settings.json"
    path.mkdir()  # something that cannot be read as a file
    (path / "inside").write_text("kept")
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.bundled_model is False
    assert store.problem is not None and "could not be opened" in store.problem
    kept = list(data_dir.glob("settings.json.broken-*"))
    assert len(kept) == 1 and (kept[0] / "inside").read_text() == "kept"


def test_one_bad_field_keeps_the_others(data_dir: Path) -> None:
    path = data_dir / "settings.json"
    path.write_text(json.dumps({"theme": "neon", "default_model_key": "openai/gpt-4o"}))
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.default_model_key == "openai/gpt-4o"
    assert store.settings.theme == "system"
    assert store.problem is not None and "theme" in store.problem
    assert len(list(data_dir.glob("settings.json.broken-*"))) == 1
    # The repaired file is written, so the next start is quiet.
    assert SettingsStore.in_dir(data_dir).problem is None


@pytest.mark.parametrize(
    "raw",
    [b"", b"[1, 2]", b'"just a string"', b"\xff\xfe\x00garbage", b"[" * 100_000, b"null"],
)
def test_unreadable_files_never_crash(data_dir: Path, raw: bytes) -> None:
    (data_dir / "settings.json").write_bytes(raw)
    store = SettingsStore.in_dir(data_dir)
    # Defaults, except the bundled model: nothing says the person wanted it started.
    assert store.settings == Settings(bundled_model=False)
    assert store.problem is not None


def test_unknown_fields_and_stray_keys_are_dropped_on_save(data_dir: Path) -> None:
    path = data_dir / "settings.json"
    path.write_text(json.dumps({"theme": "light", "openai_api_key": "sk-abcdefghijklmnopqrstuv"}))
    store = SettingsStore.in_dir(data_dir)
    assert store.settings.theme == "light"
    store.save()
    assert "sk-abcdefghijklmnopqrstuv" not in path.read_text(encoding="utf-8")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_parse_settings_raises_only_its_own_error(raw: bytes) -> None:
    try:
        result, bad = parse_settings(raw)
    except SettingsError:
        return
    assert isinstance(result, Settings)
    assert all(name in Settings.model_fields for name in bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*Settings.model_fields, "other"]), json_values))
def test_any_json_object_loads_with_what_is_valid_kept(obj: dict[str, object]) -> None:
    result, bad = parse_settings(json.dumps(obj))
    for name in Settings.model_fields:
        if name in obj and name not in bad:
            # A field that was accepted reads back as what the file said (after validation).
            assert Settings.model_validate({name: obj[name]}).__getattribute__(name) == getattr(
                result, name
            )
