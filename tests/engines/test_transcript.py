"""The transcript file: compatible reads, broken files set aside (never deleted), atomic writes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import Message, ToolCallData
from engines.context import transcript
from engines.context.transcript import (
    TranscriptError,
    TranscriptFile,
    encode,
    load_transcript,
    save_if_unchanged,
    save_transcript,
    transcript_path,
)

CHAT = "3f2b6c1e-chat"
ROOT = Path(__file__).resolve().parents[2]


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


# --- several writers ---------------------------------------------------------------------------


def test_the_new_fields_round_trip_and_older_readers_ignore_them(data_dir: Path) -> None:
    t = TranscriptFile(
        messages=[Message(role="user", text="a\n\nb")],
        seqs=[4],
        joined=[6],
        windows={"a/b": 8192},
        windows_learned={"a/b": 1_700_000_000.5},
    )
    save_transcript(data_dir, CHAT, t)
    assert load_transcript(data_dir, CHAT).transcript == t
    write_raw(data_dir, json.dumps({"joined": [3, -1, "x", True], "windows_learned": 5}).encode())
    loaded = load_transcript(data_dir, CHAT).transcript
    assert (loaded.joined, loaded.windows_learned) == ([3], {})


def _process(code: str, *args: str) -> subprocess.Popen[str]:
    """A Python process running ``code`` with the repository importable (use it in ``with``)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _hear(proc: subprocess.Popen[str]) -> str:
    # No deadline of its own: a child that hangs is caught by the run's timeout.
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def test_the_sweep_leaves_a_live_writers_temp_file_alone(data_dir: Path) -> None:
    path = save_transcript(data_dir, CHAT, TranscriptFile(summary="whole"))
    with _process("pass") as dead:
        pass
    with _process("import sys; sys.stdin.read()") as live:
        folder = path.parent
        writing = folder / f".{path.name}.{live.pid}.k2j4x.tmp"  # another process mid-write
        killed = folder / f".{path.name}.{dead.pid}.p9a8b.tmp"  # its writer was killed
        old = folder / f".{path.name}.zz81qwe.tmp"  # an older Conch's, from days ago
        for tmp in (writing, killed, old):
            tmp.write_bytes(b'{"half": ')
        days_ago = time.time() - 2 * 86_400
        os.utime(old, (days_ago, days_ago))
        loaded = load_transcript(data_dir, CHAT)
        assert loaded.transcript.summary == "whole"
        assert writing.exists()
        assert not old.exists()
        # Windows cannot ask whether a process lives without ending it: age alone counts there.
        assert killed.exists() == (os.name != "posix")
        _tell(live, "")


HOLD_LOCK = """
import sys
from pathlib import Path
from engines.context import transcript as t
path = t.transcript_path(Path(sys.argv[1]), sys.argv[2])
with t.chat_lock(path) as held:
    print("LOCKED" if held else "NOT LOCKED", flush=True)
    if sys.stdin.readline().strip() == "write":
        t._replace(path, t.encode(t.TranscriptFile(summary="written by the other process")))
print("RELEASED", flush=True)
"""


def test_a_save_never_overwrites_what_another_process_saved_meanwhile(data_dir: Path) -> None:
    save_transcript(data_dir, CHAT, TranscriptFile(summary="first"))
    seen = load_transcript(data_dir, CHAT).signature
    with _process(HOLD_LOCK, str(data_dir), CHAT) as other, ThreadPoolExecutor(1) as pool:
        assert _hear(other) == "LOCKED"
        # Started while the other process holds the lock: it checks only once that is over.
        saving = pool.submit(
            save_if_unchanged, data_dir, CHAT, encode(TranscriptFile(summary="mine")), seen
        )
        _tell(other, "write")
        assert _hear(other) == "RELEASED"
        saved = saving.result(timeout=60)
    assert not saved.written and not saved.problem
    assert load_transcript(data_dir, CHAT).transcript.summary == "written by the other process"
    # With the version it has now seen, the save goes through.
    now = load_transcript(data_dir, CHAT).signature
    again = save_if_unchanged(data_dir, CHAT, encode(TranscriptFile(summary="mine")), now)
    assert again.written and again.signature == load_transcript(data_dir, CHAT).signature


def test_a_lock_held_too_long_is_a_clear_problem_not_a_hang(data_dir: Path) -> None:
    save_transcript(data_dir, CHAT, TranscriptFile(summary="first"))
    seen = load_transcript(data_dir, CHAT).signature
    with _process(HOLD_LOCK, str(data_dir), CHAT) as other:
        assert _hear(other) == "LOCKED"
        saved = save_if_unchanged(
            data_dir, CHAT, encode(TranscriptFile(summary="mine")), seen, wait=0.05
        )
        _tell(other, "release")
        assert _hear(other) == "RELEASED"
    assert not saved.written
    assert "another Conch process kept it locked" in saved.problem
    assert load_transcript(data_dir, CHAT).transcript.summary == "first"


def test_a_failed_save_removes_the_out_of_date_file(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_transcript(data_dir, CHAT, TranscriptFile(summary="old"))
    seen = load_transcript(data_dir, CHAT).signature

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transcript, "_replace", full)
    saved = save_if_unchanged(data_dir, CHAT, encode(TranscriptFile(summary="new")), seen)
    assert not saved.written and saved.cleared and saved.signature is None
    assert "No space left on device" in saved.problem
    # the next start finds no transcript and rebuilds it from the chat log
    assert not transcript_path(data_dir, CHAT).exists()
