"""``conch models`` and ``conch ask``: the window's services and conversation, in a terminal.

``conch ask`` sends one turn through the same ``Conversation`` and engine as the window (a
long chat folds, learns and heals the same way), prints the answer to stdout as it streams and
notes (a fold, a healed refusal, memories learned) to stderr. Exit codes: 0 answered, 1 the
turn failed or no model could answer (one line on stderr says why), 2 the command was wrong,
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import platformdirs

from app.memories import LearningRun
from app.services import AppServices, ServicesError, build_services
from engines.api.transcript import TranscriptError, check_chat_id
from engines.base import Compacted, Healed, ModelInfo, Note, Problem, TextDelta, TurnProblem

SUBCOMMANDS = ("models", "ask")
OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("Conch", appauthor=False))


def wants_cli(argv: Sequence[str]) -> bool:
    """Whether the arguments name a subcommand (else the window starts)."""
    return any(a in SUBCOMMANDS for a in argv if not a.startswith("-"))


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default,
        help="where Conch keeps chats, memories and settings (nothing is written elsewhere)",
    )
    parser.add_argument(
        "--mock",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="use the scripted mock engine instead of real models",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conch", description="Chat with local models and model APIs."
    )
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    models = sub.add_parser("models", help="list the models that are ready")
    _common(models, suppress=True)
    models.add_argument("--json", action="store_true", help="print a JSON array")
    models.add_argument("--all", action="store_true", help="include models that are not ready")

    ask = sub.add_parser("ask", help="send one message and print the answer")
    _common(ask, suppress=True)
    ask.add_argument("--model", metavar="PROVIDER/MODEL", help="the model to ask")
    ask.add_argument("--chat", metavar="ID", help="continue (or start) the chat with this id")
    ask.add_argument("text", metavar="TEXT", help="the message; - reads it from stdin")
    return parser


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


# --- conch models -----------------------------------------------------------------------------


def _model_row(m: ModelInfo) -> dict[str, object]:
    return {
        "provider": m.provider,
        "id": m.id,
        "context": m.context,
        "local": m.local,
        "ready": m.ready,
    }


async def run_models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    services = build_services(args.data_dir, mock=args.mock)
    for problem in services.startup_problems:
        print(f"conch: {problem}", file=err)
    try:
        # The same rule as the window: with nothing else ready, the bundled model starts.
        models = await services.refresh_models()
        shown = models if args.all else [m for m in models if m.ready]
        if args.json:
            out.write(json.dumps([_model_row(m) for m in shown], indent=2) + "\n")
        else:
            _print_table(shown, out)
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
                    "or add an API key in Settings.\n"
                )
        return OK
    finally:
        await services.aclose()


def _print_table(models: Sequence[ModelInfo], out: TextIO) -> None:
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


def _learning_line(run: LearningRun) -> str:
    n = len(run.memories)
    things = "1 thing" if n == 1 else f"{n} things"
    if run.waiting:
        return f"Conch learned {things} from this chat; they wait for your OK in the window."
    return f"Conch learned {things} from this chat (Undo in the window)."


async def run_ask(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    text = stdin.read() if args.text == "-" else args.text
    if not text.strip():
        err.write("conch ask: there is nothing to send (the message is empty).\n")
        return USAGE
    if args.chat is not None:
        try:
            check_chat_id(args.chat)
        except TranscriptError:
            err.write(
                f"conch ask: {args.chat!r} is not a usable chat id "
                "(letters, digits, '.', '_' and '-', up to 128).\n"
            )
            return USAGE

    services = build_services(args.data_dir, mock=args.mock)
    for problem in services.startup_problems:
        print(f"conch: {problem}", file=err)
    try:
        return await _ask(services, args, text, out, err)
    finally:
        await services.aclose()


async def _ask(
    services: AppServices, args: argparse.Namespace, text: str, out: TextIO, err: TextIO
) -> int:
    await services.refresh_models()
    model: ModelInfo | None = None
    if args.model:
        model = services.catalogue.resolve(args.model)
        if model is None or not model.ready:
            err.write(
                f"conch ask: no ready model called {args.model!r}; "
                "`conch models` lists the ready ones.\n"
            )
            return FAILED

    store = services.store
    chat = store.get_chat(args.chat) if args.chat else None
    if chat is None:
        chat = store.create_chat(chat_id=args.chat)
        if not args.chat:
            err.write(f"New chat: {chat.id}\n")
    if chat.deleted_at is not None:
        store.restore_chat(chat.id)

    def learned(run: LearningRun) -> None:
        err.write(_learning_line(run) + "\n")

    try:
        conv = services.conversation(chat.id, model=model, on_learning=learned)
    except ServicesError as exc:
        err.write(f"conch ask: {exc}\n")
        return FAILED

    problem: TurnProblem | None = None
    ended_with_newline = True
    wrote = False
    try:
        stripped = text.strip()
        if stripped == "/compact" or stripped.startswith("/compact "):
            events = conv.compact(stripped.removeprefix("/compact").strip())
        else:
            events = conv.turn(text)
        async for event in events:
            if isinstance(event, TextDelta):
                out.write(event.text)
                out.flush()
                wrote = wrote or bool(event.text)
                if event.text:
                    ended_with_newline = event.text.endswith("\n")
            elif isinstance(event, Compacted):
                line = f"Earlier messages are summarised for {event.model}."
                if not event.summarised:
                    line += " (No summary could be written; the oldest turns were set aside.)"
                err.write(line + "\n")
            elif isinstance(event, Healed):
                err.write(
                    f"The message was too long for {event.model}; Conch folded the chat "
                    "and sent it again.\n"
                )
            elif isinstance(event, Note):
                err.write(f"Note: {_one_line(event.text)}\n")
            elif isinstance(event, Problem):
                problem = event.problem
    finally:
        if wrote and not ended_with_newline:
            out.write("\n")
            out.flush()
        await conv.aclose()  # lets a learning run that started finish
    if problem is not None:
        err.write(_problem_line(problem) + "\n")
        return FAILED
    return OK


# --- entry ------------------------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run a ``conch`` subcommand; returns the exit code. ``argv`` excludes the program name."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args_in = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_in)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else USAGE
    if args.data_dir is None:
        args.data_dir = default_data_dir()
    # Library warnings (a missing keyring, say) are for the log, not the answer's terminal.
    logging.getLogger("conch").setLevel(logging.ERROR)
    try:
        if args.command == "models":
            return asyncio.run(run_models(args, out, err))
        return asyncio.run(run_ask(args, out, err, stdin or sys.stdin))
    except KeyboardInterrupt:
        err.write("\nconch: stopped.\n")
        return INTERRUPTED
    except OSError as exc:
        err.write(f"conch: {exc.strerror or exc}\n")
        return FAILED


if __name__ == "__main__":
    raise SystemExit(main())
