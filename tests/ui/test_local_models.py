"""Models on this computer in the window: "Reload <model> with a 16K window" on the too-long
card and beside the picker, the loading line, and downloading an Ollama model with Stop."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from app.demo import MOCK_MODELS
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from engines.base import ModelInfo, NextStep, ProblemKind, TurnProblem
from engines.context.prepare import WARM_TOKENS
from engines.local.reload import LocalModels, ReloadOffer
from engines.mock import MockEngine, Reply
from engines.providers.ollama import OllamaAdapter
from tests.fakes.ollama_server import FakeModel, FakeOllama, running_ollama
from tests.fakes.openai_server import FakeModel as LmModel
from tests.fakes.openai_server import OpenAIStyleServer, too_long_reply
from tests.ui.windows import close_window, closed_after, open_window, route_to
from tests.waits import HANG_MS
from ui.cards.problem_card import ProblemCard
from ui.chat.chat_model import RowKind
from ui.chat.model_picker import PULL_TEXT, ModelPicker
from ui.settings.pull_dialog import PullDialog
from ui.theme import ThemeManager

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

GB = 10**9
QWEN = ModelInfo(
    provider="ollama", id="qwen3:8b", label="qwen3:8b", context=2_048, local=True, loaded=True
)
OFFER = ReloadOffer(model=QWEN, window=16_384, memory=int(6.5 * GB), memory_total=16 * GB)
QWEN_ENTRY = "qwen3:8b  ·  2K  ·  loaded"
TOO_LONG = TurnProblem.of(
    ProblemKind.TOO_LONG,
    "the prompt is longer than the context length",
    NextStep(kind="new-chat", label="Start a new chat with this message", text="Hi"),
)


def colours(image: QImage, widget: QWidget, inside: QWidget) -> Counter[int]:
    """How often each colour shows where ``inside`` is within ``widget``'s grab."""
    top_left = inside.mapTo(widget, QPoint(0, 0))
    found: Counter[int] = Counter()
    for y in range(top_left.y(), top_left.y() + inside.height(), 2):
        for x in range(top_left.x(), top_left.x() + inside.width(), 2):
            found[image.pixel(x, y) & 0xFFFFFF] += 1
    return found


def near(rgb: int, colour: QColor, tolerance: int = 8) -> bool:
    other = QColor(rgb)
    return (
        abs(other.red() - colour.red()) <= tolerance
        and abs(other.green() - colour.green()) <= tolerance
        and abs(other.blue() - colour.blue()) <= tolerance
    )


# --- the card -------------------------------------------------------------------------------


def test_the_too_long_card_paints_the_reload_offer_with_its_memory(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    card = ProblemCard(TOO_LONG, "Hi")
    qtbot.addWidget(card)
    card.resize(640, 160)
    card.show()
    qtbot.waitExposed(card, timeout=HANG_MS)
    assert not card.reload_button.isVisibleTo(card)

    card.offer_reload(OFFER)
    layout = card.layout()
    assert layout is not None
    layout.activate()
    card.resize(640, card.sizeHint().height())
    assert card.reload_button.text() == "Reload qwen3:8b with a 16K window"
    assert "about 6.5 GB of memory (this computer has 16.0 GB)" in card.reload_note.text()
    image = card.grab().toImage()
    button = colours(image, card, card.reload_button)
    # The button is there to see: filled with the accent, with words on it.
    fill, _ = button.most_common(1)[0]
    assert near(fill, theme.color("accent")) and not near(fill, theme.color("warning-bg"))
    assert len(button) >= 3
    note = colours(image, card, card.reload_note)
    assert len(note) >= 3  # words on the card, not an empty line
    # The card's other step steps back: one primary button.
    assert card.button is not None and card.button.objectName() != "NextStepButton"

    with qtbot.waitSignal(card.reload_requested, timeout=HANG_MS) as pressed:
        qtbot.mouseClick(card.reload_button, Qt.MouseButton.LeftButton)
    assert pressed.args == [OFFER]

    card.show_loading("Loading qwen3:8b into memory with a 16K window…")
    assert card.reload_progress.isVisibleTo(card) and not card.reload_button.isEnabled()
    card.reload_failed("qwen3:8b could not be loaded with a 16K window (out of memory).")
    assert not card.reload_progress.isVisibleTo(card) and card.reload_button.isEnabled()
    assert "out of memory" in card.reload_note.text()


def test_the_reload_offer_beside_another_step_is_not_cut_off_in_a_chats_column(
    qtbot: QtBot, theme: ThemeManager
) -> None:
    # Beside "Switch to …" and Details, the reload's words were squeezed and cut at both ends
    # ("ad Mock model (8K) with a 16K win") in a chat's 640-pixel column.
    bigger = ModelInfo(provider="openai", id="gpt-big", label="GPT Big (128K)", context=131_072)
    step = NextStep(kind="switch-model", label="Switch to GPT Big (128K)", model=bigger)
    problem = TurnProblem.of(ProblemKind.TOO_LONG, "the maximum is 2048 tokens", step)
    llama = ModelInfo(provider="ollama", id="llama3.1:8b-instruct", context=2_048, local=True)
    host = QWidget()
    qtbot.addWidget(host)
    host.resize(700, 400)
    card = ProblemCard(problem, "Hi", host)
    card.offer_reload(ReloadOffer(llama, 16_384, int(6.5 * GB), 16 * GB))
    host.show()
    qtbot.waitExposed(host, timeout=HANG_MS)
    # As the chat view places a row's widget: the column's width, whatever the card asks for.
    card.setGeometry(0, 0, 640, card.heightForWidth(640))
    layout = card.layout()
    assert layout is not None
    layout.activate()
    buttons = [card.reload_button, card.button, card.details_button]
    for button in buttons:
        assert button is not None and button.isVisibleTo(card)
        assert button.width() >= button.sizeHint().width(), button.text()
        assert button.geometry().right() < card.width(), button.text()


def test_only_a_too_long_card_takes_a_reload_offer(qtbot: QtBot) -> None:
    card = ProblemCard(TurnProblem.of(ProblemKind.UNREACHABLE, "refused"))
    qtbot.addWidget(card)
    card.offer_reload(OFFER)
    assert not card.reload_button.isVisibleTo(card) and card.offer is None


# --- the picker -----------------------------------------------------------------------------


def test_the_picker_offers_the_reload_and_the_download(qtbot: QtBot) -> None:
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.show()
    picker.set_models([QWEN], QWEN.key)
    assert not picker.reload_button.isVisibleTo(picker)
    assert PULL_TEXT not in picker.entries()

    picker.set_reload_offer(OFFER)
    assert picker.reload_button.isVisibleTo(picker)
    assert picker.reload_button.text() == "Reload with 16K"
    assert "about 6.5 GB of memory" in picker.reload_button.toolTip()
    with qtbot.waitSignal(picker.reload_requested, timeout=HANG_MS) as pressed:
        qtbot.mouseClick(picker.reload_button, Qt.MouseButton.LeftButton)
    assert pressed.args == [OFFER]

    picker.set_loading("Loading qwen3:8b into memory with a 16K window…")
    assert picker.status.isVisibleTo(picker) and picker.progress.isVisibleTo(picker)
    assert not picker.reload_button.isVisibleTo(picker)  # it steps aside while loading
    picker.set_loading(None)
    assert not picker.status.isVisibleTo(picker)
    assert picker.reload_button.isVisibleTo(picker) and picker.reload_button.isEnabled()

    lm = ModelInfo(provider="lmstudio", id="phi-4", context=4_096, local=True, loaded=True)
    picker.set_models([QWEN, lm], QWEN.key)
    picker.set_can_pull(True)
    # At the end of Ollama's models, where a person looks for another one.
    assert picker.entries() == [
        "Ollama",
        QWEN_ENTRY,
        PULL_TEXT,
        "LM Studio",
        "phi-4  ·  4K  ·  loaded",
    ]
    picker.set_models([lm], lm.key)  # Ollama runs but has no model yet
    assert picker.entries() == ["LM Studio", "phi-4  ·  4K  ·  loaded", "Ollama", PULL_TEXT]
    picker.set_models([QWEN, lm], QWEN.key)
    assert picker.current_key() == QWEN.key
    with qtbot.waitSignal(picker.pull_requested, timeout=HANG_MS):
        picker.combo.activated.emit(picker.entries().index(PULL_TEXT))
    assert picker.current_key() == QWEN.key  # the chat's model stays chosen


# --- downloading ----------------------------------------------------------------------------

GEMMA = FakeModel("gemma3:1b", 32_768, ("completion",), family="gemma3", size=GB)


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with running_ollama([FakeModel("qwen3:8b", 40_960)], version="0.12.6") as fake:
        fake.registry[GEMMA.key] = GEMMA
        fake.pull_step = GB // 8
        yield fake


def run(qtbot: QtBot, work: Any) -> Any:
    task = asyncio.ensure_future(work)
    qtbot.waitUntil(task.done, timeout=HANG_MS)
    return task.result()


def test_a_download_shows_progress_stops_and_goes_on_where_it_stopped(
    qtbot: QtBot, ollama: FakeOllama
) -> None:
    adapter = OllamaAdapter(ollama.url)
    local = LocalModels(lambda name: adapter if name == "ollama" else None)
    dialog = PullDialog(local.pull)
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.download.isEnabled()
    ollama.pull_hold_at = GB // 2

    qtbot.keyClicks(dialog.name, "gemma3:1b")
    qtbot.mouseClick(dialog.download, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.progress.value() >= 450, timeout=HANG_MS)
    assert dialog.progress.isVisibleTo(dialog) and dialog.stop_button.isVisibleTo(dialog)
    assert not dialog.download.isVisibleTo(dialog)  # Stop stands in its place
    assert dialog.status.text() == "Downloading gemma3:1b… 0.5 of 1.0 GB"

    qtbot.mouseClick(dialog.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=HANG_MS)
    assert dialog.status.text().startswith("Stopped. Ollama keeps what it fetched")
    assert run(qtbot, asyncio.to_thread(ollama.pull_closed.wait, HANG_MS / 1000))
    assert dialog.download.isEnabled() and not dialog.progress.isVisibleTo(dialog)

    ollama.pull_release.set()
    with qtbot.waitSignal(dialog.pulled, timeout=HANG_MS) as pulled:
        qtbot.mouseClick(dialog.download, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=HANG_MS)
        assert dialog.progress.value() >= 500  # on from where it stopped, not from nothing
    assert pulled.args == ["gemma3:1b"]
    assert dialog.status.text() == "gemma3:1b is ready to chat with."
    assert ollama.pulls_closed == 1
    run(qtbot, local.aclose())
    run(qtbot, adapter.aclose())


def test_a_name_the_library_lacks_is_said_in_one_sentence(qtbot: QtBot, ollama: FakeOllama) -> None:
    adapter = OllamaAdapter(ollama.url)
    local = LocalModels(lambda name: adapter if name == "ollama" else None)
    dialog = PullDialog(local.pull)
    qtbot.addWidget(dialog)
    qtbot.keyClicks(dialog.name, "nosuch")
    qtbot.keyClick(dialog.name, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not dialog.running, timeout=HANG_MS)
    assert dialog.status.text() == "Ollama's library has no model called nosuch."
    run(qtbot, local.aclose())
    run(qtbot, adapter.aclose())


# --- in the window, against the loopback LM Studio -------------------------------------------

LM = "qwen2.5-7b-instruct"


@pytest.fixture
def lmstudio() -> Iterator[OpenAIStyleServer]:
    model = LmModel(LM, window=4_096, trained=32_768, size_bytes=4 * GB)
    with OpenAIStyleServer("lmstudio", models=[model]) as server:
        yield server


@pytest.fixture
def real_services(data_dir: Path, lmstudio: OpenAIStyleServer) -> Iterator[AppServices]:
    route_to(data_dir, lmstudio_url=lmstudio.url)
    yield from closed_after(build_services(data_dir, mock=False, secrets=SessionSecrets()))


def test_lm_studio_at_4k_reloads_with_16k_from_the_card_and_the_message_goes_again(
    qtbot: QtBot, real_services: AppServices, lmstudio: OpenAIStyleServer
) -> None:
    win = open_window(qtbot, real_services)
    model = real_services.catalogue.find(f"lmstudio/{LM}")
    assert model is not None and model.context == 4_096
    win.new_chat()
    win.switch_model(model)
    # The picker offers it at once (LM Studio's list says what a bigger window needs).
    qtbot.waitUntil(lambda: win.picker.reload_button.isVisibleTo(win.picker), timeout=HANG_MS)
    assert win.picker.reload_button.text() == "Reload with 16K"

    # The model, loaded at 4K, refuses the message however Conch cuts it.
    lmstudio.refusal = too_long_reply("lmstudio", 4_096, 9_000)
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Please read this contract carefully.")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: win.chat_view.widget_at(RowKind.PROBLEM) is not None, timeout=HANG_MS)
    card = win.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard)
    qtbot.waitUntil(lambda: card.reload_button.isVisibleTo(card), timeout=HANG_MS)
    assert card.reload_button.text() == f"Reload {LM} with a 16K window"
    assert "GB of memory" in card.reload_note.text()

    gate = threading.Event()
    lmstudio.load_gate = gate
    qtbot.mouseClick(card.reload_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(lmstudio.requests_to("/api/v1/models/load")), timeout=HANG_MS)
    # While it loads, the card and the picker both say so.
    loading = f"Loading {LM} into memory with a 16K window…"
    assert card.reload_note.text() == loading and card.reload_progress.isVisibleTo(card)
    assert win.picker.status.toolTip() == loading and win.picker.status.isVisibleTo(win.picker)
    assert win.picker.status.text() == "Loading with a 16K window…"
    lmstudio.refusal = None
    gate.set()

    def answered() -> bool:
        chat = win.current_chat_id
        said = [m.text for m in real_services.store.messages(chat) if m.role == "assistant"]
        return "Hello, world!" in said

    qtbot.waitUntil(answered, timeout=HANG_MS)
    [load] = lmstudio.requests_to("/api/v1/models/load")
    assert load.json["context_length"] == 16_384 and lmstudio.duplicate_loads == 0
    reloaded = real_services.catalogue.find(f"lmstudio/{LM}")
    assert reloaded is not None and reloaded.context == 16_384
    # The 4K the refusal named no longer holds the chat back: the resend had the whole 16K.
    assert lmstudio.chat_requests[-1].json["max_tokens"] > 2_000
    log = [(m.role, m.text) for m in real_services.store.messages(win.current_chat_id)]
    assert [t for r, t in log if r == "user"] == ["Please read this contract carefully."]
    assert log[-1] == ("assistant", "Hello, world!")
    qtbot.waitUntil(lambda: not win.picker.status.isVisibleTo(win.picker), timeout=HANG_MS)
    # The next step up is still there, for a longer chat later.
    assert win.picker.reload_button.text() == "Reload with 32K"
    close_window(qtbot, win, real_services)


def test_a_too_long_card_shown_when_the_chat_opens_is_offered_the_reload(
    qtbot: QtBot, real_services: AppServices
) -> None:
    store = real_services.store
    key = f"lmstudio/{LM}"
    chat = store.create_chat(title="Contract", model_key=key)
    store.append_message(chat.id, "user", "The whole contract, please.", model_key=key)
    store.append_message(chat.id, "assistant", "", partial=True, problem=TOO_LONG, model_key=key)
    real_services.settings.update(last_chat_id=chat.id)
    win = open_window(qtbot, real_services)
    card = win.chat_view.widget_at(RowKind.PROBLEM)
    assert isinstance(card, ProblemCard)
    # LM Studio is asked about the model after the card is built: the offer arrives then.
    qtbot.waitUntil(lambda: card.reload_button.isVisibleTo(card), timeout=HANG_MS)
    assert card.reload_button.text() == f"Reload {LM} with a 16K window"
    assert win.picker.reload_button.isVisibleTo(win.picker)
    close_window(qtbot, win, real_services)


# --- in the window, against the loopback Ollama ---------------------------------------------


@pytest.fixture
def ollama_services(data_dir: Path, ollama: FakeOllama) -> Iterator[AppServices]:
    ollama.load("qwen3:8b", 2_048)  # another app loaded it with Ollama's old default
    route_to(data_dir, ollama_url=ollama.url)
    yield from closed_after(build_services(data_dir, mock=False, secrets=SessionSecrets()))


def test_ollama_at_2k_reloads_from_the_picker_and_a_download_joins_the_list(
    qtbot: QtBot, ollama_services: AppServices, ollama: FakeOllama
) -> None:
    win = open_window(qtbot, ollama_services)
    win.new_chat()
    assert win.picker.current_key() == "ollama/qwen3:8b"
    qtbot.waitUntil(lambda: win.picker.reload_button.isVisibleTo(win.picker), timeout=HANG_MS)
    assert win.picker.reload_button.text() == "Reload with 16K"

    qtbot.mouseClick(win.picker.reload_button, Qt.MouseButton.LeftButton)

    def reloaded() -> bool:
        found = ollama_services.catalogue.find("ollama/qwen3:8b")
        return found is not None and found.context == 16_384

    qtbot.waitUntil(reloaded, timeout=HANG_MS)
    assert ollama.loaded == {"qwen3:8b": 16_384}
    assert win.picker.entries()[1] == "qwen3:8b  ·  16K  ·  loaded"
    reloads = ollama.total_reloads()
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Hello")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(ollama.chat_requests()) >= 2, timeout=HANG_MS)
    bridge = win.bridge()
    assert bridge is not None
    qtbot.waitUntil(lambda: not bridge.busy, timeout=HANG_MS)
    assert ollama.chat_requests()[-1]["options"]["num_ctx"] == 16_384
    assert ollama.total_reloads() == reloads  # the chat found the model as it wanted it

    # "Download a model…" under Ollama's models opens the dialog; what it fetches is listed.
    entries = win.picker.entries()
    assert entries[2] == PULL_TEXT
    win.picker.combo.activated.emit(2)
    dialog = win.local_models.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.keyClicks(dialog.name, "gemma3:1b")
    qtbot.keyClick(dialog.name, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: ollama_services.catalogue.find("ollama/gemma3:1b") is not None, timeout=HANG_MS
    )

    def listed() -> bool:
        return any(e.startswith("gemma3:1b  ·") for e in win.picker.entries())

    qtbot.waitUntil(listed, timeout=HANG_MS)
    assert win.picker.current_key() == "ollama/qwen3:8b"
    close_window(qtbot, win, ollama_services)


# --- the loading line, on the mock model --------------------------------------------------


def test_a_model_not_in_memory_shows_loading_until_its_first_word(
    qtbot: QtBot, data_dir: Path
) -> None:
    services = build_services(data_dir, mock=True, seed_demo_chat=False)
    win = open_window(qtbot, services)
    chat_id = win.new_chat()
    # The demo's server holds its first model from the start; the 8K one it has to load.
    small = services.catalogue.find(MOCK_MODELS[1].key)
    assert small is not None
    win.switch_model(small)
    bridge = win.bridge(chat_id)
    assert bridge is not None
    bridge.conversation.engine = MockEngine([Reply("Hello there.")], fold_every=0, delay=0.002)
    model = bridge.conversation.model
    listed = services.catalogue.find(model.key)
    assert listed is not None and model.local and not listed.loaded

    seen: dict[str, Any] = {}

    def busy(on: bool) -> None:  # connected after the window's own listeners: sees their work
        if on:
            seen["busy"] = (win.picker.status.isVisibleTo(win.picker), win.picker.status.text())
            seen["said"] = win.picker.status.toolTip()

    def first_word(_text: str) -> None:
        seen.setdefault("answering", win.picker.status.isVisibleTo(win.picker))

    bridge.busy_changed.connect(busy)
    bridge.text_delta.connect(first_word)
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "Hi")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not bridge.busy and "answering" in seen, timeout=HANG_MS)
    assert seen["busy"] == (True, "Loading into memory…")
    assert seen["said"] == f"Loading {model.name} into memory…"
    assert seen["answering"] is False
    close_window(qtbot, win, services)


def test_the_context_meter_reads_the_bigger_window_as_soon_as_the_reload_is_done(
    qtbot: QtBot, real_services: AppServices, lmstudio: OpenAIStyleServer
) -> None:
    win = open_window(qtbot, real_services)
    model = real_services.catalogue.find(f"lmstudio/{LM}")
    assert model is not None and model.context == 4_096
    chat_id = win.new_chat()
    win.switch_model(model)
    # A message that fills what a 4K window leaves for the chat, and a bit more.
    win.composer.set_text("clause and condition " * 800)
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: [m.role for m in real_services.store.messages(chat_id)] == ["user", "assistant"],
        timeout=HANG_MS,
    )
    meter, label = win.composer.meter, win.composer.meter_label
    qtbot.waitUntil(lambda: label.text() != "" and meter.used > 0, timeout=HANG_MS)
    before = label.text()
    assert int(before.rstrip("%")) >= 100 and meter.fraction == 1.0

    # (Reading ahead, in the background, the fold the next message would bring sends requests
    # of a one-token answer: no message.)
    def messages_sent() -> int:
        sent = [r.json or {} for r in lmstudio.chat_requests]
        return sum(1 for body in sent if body.get("max_tokens") != WARM_TOKENS)

    sent = messages_sent()
    qtbot.waitUntil(lambda: win.picker.reload_button.isVisibleTo(win.picker), timeout=HANG_MS)
    assert win.picker.reload_button.text() == "Reload with 16K"

    qtbot.mouseClick(win.picker.reload_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(lmstudio.requests_to("/api/v1/models/load")), timeout=HANG_MS)

    # No message sent: the meter and its words follow the 16K window the moment it is loaded.
    qtbot.waitUntil(lambda: label.text() != before, timeout=HANG_MS)
    assert int(label.text().rstrip("%")) < 50
    assert 0 < meter.fraction < 0.5 and meter.value() < meter.maximum() // 2
    assert messages_sent() == sent
    # The bar is drawn part-filled: more than one colour along its middle row.
    image = meter.grab().toImage()
    row = image.height() // 2
    assert len({image.pixel(x, row) for x in range(2, image.width() - 2)}) >= 2
    close_window(qtbot, win, real_services)
