"""What goes wrong with a program Conch drives, in one sentence each, with the next step.

Details (the program's last words on stderr) go to Health and the card's details, scrubbed of
anything that looks like a secret first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engines.base import NextStep, Note, ProblemKind, TurnProblem
from engines.scrub import scrub

SETTINGS_LABEL = "Set the program's command in Settings → Programs"


def _detail(lines: Iterable[str]) -> str:
    return scrub("\n".join(line.rstrip() for line in lines if line.strip()))[-2_000:]


def command_text(command: Sequence[str]) -> str:
    return " ".join(command)


def missing(program: str, command: Sequence[str], install: str = "") -> TurnProblem:
    how = f" Install it with “{install}”, or set" if install else " Install it, or set"
    return TurnProblem.of(
        ProblemKind.MODEL_MISSING,
        detail=f"not found: {command_text(command)}",
        next_step=NextStep(kind="open-settings", label=SETTINGS_LABEL, text="programs"),
        message=(
            f"Conch could not start {program}: “{command[0] if command else ''}” was not found."
            f"{how} its command in Settings → Programs."
        ),
    )


def did_not_start(program: str, why: str, stderr: Iterable[str] = ()) -> TurnProblem:
    return TurnProblem.of(
        ProblemKind.UNREACHABLE,
        detail=_detail([why, *stderr]),
        next_step=NextStep(kind="open-settings", label=SETTINGS_LABEL, text="programs"),
        message=f"{program} did not start: {why} Check its command in Settings → Programs.",
    )


def not_protocol(program: str, line: str, *, partial: bool, mode: str) -> TurnProblem:
    shown = " ".join(line.split())[:120]
    return TurnProblem.of(
        ProblemKind.BROKEN_STREAM,
        detail=scrub(line[:2_000]),
        next_step=NextStep(kind="open-settings", label=SETTINGS_LABEL, text="programs"),
        partial=partial,
        message=(
            f"{program} printed “{shown}” where Conch expected {mode} messages, so Conch "
            f"stopped it. Check that its command starts it in {mode} mode."
        ),
    )


def exited(
    program: str, code: int | None, stderr: Iterable[str] = (), *, partial: bool
) -> TurnProblem:
    how = f" (exit code {code})" if code is not None else ""
    return TurnProblem.of(
        ProblemKind.BROKEN_STREAM,
        detail=_detail(stderr),
        next_step=NextStep(kind="retry", label="Send it again"),
        partial=partial,
        message=(
            f"{program} stopped in the middle of its answer{how}. What it wrote is kept; "
            "send the message again to carry on."
            if partial
            else f"{program} stopped before it answered{how}. Send the message again; if it "
            "keeps stopping, run the program on its own to see why."
        ),
    )


def silent(program: str, seconds: float, *, partial: bool) -> TurnProblem:
    return TurnProblem.of(
        ProblemKind.TIMEOUT,
        detail=f"no message for {seconds:g} seconds",
        next_step=NextStep(kind="retry", label="Try again"),
        partial=partial,
        message=(
            f"{program} sent nothing for {seconds:g} seconds, so Conch stopped it. "
            "Try again; if it keeps happening, check the program on its own."
        ),
    )


def declined(
    program: str, what: str, *, asked_person: bool, only_always: bool = False
) -> TurnProblem:
    if only_always:
        # The person chose "Allow once"; the program offered only to allow it for good.
        return TurnProblem.of(
            ProblemKind.REFUSED,
            detail=f"permission declined: {what} (no allow-once option)",
            next_step=NextStep(kind="retry", label="Send again and choose Always for this tool"),
            message=(
                f"{program} asked to {what.rstrip('.')}, but it offers only to allow that "
                f"always, not once, so Conch declined and {program} stopped there."
            ),
        )
    why = (
        "You did not allow it"
        if asked_person
        else "Conch cannot ask you about a program's actions here, so it declined"
    )
    return TurnProblem.of(
        ProblemKind.REFUSED,
        detail=f"permission declined: {what}",
        next_step=NextStep(kind="retry", label="Send again and allow it"),
        message=f"{program} asked to {what.rstrip('.')}. {why}, so {program} stopped there.",
    )


def declined_note(program: str, what: str) -> Note:
    """A request the person (or Conch) declined while the program went on and answered: said
    in the answer and on ``conch ask``'s stderr, so a refusal is never silent."""
    return Note(
        topic="tools",
        text=f"{program} asked to {what.rstrip('.')}; it was not allowed, so it went on without.",
    )


def refused(program: str, *, partial: bool) -> TurnProblem:
    return TurnProblem.of(
        ProblemKind.REFUSED,
        detail="stop reason: refusal",
        next_step=NextStep(kind="retry", label="Rephrase and try again"),
        partial=partial,
        message=f"{program} declined to answer this.",
    )


def reported(program: str, error: str, *, partial: bool) -> TurnProblem:
    return TurnProblem.of(
        ProblemKind.SERVER_ERROR,
        detail=scrub(error[:2_000]),
        next_step=NextStep(kind="retry", label="Try again"),
        partial=partial,
        message=f"{program} reported an error: {' '.join(scrub(error).split())[:200]}",
    )


def not_logged_in(program: str, login: str, *, key: str = "") -> TurnProblem:
    """``key``: the environment variable whose key the program used (a refused key is fixed
    there, not by logging in)."""
    how = f" Run “{login}” in a terminal, then try again." if login else " Log in, then try again."
    said = f"{program} is not logged in.{how}"
    if key:
        log_in = f" run “{login}” in a terminal" if login else " log in"
        said = (
            f"{program} was refused with the key in {key}. Check that key, or remove it and"
            f"{log_in}, then try again."
        )
    return TurnProblem.of(
        ProblemKind.AUTH,
        detail="authentication required",
        next_step=NextStep(kind="retry", label="Try again after logging in"),
        message=said,
    )
