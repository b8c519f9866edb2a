"""A turn whose message cannot be saved (a full disk) tells the person why, in the window."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pytestqt.qtbot import QtBot

from engines.base import TurnProblem
from engines.mock import Reply
from tests.ui.conftest import Chat
from ui.chat.bridge import ConversationBridge


@pytest.mark.allow_error_log  # the failed save is logged with its traceback
def test_a_full_disk_reaches_the_problem_card_in_plain_words(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("Larch it is.")])
    db = chat.store._db
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.execute(f"PRAGMA max_page_count = {pages}")  # the chat log cannot grow any more
    bridge = ConversationBridge(chat.conversation)
    problems: list[TurnProblem] = []
    bridge.problem.connect(problems.append)

    with qtbot.waitSignal(bridge.done, timeout=10_000) as finished:
        assert bridge.send("Here is the whole planting plan: " + "beds, paths, water. " * 1_000)

    assert finished.args == ["error"]
    (problem,) = problems
    assert problem.message.startswith("The disk that holds ")
    assert "is full" in problem.message and "Free some space and try again." in problem.message
    assert "rollback" not in problem.message.lower() and "Error" not in problem.detail
