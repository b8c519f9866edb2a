"""The main window on real mock-mode services: send, stop, /compact, cards, chats, state."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.main import build_parser
from app.services import AppServices, build_services
from engines.base import ModelInfo, NextStep, ProblemKind
from engines.mock import CompactBefore, Refuse, Reply, ShortenBefore
from tests.ui.windows import Scripts
from tests.waits import HANG_MS
from ui.cards.memory_card import MemoryCard
from ui.cards.problem_card import ProblemCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.chat_model import RowKind
from ui.main_window import MainWindow
from ui.start import QUIT_AFTER_ENV, quit_after_ms

# The offscreen platform cannot resize windows to their hints; it says so at WARNING.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

BIG, SMALL, _LARGE = MOCK_MODELS  # "Mock model" reads 32K, "Mock model (8K)" reads 8K


def send(qtbot: QtBot, win: MainWindow, text: str) -> None:
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, text)
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)


def wait_idle(qtbot: QtBot, win: MainWindow, chat_id: str | None = None) -> None:
    bridge = win.bridge(chat_id)
    assert bridge is not None
    qtbot.waitUntil(lambda: not bridge.busy, timeout=8000)


def test_a_message_streams_in_and_names_the_chat(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Larch, untreated.", chunk_size=3)])
    chat_id = window.new_chat()
    send(qtbot, window, "Which wood for raised beds?")
    qtbot.waitUntil(lambda: window.composer.busy, timeout=3000)
    wait_idle(qtbot, window)

    assert not window.composer.busy
    texts = [(m.role, m.text) for m in services.store.messages(chat_id)]
    assert texts == [("user", "Which wood for raised beds?"), ("assistant", "Larch, untreated.")]
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown == ["Which wood for raised beds?", "Larch, untreated."]
    assert window.sidebar.titles()[0] == "Which wood for raised beds?"
    assert window.title_label.text() == "Which wood for raised beds?"
    assert window.composer.meter.isVisibleTo(window)
    assert "tokens" in window.composer.meter.toolTip()


def test_after_the_first_turn_of_a_new_chat_the_meter_does_not_read_0_percent(
    qtbot: QtBot, window: MainWindow, scripts: Scripts
) -> None:
    # A short turn: the 32K model's room for the chat (about 24,000 tokens once Conch's
    # instructions and the answer's room are kept) is far from full, but no longer empty.
    scripts.queue.append([Reply("Larch, untreated.")])
    window.new_chat()
    send(qtbot, window, "Which wood for raised beds?")
    qtbot.waitUntil(lambda: window.composer.busy, timeout=3000)
    wait_idle(qtbot, window)
    meter, label = window.composer.meter, window.composer.meter_label
    assert 0 < meter.used < meter.budget // 100
    assert label.text() == "<1%" and label.isVisibleTo(window)
    assert meter.toolTip().startswith(f"About {meter.used} of ")


def test_stop_keeps_what_arrived(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("word " * 500, chunk_delay=0.01, chunk_size=5)])
    chat_id = window.new_chat()
    send(qtbot, window, "Tell me everything")
    bridge = window.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: len(bridge.partial_text) > 20, timeout=5000)
    qtbot.mouseClick(window.composer.stop_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    kept = services.store.message(chat_id, 1)
    assert kept is not None and kept.partial and kept.text
    assert kept.problem is not None and kept.problem.kind is ProblemKind.CANCELLED
    assert window.composer.send_button.isVisibleTo(window)


def chat_of_two_turns(qtbot: QtBot, win: MainWindow, scripts: Scripts) -> str:
    """A new chat with two answered turns (the newest is what a fold keeps)."""
    scripts.queue.append([Reply("Noted."), Reply("Fine.")])
    chat_id = win.new_chat()
    for text in ("The budget is 2,500 euros.", "We build 24 beds."):
        send(qtbot, win, text)
        wait_idle(qtbot, win)
    return chat_id


def test_compact_command_folds_with_the_focus_and_shows_the_divider(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    chat_id = chat_of_two_turns(qtbot, window, scripts)
    send(qtbot, window, "/compact keep the budget numbers")
    qtbot.waitUntil(lambda: services.store.latest_compaction(chat_id) is not None, timeout=5000)
    wait_idle(qtbot, window)

    fold = services.store.latest_compaction(chat_id)
    assert fold is not None and "Kept in focus, as asked: keep the budget numbers" in fold.summary
    assert [m.role for m in services.store.messages(chat_id)] == ["user", "assistant"] * 2
    divider = window.chat_view.widget_at(RowKind.DIVIDER)
    assert isinstance(divider, SummaryDivider)
    assert divider.compaction.first_kept_seq == fold.first_kept_seq


def test_too_long_card_switches_to_the_bigger_model_and_sends_again(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    step = NextStep(kind="switch-model", label="Switch", model=BIG)
    scripts.queue.append([Refuse(ProblemKind.TOO_LONG, next_step=step), Reply("Read it all.")])
    chat_id = window.new_chat()
    window.switch_model(SMALL)
    send(qtbot, window, "A very long message")
    wait_idle(qtbot, window)

    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None
    assert card.button.text() == "Switch to Mock model (reads 32K)"
    qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    chat = services.store.get_chat(chat_id)
    assert chat is not None and chat.model_key == BIG.key
    assert window.picker.current_key() == BIG.key
    log = [(m.role, m.text) for m in services.store.messages(chat_id)]
    # Sent again in place: the question is in the chat once, the answer right after it.
    assert [text for role, text in log if role == "user"] == ["A very long message"]
    assert log[-1] == ("assistant", "Read it all.")
    inputs = scripts.engines[chat_id].inputs
    assert inputs[-1].model.key == BIG.key and inputs[-1].seq == inputs[0].seq
    assert window.chat_view.widget_at(RowKind.PROBLEM) is None  # the answer replaced the card
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown == ["A very long message", "Read it all."]


def test_switching_twice_still_asks_once(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    to_big = NextStep(kind="switch-model", label="Switch", model=BIG)
    to_large = NextStep(kind="switch-model", label="Switch", model=_LARGE)
    scripts.queue.append(
        [
            Refuse(ProblemKind.TOO_LONG, next_step=to_big),
            Refuse(ProblemKind.TOO_LONG, next_step=to_large),
            Reply("Read it all at last."),
        ]
    )
    chat_id = window.new_chat()
    window.switch_model(SMALL)
    send(qtbot, window, "A whole book")
    wait_idle(qtbot, window)
    for _switch in range(2):
        card = window.chat_view.widget_at(RowKind.PROBLEM)
        assert isinstance(card, ProblemCard) and card.button is not None
        qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)
        wait_idle(qtbot, window)

    log = services.store.messages(chat_id)
    assert [m.text for m in log if m.role == "user"] == ["A whole book"]
    assert log[-1].text == "Read it all at last." and log[-1].model_key == _LARGE.key
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown == ["A whole book", "Read it all at last."]


def test_too_long_card_can_start_a_new_chat_with_the_message(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Refuse(ProblemKind.TOO_LONG)])
    first = window.new_chat()
    send(qtbot, window, "Paste of a whole book")
    wait_idle(qtbot, window)
    card = window.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard) and card.button is not None
    assert card.button.text() == "Start a new chat with this message"

    qtbot.mouseClick(card.button, Qt.MouseButton.LeftButton)

    assert window.current_chat_id != first
    assert window.composer.text() == "Paste of a whole book"
    assert services.store.message_count(window.current_chat_id) == 0
    assert services.store.get_chat(first) is not None


def test_a_model_list_that_arrives_after_the_window_is_gone_reaches_no_widget(
    qtbot: QtBot, services: AppServices, caplog: pytest.LogCaptureFixture
) -> None:
    # A listing still under way when the window is closed and deleted ends afterwards.
    win = MainWindow(services)
    win.show()
    started = asyncio.get_running_loop().create_task(win.start())
    qtbot.waitUntil(started.done, timeout=HANG_MS)
    view = win.chat_view
    win.close()
    win.deleteLater()
    qtbot.waitUntil(lambda: not shiboken6.isValid(view), timeout=HANG_MS)

    listed = asyncio.get_running_loop().create_task(services.catalogue.refresh())
    qtbot.waitUntil(listed.done, timeout=HANG_MS)

    assert listed.result()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_deleting_a_chat_while_it_streams_keeps_the_others(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("kept")])
    other = window.new_chat()
    send(qtbot, window, "A chat to keep")
    wait_idle(qtbot, window)

    scripts.queue.append([Reply("word " * 500, chunk_delay=0.01, chunk_size=5)])
    doomed = window.new_chat()
    send(qtbot, window, "This one goes")
    bridge = window.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: len(bridge.partial_text) > 10, timeout=5000)

    window.sidebar.delete(doomed)
    qtbot.waitUntil(lambda: not bridge.busy, timeout=5000)

    assert window.current_chat_id == other
    assert window.sidebar.chat_ids() == [other]
    assert [m.text for m in services.store.messages(other)] == ["A chat to keep", "kept"]
    kept = services.store.message(doomed, 1)
    assert kept is not None and kept.partial  # what arrived is saved, in case of Undo
    assert window.sidebar.undo_bar.isVisibleTo(window)

    qtbot.mouseClick(window.sidebar.undo_bar.button, Qt.MouseButton.LeftButton)
    assert set(window.sidebar.chat_ids()) == {other, doomed}
    assert window.current_chat_id == doomed
    shown = [r.message.text for r in window.chat_view.chat_model.rows() if r.message]
    assert shown[:1] == ["This one goes"]


def test_a_learning_run_shows_a_card_and_undo_forgets(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Good."), CompactBefore(), Reply("Noted.")])
    window.new_chat()
    send(qtbot, window, "We chose untreated larch for the beds.")
    wait_idle(qtbot, window)
    send(qtbot, window, "And the soil?")
    qtbot.waitUntil(lambda: bool(window.chat_view.widgets_of(RowKind.MEMORIES)), timeout=5000)
    wait_idle(qtbot, window)

    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard)
    assert card.title.text() == "Learned 1 thing from earlier in this chat"
    [memory] = card.run.memories
    assert "untreated larch" in memory.text
    card.buttons[(memory.id, "Undo")].click()
    assert services.memories.list("kept") == []
    assert "larch" not in services.system_prompt(BIG)


def test_tidy_up_memories_now_says_what_it_learned_and_shows_the_card(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    store = services.store
    chat = store.create_chat(title="Committee", model_key=BIG.key)
    store.append_message(chat.id, "user", "My name is Priya and I chair the committee.")
    store.append_message(chat.id, "assistant", "Nice to meet you, Priya.")
    window.sidebar.refresh()
    window.open_chat(chat.id)
    [tidy] = [c for c in window.palette_commands() if c.title == "Tidy up memories now"]
    status = window.statusBar()

    task = asyncio.ensure_future(tidy.callback())  # as the palette runs it
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    assert status.currentMessage() == "Memories tidied up: learned 1 thing from 1 chat."
    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard) and "Priya" in card.run.memories[0].text
    # Again: every word is read already, and it says so rather than nothing.
    task = asyncio.ensure_future(tidy.callback())
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    assert status.currentMessage() == "Memories tidied up: nothing new to remember."


def test_the_demo_model_says_it_is_loaded_before_a_message_is_sent(window: MainWindow) -> None:
    window.new_chat()
    assert window.picker.current_key() == BIG.key
    # The header's line as painted: the demo's model is ready at once, nothing to load.
    assert window.picker.combo.shown_text() == f"{BIG.name}  ·  32K  ·  loaded"


def test_a_local_model_shows_as_loaded_once_it_has_answered(
    qtbot: QtBot, window: MainWindow, scripts: Scripts
) -> None:
    scripts.queue.append([Reply("Hello.")])
    window.new_chat()
    window.switch_model(SMALL)

    def entry(model: ModelInfo) -> str:
        return next(e for e in window.picker.entries() if e.startswith(f"{model.name}  ·"))

    assert entry(SMALL).endswith("not loaded")
    send(qtbot, window, "Hi")
    wait_idle(qtbot, window)
    qtbot.waitUntil(lambda: entry(SMALL).endswith("  ·  loaded"), timeout=10_000)
    assert window.picker.current_key() == SMALL.key
    # The demo's server holds one model, as a small computer would: the other now needs loading.
    assert entry(BIG).endswith("not loaded")


def test_a_memory_edited_on_the_memories_page_shows_its_new_words_in_the_chat(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    chat_id = window.new_chat()
    run = services.memories.add_run(
        chat_id, ["Marta waters on Mondays."], seq_from=0, seq_to=0, waiting=False, source="fold"
    )
    assert run is not None
    window.open_chat(chat_id)
    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard)
    [memory] = run.memories

    window.show_settings("memories")
    page = window._settings_dialog.memories_page
    row = page.row_for(memory.id)
    assert row is not None
    row.start_editing()
    row.editor.setPlainText("Marta waters on Tuesdays.")
    qtbot.mouseClick(row.save_button, Qt.MouseButton.LeftButton)

    [card] = window.chat_view.widgets_of(RowKind.MEMORIES)
    assert isinstance(card, MemoryCard)
    words = [label.text() for label in card.findChildren(QLabel) if label.isVisibleTo(card)]
    assert "• Marta waters on Tuesdays." in words
    assert "• Marta waters on Mondays." not in words
    window._settings_dialog.close()


def test_window_state_and_last_chat_come_back(
    qtbot: QtBot, window: MainWindow, services: AppServices
) -> None:
    first = window.new_chat()
    window.new_chat()
    window.open_chat(first)
    window.resize(640, 480)  # the offscreen screen is 800 × 600
    window.close()

    again = MainWindow(services)
    qtbot.addWidget(again)
    assert again.current_chat_id == first
    assert again.size().width() == 640 and again.size().height() == 480


def test_search_and_rename(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    scripts.queue.append([Reply("Copper tape works.")])
    slugs = window.new_chat()
    send(qtbot, window, "What about slugs?")
    wait_idle(qtbot, window)
    other = window.new_chat()
    window.sidebar.rename(other, "Budget")

    window.sidebar.search.setText("copper")  # only in an answer's text
    qtbot.waitUntil(lambda: window.sidebar.chat_ids() == [slugs], timeout=3000)
    window.sidebar.search.setText("budg")
    qtbot.waitUntil(lambda: window.sidebar.chat_ids() == [other], timeout=3000)
    assert window.title_label.text() == "Budget"
    window.sidebar.search.setText("nothing like this")
    qtbot.waitUntil(lambda: window.sidebar.chat_ids() == [], timeout=3000)
    assert window.sidebar.empty.isVisibleTo(window)


def test_export_writes_every_message(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, tmp_path: Path
) -> None:
    scripts.queue.append([Reply("| a | b |\n|---|---|\n| 1 | 2 |")])
    window.new_chat()
    send(qtbot, window, "A table please")
    wait_idle(qtbot, window)
    out = window.export_current_markdown(tmp_path / "chat.md")
    assert out is not None
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# A table please")
    assert "**You:**\n\nA table please" in text and "| 1 | 2 |" in text


def test_ctrl_k_then_summ_and_enter_summarises_the_start_of_the_chat(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    chat_id = chat_of_two_turns(qtbot, window, scripts)
    assert services.store.latest_compaction(chat_id) is None

    qtbot.keyClick(window, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    palette = window._palette
    assert palette is not None
    qtbot.waitUntil(lambda: palette.search.hasFocus() or palette.search.isVisible(), timeout=3000)
    qtbot.keyClicks(palette.search, "summ")
    qtbot.keyClick(palette.search, Qt.Key.Key_Return)

    qtbot.waitUntil(lambda: services.store.latest_compaction(chat_id) is not None, timeout=5000)
    wait_idle(qtbot, window)
    fold = services.store.latest_compaction(chat_id)
    assert fold is not None and fold.first_kept_seq == 2  # all but the newest turn
    assert isinstance(window.chat_view.widget_at(RowKind.DIVIDER), SummaryDivider)


def test_the_palette_offers_the_summary_command(window: MainWindow) -> None:
    titles = [c.title for c in window.palette_commands()]
    assert titles[0] == "Summarise the start of this chat"
    assert {"New chat", "Switch model…", "Settings", "Health"} <= set(titles)


def test_the_mock_demo_opens_with_its_divider_and_memories(
    qtbot: QtBot, tmp_path: Path, run_window: Callable[[AppServices], MainWindow]
) -> None:
    services = build_services(tmp_path / "demo", mock=True)
    try:
        win = run_window(services)
        assert win.title_label.text() == "Community garden"
        divider = win.chat_view.widget_at(RowKind.DIVIDER)
        assert isinstance(divider, SummaryDivider)
        assert divider.title == "Earlier messages are summarised for Mock model"
        [card] = win.chat_view.widgets_of(RowKind.MEMORIES)
        assert isinstance(card, MemoryCard)
        assert card.title.text() == "Learned 4 things from earlier in this chat"
        assert win.picker.current_key() == BIG.key
    finally:
        services.store.close()
        services.memories.close()
        services.health.close()


@pytest.fixture
def run_window(qtbot: QtBot) -> Iterator[Callable[[AppServices], MainWindow]]:
    made: list[MainWindow] = []

    def make(services: AppServices) -> MainWindow:
        win = MainWindow(services)
        qtbot.addWidget(win)
        win.show()
        task = asyncio.get_running_loop().create_task(win.start())
        qtbot.waitUntil(task.done, timeout=5000)
        made.append(win)
        return win

    yield make
    for win in made:
        close = asyncio.get_running_loop().create_task(win.aclose())
        qtbot.waitUntil(close.done, timeout=5000)


# --- the real entry point ---------------------------------------------------------------------


def _conch(args: list[str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        QT_QPA_PLATFORM="offscreen",
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_STATE_HOME=str(home / "state"),
    )
    env.pop(QUIT_AFTER_ENV, None)
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "app.main", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_conch_mock_opens_the_window_and_quits_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data = tmp_path / "conch-data"
    done = _conch(["--mock", "--data-dir", str(data), "--quit-after", "1.5"], home)

    assert done.returncode == 0, done.stderr
    assert (data / "conch.sqlite3").exists()
    assert (data / "settings.json").exists()  # window state saved on the way out
    assert "Traceback" not in done.stderr
    assert list(home.iterdir()) == []  # nothing written outside the data dir


def test_subcommands_go_to_the_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _conch(["models", "--mock", "--data-dir", str(tmp_path / "d"), "--json"], home)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [(m["provider"], m["id"]) for m in listed] == [
        ("mock", "mock-model"),
        ("mock", "mock-small"),
        ("mock", "mock-large"),
    ]


@pytest.mark.allow_log("conch.main")  # a wrong value is logged
def test_quit_after_comes_from_the_flag_or_the_environment() -> None:
    parser = build_parser()
    assert quit_after_ms(parser.parse_args(["--quit-after", "2.5"]), {}) == 2500
    none = parser.parse_args([])
    assert quit_after_ms(none, {QUIT_AFTER_ENV: "1500"}) == 1500
    assert quit_after_ms(none, {QUIT_AFTER_ENV: "soon"}) is None
    assert quit_after_ms(none, {}) is None


PASTED = ("A pasted report " * 40).strip()


def test_a_message_sent_in_part_says_so_and_the_switch_sends_it_whole(
    qtbot: QtBot, window: MainWindow, scripts: Scripts, services: AppServices
) -> None:
    step = NextStep(kind="switch-model", label=f"Switch to {BIG.name}", model=BIG)
    scripts.queue.append(
        [
            ShortenBefore(sent_chars=400, next_step=step),
            Reply("Read the ends."),
            Reply("All of it."),
        ]
    )
    chat_id = window.new_chat()
    window.switch_model(SMALL)
    send(qtbot, window, PASTED)
    wait_idle(qtbot, window)

    notice = window.cut_notice
    assert notice.isVisible() and "first and last 200 characters" in notice.label.text()
    # Painted, not only visible: the notice's pixels are not all one colour.
    picture = notice.grab().toImage()
    colours = {picture.pixel(x, picture.height() // 2) for x in range(0, picture.width(), 3)}
    assert len(colours) > 2
    assert notice.button.isVisible() and notice.button.text() == f"Switch to {BIG.name}"
    qtbot.mouseClick(notice.button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)

    assert not notice.isVisible()
    assert window.picker.current_key() == BIG.key
    log = [(m.role, m.text) for m in services.store.messages(chat_id)]
    assert [text for role, text in log if role == "user"] == [PASTED]
    assert log[-1] == ("assistant", "All of it.")
    inputs = scripts.engines[chat_id].inputs
    # Sent again in place, whole, from the chat log.
    assert inputs[-1].model.key == BIG.key and inputs[-1].seq == inputs[0].seq
    assert inputs[-1].text == PASTED


def test_a_status_note_floats_over_the_chat_and_never_moves_it(
    qtbot: QtBot, window: MainWindow
) -> None:
    bar = window.statusBar()
    toast = window.status_toast
    # No strip under the chat, ever: the chat reaches the window's bottom.
    assert window.splitter.geometry().bottom() == window.height() - 1
    chat = window.chat_stack
    before = chat.geometry()
    quiet = chat.grab().toImage()

    words = "Chat settings saved; they apply from the next message."
    window.show_status(words)
    qtbot.waitUntil(toast.isVisible, timeout=HANG_MS)
    assert bar.currentMessage() == words and toast.text() == words
    assert not bar.isVisible()
    assert chat.geometry() == before  # nothing moved to make room
    # It sits at the bottom of the chat, inside it, and is painted there.
    box = toast.geometry()
    assert chat.rect().contains(box)
    assert box.bottom() > chat.height() * 3 // 4
    shown = chat.grab().toImage()
    centre = box.center()
    row = [(x, centre.y()) for x in range(box.left() + 4, box.right() - 4)]
    assert any(shown.pixel(x, y) != quiet.pixel(x, y) for x, y in row)
    # Clicks go through to the chat under it.
    assert toast.testAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)

    bar.clearMessage()  # what the timeout does after STATUS_MS
    assert not toast.isVisible()
    assert chat.geometry() == before
