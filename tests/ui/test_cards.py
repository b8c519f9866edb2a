"""The cards and small widgets: too-long and problem cards, memory cards, meter, picker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from engines.base import ModelInfo, NextStep, ProblemKind, TurnProblem
from tests.ui.conftest import LEARNED, Chat
from ui.cards.memory_card import MemoryCard
from ui.cards.problem_card import ProblemCard
from ui.chat.context_meter import ContextMeter, describe
from ui.chat.model_picker import ModelPicker, window_label

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

BIG = ModelInfo(provider="openai", id="gpt-big", label="Big model", context=131072)


def test_window_labels_read_like_people_write_them() -> None:
    assert window_label(8192) == "8K"
    assert window_label(32768) == "32K"
    assert window_label(131072) == "128K"
    assert window_label(128000) == "128K"
    assert window_label(200000) == "200K"
    assert window_label(1_048_576) == "1M"
    assert window_label(1_000_000) == "1M"


def test_too_long_card_offers_the_bigger_model(qtbot: QtBot) -> None:
    step = NextStep(kind="switch-model", label="Switch", model=BIG)
    card = ProblemCard(TurnProblem.of(ProblemKind.TOO_LONG, next_step=step), "my long text")
    qtbot.addWidget(card)
    assert card.property("kind") == "too-long"
    assert card.sentence.text() == (
        "This message is too long for the model, even after summarising the chat."
    )
    assert card.button is not None
    assert card.button.text() == "Switch to Big model (reads 128K)"
    with qtbot.waitSignal(card.step_requested) as pressed:
        qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)
    assert pressed.args == [step]


def test_the_switch_button_names_the_window_once() -> None:
    from ui.cards.problem_card import step_label

    named = ModelInfo(provider="mock", id="large", label="Mock model (128K)", context=131_072)
    step = NextStep(kind="switch-model", label="Switch", model=named)
    assert step_label(step) == "Switch to Mock model (128K)"


def test_too_long_card_without_a_bigger_model_offers_a_new_chat(qtbot: QtBot) -> None:
    card = ProblemCard(TurnProblem.of(ProblemKind.TOO_LONG), "the message that was too long")
    qtbot.addWidget(card)
    assert card.button is not None
    assert card.button.text() == "Start a new chat with this message"
    with qtbot.waitSignal(card.step_requested) as pressed:
        card.button.click()
    step = pressed.args[0]
    assert step.kind == "new-chat" and step.text == "the message that was too long"


def test_other_problems_show_their_sentence_and_next_step(qtbot: QtBot) -> None:
    problem = TurnProblem.of(
        ProblemKind.UNREACHABLE,
        detail="connect refused on 127.0.0.1:11434",
        next_step=NextStep(kind="retry", label="Try again"),
    )
    card = ProblemCard(problem)
    qtbot.addWidget(card)
    card.show()
    assert card.sentence.text() == "Conch could not reach the model's server."
    assert card.button is not None and card.button.text() == "Try again"
    assert card.details_button is not None
    assert not card.details.isVisible()
    card.details_button.click()
    assert card.details.isVisible() and "11434" in card.details.text()


def test_a_wait_step_unlocks_itself(qtbot: QtBot) -> None:
    step = NextStep(kind="wait", label="Wait", seconds=0.2)
    card = ProblemCard(TurnProblem.of(ProblemKind.RATE_LIMITED, next_step=step))
    qtbot.addWidget(card)
    assert card.button is not None and not card.button.isEnabled()
    qtbot.waitUntil(card.button.isEnabled, timeout=3000)


def test_memory_undo_removes_the_memory(qtbot: QtBot, chat_factory: Callable[..., Chat]) -> None:
    chat = chat_factory()
    run = chat.book.add_run(
        chat.chat_id, LEARNED, seq_from=0, seq_to=3, waiting=False, source="fold"
    )
    assert run is not None
    card = MemoryCard(run, chat.book)
    qtbot.addWidget(card)
    assert card.title.text() == "Learned 2 things from earlier in this chat"
    first = run.memories[0]
    undo = card.buttons[(first.id, "Undo")]
    assert undo.accessibleName() == f"Undo: {first.text}"

    with qtbot.waitSignal(card.changed):
        qtbot.mouseClick(undo, Qt.MouseButton.LeftButton)

    kept = [m.text for m in chat.book.list("kept")]
    assert first.text not in kept and LEARNED[1] in kept
    assert first.text not in chat.book.kept_for_prompt(10_000)
    assert (first.id, "Undo") not in card.buttons  # now it says "Undone", with Redo
    assert (first.id, "Redo") in card.buttons


def test_waiting_memories_offer_keep_and_discard(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    run = chat.book.add_run(
        chat.chat_id, LEARNED, seq_from=0, seq_to=3, waiting=True, source="fold"
    )
    assert run is not None
    card = MemoryCard(run, chat.book)
    qtbot.addWidget(card)
    assert "keep them?" in card.title.text()
    a, b = run.memories
    assert chat.book.kept_for_prompt(10_000) == ""  # nothing is used before an OK

    card.buttons[(a.id, "Keep")].click()
    card.buttons[(b.id, "Discard")].click()

    assert [m.text for m in chat.book.list("kept")] == [a.text]
    assert [m.text for m in chat.book.list("discarded")] == [b.text]
    assert a.text in chat.book.kept_for_prompt(10_000)


def test_context_meter_speaks_in_words(qtbot: QtBot) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    assert describe(5_123, 6_100) == (
        "About 5,100 of 6,100 tokens; earlier messages will be summarised soon"
    )
    assert describe(900, 6_100) == "About 900 of 6,100 tokens of what the model reads at once"
    meter.set_usage((5_123, 6_100))
    assert not meter.isHidden()
    assert meter.toolTip() == describe(5_123, 6_100)
    assert 0.8 < meter.fraction < 0.85
    assert meter.value() == 840 and meter.property("level") == "high"
    assert meter.percent_text() == "84%"
    meter.set_usage(None)
    assert meter.isHidden()


def test_context_meter_says_how_far_past_the_budget_and_why_the_budget_is_smaller(
    qtbot: QtBot,
) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.set_usage((24_150, 24_200), 32_768)
    assert meter.percent_text() == "99%"  # not yet past the budget: nothing summarised yet
    assert meter.property("level") == "high"
    meter.set_usage((63_700, 24_200), 32_768)
    assert meter.percent_text() == "263%"  # the true share, not a full bar's "100%"
    assert meter.value() == meter.maximum() and meter.property("level") == "full"
    words = meter.toolTip()
    assert "About 63,700 of 24,200 tokens" in words
    assert "summarised with the next message" in words
    assert "The model reads 32K tokens" in words and "fits the chat into 24,200" in words
    assert max(len(line) for line in words.splitlines()) <= 90  # a tooltip, not a banner


def test_model_picker_groups_ready_models_local_first(qtbot: QtBot) -> None:
    models = [
        ModelInfo(provider="openai", id="gpt-a", label="GPT A", context=200000),
        ModelInfo(provider="ollama", id="llama3", context=32768, local=True, loaded=True),
        ModelInfo(provider="ollama", id="qwen", context=8192, local=True),
        ModelInfo(provider="openai", id="gpt-off", context=8192, ready=False),
    ]
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.set_models(models, "openai/gpt-a")
    assert picker.entries() == [
        "Ollama",
        "llama3  ·  32K  ·  loaded",
        "qwen  ·  8K  ·  not loaded",
        "OpenAI",
        "GPT A  ·  200K",
    ]
    assert picker.current_key() == "openai/gpt-a"
    with qtbot.waitSignal(picker.model_chosen) as chosen:
        picker.combo.activated.emit(1)
    assert chosen.args[0].key == "ollama/llama3"
    # Headings are not choices.
    assert not picker.combo.model().index(0, 0).flags() & Qt.ItemFlag.ItemIsSelectable


def test_model_picker_shows_the_bundled_model_starting(qtbot: QtBot) -> None:
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.show()
    picker.set_starting("Starting the local model…", 0.4)
    assert picker.status.isVisible() and picker.status.text() == "Starting the local model…"
    assert picker.progress.value() == 40
    picker.set_starting(None)
    assert not picker.status.isVisible() and not picker.progress.isVisible()
