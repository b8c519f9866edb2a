"""``conch models`` and ``conch ask``: the window's services and conversation, in a terminal.

``conch ask`` sends one turn through the same ``Conversation`` and engine as the window (a
long chat folds, learns and heals the same way), prints the answer to stdout as it streams and
notes (a fold, a healed refusal, memories learned) to stderr, as is a long wait before the first
word ("Reading the chat… 35%", ``ReadingLine``). Exit codes: 0 answered, 1 the
turn failed or no model could answer (one line on stderr says why), 2 the command was wrong,
128 + the signal's number when stopped by Ctrl+C (130), SIGTERM (143) or SIGHUP (129) -- what
had arrived of the answer is saved: after Ctrl+C as when Stop is pressed in the window, after
SIGTERM or SIGHUP as when the window is closed on it ("Conch was closed before this answer
finished."); either goes on with Continue in the window.

``conch ask --allow-tools NAME,…`` offers the model the tools of the MCP servers in Settings →
Tools; the named ones run without asking, any other call is declined (nobody is there to ask),
and each call is printed on stderr as a row: the call, how it ended, its first lines. A name
that none of those servers offers is said on stderr before the turn.

When the bundled model answers, its runtime stays running after the command (until it has had
no request for ``bundled.IDLE_EXIT`` seconds, or ``CONCH_LOCAL_MODEL_IDLE``; 0 stops it with the
command), so the next command finds it warm: no model load, and the start of the chat already
read (engines/local/bundled.py).

The command line itself (shared with the window) is in app/arguments.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO

from app.arguments import parse_arguments
from app.conversation import Conversation, MessageSaved
from app.data_dir import DataDirError, prepare_data_dir
from app.logs import configure_logging, report_unhandled
from app.memories import LearningRun
from app.reading import READING_AFTER_S, SUMMARISING, ReadingWait, reading_wait
from app.secrets import EnvironmentKeys, SecretStore, open_secrets
from app.services import AppServices, ServicesError, build_services
from app.store import StoreError
from engines.base import (
    Compacted,
    Healed,
    ModelInfo,
    Note,
    Problem,
    Reading,
    Shortened,
    TextDelta,
    ToolResult,
    TurnProblem,
    arguments_line,
)
from engines.context.session import ApiSession
from engines.context.tool_loop import ToolHost
from engines.context.transcript import TranscriptError, check_chat_id
from engines.local import bundled
from engines.programs.catalogue import PROVIDER as PROGRAMS
from engines.tools import approvals

log = logging.getLogger("conch.cli")
OK, FAILED, USAGE = 0, 1, 2
TOOLS_LISTED = 30  # tool names a sentence about --allow-tools lists at most
# Ctrl+C, a polite kill and a closed terminal all stop a turn the same way.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
# Of those, the ones that close Conch around the answer rather than stop it: Ctrl+C is the
# person at this terminal pressing Stop ("You stopped the answer."), while SIGTERM (a kill, a
# logout, a service manager) and SIGHUP (the terminal went away) end the command from outside,
# so the answer is saved as the window saves one it was closed on, and offers Continue there.
CLOSING_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _problem_line(problem: TurnProblem) -> str:
    line = problem.message
    if problem.detail and problem.detail not in line:
        detail = _one_line(problem.detail)
        line += f" ({detail[:200]}{'…' if len(detail) > 200 else ''})"
    step = problem.next_step
    if step is not None and step.kind not in ("none", "retry"):
        line += f" Next: {step.label}."
    return _one_line(line)


def _keep_runtime_warm(services: AppServices, err: TextIO) -> None:
    """A bundled runtime this command starts (or finds) stays running for the next command."""
    if services.mock or services.runtime is not None:
        return
    idle, problem = bundled.idle_exit_setting()
    if problem:
        err.write(f"conch: {problem}\n")
    services.runtime = bundled.BundledRuntime(services.data_dir, idle_exit=idle)


# --- conch models -----------------------------------------------------------------------------


def _secrets(args: argparse.Namespace) -> SecretStore | None:
    """The keyring, and for a company it has no key for, the company's usual environment
    variable (a headless machine has no keyring). The mock needs no keys."""
    return None if args.mock else EnvironmentKeys(open_secrets())


def _key_source(services: AppServices, provider: str) -> str:
    secrets = services.secrets
    return secrets.source(provider) if isinstance(secrets, EnvironmentKeys) else ""


def _model_row(m: ModelInfo, key_from: str = "") -> dict[str, object]:
    row: dict[str, object] = {
        "provider": m.provider,
        "id": m.id,
        "context": m.context,
        "local": m.local,
        "ready": m.ready,
    }
    if key_from:
        row["key_from"] = key_from
    return row


def _print_key_sources(services: AppServices, out: Output) -> None:
    """One line per company with a key: where the key came from (never the key)."""
    for name in sorted(services.catalogue.adapters):
        source = _key_source(services, name)
        if source:
            label = services.catalogue.adapters[name].label
            out.write(f"{label} key: from the {source}\n")


async def run_models(args: argparse.Namespace, out: Output, err: TextIO) -> int:
    services = build_services(args.data_dir, mock=args.mock, secrets=_secrets(args))
    for problem in services.startup_problems:
        print(f"conch: {problem}", file=err)
    _keep_runtime_warm(services, err)
    try:
        # The same rule as the window: with nothing else ready, the bundled model starts.
        models = await services.refresh_models()
        shown = models if args.all else [m for m in models if m.ready]
        if args.all:
            # Programs that keep their own chat (Claude Code, Codex, ACP agents), ready or not;
            # `conch ask --model programs/<name>` takes the ready ones.
            shown = [*shown, *services.programs()]
        if args.json:
            rows = [_model_row(m, _key_source(services, m.provider)) for m in shown]
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            _print_table(shown, out)
            _print_key_sources(services, out)
            catalogue = services.catalogue
            for name, why in sorted(catalogue.unreachable.items()):
                if name not in catalogue.probed:
                    label = catalogue.adapters[name].label
                    err.write(f"{label} could not be reached: {_one_line(why)}\n")
            for name, why in sorted(catalogue.problems.items()):
                label = catalogue.adapters[name].label
                err.write(f"{label}: {_one_line(why)}\n")
            if not shown:
                err.write(
                    "No model is ready. Start Ollama, LM Studio or llama.cpp, "
                    "or add an API key in Settings (or set OPENAI_API_KEY, ANTHROPIC_API_KEY "
                    "or another company's usual variable).\n"
                )
        return OK
    finally:
        await services.aclose()


def _print_table(models: Sequence[ModelInfo], out: Output) -> None:
    rows = [("PROVIDER", "MODEL", "WINDOW", "WHERE")]
    for m in models:
        where = "this computer" if m.local else "API"
        if not m.ready:
            where += " (not ready)"
        rows.append((m.provider, m.id, f"{m.context:,}", where))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        out.write(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}\n")


# --- conch ask --------------------------------------------------------------------------------


def _headless_tools(
    services: AppServices, engine: object, allowed: Sequence[str], err: TextIO
) -> ToolHost | None:
    """Tools in a terminal: offered only with ``--allow-tools``, from the servers configured in
    Settings → Tools; the named tools run without asking, and nobody is asked about the others
    (the model is told how the person could allow them). The host, when tools are offered."""
    if not isinstance(engine, ApiSession):
        if allowed:  # the mock, or a program that keeps its own tools
            err.write(
                "conch ask: this model does not use Conch's tools; --allow-tools is ignored.\n"
            )
        return None
    if not allowed:
        engine.tools = None
        return None
    host = engine.tools or ToolHost(services.tools)
    host.approve = None
    host.always = {approvals.by_name(name) for name in allowed}
    engine.tools = host
    return host


async def _say_unknown_tools(host: ToolHost, allowed: Sequence[str], err: TextIO) -> None:
    """Say which ``--allow-tools`` names no server of the chat offers (a typo would otherwise
    only show when the model's call is declined)."""
    try:
        names = (await host.catalogue()).names()
    except Exception:  # the turn meets the same failure and says it in its own words
        log.warning("listing the tools for --allow-tools failed", exc_info=True)
        return
    unknown = [name for name in allowed if name not in names]
    if not unknown:
        return
    which = " or ".join(f"“{name}”" for name in unknown)
    listed = ", ".join(names[:TOOLS_LISTED]) + (" …" if len(names) > TOOLS_LISTED else "")
    offered = f"the tools are: {listed}" if names else "no server there offers any tool"
    err.write(
        f"conch ask: no tool server in Settings → Tools offers a tool called {which} "
        f"(--allow-tools); {offered}.\n"
    )


def tool_row(event: ToolResult) -> str:
    """A tool call as ``conch ask`` prints it on stderr: the call and how it ended on one line,
    then the first lines of what it gave, indented."""
    server = f" ({event.server})" if event.server else ""
    ending = {
        "done": "done",
        "failed": "failed",
        "denied": "not allowed",
        "unknown": "no such tool",
        "invalid": "bad arguments",
        "stopped": "stopped",
        "closed": "cut off when Conch closed",
        "not-run": "not run",
    }[event.status]
    figures = f"{event.seconds:.1f} s" if event.seconds else ""
    if event.shortened:
        figures += (", " if figures else "") + (
            f"{event.total_chars:,} characters, the model read {event.sent_chars:,}"
        )
    line = f"Tool {event.tool}{server} {arguments_line(event.arguments)}: {ending}"
    if figures:
        line += f" ({figures})"
    lines = [_one_line(line)]
    if event.status == "done":
        lines += [f"  {row}" for row in event.preview.splitlines()]
    else:
        lines.append(f"  {_one_line(event.text)[:300]}")
    return "\n".join(lines) + "\n"


def _learning_line(run: LearningRun) -> str:
    n = len(run.memories)
    things = "1 thing" if n == 1 else f"{n} things"
    if run.waiting:
        return f"Conch learned {things} from this chat; they wait for your OK in the window."
    return f"Conch learned {things} from this chat (Undo in the window)."


def as_text(raw: str | bytes) -> tuple[str, bool]:
    """``raw`` as text that can be saved and sent, and whether anything had to be replaced.

    Bytes that are not UTF-8 (piped from a binary file, say, or in an argument, where Python
    keeps them as lone surrogates) become U+FFFD: SQLite and the model APIs take only valid
    text, and a message that cannot be saved would be lost.
    """
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), False
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace"), True
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        try:
            data = raw.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:
            data = raw.encode("utf-8", errors="replace")
        return data.decode("utf-8", errors="replace"), True
    return raw, False


def read_message(text: str, stdin: TextIO | BinaryIO, err: TextIO) -> str:
    """The message to send: ``text``, or all of stdin for ``-`` (as bytes when it can, so an
    undecodable byte is replaced rather than fatal)."""
    raw: str | bytes
    if text == "-":
        buffer = getattr(stdin, "buffer", None)
        raw = buffer.read() if buffer is not None else stdin.read()
    else:
        raw = text
    message, replaced = as_text(raw)
    if replaced:
        err.write(
            "conch ask: part of the message is not UTF-8 text; those bytes are sent as "
            "\N{REPLACEMENT CHARACTER}.\n"
        )
    return message


class Output:
    """stdout for the answer. A character this terminal cannot show is printed as '?' (noted
    once at the end) and a reader that went away stops the printing, never the turn: the
    whole answer is saved in the chat either way."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.replaced = False
        self.gone = False

    def write(self, text: str) -> None:
        if self.gone or not text:
            return
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                encoding = getattr(self.stream, "encoding", None) or "ascii"
                self.stream.write(text.encode(encoding, "replace").decode(encoding))
                self.replaced = True
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe or terminal, or a closed stream
            self.gone = True
            self._silence()

    def _silence(self) -> None:
        """Point the closed stdout at /dev/null so the flush at exit does not fail again."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)


class ReadingLine:
    """The wait before the answer's first word, said on stderr in the window's words
    (``app.reading``): on a terminal one line, rewritten in place and wiped when the answer
    starts; else a line each time it says something new, the time alone at most every
    ``QUIET_LINE_S`` and a share at most every ``SHARE_LINE_S``. Nothing goes to stdout."""

    TICK_S = 1.0  # how often the time on the line moves on
    SHARE_LINE_S = 1.0
    QUIET_LINE_S = 10.0

    def __init__(self, err: TextIO, wait: ReadingWait | None, after: float) -> None:
        self._err = err
        self._wait = wait
        self._after = after
        try:
            self._tty = err.isatty()
        except (AttributeError, OSError, ValueError):
            self._tty = False
        self._shown = ""  # what the terminal's line says now ("" once wiped)
        self._said = ""  # the last words written
        self._said_at = 0.0
        self._said_share = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._wait is not None:
            self._task = asyncio.get_running_loop().create_task(self._tick())

    def observe(self, event: object) -> None:
        """Every event of the turn, before anything about it is printed."""
        if self._wait is None:
            return
        self._wait.observe(event)
        if isinstance(event, Reading):
            self._say()
        else:
            self.wipe()  # the answer, or another line on stderr, comes next

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.wipe()

    def wipe(self) -> None:
        if self._shown:
            self._write("\r" + " " * len(self._shown) + "\r")
            self._shown = ""

    async def _tick(self) -> None:
        await asyncio.sleep(self._after)
        while True:
            self._say()
            await asyncio.sleep(self.TICK_S)

    def _say(self) -> None:
        wait = self._wait
        words = wait.words(self._after) if wait is not None else ""
        if not words or (words == self._shown if self._tty else words == self._said):
            return
        share = wait is not None and wait.reading is not None
        now = asyncio.get_running_loop().time()
        if not self._tty and self._said and share == self._said_share:
            gap = self.SHARE_LINE_S if share else self.QUIET_LINE_S
            if now - self._said_at < gap:
                return
        self._said, self._said_at, self._said_share = words, now, share
        if self._tty:
            padding = " " * max(0, len(self._shown) - len(words))
            self._write("\r" + words + padding)
            self._shown = words
        else:
            self._write(words + "\n")

    def _write(self, text: str) -> None:
        try:
            self._err.write(text)
            self._err.flush()
        except (OSError, ValueError):  # stderr went away: the answer goes on without it
            self._wait = None


@dataclass
class Progress:
    """How far ``conch ask`` got, for the sentence said when it is stopped."""

    chat_id: str = ""
    sent: bool = False  # the person's message is saved in the chat
    conversation: Conversation | None = None  # the turn's, told when a signal closes Conch


async def run_ask(
    args: argparse.Namespace, text: str, out: Output, err: TextIO, progress: Progress
) -> int:
    services = build_services(args.data_dir, mock=args.mock, secrets=_secrets(args))
    for problem in services.startup_problems:
        print(f"conch: {problem}", file=err)
    # A task nobody awaits that fails (a tool server, learning) reaches the log and Health.
    unreport = report_unhandled(services.health, asyncio.get_running_loop())
    _keep_runtime_warm(services, err)
    try:
        return await _ask(services, args, text, out, err, progress)
    finally:
        await services.aclose()
        unreport()


async def _ask(
    services: AppServices,
    args: argparse.Namespace,
    text: str,
    out: Output,
    err: TextIO,
    progress: Progress,
) -> int:
    program = services.find_program(args.model) if args.model else None
    chat_on = services.store.get_chat(args.chat) if args.chat else None
    on_program = program is not None or (
        not args.model and chat_on is not None and chat_on.model_key.startswith(f"{PROGRAMS}/")
    )
    # A program keeps its own chat: the bundled model is not started for it.
    await services.refresh_models(start_bundled=not on_program)
    model: ModelInfo | None = None
    if args.model:
        model = services.catalogue.resolve(args.model) or program
        if model is None or not model.ready:
            err.write(
                f"conch ask: no ready model called {args.model!r}; "
                "`conch models` lists the ready ones.\n"
            )
            return FAILED

    store = services.store
    chat = store.get_chat(args.chat) if args.chat else None
    created = chat is None
    if chat is None:
        chat = store.create_chat(chat_id=args.chat)
    elif chat.deleted_at is not None:
        store.restore_chat(chat.id)
    progress.chat_id = chat.id
    try:
        announce = created and not args.chat  # a chat named on the command line is known
        return await _turn(
            services,
            chat.id,
            model,
            text,
            out,
            err,
            progress,
            announce=announce,
            allowed=getattr(args, "allow_tools", ()),
        )
    finally:
        # Whatever stopped the command before the message was saved, no empty chat is left.
        if created and store.message_count(chat.id) == 0:
            store.delete_chat(chat.id)


async def _finish_summary(conv: Conversation, err: TextIO) -> None:
    """A fold's summary still being written after the answer: this process waits for it, so
    the next ``conch ask`` sends it (the answer is out; the wait says so)."""
    engine = conv.engine
    if not isinstance(engine, ApiSession) or not engine.writing:
        return
    err.write(SUMMARISING + "\n")
    await engine.wait_written()


async def _turn(
    services: AppServices,
    chat_id: str,
    model: ModelInfo | None,
    text: str,
    out: Output,
    err: TextIO,
    progress: Progress,
    *,
    announce: bool,
    allowed: Sequence[str] = (),
) -> int:
    waiting: ReadingLine | None = None

    def learned(run: LearningRun) -> None:
        if waiting is not None:
            waiting.wipe()
        err.write(_learning_line(run) + "\n")

    try:
        conv = services.conversation(chat_id, model=model, on_learning=learned)
    except ServicesError as exc:
        err.write(f"conch ask: {exc}\n")
        return FAILED
    progress.conversation = conv
    host = _headless_tools(services, conv.engine, allowed, err)
    if host is not None:
        await _say_unknown_tools(host, allowed, err)

    problem: TurnProblem | None = None
    ended_with_newline = True
    wrote = False
    stripped = text.strip()
    if stripped == "/compact" or stripped.startswith("/compact "):
        events = conv.compact(stripped.removeprefix("/compact").strip())
        waiting = ReadingLine(err, None, READING_AFTER_S)
    else:
        events = conv.turn(text)
        waiting = ReadingLine(err, reading_wait(conv), READING_AFTER_S)
    waiting.start()
    try:
        async for event in events:
            waiting.observe(event)
            if isinstance(event, TextDelta):
                out.write(event.text)
                wrote = wrote or bool(event.text)
                if event.text:
                    ended_with_newline = event.text.endswith("\n")
            elif isinstance(event, MessageSaved) and event.role == "user":
                progress.sent = True
                if announce:
                    err.write(f"New chat: {chat_id}\n")
            elif isinstance(event, Compacted):
                line = f"Earlier messages are summarised for {event.model}."
                if event.writing:
                    line += " (The answer did not wait for the summary; it is written next.)"
                elif not event.summarised:
                    line += " (No summary could be written; the oldest turns were set aside.)"
                err.write(line + "\n")
            elif isinstance(event, Healed):
                err.write(
                    f"The message was too long for {event.model}; Conch folded the chat "
                    "and sent it again.\n"
                )
            elif isinstance(event, Shortened):
                line = event.text
                if event.next_step is not None and event.next_step.model is not None:
                    line += f" ({event.next_step.model.name} reads the whole message: "
                    line += f"--model {event.next_step.model.key})"
                err.write(_one_line(line) + "\n")
            elif isinstance(event, ToolResult):
                err.write(tool_row(event))
            elif isinstance(event, Note):
                err.write(f"Note: {_one_line(event.text)}\n")
            elif isinstance(event, Problem):
                problem = event.problem
    finally:
        await waiting.stop()
        if wrote and not ended_with_newline:
            out.write("\n")
        # Closed here, whatever stopped the loop above, so the answer is saved while the chat
        # log is still open (not later by the garbage collector).
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
        try:
            await _finish_summary(conv, err)
        finally:
            await conv.aclose()  # lets a learning run that started finish
    if out.replaced:
        err.write(
            "conch ask: this terminal cannot show some characters of the answer (printed as "
            f"'?'); the whole answer is saved in chat {chat_id}.\n"
        )
    if problem is not None:
        err.write(_problem_line(problem) + "\n")
        return FAILED
    return OK


# --- entry ------------------------------------------------------------------------------------


def _stopped_line(signum: int, progress: Progress | None) -> str:
    name = signal.Signals(signum).name
    if progress is not None and progress.sent:
        return (
            f"conch: stopped by {name}; your message and what had arrived of the answer are "
            f"saved in chat {progress.chat_id}."
        )
    return f"conch: stopped by {name}."


async def until_signalled(
    work: Coroutine[Any, Any, int], err: TextIO, progress: Progress | None = None
) -> int:
    """Run ``work``; a stop signal cancels it (the turn saves what arrived, as stopped by the
    person or, for ``CLOSING_SIGNALS``, as cut by Conch closing) and the exit code is 128 + the
    signal's number. A second signal stops at once, the default way."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            loop.remove_signal_handler(signum)
            signal.raise_signal(signum)
            return
        received.append(signum)
        conv = progress.conversation if progress is not None else None
        if conv is not None and signum in CLOSING_SIGNALS:
            conv.closing()  # before the cancel reaches the turn, which saves the answer
        task.cancel()

    installed: list[int] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # Windows, or not the main thread: Ctrl+C still raises KeyboardInterrupt
        installed.append(signum)
    try:
        return await work
    except asyncio.CancelledError:
        if not received:
            raise
        task.uncancel()
        with contextlib.suppress(OSError, ValueError):  # the terminal may be gone (SIGHUP)
            err.write(_stopped_line(received[0], progress) + "\n")
        return 128 + received[0]
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def run_command(
    args: argparse.Namespace,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | BinaryIO | None = None,
) -> int:
    """Run ``conch models`` or ``conch ask`` from parsed arguments; returns the exit code."""
    out = Output(stdout or sys.stdout)
    err = stderr or sys.stderr
    unlog: Callable[[], None] | None = None
    try:
        if args.command == "ask":
            if args.chat is not None:
                try:
                    check_chat_id(args.chat)
                except TranscriptError:
                    err.write(
                        f"conch ask: {args.chat!r} is not a usable chat id "
                        "(letters, digits, '.', '_' and '-', up to 128).\n"
                    )
                    return USAGE
            text = read_message(args.text, stdin or sys.stdin, err)
            if not text.strip():
                err.write("conch ask: there is nothing to send (the message is empty).\n")
                return USAGE
        args.data_dir = prepare_data_dir(args.data_dir)
        # Warnings (a missing keyring, say) go to the log file, never to the answer's terminal.
        unlog = configure_logging(args.data_dir, console=False)
        if args.command == "models":
            return asyncio.run(until_signalled(run_models(args, out, err), err))
        progress = Progress()
        return asyncio.run(until_signalled(run_ask(args, text, out, err, progress), err, progress))
    except KeyboardInterrupt:  # before the loop started (or where it cannot take signals)
        err.write("\nconch: stopped.\n")
        return 128 + signal.SIGINT
    except (DataDirError, StoreError) as exc:
        err.write(f"conch: {exc}\n")
        return FAILED
    except sqlite3.Error as exc:
        err.write(
            f"conch: the chat log in {args.data_dir} could not be written ({exc}); check that "
            "the disk has room and the folder is writable.\n"
        )
        return FAILED
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):  # stderr itself may be what failed
            err.write(f"conch: {exc.strerror or exc}.\n")
        return FAILED
    finally:
        if unlog is not None:
            unlog()


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | BinaryIO | None = None,
) -> int:
    """``python -m app.cli``: a command is required (``conch`` alone opens the window, through
    app/main.py). ``argv`` excludes the program name."""
    err = stderr or sys.stderr
    try:
        args = parse_arguments(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else USAGE
    if args.command is None:
        err.write("conch: name a command (models or ask); `conch` alone opens the window.\n")
        return USAGE
    return run_command(args, stdout=stdout, stderr=err, stdin=stdin)


if __name__ == "__main__":
    raise SystemExit(main())
