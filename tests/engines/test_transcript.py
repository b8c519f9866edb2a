"""The transcript file: compatible reads, broken files set aside (never deleted), atomic writes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.api.transcript import (
    TranscriptError,
    TranscriptFile,
    load_transcript,
    save_transcript,
    transcript_path,
)
from engines.base import Message, ToolCallData

CHAT = "3f2b6c1e-chat"


def write_raw(data_dir: Path, data: bytes, chat_id: str = CHAT) -> Path:
    path = transcript_path(data_dir, chat_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def broken_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "api-sessions").glob("*.broken-*"))


def test_round_trip(data_dir: Path) -> None:
    t = TranscriptFile(
        messages=[
            Message(role="user", text="Grüße 👋"),
            Message(
                role="assistant",
                text="hi",
                raw=({"type": "thinking", "thinking": "…", "signature": "abc=="},),
                tool_calls=(ToolCallData(id="c1", name="search", arguments={"q": "x"}),),
            ),
            Message(role="tool", text="result", tool_call_id="c1", untrusted=True),
        ],
        summary="they said hi",
        seqs=[7],
        factor=1.25,
        windows={"ollama/llama3": 8192},
    )
    path = save_transcript(data_dir, CHAT, t)
    assert path == data_dir / "api-sessions" / f"{CHAT}.json"
    assert json.loads(path.read_text("utf-8"))["version"] == 1
    loaded = load_transcript(data_dir, CHAT)
    assert loaded.existed and not loaded.recovered
    assert loaded.transcript == t
    # nothing but the file itself is left in the folder (no temp files)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_missing_file_is_a_fresh_transcript(data_dir: Path) -> None:
    loaded = load_transcript(data_dir, CHAT)
    assert not loaded.existed and not loaded.recovered
    assert loaded.transcript == TranscriptFile()
    assert not (data_dir / "api-sessions").exists()  # loading writes nothing


def test_an_older_file_without_the_new_fields_loads_with_defaults(data_dir: Path) -> None:
    write_raw(
        data_dir,
        json.dumps({"version": 1, "messages": [{"role": "user", "text": "hello"}]}).encode(),
    )
    loaded = load_transcript(data_dir, CHAT)
    assert not loaded.recovered
    t = loaded.transcript
    assert t.messages == [Message(role="user", text="hello")]
    assert (t.summary, t.seqs, t.factor, t.windows) == ("", [], 1.0, {})


def test_unknown_fields_are_ignored(data_dir: Path) -> None:
    write_raw(
        data_dir,
        json.dumps(
            {
                "version": 1,
                "messages": [{"role": "user", "text": "hi", "colour": "blue"}],
                "summary": "s",
                "seqs": [3],
                "factor": 1.5,
                "somethingNew": {"a": 1},
            }
        ).encode(),
    )
    loaded = load_transcript(data_dir, CHAT)
    assert not loaded.recovered
    assert loaded.transcript.summary == "s"
    assert loaded.transcript.messages[0].text == "hi"


def test_absurd_factor_and_windows_are_tamed(data_dir: Path) -> None:
    write_raw(
        data_dir,
        json.dumps(
            {"factor": -3, "windows": {"a/b": 4096, "c/d": -1, "e/f": "big", "g/h": True}}
        ).encode(),
    )
    t = load_transcript(data_dir, CHAT).transcript
    assert t.factor == 1.0
    assert t.windows == {"a/b": 4096}
    write_raw(data_dir, b'{"factor": 1e308}')
    assert load_transcript(data_dir, CHAT).transcript.factor == 4.0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'{"version": 2, "messages": []}', "newer Conch"),
        (b'{"version": 1, "messages": [', "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"null", "not valid"),
        (b'{"messages": 3}', "not valid"),
        (b'{"messages": [{"role": "wizard"}]}', "not valid"),
        (b"[" * 50_000, "not valid JSON"),
    ],
)
def test_a_broken_file_is_moved_aside_never_deleted(data_dir: Path, data: bytes, why: str) -> None:
    write_raw(data_dir, data)
    loaded = load_transcript(data_dir, CHAT)
    assert loaded.recovered
    assert loaded.transcript == TranscriptFile()
    assert "Nothing was lost" in loaded.note and why in loaded.note
    aside = broken_files(data_dir)
    assert len(aside) == 1 and aside[0] == loaded.moved_to
    assert aside[0].name.startswith(f"{CHAT}.json.broken-")
    assert aside[0].read_bytes() == data
    assert not transcript_path(data_dir, CHAT).exists()
    # a fresh save works, and a second breakage in the same second does not overwrite the first
    save_transcript(data_dir, CHAT, TranscriptFile(summary="new"))
    write_raw(data_dir, b"{{{")
    load_transcript(data_dir, CHAT)
    assert len(broken_files(data_dir)) == 2
    assert aside[0].read_bytes() == data


def test_a_broken_file_that_cannot_be_moved_raises_the_typed_error(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_raw(data_dir, b"not json")

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(TranscriptError, match="could not be moved aside"):
        load_transcript(data_dir, CHAT)
    assert path.read_bytes() == b"not json"


def test_an_interrupted_write_leaves_the_old_file_intact(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = TranscriptFile(summary="old", seqs=[1], messages=[Message(role="user", text="a")])
    save_transcript(data_dir, CHAT, old)
    before = transcript_path(data_dir, CHAT).read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(TranscriptError, match="No space left"):
        save_transcript(data_dir, CHAT, TranscriptFile(summary="new"))
    monkeypatch.undo()
    assert transcript_path(data_dir, CHAT).read_bytes() == before
    assert load_transcript(data_dir, CHAT).transcript == old
    leftovers = [p.name for p in (data_dir / "api-sessions").iterdir()]
    assert leftovers == [f"{CHAT}.json"]


@pytest.mark.parametrize(
    "chat_id",
    ["", "..", "../escape", "a/b", "a\\b", ".hidden", "x" * 200, "nul\0l", "two words", "é"],
)
def test_unsafe_chat_ids_are_refused(data_dir: Path, chat_id: str) -> None:
    with pytest.raises(TranscriptError):
        load_transcript(data_dir, chat_id)
    with pytest.raises(TranscriptError):
        save_transcript(data_dir, chat_id, TranscriptFile())
    assert list(data_dir.parent.rglob("*.json")) == []


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=300).map(str.encode))
def test_the_loader_only_returns_or_raises_its_own_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_raw(d, data)
        try:
            loaded = load_transcript(d, CHAT)
        except TranscriptError:
            return
        if loaded.recovered:
            assert loaded.moved_to is not None and loaded.moved_to.read_bytes() == data
        else:
            assert isinstance(loaded.transcript, TranscriptFile)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_the_loader_survives_any_json_value(value: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_raw(d, json.dumps({"version": 1, "messages": [value], "seqs": value}).encode())
        try:
            load_transcript(d, CHAT)
        except TranscriptError:
            pytest.fail("a file that can be moved aside must not raise")


def test_save_creates_the_folder_and_writes_utf8(data_dir: Path) -> None:
    save_transcript(data_dir, CHAT, TranscriptFile(summary="naïve ☕"))
    raw = transcript_path(data_dir, CHAT).read_bytes()
    assert "naïve ☕" in raw.decode("utf-8")
    assert os.path.isdir(data_dir / "api-sessions")
