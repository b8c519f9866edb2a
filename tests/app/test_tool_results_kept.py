"""A huge tool result is kept in the chat log shortened (head and tail, marked), as a model is
sent it; the call's record still says how big it was."""

from __future__ import annotations

from pathlib import Path

from app.store import ChatStore
from app.tool_calls import keep_tool_call, tool_call_book
from engines.base import ToolResult
from engines.tools.rules import KEPT_RESULT_TOKENS
from engines.window import estimate_tokens
from tests.fakes.mcp_server import huge_text


def test_a_20_mb_result_is_kept_shortened_and_a_small_one_whole(data_dir: Path) -> None:
    big = huge_text(20 * 1024 * 1024)
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.create_chat()
        call = ToolResult(
            call_id="c1",
            tool="huge",
            server="Fake",
            status="done",
            text=big,
            preview="",
            total_chars=len(big),
            shortened=True,
            untrusted=True,
        )
        seq = keep_tool_call(store, chat.id, call)
        small = keep_tool_call(
            store, chat.id, call.model_copy(update={"text": "42", "total_chars": 2})
        )
        kept = store.message(chat.id, seq)
        assert kept is not None
        assert estimate_tokens(kept.text) <= KEPT_RESULT_TOKENS
        assert kept.text.startswith(big[:1000]) and kept.text.endswith(big[-1000:])
        assert "left out" in kept.text  # the marker a model reads, too
        short = store.message(chat.id, small)
        assert short is not None and short.text == "42"
        book = tool_call_book(store)
        assert book is not None
        assert book.between(chat.id, seq, seq)[seq].total_chars == len(big)
        chat_now = store.get_chat(chat.id)
        assert chat_now is not None and chat_now.untrusted
    finally:
        store.close()


def test_a_call_that_read_nothing_from_outside_leaves_the_chat_trusted(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.create_chat()
        denied = ToolResult(
            call_id="c1",
            tool="write_file",
            server="Files",
            status="denied",
            preview="",
            text="The person did not allow this call.",
            untrusted=False,
        )
        keep_tool_call(store, chat.id, denied)
        after = store.get_chat(chat.id)
        assert after is not None and not after.untrusted
    finally:
        store.close()
