"""The log file, and every error nobody caught: logged to ``conch.log`` and noted in Health.

``configure_logging`` sends Conch's own loggers from INFO, and every other logger (asyncio,
qasync, httpx, the MCP SDK) from WARNING, to ``<data_dir>/logs/conch.log``. ``report_unhandled``
catches what would otherwise vanish or only reach a terminal nobody reads: an exception raised
in a Qt slot (PySide6 hands it to ``sys.excepthook``), in a thread, or in an asyncio task or
callback nobody awaited (the loop's exception handler). Each is logged with its traceback, and
the first of each kind becomes one Health note in one sentence; the traceback stays in the log.

Qt-free: the window (ui/start.py) and ``conch ask`` (app/cli.py) both use it.
"""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from app.health import Notes
from engines.scrub import scrub

LOG_NAME = "conch.log"
_ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("conch.unhandled")

Undo = Callable[[], None]


# --- the log file -----------------------------------------------------------------------------


class _OwnFromInfo(logging.Filter):
    """Conch's own loggers from INFO; any other logger only from WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        ours = record.name == "conch" or record.name.startswith("conch.")
        return ours or record.levelno >= logging.WARNING


class _Scrubbed(logging.Formatter):
    """Secrets left out of every line: an error's message may quote anything (a key in a
    failed request, a line of the chat)."""

    _inside = threading.local()

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if getattr(self._inside, "on", False):
            return text  # scrub itself logging that it failed: not scrubbed twice over
        self._inside.on = True
        try:
            return scrub(text)
        finally:
            self._inside.on = False


def configure_logging(data_dir: Path, *, console: bool = True) -> Undo:
    """Log to ``<data_dir>/logs/conch.log`` (Conch from INFO, every library from WARNING) and,
    when ``console``, warnings to stderr. Calling it again replaces what it set up before;
    the returned function takes it all away (tests, and ``conch ask`` when it ends)."""
    root = logging.getLogger()
    conch = logging.getLogger("conch")
    _remove_ours(root)
    old_level = conch.level
    conch.setLevel(logging.INFO)
    # Library loggers inherit the root's level: at WARNING they never build their INFO lines.
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    added: list[logging.Handler] = []
    if console:
        to_stderr = logging.StreamHandler()
        to_stderr.setLevel(logging.WARNING)
        to_stderr.setFormatter(_Scrubbed("conch: %(levelname)s %(name)s: %(message)s"))
        added.append(to_stderr)
    try:
        logs = data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        to_file: logging.Handler = logging.handlers.RotatingFileHandler(
            logs / LOG_NAME, maxBytes=1_000_000, backupCount=3, encoding="utf-8"
        )
    except OSError as exc:
        file_problem: OSError | None = exc
    else:
        file_problem = None
        to_file.setLevel(logging.INFO)
        to_file.addFilter(_OwnFromInfo())
        to_file.setFormatter(_Scrubbed("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        added.append(to_file)
    if not added:
        # Without any handler Python prints warnings to stderr itself: ``conch ask`` keeps
        # its terminal for the answer.
        added.append(logging.NullHandler())
    for handler in added:
        handler._conch = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    if file_problem is not None:
        conch.warning("the log file could not be opened (%s); it is not kept", file_problem)

    def undo() -> None:
        _remove_ours(root)
        conch.setLevel(old_level)

    return undo


def _remove_ours(root: logging.Logger) -> None:
    for handler in [h for h in root.handlers if getattr(h, "_conch", False)]:
        root.removeHandler(handler)
        handler.close()


# --- errors nobody caught ---------------------------------------------------------------------


class UnhandledErrors:
    """Logs an uncaught error with its traceback and notes the first of each kind in Health."""

    TOPIC = "error"

    def __init__(self, health: Notes) -> None:
        self.health = health
        self._noted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self, what: str, exc: BaseException | None) -> None:
        """``what`` says where it happened ("a Qt slot", "a background task …")."""
        info = (type(exc), exc, exc.__traceback__) if exc is not None else None
        log.error("uncaught, in %s", what, exc_info=info)
        kind = type(exc).__name__ if exc is not None else "error"
        place = _where(exc)
        with self._lock:
            if (kind, place) in self._noted:
                return  # a slot that fails on every repaint would fill Health otherwise
            self._noted.add((kind, place))
        said = f"{kind} in {place}" if place else kind
        try:
            self.health.add(
                self.TOPIC,
                f"Conch met an unexpected error ({said}) and kept going; what happened is in "
                f"the log file {LOG_NAME}, in the logs folder of Conch's data folder.",
            )
        except Exception:  # a note is a help: the error is already in the log
            log.warning("the health note for an unhandled error could not be written")

    # -- the hooks --

    def excepthook(
        self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        """``sys.excepthook``: an exception in a Qt slot, or one that ends the program."""
        if isinstance(exc, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        self.report("a Qt slot or callback", exc.with_traceback(tb))

    def thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return  # a thread that ended itself, as threading's own hook ignores it
        name = args.thread.name if args.thread is not None else "a thread"
        self.report(f"the thread {name}", args.exc_value.with_traceback(args.exc_traceback))

    def loop_handler(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's exception handler: a task that failed with nobody awaiting it, a
        callback that raised, a transport that broke."""
        exc = context.get("exception")
        task = context.get("task") or context.get("future")
        name = task.get_name() if isinstance(task, asyncio.Task) else ""
        what = str(context.get("message") or "the event loop")
        if name:
            what += f" (task {name})"
        self.report(what, exc if isinstance(exc, BaseException) else None)


def _where(exc: BaseException | None) -> str:
    """Conch's own file the error came through last (``ui/main_window.py``), else the file it
    was raised in."""
    tb = exc.__traceback__ if exc is not None else None
    ours = last = ""
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        path = Path(last)
        if path.is_relative_to(_ROOT) and not path.is_relative_to(_ROOT / ".venv"):
            ours = path.relative_to(_ROOT).as_posix()
        tb = tb.tb_next
    return ours or (Path(last).name if last else "")


def report_unhandled(health: Notes, loop: asyncio.AbstractEventLoop | None = None) -> Undo:
    """Install the hooks (``sys``, ``threading`` and, when given, the loop's exception handler);
    the returned function puts back what was there before."""
    errors = UnhandledErrors(health)
    old_sys, old_thread = sys.excepthook, threading.excepthook
    sys.excepthook = errors.excepthook
    threading.excepthook = errors.thread_excepthook
    old_loop = loop.get_exception_handler() if loop is not None else None
    if loop is not None:
        loop.set_exception_handler(errors.loop_handler)

    def undo() -> None:
        sys.excepthook = old_sys
        threading.excepthook = old_thread
        if loop is not None:
            loop.set_exception_handler(old_loop)

    return undo
