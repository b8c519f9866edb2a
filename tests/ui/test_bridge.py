"""ConversationBridge: a turn as Qt signals, Stop keeps what arrived, cleanup always runs."""

from __future__ import annotations

from collections.abc import Callable

from pytestqt.qtbot import QtBot
from shiboken6 import Shiboken

from engines.base import Compacted, ProblemKind, TurnProblem
from engines.mock import CompactBefore, Fail, Reply
from tests.ui.conftest import LEARNED, Chat
from ui.chat.bridge import ConversationBridge
from ui.chat.chat_model import mark_for

ANSWER = "Larch lasts eight to ten years without any treatment at all."


def test_send_streams_saves_and_ends(qtbot: QtBot, chat_factory: Callable[..., Chat]) -> None:
    chat = chat_factory([Reply(ANSWER, thinking="Wood question.", chunk_size=5)])
    bridge = ConversationBridge(chat.conversation)
    deltas: list[str] = []
    thinking: list[str] = []
    saved: list[tuple[int, str]] = []
    busy: list[bool] = []
    bridge.text_delta.connect(deltas.append)
    bridge.thinking_delta.connect(thinking.append)
    bridge.message_saved.connect(lambda seq, role: saved.append((seq, role)))
    bridge.busy_changed.connect(busy.append)

    with qtbot.waitSignal(bridge.done, timeout=5000) as finished:
        assert bridge.send("Untreated larch or pine?")
        assert bridge.busy

    assert finished.args == ["stop"]
    assert "".join(deltas) == ANSWER
    assert len(deltas) > 1  # it streamed, not one lump
    assert "".join(thinking) == "Wood question."
    assert saved == [(0, "user"), (1, "assistant")]
    assert busy == [True, False]
    assert not bridge.busy
    answer = chat.store.message(chat.chat_id, 1)
    assert answer is not None and answer.text == ANSWER and not answer.partial


def test_send_while_busy_is_refused(qtbot: QtBot, chat_factory: Callable[..., Chat]) -> None:
    chat = chat_factory([Reply(ANSWER, chunk_delay=0.01, chunk_size=3)])
    bridge = ConversationBridge(chat.conversation)
    with qtbot.waitSignal(bridge.done, timeout=5000):
        assert bridge.send("first")
        assert not bridge.send("second")
        assert not bridge.compact()
    assert [m.text for m in chat.store.messages(chat.chat_id) if m.role == "user"] == ["first"]


def test_stop_keeps_the_partial_answer_marked_stopped(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    long_answer = "word " * 400
    chat = chat_factory([Reply(long_answer, chunk_delay=0.01, chunk_size=5)])
    bridge = ConversationBridge(chat.conversation)
    busy: list[bool] = []
    bridge.busy_changed.connect(busy.append)

    bridge.send("Tell me everything")
    qtbot.waitUntil(lambda: len(bridge.partial_text) >= 20, timeout=5000)
    with qtbot.waitSignal(bridge.done, timeout=5000) as finished:
        bridge.stop()

    assert finished.args == ["cancelled"]
    assert busy == [True, False]
    kept = chat.store.message(chat.chat_id, 1)
    assert kept is not None
    assert kept.text and long_answer.startswith(kept.text)
    assert len(kept.text) < len(long_answer)
    assert kept.partial
    assert kept.problem is not None and kept.problem.kind is ProblemKind.CANCELLED
    assert mark_for(kept) == "Stopped"


def test_a_failure_mid_answer_is_kept_and_marked_cut_off(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Fail(after_chars=30, text="This answer will break off right about here.")])
    bridge = ConversationBridge(chat.conversation)
    problems: list[TurnProblem] = []
    bridge.problem.connect(problems.append)

    with qtbot.waitSignal(bridge.done, timeout=5000) as finished:
        bridge.send("go")

    assert finished.args == ["problem"]
    assert [p.kind for p in problems] == [ProblemKind.BROKEN_STREAM]
    kept = chat.store.message(chat.chat_id, 1)
    assert kept is not None and kept.text == "This answer will break off rig"
    assert mark_for(kept) == "Cut off"


def test_compact_passes_the_focus_and_reports_the_fold(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("one"), Reply("two")])
    bridge = ConversationBridge(chat.conversation)
    for text in ("Budget is €2,500", "Beds: 24"):
        with qtbot.waitSignal(bridge.done, timeout=5000):
            bridge.send(text)
    folds: list[Compacted] = []
    bridge.compacted.connect(folds.append)

    with qtbot.waitSignal(bridge.done, timeout=5000):
        assert bridge.compact("keep the budget numbers")

    assert len(folds) == 1
    assert "keep the budget numbers" in folds[0].summary
    latest = chat.store.latest_compaction(chat.chat_id)
    assert latest is not None and latest.first_kept_seq == 2


def test_learning_after_a_fold_reaches_the_window(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("a"), CompactBefore(), Reply("b")])
    bridge = ConversationBridge(chat.conversation)
    with qtbot.waitSignal(bridge.done, timeout=5000):
        bridge.send("We chose larch")
    with qtbot.waitSignal(bridge.learning_done, timeout=5000) as learned:
        bridge.send("And soil?")
    run = learned.args[0]
    assert [m.text for m in run.memories] == list(LEARNED)
    qtbot.waitUntil(lambda: not bridge.busy, timeout=5000)


def test_a_bridge_deleted_mid_turn_does_not_crash(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory([Reply("word " * 200, chunk_delay=0.005, chunk_size=4)])
    bridge = ConversationBridge(chat.conversation)
    bridge.send("go")
    qtbot.waitUntil(lambda: len(bridge.partial_text) > 10, timeout=5000)
    task = bridge._task
    assert task is not None
    Shiboken.delete(bridge)  # the window dropped it (a deleted chat) while it streamed

    qtbot.waitUntil(task.done, timeout=10000)
    assert task.exception() is None
    answer = chat.store.message(chat.chat_id, 1)
    assert answer is not None and answer.text == ("word " * 200)
