"""The window: Qt, the qasync loop, the services and the main window, from start to shutdown.

``conch`` without a command comes here (app/main.py parses the command line). The window runs
on a qasync loop, so every turn is an asyncio task on the Qt event loop. The loop is started the
way qasync's README shows for Python 3.11+ (``asyncio.Runner`` with a ``QEventLoop`` factory)
and ``main`` ends on an asyncio Event set when the window closes (or the app is asked to quit).
Shutdown happens while the loop still runs: turns are stopped (their partial answers saved),
engines and HTTP clients closed, the bundled model stopped. Any qasync workaround belongs in
this module and nowhere else.

Every way the window ends without the person closing it ends the way closing it does (turns
stopped with what had arrived saved, the window's state kept, the bundled model stopped):

- SIGTERM, SIGHUP and Ctrl+C (SIGINT) close the window; Conch exits with 128 + the signal's
  number (143, 129, 130), as ``conch ask`` does, and says nothing on stderr. A second one
  during the shutdown ends it at once, the default way.
- The display going away (the X server ending) makes Qt end its event loop by itself;
  ``run_gui`` runs the loop again until ``main`` has closed everything, says one sentence on
  stderr and exits with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from app.data_dir import DataDirError, prepare_data_dir
from app.logs import configure_logging, report_unhandled
from app.qt_libraries import check_qt_libraries, install_sentence, library_named_in

if TYPE_CHECKING:
    from PySide6.QtCore import QMessageLogContext, QtMsgType
    from PySide6.QtWidgets import QApplication

    from app.services import EngineFactory

log = logging.getLogger("conch.main")

T = TypeVar("T")

QUIT_AFTER_ENV = "CONCH_QUIT_AFTER_MS"  # CI smoke runs: close the window after this many ms
SHUTDOWN_SECONDS = 10.0  # longest the window waits for turns and engines to close


def quit_after_ms(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int | None:
    """Milliseconds until the window closes by itself, from --quit-after or the environment."""
    if args.quit_after is not None:
        return max(0, int(args.quit_after * 1000))
    raw = (environ if environ is not None else dict(os.environ)).get(QUIT_AFTER_ENV, "")
    try:
        return max(0, int(raw)) if raw.strip() else None
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; ignored", QUIT_AFTER_ENV, raw)
        return None


# What Qt said when the connection to the display broke (the X server or the Wayland
# compositor ended before the window closed); Qt then ends its event loop by itself.
_display_lost: list[str] = []


def display_lost() -> str | None:
    """Qt's words when the display went away during this run, or None."""
    return _display_lost[0] if _display_lost else None


def route_qt_messages() -> None:
    """Qt's own warnings go to the "conch.qt" logger instead of straight to stderr; a display
    that went away is kept for the one line ``run_gui`` ends with (Qt says it at every event
    it still processes)."""
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    qt_log = logging.getLogger("conch.qt")
    levels = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
        QtMsgType.QtFatalMsg: logging.CRITICAL,
    }

    def handler(kind: QtMsgType, _context: QMessageLogContext, message: str) -> None:
        if "connection broke" in message:
            if not _display_lost:
                _display_lost.append(message)
            return
        if message.startswith("This plugin does not support"):
            # A platform without window hints (offscreen, some Wayland compositors) ignores
            # one: nothing anyone can act on, and it is said at every start.
            qt_log.debug("%s", message)
            return
        qt_log.log(levels.get(kind, logging.WARNING), "%s", message)

    qInstallMessageHandler(handler)


# --- the window -------------------------------------------------------------------------------


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def on_stop_signals(
    loop: asyncio.AbstractEventLoop, stop: Callable[[int], object]
) -> Callable[[], None]:
    """Call ``stop(signum)`` on the loop when a stop signal arrives; returns the undo. A signal
    after the undo has its default effect, Ctrl+C too (a second signal during a slow shutdown
    ends it, rather than raising KeyboardInterrupt in whatever Qt is running)."""
    installed: list[int] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, stop, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # Windows has no such signals on its loops
        installed.append(signum)

    def undo() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal.SIG_DFL)

    return undo


async def main(
    app: QApplication,
    data_dir: Path,
    *,
    mock: bool,
    quit_after: int | None,
    data_problem: str = "",
    engines: EngineFactory | None = None,
) -> int:
    """Build the services and the window, run until the window closes, then close it all.
    ``engines`` builds each chat's engine (tests hand in their own); by default the usual."""
    from PySide6.QtCore import QTimer

    from app.services import build_services
    from app.store import StoreError
    from ui.icons import app_icon
    from ui.main_window import MainWindow
    from ui.theme import ThemeManager

    app.setWindowIcon(app_icon())
    if data_problem:
        await tell_and_wait(data_problem, quit_after)
        return 1
    try:
        services = build_services(data_dir, mock=mock, engines=engines)
    except StoreError as exc:
        log.error("cannot open the data folder: %s", exc)
        await tell_and_wait(str(exc), quit_after)
        return 1
    theme = ThemeManager(app, services.settings.settings.theme)
    window = MainWindow(services, theme=theme)
    closing = asyncio.Event()
    window.closed.connect(closing.set)
    app.aboutToQuit.connect(closing.set)
    loop = asyncio.get_running_loop()
    # An exception in a slot or a task nobody awaits reaches the log and Health, not nowhere.
    unreport = report_unhandled(services.health, loop)
    window.show()
    starting = loop.create_task(window.start(), name="list-models")
    # The daily tidy-up reads what no fold has read yet; it runs while the window is open.
    tidying = loop.create_task(services.tidy_loop(window.show_learning), name="tidy-up")
    # A local server started after Conch shows up in the model picker by itself.
    watching = loop.create_task(services.watch_servers(), name="watch-servers")
    if quit_after is not None:
        QTimer.singleShot(quit_after, window.close)
    stopped_by: list[int] = []

    def stop(signum: int) -> None:
        if not stopped_by:
            stopped_by.append(signum)
            log.info("closing the window on %s", signal.Signals(signum).name)
        window.close()

    # Through the loop's own signal handling (qasync's loop is asyncio's selector loop on
    # Unix), so the close runs as an ordinary callback, never inside a signal handler.
    ignore_signals = on_stop_signals(loop, stop)
    log.info("the window is open")
    try:
        await closing.wait()
    finally:
        ignore_signals()
        if window.isVisible():
            # Qt quit without the window closing (the display went away): close it as the
            # person would have, which keeps its state.
            window.close()
        starting.cancel()
        tidying.cancel()
        watching.cancel()
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await asyncio.gather(starting, tidying, watching, return_exceptions=True)
                await window.aclose()
        except TimeoutError:
            log.warning("turns did not stop within %s seconds; closing anyway", SHUTDOWN_SECONDS)
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await services.aclose()
        except TimeoutError:
            log.warning("the services did not close within %s seconds", SHUTDOWN_SECONDS)
        theme.close()
        window.deleteLater()
        unreport()
        log.info("the window closed and everything behind it")
    return 128 + stopped_by[0] if stopped_by else 0


async def tell_and_wait(text: str, quit_after: int | None) -> None:
    """Show a message box without blocking the loop (never exec() in a coroutine)."""
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Critical, "Conch cannot open its data", text)
    box.setTextFormat(Qt.TextFormat.PlainText)  # the sentence names a path: never markup
    closed = asyncio.Event()
    box.finished.connect(lambda _result: closed.set())
    box.open()
    if quit_after is not None:
        QTimer.singleShot(quit_after, box.close)
    await closed.wait()


def install_asyncgen_hooks(loop: asyncio.AbstractEventLoop) -> None:
    """Let the loop finalise async generators, as asyncio's own run_forever does.

    qasync's run_forever skips this (qasync/__init__.py, run_forever), so an async generator
    left suspended (httpx's body iterators, say) is finalised by the garbage collector outside
    the loop, where closing it fails with "async generator ignored GeneratorExit".
    """
    firstiter = getattr(loop, "_asyncgen_firstiter_hook", None)
    finalizer = getattr(loop, "_asyncgen_finalizer_hook", None)
    if firstiter is not None and finalizer is not None:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)


def run_gui(args: argparse.Namespace) -> int:
    # Qt aborts with a generic message when a system library is missing: name it first.
    missing = check_qt_libraries(os.environ, args.qt_args)
    if missing:
        print(f"conch: {missing}", file=sys.stderr)
        return 1
    try:
        import qasync
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:
        library = library_named_in(str(exc))
        if library is None:
            raise
        print(f"conch: {install_sentence([library])}", file=sys.stderr)
        return 1

    data_dir: Path = args.data_dir
    data_problem = ""
    try:
        prepare_data_dir(data_dir)
    except DataDirError as exc:
        data_problem = str(exc)  # said on stderr and in a message box
        print(f"conch: {data_problem}", file=sys.stderr)
    else:
        configure_logging(data_dir)
    route_qt_messages()
    existing = QApplication.instance()
    app = (
        existing
        if isinstance(existing, QApplication)
        else QApplication([sys.argv[0], *args.qt_args])
    )
    app.setApplicationName("Conch")
    app.setApplicationDisplayName("Conch")
    app.setDesktopFileName("conch")
    # The window's closed signal ends main(); letting Qt quit on its own would stop the loop
    # before the turns are saved and the engines closed.
    app.setQuitOnLastWindowClosed(False)

    # Python 3.11's asyncio.run has no loop_factory; Runner does (qasync README, 3.11+).
    def make_loop() -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = qasync.QEventLoop(app)
        install_asyncgen_hooks(loop)
        return loop

    try:
        with asyncio.Runner(loop_factory=make_loop) as runner:
            loop = runner.get_loop()
            opened = main(
                app,
                data_dir,
                mock=args.mock,
                quit_after=quit_after_ms(args),
                data_problem=data_problem,
            )
            try:
                code = run_to_end(loop, opened)
            finally:
                wind_down(loop)
    except KeyboardInterrupt:
        # Ctrl+C before the window's handlers were installed (while Qt loads): nothing to save.
        return 128 + signal.SIGINT
    except TimeoutError:
        log.warning("Qt's event loop kept ending; Conch quit before it had closed everything")
        return 1
    lost = display_lost()
    if lost is None:
        return code
    log.info("the display went away before the window closed (Qt: %s)", lost)
    with contextlib.suppress(OSError, ValueError):  # the terminal may have gone with it
        print(f"conch: {DISPLAY_LOST_SENTENCE}", file=sys.stderr)
    return 1


DISPLAY_LOST_SENTENCE = "the display went away, so Conch saved its chats and closed."


def run_to_end(loop: asyncio.AbstractEventLoop, work: Awaitable[T]) -> T:
    """Run the loop until ``work`` is done, even when Qt ends its event loop first.

    Qt ends its loop by itself when the display goes away (the X server ended), with ``main``
    still waiting: qasync's ``run_until_complete`` would then raise "Event loop stopped before
    Future completed", after stepping ``main`` once outside any running loop, so the window's
    close and the shutdown after it never ran. Qt's loop runs again after that (its timers and
    sockets still work), so it is run until the work is done, for at most the time the
    shutdown may take after Qt first ended it (then TimeoutError).
    """
    task = asyncio.ensure_future(work, loop=loop)
    task.add_done_callback(lambda _task: loop.stop())
    deadline: float | None = None
    while not task.done():
        if deadline is not None and time.monotonic() > deadline:
            task.cancel()
            raise TimeoutError
        loop.run_forever()
        if not task.done() and deadline is None:
            deadline = time.monotonic() + 3 * SHUTDOWN_SECONDS
            log.info("Qt's event loop ended before the window closed; running it to close")
    return task.result()


def wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.Runner`` does when it closes (cancel what is left, finish async generators
    and the default executor), each step through ``run_to_end``: after the display went away
    qasync's own ``run_until_complete`` would fail on them."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        run_to_end(loop, asyncio.gather(*left, return_exceptions=True))
    run_to_end(loop, loop.shutdown_asyncgens())
    run_to_end(loop, loop.shutdown_default_executor())
