"""``conch``: the command line. A command goes to app/cli.py; otherwise the window
(ui/start.py). Nothing here loads Qt, so a command runs on a machine without it.

Nothing is written outside the data dir (``--data-dir``, default the platform's user data
folder for "Conch"): chats, memories, settings, health notes and the log all live there.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from app.arguments import build_parser as build_parser  # the window's options live there
from app.arguments import parse_arguments


def run(argv: Sequence[str] | None = None) -> int:
    """The ``conch`` console script: the window, or a command (app/cli.py)."""
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:2] == ["-m", "engines.local.serve"]:
        # A frozen build has no Python to run the model's server: Conch itself runs it.
        from engines.local import serve

        return serve.main(given[2:])
    try:
        args = parse_arguments(given)
    except SystemExit as exc:  # --help, or a wrong command line (argparse said why)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is not None:
        from app import cli

        return cli.run_command(args)
    from ui.start import run_gui  # the window, and with it Qt

    return run_gui(args)


if __name__ == "__main__":
    sys.exit(run())
