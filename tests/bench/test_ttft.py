"""The time-to-first-token bench's matched comparison: each turn against the same turn
unfolded, so a fold turn bringing a long message is not blamed for reading that message."""

from __future__ import annotations

import asyncio

from bench.ttft import Lockstep, PolicyRun, TurnFigures, matched, run, run_surprise


def _turn(ttft: float | None, evaluated: int | None, *, fold: bool = False) -> TurnFigures:
    return TurnFigures(
        ttft=ttft, fold=fold, evaluated=evaluated, cached=0, in_turn_evaluated=0, sent=0
    )


def test_a_fold_turn_is_divided_by_the_same_turn_of_the_control() -> None:
    conch = PolicyRun(
        turns=[
            _turn(1.0, 40),
            _turn(6.0, 460, fold=True),  # a long pasted message: slow in the control too
            _turn(1.1, 50),
            _turn(3.0, 300, fold=True),
        ]
    )
    control = PolicyRun(turns=[_turn(1.0, 40), _turn(5.0, 400), _turn(1.0, 60), _turn(1.0, 50)])

    figures = matched(conch, control)

    assert figures["fold_vs_control"] == {"n": 2, "median": 2.1, "max": 3.0}
    assert figures["normal_vs_control"] == {"n": 2, "median": 1.05, "max": 1.1}
    # Only the first turn read as many tokens as the control's (50 is not within 5% of 60).
    assert figures["same_work_vs_control"] == {"n": 1, "median": 1.0, "max": 1.0}
    assert figures["fold_evaluated_vs_control"] == {"n": 2, "median": 3.575, "max": 6.0}
    assert figures["extra_evaluated_fold"] == {"n": 2, "median": 155.0, "max": 250.0}
    assert figures["extra_evaluated_normal"] == {"n": 2, "median": -5.0, "max": 0.0}
    assert figures["fold_turns"] == [[1, 6.0, 5.0, 460, 400], [3, 3.0, 1.0, 300, 50]]


def test_turns_without_an_answer_or_past_the_control_are_left_out() -> None:
    conch = PolicyRun(
        turns=[_turn(None, 40, fold=True), _turn(2.0, 90, fold=True), _turn(2.0, 90, fold=True)]
    )
    control = PolicyRun(turns=[_turn(1.0, 40), _turn(1.0, 30)])

    figures = matched(conch, control)

    assert figures["fold_vs_control"] == {"n": 1, "median": 2.0, "max": 2.0}
    assert figures["normal_vs_control"] == {"n": 0, "median": None, "max": None}
    assert figures["fold_vs_control_over_normal"] is None


async def test_the_surprise_paste_folds_without_a_summary_before_its_first_token() -> None:
    # On the timed stand-in: the figures' shape, not its clock (the machine may be busy).
    figures = await run_surprise(2_048, (), True, 8_192)
    assert figures["folded"] is True and figures["problems"] == []
    assert figures["summary_requests_before_first_token"] == 0
    assert isinstance(figures["background_requests"], int) and figures["background_requests"] >= 1
    assert isinstance(figures["ttft_paste"], float) and isinstance(
        figures["paste_vs_control"], float
    )


async def test_runs_in_lockstep_take_each_turn_in_order_and_one_that_fails_holds_nobody() -> None:
    pace = Lockstep(["control", "a", "b"])
    order: list[tuple[str, int]] = []

    async def runner(name: str, turns: int, fail_at: int | None = None) -> None:
        try:
            for i in range(turns):
                await pace.take(name, i)
                if i == fail_at:
                    raise RuntimeError("the server went away")
                order.append((name, i))
                await asyncio.sleep(0)  # another run may try to go first here
                await pace.give()
        finally:
            await pace.leave(name)

    results = await asyncio.wait_for(
        asyncio.gather(
            runner("b", 3), runner("a", 3, fail_at=1), runner("control", 3), return_exceptions=True
        ),
        10,
    )
    assert isinstance(results[1], RuntimeError)
    assert order == [
        ("control", 0), ("a", 0), ("b", 0),
        ("control", 1), ("b", 1),
        ("control", 2), ("b", 2),
    ]  # fmt: skip


async def test_the_fold_turns_are_timed_in_lockstep_with_the_control() -> None:
    figures = await run(6, [1_024], policies=("conch", "no_fold"), control_window=2_048, fake=True)
    assert figures["lockstep"] is True
    conch = figures["1024"]
    assert isinstance(conch, dict) and conch["conch"]["turns"] == 6
    assert figures["no_fold"]["turns"] == 6  # type: ignore[index]
