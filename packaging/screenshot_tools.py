"""Tools for packaging/screenshots.py: a chat that reads a file through an MCP server.

The demo's mock engine does not use tools, so this chat runs on the real engine (``ApiSession``
with its tool loop) and the app's own tool servers, with a file server from the checkout
(tests/fakes/mcp_files.py, a real MCP server) and a small scripted model that asks to read
``notes.txt`` and then says what it read. The window, the approval card and the tool line are
the real ones.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from engines.base import Done, Event, ModelInfo, TextDelta, ToolCall, ToolCallData
from engines.context.session import ApiSession
from engines.providers.base import ChatRequest

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is on my shopping list? It is in notes.txt."
NOTES = (
    "Shopping for the garden day:\n"
    "- 12 larch boards (untreated), 2 m\n"
    "- 40 kg of compost\n"
    "- seed potatoes, 'Charlotte'\n"
)


class ReadingModel:
    """A model that reads ``notes.txt`` with the chat's file tool, then answers from it."""

    name = "mock"
    label = "Mock"
    local = True

    async def list_models(self) -> list[ModelInfo]:
        return []

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        last = request.messages[-1]
        if last.role == "user":
            call = ToolCallData(id="call_1", name="read_text_file", arguments={"path": "notes.txt"})
            yield ToolCall(call=call)
            yield Done(stop_reason="tool_calls")
            return
        items = [line[2:] for line in last.text.splitlines() if line.startswith("- ")]
        yield TextDelta(text="Your list has " + "; ".join(items) + ".")
        yield Done()

    def cheap_models(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


def add_tool_chat(services: Any, folder: Path) -> str:
    """A chat whose engine is the reading model with the app's tools, and a file server for
    ``folder`` (holding notes.txt) in Settings → Tools. Returns the chat's id."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text(NOTES, "utf-8")
    if services.tools.config("files") is None:
        services.tools.add_stdio(
            "Files",
            sys.executable,
            ["-m", "tests.fakes.mcp_files", str(folder)],
            {"PYTHONPATH": str(ROOT)},
        )
    chat = services.store.create_chat(title="Shopping list", model_key="mock/mock-model")
    standard = services.engines

    def engines(services_: Any, chat_: Any, model: ModelInfo, approve: Any) -> Any:
        if chat_.id != chat.id:
            return standard(services_, chat_, model, approve)
        # The services give it the chat's tools and the window's approval card.
        return ApiSession(chat_id=chat.id, data_dir=None, adapters={"mock": ReadingModel()})

    services.engines = engines
    return str(chat.id)


async def render_tools(
    window: Any,
    services: Any,
    folder: Path,
    settle: Callable[[float], Awaitable[None]],
    shot: Callable[[str, Callable[[], Any]], Awaitable[None]],
) -> None:
    """tool-approval.png (the card and the waiting tool line), tool-call.png (the line opened
    after the answer) and tools.png (Settings → Tools with the server ready)."""
    from ui.chat.chat_model import RowKind

    window.open_chat(add_tool_chat(services, folder))
    await settle(0.2)
    bridge = window.bridge()
    bridge.send(QUESTION)
    for _ in range(600):  # the file server starts (a Python process) before the card shows
        if window.approval_card.isVisible():
            break
        await asyncio.sleep(0.05)
    window.chat_view.scroll_to_bottom()
    await shot("tool-approval.png", window.grab)
    window.approval_card.buttons["once"].click()
    for _ in range(600):
        if not bridge.busy:
            break
        await asyncio.sleep(0.05)
    await settle(0.2)
    rows = window.chat_view.widget_at(RowKind.TOOLS)
    if rows is not None:
        for line in rows.lines.values():
            line.button.click()
    await settle(0.2)
    window.chat_view.scroll_to_bottom()
    await shot("tool-call.png", window.grab)
    window.show_settings("tools")
    dialog = window._settings_dialog
    dialog.resize(860, 640)
    await shot("tools.png", dialog.grab)
    dialog.hide()
