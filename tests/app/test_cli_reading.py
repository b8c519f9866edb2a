"""``conch ask`` says on stderr that the model is still reading ("Reading the chat… 35%"), from a
llama.cpp server's own prompt-progress chunks, and nothing of it reaches stdout: a line per
step when stderr is a file or a pipe, one line rewritten in place and wiped before the answer
on a terminal.

The command runs in-process (``main``) against a loopback llama.cpp server, with the wait that
counts as long (``READING_AFTER_S``) set to 0 instead of waiting two seconds.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.store import ChatStore
from tests.app.test_cli import closed_port
from tests.fakes.memory_keyring import MemoryKeyring, installed
from tests.fakes.openai_server import OpenAIStyleServer, Script

ANSWER = "Untreated larch lasts longest."


class ReadingServer(OpenAIStyleServer):
    """llama.cpp's server asked with ``return_progress``: before its first word it says how
    much of the prompt it has read (``prompt_progress``; ``processed`` counts cached tokens)."""

    def _chunks(self, body: dict[str, Any]) -> list[str]:
        pieces = super()._chunks(body)
        progress = [
            {
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}],
                "object": "chat.completion.chunk",
                "prompt_progress": {"total": 3_000, "cache": 0, "processed": done, "time_ms": 9},
            }
            for done in (1_050, 3_000)
        ]
        return [f"data: {json.dumps(p)}\n\n" for p in progress] + pieces


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def server() -> Iterator[ReadingServer]:
    # A working keyring, as on a desktop (in-process, the null one would be logged as missing).
    with installed(MemoryKeyring()):
        script = Script(text=["Untreated larch", " lasts longest."])
        with ReadingServer("llamacpp", script=script) as running:
            yield running


def ask(
    server: ReadingServer, data_dir: Path, monkeypatch: pytest.MonkeyPatch, err: io.StringIO
) -> tuple[int, str]:
    settings = {
        "llamacpp_url": server.url,
        "lmstudio_url": f"http://127.0.0.1:{closed_port()}",
        "vllm_url": f"http://127.0.0.1:{closed_port()}",
        "bundled_model": False,
    }
    (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{closed_port()}")
    monkeypatch.setattr(cli, "READING_AFTER_S", 0.0)
    out = io.StringIO()
    code = cli.main(
        ["ask", "--chat", "larch", "--data-dir", str(data_dir), "Which wood?"],
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue()


def test_reading_progress_goes_to_stderr_a_line_a_step(
    server: ReadingServer, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = io.StringIO()
    code, out = ask(server, data_dir, monkeypatch, err)

    assert code == 0, err.getvalue()
    assert out == ANSWER + "\n"  # the answer alone: stdout can be piped on
    lines = err.getvalue().splitlines()
    assert "Reading the chat… 35%" in lines
    assert "\r" not in err.getvalue()  # a file or a pipe gets whole lines
    store = ChatStore.in_dir(data_dir)
    try:
        assert [m.text for m in store.messages("larch")] == ["Which wood?", ANSWER]
    finally:
        store.close()


def test_on_a_terminal_one_line_is_rewritten_and_wiped_before_the_answer(
    server: ReadingServer, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = Terminal()
    code, out = ask(server, data_dir, monkeypatch, err)

    assert code == 0, err.getvalue()
    assert out == ANSWER + "\n"
    said = err.getvalue()
    assert "\rReading the chat… 35%" in said
    # Wiped: what the line said last is overwritten with spaces and the cursor is back at
    # the start, so the answer (stdout, the same terminal) starts on a clean line.
    assert said.rstrip("\r").endswith(" ")
    assert said.endswith("\r")
    assert "Reading" not in said.rsplit("\r", 2)[-2]
