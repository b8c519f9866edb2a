"""The ``conch`` command line: one parser for the window and its commands.

``conch`` alone opens the window; ``conch models`` and ``conch ask`` run in the terminal
(app/cli.py). ``--data-dir`` and ``--mock`` work before or after a command. Qt's own options
(one dash, such as ``-platform offscreen``) are set aside for the window's QApplication.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import platformdirs

COMMANDS = ("models", "ask")

# Qt's own command-line options (QGuiApplication and QApplication) and whether each takes a
# value; Qt also accepts the "-name=value" spelling.
_QT_WITH_VALUE = frozenset(
    {
        "-platform",
        "-platformpluginpath",
        "-platformtheme",
        "-plugin",
        "-qwindowgeometry",
        "-qwindowicon",
        "-qwindowtitle",
        "-session",
        "-style",
        "-stylesheet",
        "-display",
        "-geometry",
        "-title",
        "-name",
        "-visual",
        "-qmljsdebugger",
    }
)
_QT_FLAGS = frozenset({"-reverse", "-widgetcount", "-nograb", "-dograb", "-sync"})


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("Conch", appauthor=False))


def split_qt_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(Conch's arguments, Qt's arguments); everything after ``--`` is Conch's."""
    ours: list[str] = []
    qt: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            ours += [arg, *rest]
            break
        name = arg.split("=", 1)[0]
        if name in _QT_FLAGS:
            qt.append(arg)
        elif name in _QT_WITH_VALUE:
            qt.append(arg)
            if "=" not in arg and rest:
                qt.append(rest.pop(0))
        else:
            ours.append(arg)
    return ours, qt


def tool_names(text: str) -> tuple[str, ...]:
    """``--allow-tools``' value: tool names separated by commas (spaces around them ignored)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError("name at least one tool, for example read_text_file")
    return names


def _shared(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes. A command's parser leaves them unset when absent, so
    the value given before the command name stands."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None if top else argparse.SUPPRESS,
        metavar="DIR",
        help="where Conch keeps chats, memories and settings (nothing is written elsewhere)",
    )
    parser.add_argument(
        "--mock",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="use the scripted mock engine (with a demo long chat) instead of real models",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conch",
        usage="\n  conch [--data-dir DIR] [--mock] [--quit-after SECONDS]   (the window)"
        "\n  conch models [--json] [--all] [--data-dir DIR] [--mock]"
        "\n  conch ask [--model PROVIDER/MODEL] [--chat ID] [--allow-tools NAME,...]"
        " [--data-dir DIR] [--mock] TEXT",
        description="Chat with local models and model APIs. Without a command, Conch opens "
        "its window.",
    )
    _shared(parser, top=True)
    parser.add_argument(
        "--quit-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close the window after this many seconds (for smoke tests)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    models = sub.add_parser("models", prog="conch models", help="list the models that are ready")
    _shared(models, top=False)
    models.add_argument("--json", action="store_true", help="print a JSON array")
    models.add_argument("--all", action="store_true", help="include models that are not ready")

    ask = sub.add_parser("ask", prog="conch ask", help="send one message and print the answer")
    _shared(ask, top=False)
    ask.add_argument("--model", metavar="PROVIDER/MODEL", help="the model to ask")
    ask.add_argument("--chat", metavar="ID", help="continue (or start) the chat with this id")
    ask.add_argument(
        "--allow-tools",
        type=tool_names,
        default=(),
        metavar="NAME,...",
        help="offer the model the tools of the MCP servers in Settings → Tools, and let it run "
        "these ones without asking (any other call is declined)",
    )
    ask.add_argument("text", metavar="TEXT", help="the message; - reads it from stdin")
    return parser


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` (without the program name). ``command`` is None for the window,
    ``qt_args`` holds Qt's own options and ``data_dir`` is always set.

    A wrong command line prints the usage and raises ``SystemExit(2)``, as argparse does.
    """
    parser = build_parser()
    ours, qt_args = split_qt_args(argv)
    args = parser.parse_args(ours)
    if qt_args and args.command is not None:
        parser.error(f"{qt_args[0]} is an option for the window, not for 'conch {args.command}'")
    if args.command is not None and args.quit_after is not None:
        parser.error(f"--quit-after is for the window, not for 'conch {args.command}'")
    args.qt_args = qt_args
    if args.data_dir is None:
        args.data_dir = default_data_dir()
    return args
