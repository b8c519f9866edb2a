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


def test_a_corrupt_file_is_kept_aside_and_defaults_used(data_dir: Path) -> None:
    path = data_dir / "settings.json"
    path.write_text('{"theme": "dark", "remember_automa', encoding="utf-8")
    store = SettingsStore.in_dir(data_dir)
    assert store.settings == Settings()
    assert store.problem is not None
    assert "could not be read" in store.problem
    kept = list(data_dir.glob("settings.json.broken-*"))
    assert len(kept) == 1
    assert kept[0].name in store.problem
    # The old bytes are kept exactly: nothing is lost.
    assert kept[0].read_text(encoding="utf-8") == '{"theme": "dark", "remember_automa'
    assert not path.exists()


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
    assert store.settings == Settings()
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
