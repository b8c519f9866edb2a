"""Outside text is never markup: the attack strings, at rest in the data dir, through the window.

Every place the window shows words Conch did not write (a chat's title in the sidebar, above
the chat, in the title bar and the Trash; a memory on its page and on the chat's card; a
Health note and its model; a problem card's step and details; the summary line; a tool call's
line and result; a tool server's name; the chat settings' heading) is fed each string of
tests/data/attack_strings.json and must show it exactly as written, as plain text. The
``<img src="FIFO">`` string points at a named pipe that notices being opened: a widget reading
it as HTML would open it (and, outside a test, hang for good). ``<img src="/dev/zero">`` would
abort the process, so it goes to a real ``conch`` child process instead, as in the report.
"""

from __future__ import annotations

import ast
import asyncio
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import shiboken6
from PySide6 import QtGui
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QApplication, QLabel, QToolTip, QWidget
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from app.settings import SettingsStore
from app.store import ChatStore
from app.tool_calls import keep_tool_call
from engines.base import ModelInfo, NextStep, ProblemKind, ToolResult, TurnProblem
from tests.attacks import Attack, FifoTripwire, markup, names
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script, ScriptedCall
from tests.ui.windows import close_files, route_to, shown
from tests.waits import HANG_MS, HANG_SECONDS
from ui.cards.memory_card import MemoryCard
from ui.cards.problem_card import ProblemCard
from ui.cards.summary_divider import SummaryDivider
from ui.chat.chat_model import RowKind
from ui.chat.tool_rows import ToolRows
from ui.main_window import MainWindow
from ui.plain import button_words, plain_tip, shown_name, window_title

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

ROOT = Path(__file__).resolve().parents[2]
# The direction controls the issue names: embeddings and overrides, isolates, marks.
TIP_LABEL = "qtooltip_label"  # Qt's name for the label a tooltip is shown in
CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
IN_PROCESS = [a.name for a in markup(Path("unused")) if a.in_process]


def attack(name: str, fifo: Path) -> Attack:
    return next(a for a in markup(fifo) if a.name == name)


# --- what a person would have in their data dir after an import or a hostile server ------------


def seed(data_dir: Path, text: str) -> dict[str, str]:
    """A data dir whose every outside field is ``text``: returns the chats' ids by role."""
    store = ChatStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    try:
        gone = store.create_chat(title=text, model_key="mock/mock-model")
        store.append_message(gone.id, "user", "hello")
        store.delete_chat(gone.id)  # in the Trash
        chat = store.create_chat(title=text, model_key="mock/mock-model")
        store.append_message(chat.id, "user", "first")
        store.append_message(chat.id, "assistant", "an answer")
        store.add_compaction(chat.id, 2, text, model=text)
        store.append_message(chat.id, "user", "read the file")
        call = ToolResult(
            call_id="c1",
            tool=text,
            server=text,
            arguments={"path": text},
            status="done",
            text=text,
            preview=text,
            untrusted=True,
        )
        keep_tool_call(store, chat.id, call, model_key="mock/mock-model")
        step = NextStep(
            kind="switch-model",
            label="",
            model=ModelInfo(provider="mock", id="big", label=text, context=131072),
        )
        problem = TurnProblem(
            kind=ProblemKind.TOO_LONG, message="The chat is too long.", detail=text, next_step=step
        )
        store.append_message(chat.id, "assistant", "", problem=problem)
        book.add(text, chat_id=chat.id)
        book.add_run(
            chat.id, [f"Learned: {text}"], seq_from=0, seq_to=1, waiting=True, source="fold"
        )
        health.add("provider", text, model=text)
        return {"chat": chat.id, "trash": gone.id}
    finally:
        store.close()
        book.close()
        health.close()


# --- the helpers the checks use ----------------------------------------------------------------


@contextmanager
def window_on(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    """The real window, started; gone (its C++ side too) when the block ends, however it
    ends: a window left behind by a failed check could open the pipe again after its writer
    has stopped, and hang the suite instead of failing the test."""
    win = MainWindow(services)
    win.resize(1100, 800)
    win.show()
    try:
        started = asyncio.ensure_future(win.start())
        qtbot.waitUntil(started.done, timeout=HANG_MS)
        yield win
    finally:
        closing = asyncio.ensure_future(win.aclose())
        qtbot.waitUntil(closing.done, timeout=HANG_MS)
        win.close()
        shiboken6.delete(win)


def labels(*roots: QWidget) -> list[QLabel]:
    """The labels under ``roots`` (Qt's own tooltip label aside: it reads HTML by design, so
    what Conch gives it is escaped, and checked as the tooltip it shows)."""
    found: list[QLabel] = []
    for root in roots:
        found += [w for w in root.findChildren(QLabel) if w.objectName() != TIP_LABEL]
    return found


def where(widget: QWidget) -> str:
    """A widget's place in the window, for a failure's message ("SettingsDialog > … > QLabel")."""
    chain: list[str] = []
    at: QWidget | None = widget
    while at is not None:
        chain.append(at.objectName() or type(at).__name__)
        at = at.parentWidget()
    return " > ".join(reversed(chain))


def assert_shown_as_written(label: QLabel, expected: str) -> None:
    assert label.textFormat() == Qt.TextFormat.PlainText, label.objectName()
    assert label.text() == expected


def tip_text(tip: str) -> str:
    """What a tooltip shows: Qt reads it as HTML when it looks like HTML."""
    if not QtGui.Qt.mightBeRichText(tip):
        return tip
    doc = QTextDocument()
    doc.setHtml(tip)
    return doc.toPlainText()


def paint_everything() -> None:
    """Lay out and draw every window: what a rich-text label would load, it loads now."""
    for top in QApplication.topLevelWidgets():
        if top.isVisible():
            top.grab()


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", IN_PROCESS)
def test_outside_text_at_rest_shows_as_written_all_over_the_window(
    qtbot: QtBot, data_dir: Path, tmp_path: Path, name: str
) -> None:
    with FifoTripwire(tmp_path / "picture.fifo") as fifo:
        text = attack(name, fifo.path).text
        ids = seed(data_dir, text)
        built = build_services(data_dir, mock=True, seed_demo_chat=False)
        try:
            with window_on(qtbot, built) as win:
                check_window(qtbot, win, built, text, ids)
        finally:
            close_files(built)
    assert not fifo.opened, "a widget read the text as HTML and opened the pipe"


def check_window(
    qtbot: QtBot, win: MainWindow, services: AppServices, text: str, ids: dict[str, str]
) -> None:
    chat = services.store.get_chat(ids["chat"])
    assert chat is not None
    title = chat.title  # as the chat log keeps it
    assert win.current_chat_id == ids["chat"]

    # The title: in the sidebar (and its tooltip), above the chat, in the title bar.
    assert win.sidebar.titles() == [title]
    assert tip_text(win.sidebar.list.item(0).toolTip()) == title
    assert_shown_as_written(win.title_label, title)
    assert win.windowTitle() == f"{title} — Conch demo (scripted answers)"  # --mock says so

    # The chat's own rows: the summary line, the tool call, the problem card, the memory card.
    view = win.chat_view
    divider = next(w for w in view.widgets_of(RowKind.DIVIDER) if isinstance(w, SummaryDivider))
    divider.button.click()
    assert_shown_as_written(divider.summary, text)
    assert divider.button.text() == button_words(f"▾ Earlier messages are summarised for {text}")
    tools = next(w for w in view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows))
    line = next(iter(tools.lines.values()))
    line.button.click()
    assert text in line.details.text() and line.details.textFormat() == Qt.TextFormat.PlainText
    assert line.button.text().startswith(button_words(f"▾ {text} ({text})"))
    card = next(w for w in view.widgets_of(RowKind.PROBLEM) if isinstance(w, ProblemCard))
    assert_shown_as_written(card.details, text)
    assert card.button is not None
    assert card.button.text().startswith(button_words(f"Switch to {text}"))
    memory_card = next(w for w in view.widgets_of(RowKind.MEMORIES) if isinstance(w, MemoryCard))
    learned = services.memories.runs(ids["chat"])[0].memories[0].text
    shown_items = [w for w in labels(memory_card) if w.objectName() == "MemoryCardItem"]
    assert [w.text() for w in shown_items] == [f"• {learned}"]

    # Chat settings: the chat's title as its heading.
    win.show_chat_settings()
    panel = win._chat_settings
    assert panel is not None
    assert_shown_as_written(panel.heading, title)

    # Settings: Memories, Health, Trash.
    win.show_settings("memories")
    dialog = win._settings_dialog
    qtbot.waitUntil(lambda: len(dialog.memories_page.rows()) == 2, timeout=HANG_MS)
    kept = services.memories.list("kept")[0]
    row = next(r for r in dialog.memories_page.rows() if r.memory.id == kept.id)
    assert_shown_as_written(row.text, kept.text)
    assert row.meta.text().startswith(f"From “{title}”")
    dialog.show_page("health")
    qtbot.waitUntil(lambda: bool(dialog.health_page.rows()), timeout=HANG_MS)
    note = services.health.notes(limit=1)[0]
    health_row = dialog.health_page.rows()[0]
    assert_shown_as_written(health_row.text, note.text)
    assert note.model in health_row.meta.text()
    dialog.show_page("trash")
    trash_rows = dialog.trash_page._rows
    assert [r.chat.id for r in trash_rows] == [ids["trash"]]
    assert_shown_as_written(trash_rows[0].title, title)

    # The palette: Conch's own commands, drawn as plain text too.
    win.open_palette()

    paint_everything()
    for top in QApplication.topLevelWidgets():
        for label in labels(top):
            assert label.textFormat() == Qt.TextFormat.PlainText, (
                f"{where(label)} reads its text as markup"
            )

    # The title's tooltip, shown for real, says the title (and loads nothing).
    item_rect = win.sidebar.list.visualItemRect(win.sidebar.list.item(0))
    at = win.sidebar.list.viewport().mapToGlobal(item_rect.center())
    QToolTip.showText(at, win.sidebar.list.item(0).toolTip(), win.sidebar.list.viewport())
    tip = next(w for w in QApplication.topLevelWidgets() if w.objectName() == TIP_LABEL)
    assert isinstance(tip, QLabel)
    tip.grab()
    assert tip_text(tip.text()) == title
    QToolTip.hideText()


def test_a_chat_named_with_dev_zero_opens_in_the_real_app(tmp_path: Path) -> None:
    """The report's repro: ``conch ask --mock`` names a chat ``<img src="/dev/zero"> hi``, then
    ``conch`` opens on it (it used to abort with std::bad_alloc, at every start while that chat
    was the one open). The child's memory is capped, so a regression fails here instead of
    filling the machine."""
    text = next(a for a in markup(tmp_path / "unused") if a.name == "img-dev-zero").text
    home = tmp_path / "home"
    home.mkdir()
    data = tmp_path / "data"
    asked = conch(["ask", "--mock", "--data-dir", str(data), text], home)
    assert asked.returncode == 0, asked.stderr
    store = ChatStore.in_dir(data)
    try:
        chat = store.list_chats()[0]
        assert chat.title == text
    finally:
        store.close()
    SettingsStore.in_dir(data).update(last_chat_id=chat.id)  # the chat open when Conch closed

    opened = conch(["--mock", "--data-dir", str(data), "--quit-after", "1.5"], home)

    assert opened.returncode == 0, opened.stderr[-2000:]
    assert "bad_alloc" not in opened.stderr and "Traceback" not in opened.stderr


def conch(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        QT_QPA_PLATFORM="offscreen",
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_STATE_HOME=str(home / "state"),
        PYTHONPATH=str(ROOT),
    )

    def cap_memory() -> None:
        # Enough for Python and Qt; far less than reading /dev/zero as a picture asks for.
        limit = 3 * 1024**3
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "app.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
        preexec_fn=cap_memory,
    )


@pytest.mark.parametrize("name", [n.name for n in names()])
def test_a_name_s_direction_controls_are_written_out_wherever_it_is_shown(
    qtbot: QtBot, data_dir: Path, name: str
) -> None:
    bidi = next(n for n in names() if n.name == name)
    ids = seed(data_dir, bidi.text)
    built = build_services(data_dir, mock=True, seed_demo_chat=False)
    try:
        with shown(qtbot, built, start=True) as win:
            seen = [
                *win.sidebar.titles(),
                win.title_label.text(),
                win.windowTitle(),
            ]
            win.show_settings("trash")
            seen.append(win._settings_dialog.trash_page._rows[0].title.text())
            win.composer.add_text(bidi.text, "the attached words")
            seen.append(win.composer.chip_list[0].label.text())
            # No control left to reorder what is seen; each is there, written out.
            for shown_text in seen:
                assert not CONTROLS & set(shown_text), repr(shown_text)
                written = {f"[U+{ord(c):04X}]" for c in CONTROLS & set(bidi.text)}
                assert all(w in shown_text for w in written), repr(shown_text)
            assert win.sidebar.titles() == [shown_name(bidi.text)]
            assert ids["chat"] == win.current_chat_id
    finally:
        close_files(built)


def test_the_helpers_keep_text_as_written() -> None:
    assert shown_name("invoice\u202efdp.exe") == "invoice[U+202E]fdp.exe"
    assert shown_name("Plain title — ok") == "Plain title — ok"
    assert plain_tip("Which wood for raised beds?") == "Which wood for raised beds?"
    for text in ("<b>bold</b>", "&lt;b&gt; and <i>", "a\n<img src=x>", "x & y"):
        assert tip_text(plain_tip(text)) == text
    assert button_words("Salt & pepper\tnow") == "Salt && pepper now"
    assert window_title("Draft [*]") == "Draft [*][*] — Conch"


def test_no_widget_code_makes_a_label_that_reads_markup() -> None:
    """Every label in ui/ is a ``PlainLabel``: new code is plain text unless it says otherwise."""
    made: list[str] = []
    for path in sorted((ROOT / "ui").glob("*.py")):
        if path.name == "plain.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if called == "QLabel":
                    made.append(f"{path.name}:{node.lineno}")
    assert made == [], f"use ui.plain.PlainLabel instead of QLabel at {made}"


# --- live: a model server and a tool server that speak in markup -------------------------------


def test_a_server_s_model_id_and_a_tool_server_s_words_show_as_written(
    qtbot: QtBot, data_dir: Path, tmp_path: Path
) -> None:
    """A model id listed by the server, a tool server named (say, by an imported mcp.json) with
    markup, a file whose words are markup: the picker, the approval card, the call's line and
    result and the Tools page show each as written, and nothing opens the pipe the markup
    points at."""
    with FifoTripwire(tmp_path / "picture.fifo") as fifo:
        text = attack("img-fifo", fifo.path).text
        folder = tmp_path / "files"
        folder.mkdir()
        (folder / "notes.txt").write_text(text, "utf-8")
        with OpenAIStyleServer("lmstudio", models=[FakeModel(text, window=32_768)]) as lmstudio:
            call = ScriptedCall("call_1", "read_text_file", {"path": "notes.txt"})
            lmstudio.scripts = [
                Script(text=[], calls=[call], finish_reason="tool_calls"),
                Script(text=["Done."]),
            ]
            route_to(data_dir, lmstudio_url=lmstudio.url)
            built = build_services(data_dir, mock=False, secrets=SessionSecrets())
            files = ["-m", "tests.fakes.mcp_files", str(folder)]
            built.tools.add_stdio(text, sys.executable, files, {"PYTHONPATH": str(ROOT)})
            try:
                with window_on(qtbot, built) as win:
                    check_live(qtbot, win, built, text)
            finally:
                closing = asyncio.ensure_future(built.aclose())
                qtbot.waitUntil(closing.done, timeout=HANG_MS)
    assert not fifo.opened, "a widget read the text as HTML and opened the pipe"


def check_live(qtbot: QtBot, win: MainWindow, services: AppServices, text: str) -> None:
    assert any(entry.startswith(f"{text}  ·  32K") for entry in win.picker.entries())
    chat_id = win.new_chat()
    bridge = win.bridge(chat_id)
    assert bridge is not None and bridge.conversation.model.id == text
    win.composer.edit.setFocus()
    qtbot.keyClicks(win.composer.edit, "What do my notes say?")
    qtbot.keyClick(win.composer.edit, Qt.Key.Key_Return)

    card = win.approval_card
    qtbot.waitUntil(card.isVisible, timeout=HANG_MS)
    assert_shown_as_written(card.label, f"The model asks to use read_text_file ({text})")
    assert tip_text(card.buttons["always"].toolTip()).endswith(f": read_text_file on {text}")
    paint_everything()
    qtbot.mouseClick(card.buttons["once"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not bridge.busy, timeout=HANG_MS)

    rows = [w for w in win.chat_view.widgets_of(RowKind.TOOLS) if isinstance(w, ToolRows)]
    line = next(iter(rows[0].lines.values()))
    assert line.button.text().startswith(button_words(f"▸ read_text_file ({text})"))
    line.button.click()
    assert text in line.details.text() and line.details.textFormat() == Qt.TextFormat.PlainText

    win.show_settings("tools")
    server_row = next(iter(win._settings_dialog.tools_page.rows.values()))
    assert_shown_as_written(server_row.title, text)
    paint_everything()
    for top in QApplication.topLevelWidgets():
        for label in labels(top):
            assert label.textFormat() == Qt.TextFormat.PlainText, label.objectName()
