"""Continue after Stop, in the window, against the loopback Ollama.

The person stops an answer while the server is still writing it, then clicks Continue under
it: the model goes on from the stopped words (Ollama continues a final assistant message),
the same bubble grows, the chat log keeps one answer, and after a restart the chat shows it
and the model remembers it whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.base import ProblemKind
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply, running_ollama
from tests.ui.windows import close_files, close_window, open_window, route_to
from tests.waits import HANG_MS
from ui.chat.chat_model import RowKind
from ui.chat.chat_view import ChatView

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

QUESTION = "Tell me about the garden."
WHOLE = "The garden has twelve beds. Larch lasts ten years. Water them at dawn."
STOPPED = "The garden has twelve beds. "  # two streamed lines of 14 characters
MODEL = "ollama/llama3.2:latest"


def answer(body: dict[str, Any]) -> FakeReply:
    # As Ollama's chat template does: a final assistant message is written on, not answered.
    last = body["messages"][-1]
    if last["role"] == "assistant":
        return FakeReply(text=WHOLE[len(last["content"]) :], chunk=14)
    if last["content"] == QUESTION:
        return FakeReply(text=WHOLE, chunk=14)
    return FakeReply(text="Loam, mostly.", chunk=14)


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama([FakeModel("llama3.2", 131_072)], responder=answer) as fake:
        yield fake


def services_for(data_dir: Path, ollama: FakeOllama) -> AppServices:
    route_to(data_dir, ollama_url=ollama.url)
    return build_services(data_dir, mock=False, secrets=SessionSecrets())


def answers_on_screen(view: ChatView) -> list[tuple[RowKind, str]]:
    """Every answer bubble the chat shows, with the words it shows."""
    view.flush()
    out: list[tuple[RowKind, str]] = []
    for row in view.chat_model.rows():
        if row.kind is RowKind.STREAMING:
            out.append((row.kind, row.text))
        elif row.kind is RowKind.MESSAGE and row.message and row.message.role == "assistant":
            out.append((row.kind, row.message.text))
    return out


def click_continue(qtbot: QtBot, view: ChatView) -> None:
    i = view.continuable_row()
    assert i >= 0
    index = view.chat_model.index(i, 0)
    view.scrollTo(index)
    rect = view.visualRect(index)
    (where,) = [r for a, r in view.delegate.buttons(index, rect) if a == "continue"]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=where.center())


def test_continue_after_stop_grows_the_same_answer_and_a_restart_keeps_it(
    qtbot: QtBot, data_dir: Path, ollama: FakeOllama
) -> None:
    services = services_for(data_dir, ollama)
    win = open_window(qtbot, services, size=(900, 700))
    model = services.catalogue.find(MODEL)
    assert model is not None
    win.new_chat()
    win.switch_model(model)
    chat = win.current_chat_id
    view = win.chat_view

    # The server writes two lines and then keeps the person waiting: they press Stop.
    ollama.chat_hold_after = 2
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, QUESTION)
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: answers_on_screen(view) == [(RowKind.STREAMING, STOPPED)])
    assert ollama.chat_held.is_set()
    qtbot.mouseClick(win.composer.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.continuable_row() >= 0, timeout=HANG_MS)
    ollama.chat_release.set()
    (stopped,) = [m for m in services.store.messages(chat) if m.role == "assistant"]
    assert stopped.text == STOPPED and stopped.problem is not None
    assert stopped.problem.kind is ProblemKind.CANCELLED
    # The offer is in sight under the answer, and in Ctrl+K.
    row = view.chat_model.row(view.continuable_row())
    shown = view.delegate.document(row, view.delegate.content_width()).toPlainText()
    assert shown.rstrip().endswith("Stopped · Continue")
    titles = [c.title for c in win.palette_commands()]
    assert "Continue the stopped answer" in titles

    # Continue: the server writes one more line and waits again; the bubble that showed the
    # stopped words is the one growing (no second answer on screen).
    ollama.chat_held.clear()
    ollama.chat_release.clear()
    ollama.chat_hold_after = 1
    click_continue(qtbot, view)
    qtbot.waitUntil(win.composer.edit.hasFocus, timeout=HANG_MS)  # ready for the next message
    qtbot.waitUntil(ollama.chat_held.is_set, timeout=HANG_MS)
    qtbot.waitUntil(
        lambda: answers_on_screen(view) == [(RowKind.STREAMING, STOPPED + "Larch lasts t")],
        timeout=HANG_MS,
    )
    sent = ollama.chat_requests()[-1]["messages"]
    assert sent[-1] == {"role": "assistant", "content": STOPPED.rstrip()}
    ollama.chat_release.set()
    qtbot.waitUntil(lambda: answers_on_screen(view) == [(RowKind.MESSAGE, WHOLE)], timeout=HANG_MS)

    # One answer in the chat log, finished; nothing more to continue.
    log = [(m.role, m.text, m.problem) for m in services.store.messages(chat)]
    assert log == [("user", QUESTION, None), ("assistant", WHOLE, None)]
    assert view.continuable_row() < 0
    assert "Continue the stopped answer" not in [c.title for c in win.palette_commands()]
    close_window(qtbot, win, services)
    close_files(services)

    # After a restart: the same one answer, and the model is sent it whole.
    services = services_for(data_dir, ollama)
    win = open_window(qtbot, services, size=(900, 700))
    win.open_chat(chat)
    assert answers_on_screen(win.chat_view) == [(RowKind.MESSAGE, WHOLE)]
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "And the soil?")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: [m.text for m in services.store.messages(chat)][-1:] == ["Loam, mostly."],
        timeout=HANG_MS,
    )
    remembered = ollama.chat_requests()[-1]["messages"]
    assert [m["content"] for m in remembered if m["role"] == "assistant"] == [WHOLE]
    close_window(qtbot, win, services)
    close_files(services)
