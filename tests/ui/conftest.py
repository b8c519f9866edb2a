"""UI test setup: a qasync loop that pytest-qt's waits drive, and one that reports failures.

pytest-qt spins Qt event loops (``waitSignal``, ``waitUntil``); a qasync ``QEventLoop`` schedules
its callbacks as Qt timers, so those waits run asyncio tasks too. The loop is installed as the
*running* loop (what ``asyncio.get_running_loop()`` returns inside the app) without calling
``run_forever``, which would start a second Qt event loop. Exceptions a task swallowed (the
loop's exception handler) fail the test at teardown instead of vanishing into a log.

So UI tests are plain (sync) functions: async work runs as tasks on this loop while
``qtbot`` waits. An ``async def`` test here would get pytest-asyncio's loop instead.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import qasync
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.conversation import Conversation
from app.memories import LearningRun, MemoryBook
from app.services import AppServices, build_services
from app.store import ChatStore
from engines.base import ModelInfo
from engines.mock import MockEngine, Step
from tests.ui.windows import Scripts, closed_after, shown
from ui.main_window import MainWindow
from ui.start import install_asyncgen_hooks
from ui.theme import ThemeManager


@pytest.fixture(autouse=True)
def qloop(qapp: QApplication, qtbot: QtBot) -> Iterator[asyncio.AbstractEventLoop]:
    loop = qasync.QEventLoop(qapp)
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    asyncio.events._set_running_loop(loop)
    old_hooks = sys.get_asyncgen_hooks()
    install_asyncgen_hooks(loop)  # as ui/start.py does for the real window
    try:
        yield loop
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            qtbot.waitUntil(lambda: all(t.done() for t in pending), timeout=5000)
        for task in pending:
            if not task.cancelled() and task.exception() is not None:
                problems.append({"message": "task failed", "exception": task.exception()})
        gc.collect()  # "exception was never retrieved" is reported when a task is collected
    finally:
        sys.set_asyncgen_hooks(*old_hooks)
        asyncio.events._set_running_loop(None)
        loop.close()
    if problems:
        first = problems[0]
        exc = first.get("exception")
        if isinstance(exc, BaseException):
            raise AssertionError(f"the event loop reported: {first.get('message')}") from exc
        raise AssertionError(f"the event loop reported: {first}")


@pytest.fixture
def scripts() -> Scripts:
    """Scripted engines for the next chats ``services`` opens; none queued: the demo's."""
    return Scripts()


@pytest.fixture
def services(data_dir: Path, scripts: Scripts) -> Iterator[AppServices]:
    """The mock app without its demo chat, its chats' engines from ``scripts``; a module
    needing other services defines its own."""
    built = build_services(data_dir, mock=True, seed_demo_chat=False, engines=scripts)
    yield from closed_after(built)


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    """The real window on ``services``, shown and started; closed after the test."""
    with shown(qtbot, services, start=True, timeout=5000) as win:
        yield win


@pytest.fixture(params=("light", "dark"))
def theme(request: pytest.FixtureRequest, qapp: QApplication) -> Iterator[ThemeManager]:
    """The real stylesheet and palette of one scheme, put back after the test."""
    sheet, palette, style = qapp.styleSheet(), qapp.palette(), qapp.style().name()
    manager = ThemeManager(qapp, str(request.param))
    yield manager
    manager.close()
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


# --- a chat on the scripted mock engine -------------------------------------------------------


@dataclass
class Chat:
    """A real chat log, memory book and conversation on a scripted ``MockEngine``."""

    store: ChatStore
    book: MemoryBook
    engine: MockEngine
    conversation: Conversation
    chat_id: str


MOCK_MODEL = ModelInfo(provider="mock", id="small", label="Small mock", context=8192, local=True)
BIG_MODEL = ModelInfo(provider="mock", id="big", label="Big mock", context=131072)


LEARNED = ("The garden uses untreated larch", "Marta coordinates the garden")


class BookLearner:
    """A ``Learner`` that records fixed memories in the real book.

    What to learn is app/learning.py's business (tested there); the window only needs runs.
    Like the real one, a chat that read something untrusted gets memories that wait.
    """

    def __init__(self, store: ChatStore, book: MemoryBook) -> None:
        self.store = store
        self.book = book
        self.calls: list[tuple[str, int]] = []

    async def review(self, chat_id: str, before_seq: int) -> LearningRun | None:
        self.calls.append((chat_id, before_seq))
        await asyncio.sleep(0)
        chat = self.store.get_chat(chat_id)
        waiting = chat is not None and chat.untrusted
        return self.book.add_run(
            chat_id,
            LEARNED,
            seq_from=0,
            seq_to=max(0, before_seq - 1),
            waiting=waiting,
            source="fold",
        )


@pytest.fixture
def chat_factory(data_dir: Path) -> Iterator[Callable[..., Chat]]:
    store = ChatStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    made: list[Chat] = []

    def make(
        script: Sequence[Step] = (),
        *,
        fold_every: int = 0,
        delay: float = 0.001,
        model: ModelInfo = MOCK_MODEL,
        untrusted: bool = False,
        learn: bool = True,
    ) -> Chat:
        chat = store.create_chat(model_key=model.key)
        if untrusted:
            store.mark_chat(chat.id, untrusted=True)
        engine = MockEngine(script, fold_every=fold_every, delay=delay)
        learner = BookLearner(store, book) if learn else None
        conversation = Conversation(
            chat.id, store=store, engine=engine, model=model, learner=learner
        )
        made.append(Chat(store, book, engine, conversation, chat.id))
        return made[-1]

    yield make
    store.close()
    book.close()
