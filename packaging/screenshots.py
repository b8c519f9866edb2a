"""Render Conch's main states offscreen, on the mock engine, into docs/screenshots/*.png.

    python packaging/screenshots.py [--out DIR] [--width 1200 --height 800]

The committed pictures are then made small with ImageMagick (256 colours keep the text sharp):

    for f in docs/screenshots/*.png; do convert "$f" -strip -colors 256 \
        -define png:compression-level=9 -define png:compression-filter=5 "$f"; done

Everything runs in a throwaway data dir (the demo long chat that ``conch --mock`` shows), on
Qt's offscreen platform unless another one is asked for, so it works on a build machine and
in CI. Each picture is the real window (or dialog) drawn by Qt, nothing staged by hand:

    long-chat.png         the demo chat at the quiet line where the model's memory starts
    summary-open.png      the same line opened to the summary the model reads
    memory-card.png       the card of what Conch learned before folding, with Undo
    too-long.png          the card for a message too long even after summarising
    reload.png            the same card offering to reload the chat's local model with a
                          bigger window (and the picker's "Reload with 16K")
    tool-approval.png     a chat's model asking to read a file: the approval card, the call's line
    tool-call.png         the call's line opened, under the answer that used what it read
    tools.png             Settings → Tools with the file server ready
    code.png              an answer with a highlighted code block
    actions.png           the pointer over that answer: its buttons, and its versions "‹ 2/2 ›"
    versions.png          the earlier version of the answer, flipped to ("‹ 1/2 ›")
    continue.png          an answer the person stopped: "Stopped · Continue", and Continue
                          among its buttons
    chat-settings.png     a chat's own settings: model, temperature, answer length, prompt
    trash.png             Settings → Trash with deleted chats to restore
    first-screen.png      an empty chat: who answers and why, the servers found, one click each
    summary-parts.png     a fold's divider opened to the summary's four parts, the model's
                          lines and the ones Conch kept word for word
    summary-writing.png   the divider of a fold that went ahead: "Summary being written…", and
                          what the model reads until then
    sidebar.png           the sidebar with a folder and a pinned chat, a forked chat open with
                          its link back ("Forked from …")
    reading.png           an answer's placeholder while the model reads: "Reading the chat… 35%"
    palette.png           the command palette (Ctrl+K) with "summ" typed
    settings.png          Settings → Providers
    memories.png          Settings → Memories
    health.png            Settings → Health
    dark.png              the long chat in the dark theme
    dark-settings.png     Settings → Appearance in the dark theme
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PySide6.QtGui import QPixmap
    from PySide6.QtWidgets import QApplication, QWidget

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: the app's packages are here
    sys.path.insert(0, str(ROOT))
DEFAULT_OUT = ROOT / "docs" / "screenshots"

TOO_LONG_TEXT = (
    "Here is the whole contract for the garden lot, all 240 pages with the annexes. "
    "Can you find every clause about water use and who pays for the meter?"
)


async def settle(app: QApplication, seconds: float = 0.15) -> None:
    """Let layouts, deferred paints and queued tasks finish. Awaiting hands the loop (Qt's
    own, through qasync) the events; ``processEvents`` from inside this task would run other
    tasks' steps while it runs, which asyncio refuses ("Cannot enter into task")."""
    for _ in range(3):
        await asyncio.sleep(seconds / 3)
    app.sendPostedEvents()  # deferred layouts and deletions, no task steps


def save(pixmap: QPixmap, out: Path, name: str, written: list[Path]) -> None:
    path = out / name
    if not pixmap.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    written.append(path)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def with_popup(window: QWidget, popup: QWidget) -> QPixmap:
    """The window with a popup (a separate top-level window) drawn where it sits."""
    from PySide6.QtGui import QColor, QPainter

    shot = window.grab()
    painter = QPainter(shot)
    # A light scrim, as a compositor would show behind a popup.
    painter.fillRect(shot.rect(), QColor(0, 0, 0, 28))
    at = window.mapFromGlobal(popup.mapToGlobal(popup.rect().topLeft()))
    if not popup.mask().isEmpty():  # a popup cut to a shape (the palette): only that shows
        painter.setClipRegion(popup.mask().translated(at))
    painter.drawPixmap(at, popup.grab())
    painter.end()
    return shot


def scroll_to_row(window: Any, kind: Any) -> QWidget | None:
    """Scroll the chat so the first row of ``kind`` sits near the top; its widget."""
    from PySide6.QtWidgets import QAbstractItemView

    view = window.chat_view
    i = view.chat_model.find(kind)
    if i < 0:
        return None
    index = view.chat_model.index(i, 0)
    view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtTop)
    bar = view.verticalScrollBar()
    bar.setValue(max(0, bar.value() - 140))  # show a little of what comes before it
    widget: QWidget | None = view.indexWidget(index)
    return widget


def add_too_long_chat(services: Any) -> str:
    """A chat whose last answer failed as too long, with a bigger model offered."""
    from engines.base import NextStep, ProblemKind, TurnProblem

    models = sorted(services.catalogue.ready_models(), key=lambda m: m.context)
    small = models[0] if models else None
    bigger = models[-1] if len(models) > 1 else None
    step = (
        NextStep(kind="switch-model", label=f"Switch to {bigger.name}", model=bigger)
        if bigger is not None
        else None
    )
    store = services.store
    key = small.key if small is not None else ""
    chat = store.create_chat(title="Garden lot contract", model_key=key)
    store.append_message(chat.id, "user", "Hi! I have a long document for you.", model_key=key)
    store.append_message(
        chat.id,
        "assistant",
        "Of course — paste it in or attach it, and tell me what to look for.",
        model_key=key,
    )
    store.append_message(chat.id, "user", TOO_LONG_TEXT + "\n\n" + "§ 1 …\n" * 40)
    window = small.context if small is not None else 8192
    problem = TurnProblem.of(
        ProblemKind.TOO_LONG,
        detail=f"This model's maximum context length is {window} tokens. "
        "However, your messages resulted in 61440 tokens.",
        next_step=step,
    )
    store.append_message(chat.id, "assistant", "", partial=True, problem=problem, model_key=key)
    return str(chat.id)


def reload_offer(services: Any, chat_id: str) -> Any:
    """What the card offers when the chat's local model could read 16K: the mock model has
    no server to load it, so the offer is made as the engine makes one (memory as a 7B model
    at 4 bits would take)."""
    from engines.local.reload import ModelFacts, ReloadOffer

    chat = services.store.get_chat(chat_id)
    model = services.catalogue.find(chat.model_key) if chat is not None else None
    if model is None:
        return None
    facts = ModelFacts(trained=131_072, weights=4_683_000_000, kv_per_token=57_344)
    return ReloadOffer(
        model=model, window=16_384, memory=facts.memory_at(16_384), memory_total=16 * 10**9
    )


async def render(out: Path, width: int, height: int) -> list[Path]:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from app.services import build_services
    from ui.chat.chat_model import RowKind
    from ui.main_window import MainWindow
    from ui.theme import ThemeManager

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    written: list[Path] = []

    with tempfile.TemporaryDirectory(prefix="conch-shots-") as tmp:
        services = build_services(Path(tmp), mock=True)
        services.health.add(
            "healed",
            "A “too long” refusal was healed: the chat was folded and the turn sent again.",
            model="Mock model (8K)",
            window=8192,
        )
        services.health.add(
            "summary-failed",
            "The summariser answered with a refusal; the oldest turns were dropped anyway.",
            model="Mock model (8K)",
        )
        services.health.add("unreachable", "LM Studio could not be reached: connection refused.")
        services.memories.add(
            "The person's garden group meets on Saturday mornings.",
            chat_id=services.settings.settings.last_chat_id,
            status="waiting",
        )
        theme = ThemeManager(app, "light")
        window = MainWindow(services, theme=theme)
        window.resize(width, height)
        window.show()
        try:
            await window.start()
            await settle(app, 0.4)
            demo_chat = window.current_chat_id

            async def shot(name: str, target: Callable[[], QPixmap]) -> None:
                await settle(app)
                save(target(), out, name, written)

            # The long chat at the quiet line, closed, then opened.
            divider = scroll_to_row(window, RowKind.DIVIDER)
            await shot("long-chat.png", window.grab)
            if divider is not None and hasattr(divider, "set_open"):
                divider.set_open(True)
                await settle(app)
                scroll_to_row(window, RowKind.DIVIDER)
            await shot("summary-open.png", window.grab)
            if divider is not None and hasattr(divider, "set_open"):
                divider.set_open(False)

            # What Conch learned before folding.
            scroll_to_row(window, RowKind.MEMORIES)
            await shot("memory-card.png", window.grab)

            # The palette over the chat, "summ" typed.
            window.open_palette()
            await settle(app)
            palette = window._palette
            QTest.keyClicks(palette.search, "summ")
            await shot("palette.png", lambda: with_popup(window, palette))
            QTest.keyClick(palette.search, Qt.Key.Key_Escape)

            # Settings pages.
            window.show_settings("providers")
            dialog = window._settings_dialog
            dialog.resize(860, 640)
            await shot("settings.png", dialog.grab)
            dialog.show_page("memories")
            await shot("memories.png", dialog.grab)
            dialog.show_page("health")
            await shot("health.png", dialog.grab)
            dialog.hide()

            # A message too long even after summarising.
            too_long = add_too_long_chat(services)
            window.sidebar.refresh()  # the new chat is listed, as one made in the window is
            window.open_chat(too_long)
            await settle(app, 0.3)
            window.chat_view.scroll_to_bottom()
            await shot("too-long.png", window.grab)

            # The same card when the chat's model could be loaded with a bigger window.
            offer = reload_offer(services, window.current_chat_id)
            card = window.chat_view.widget_at(RowKind.PROBLEM)
            if offer is not None and card is not None and hasattr(card, "offer_reload"):
                card.offer_reload(offer)
                window.picker.set_reload_offer(offer)
                await settle(app, 0.3)
                window.chat_view.scroll_to_bottom()
                await shot("reload.png", window.grab)

            # A chat reading a file through a tool (run as a script, this folder is on the path).
            from screenshot_tools import render_tools

            files = Path(tmp) / "files"
            await render_tools(window, services, files, lambda s: settle(app, s), shot)

            # A message's buttons, coloured code, versions, Continue, a chat's settings, Trash.
            from screenshot_chat import render_chat_states

            demo = services.store.get_chat(demo_chat)
            key = demo.model_key if demo is not None else ""
            await render_chat_states(window, services, lambda s: settle(app, s), shot, key)

            # The first screen, folders and pins, a fork, the summary's parts, reading.
            from screenshot_long import render_long_states

            await render_long_states(
                window, services, lambda s: settle(app, s), shot, key, demo_chat
            )

            # Dark theme, chosen the way a person does: Settings → Appearance → Dark.
            window.show_settings("appearance")
            dialog.theme_buttons["dark"].click()
            dialog.hide()
            window.open_chat(demo_chat)
            await settle(app, 0.3)
            scroll_to_row(window, RowKind.DIVIDER)
            await shot("dark.png", window.grab)
            window.show_settings("appearance")
            await shot("dark-settings.png", dialog.grab)
            dialog.hide()
        finally:
            await window.aclose()
            await services.aclose()
            theme.close()
            window.deleteLater()
            # The window is closed and the loop winding down: delete it now, without awaiting.
            app.sendPostedEvents()
    return written


def quiet_platform_notices() -> None:
    """Drop the offscreen platform's "does not support raise()" notices; show the rest."""
    from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler

    def handler(kind: QtMsgType, _context: QMessageLogContext, message: str) -> None:
        if "This plugin does not support" not in message:
            print(message, file=sys.stderr)

    qInstallMessageHandler(handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python packaging/screenshots.py",
        description="Render Conch's main states offscreen into PNG files.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the PNGs")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args(argv)

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import qasync
    from PySide6.QtWidgets import QApplication

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0]])
    app.setApplicationName("Conch")
    quiet_platform_notices()
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(app)) as runner:
        written = runner.run(render(out, args.width, args.height))
    print(f"{len(written)} screenshots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
