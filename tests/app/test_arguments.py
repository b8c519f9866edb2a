"""One command line for the window and its commands (app/arguments.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.arguments import default_data_dir, parse_arguments, split_qt_args


def test_a_data_dir_named_like_a_command_opens_the_window_there() -> None:
    args = parse_arguments(["--data-dir", "models", "--mock"])
    assert args.command is None
    assert args.data_dir == Path("models")
    assert args.mock is True


@pytest.mark.parametrize(
    "argv",
    [
        ["--mock", "--data-dir", "D", "models", "--json"],
        ["models", "--mock", "--data-dir", "D", "--json"],
        ["--data-dir", "D", "models", "--json", "--mock"],
    ],
)
def test_shared_options_work_before_or_after_the_command(argv: list[str]) -> None:
    args = parse_arguments(argv)
    assert (args.command, args.data_dir, args.mock, args.json) == ("models", Path("D"), True, True)


def test_ask_takes_its_text_and_options() -> None:
    args = parse_arguments(["ask", "--chat", "notes", "--model", "ollama/x", "-"])
    assert (args.command, args.chat, args.model, args.text) == ("ask", "notes", "ollama/x", "-")
    assert args.data_dir == default_data_dir()
    assert args.mock is False


def test_the_window_keeps_its_smoke_test_flags_and_qt_options() -> None:
    args = parse_arguments(["--mock", "--data-dir", "D", "--quit-after", "3", "-platform", "xcb"])
    assert args.command is None
    assert args.quit_after == 3.0
    assert args.qt_args == ["-platform", "xcb"]


def test_qt_options_are_set_aside_in_both_spellings() -> None:
    ours, qt = split_qt_args(["-style=fusion", "--mock", "-reverse", "-platform", "offscreen"])
    assert ours == ["--mock"]
    assert qt == ["-style=fusion", "-reverse", "-platform", "offscreen"]
    # After "--" nothing is Qt's: a message may start with a dash.
    assert split_qt_args(["ask", "--", "-reverse"]) == (["ask", "--", "-reverse"], [])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["frobnicate"], "invalid choice"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["ask", "-platform", "offscreen", "hi"], "-platform is an option for the window"),
        (["models", "--quit-after", "3"], "unrecognized arguments"),
        (["--quit-after", "3", "models"], "--quit-after is for the window"),
        (["ask"], "required: TEXT"),
    ],
)
def test_a_wrong_command_line_exits_2_saying_why(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_arguments(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
