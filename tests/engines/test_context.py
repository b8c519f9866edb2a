"""The window arithmetic: estimates, budgets, fold plans and shortening."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import Message, Picture, ToolCallData
from engines.window import (
    FOLD_BYTES,
    KEEP_BYTES,
    PICTURE_TOKENS,
    Ledger,
    answer_reserve,
    budget,
    estimate_message,
    estimate_tokens,
    message_bytes,
    shorten_text,
    shorten_turn,
    update_factor,
)
from tests.cost import LINEAR_GROWTH, cpu_seconds, growth

# --- estimate ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("x" * 4000, 1000),  # a long run of letters: four a token
        ("é", 1),
        ("日本語", 3),  # any other character: one each
        ("👍", 1),
        ("1234567890", 10),  # tokenizers split digits: one each
        ("2024-03-15", 11),  # eight digits and two dashes (1.2 each)
    ],
)
def test_estimate_counts_words_digits_and_other_characters(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_a_digit_costs_a_token_so_a_table_of_numbers_is_not_counted_as_prose() -> None:
    row = "2024-03-15,4711,21.5,87,1013.2\n"
    prose = "The library opens at nine, but the reading room stays quiet all morning.\n"
    assert len(row) < len(prose) / 2
    assert estimate_tokens(row * 100) > estimate_tokens(prose * 100)  # 22 digits a row
    assert estimate_tokens(row * 100) >= 100 * sum(c.isdigit() for c in row)


def test_estimate_of_a_five_megabyte_paste_is_quick_and_linear() -> None:
    ascii_paste = "log line 42: all is well\n" * 200_000  # 5 MB
    mixed_paste = ("naïve café " * 50_000) * 9  # 4.95 MB of text, 900,000 non-ASCII
    a = estimate_tokens(ascii_paste)
    m = estimate_tokens(mixed_paste)
    # Each line (or phrase) costs the same wherever it stands: eight times the text, eight
    # times the estimate.
    assert a == 8 * estimate_tokens(ascii_paste[: len(ascii_paste) // 8])
    assert m == 9 * estimate_tokens(mixed_paste[: len(mixed_paste) // 9])
    assert m >= 900_000  # a token for each non-ASCII character
    # In CPU time, which a busy machine does not inflate: about 0.16 s; a loop in Python over
    # each character would take seconds.
    work = cpu_seconds(lambda: (estimate_tokens(ascii_paste), estimate_tokens(mixed_paste)))
    assert work < 0.5
    assert growth(estimate_tokens, "log line 42: all is well\n", 500_000) < LINEAR_GROWTH


def test_shortening_a_huge_paste_costs_linear_time() -> None:
    # A paste of megabytes of numbers is cut for a small model as cheaply, per byte, as a short one.
    row = "2024-03-15,4711,21.5,87,1013.2\n"
    assert growth(lambda text: shorten_text(text, 2_000), row, 400_000) < LINEAR_GROWTH
    out = shorten_text(row * 20_000, 2_000)
    assert out.startswith(row) and out.endswith(row) and estimate_tokens(out) <= 2_000


def _rule(text: str) -> int:
    """The estimate's rule said plainly, in tenths of a token, one pattern at a time."""
    letters, spaces, punct = "[A-Za-z]+", "[ \t]+", "[^A-Za-z0-9 \t\r\n\v\f\x80-\U0010ffff]+"
    tenths = (
        10 * sum(len(run) // 4 for run in re.findall(letters, text))
        + 4 * len(re.findall("[ \t][A-Za-z]", text))
        + 3 * len(re.findall(f"{punct[:-1]}[A-Za-z]", text))
        + 10 * len(re.findall("[0-9]", text))
        + 10 * len(re.findall("[ \t][0-9]", text))
        + sum(12 + 4 * (len(run) // 2) for run in re.findall(punct, text))
        + 4 * sum(len(run) // 4 for run in re.findall(spaces, text))
        + 8 * len(re.findall("[\r\n\v\f]", text))
        + 10 * len(re.findall("[\x80-\U0010ffff]", text))
    )
    return max(1, -(-tenths // 10)) if text else 0


@given(st.text(max_size=300))
def test_estimate_matches_the_rule_for_any_text(text: str) -> None:
    assert estimate_tokens(text) == _rule(text)


@given(st.text(alphabet="ab 0.,!\n\té日", max_size=200))
def test_estimate_matches_the_rule_for_text_of_words_digits_and_punctuation(text: str) -> None:
    assert estimate_tokens(text) == _rule(text)


@given(st.text(max_size=200), st.integers(0, 200))
def test_a_part_of_a_text_never_costs_more_than_the_whole(text: str, cut: int) -> None:
    whole = estimate_tokens(text)
    assert estimate_tokens(text[:cut]) <= whole
    assert estimate_tokens(text[cut:]) <= whole


@given(st.lists(st.text(max_size=80), max_size=8))
def test_lines_cost_no_more_together_than_apart(lines: list[str]) -> None:
    # What the fact keeper and the tool list rely on: adding up lines never under-counts.
    together = "".join(f"{line}\n" for line in lines)
    assert estimate_tokens(together) <= sum(estimate_tokens(f"{line}\n") for line in lines)


def test_pictures_cost_a_fixed_1600_each() -> None:
    pics = (Picture(data="A" * 10), Picture(data="B" * 999_999))
    assert PICTURE_TOKENS == 1600
    assert estimate_message(Message(role="user", pictures=pics)) == 3200
    assert estimate_message(Message(role="user", text="abcd", pictures=pics[:1])) == 1601


def test_message_estimate_counts_text_thinking_and_tool_calls() -> None:
    m = Message(
        role="assistant",
        text="a" * 40,
        thinking="b" * 80,
        tool_calls=(ToolCallData(id="1", name="read_file", arguments={"path": "/tmp/x"}),),
    )
    base = estimate_message(m.model_copy(update={"tool_calls": ()}))
    assert base == 10 + 20
    assert estimate_message(m) > base
    # raw blocks are what gets sent for such a message, so they are what is counted
    raw = ({"type": "thinking", "thinking": "b" * 80, "signature": "s" * 400},)
    with_raw = m.model_copy(update={"raw": raw})
    assert estimate_message(with_raw) >= 120
    assert estimate_message(with_raw) == estimate_message(with_raw)  # deterministic
    tool = Message(role="tool", text="c" * 400, tool_name="search", tool_call_id="1")
    assert estimate_message(tool) == 100 + estimate_tokens("search")


def test_message_bytes_is_the_size_of_its_json() -> None:
    m = Message(role="user", text="ü" * 1000)
    assert message_bytes(m) == len(m.model_dump_json().encode())
    assert message_bytes(m) > 2000


# --- budget -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "reserve", "expected"),
    [
        (8_192, 1_229, 7_372 - 1_229),
        (16_384, 2_458, 14_745 - 2_458),
        (32_768, 4_915, 29_491 - 4_915),
        (128_000, 16_384, 115_200 - 16_384),  # reserve clamped at 16,384 (19,200 uncapped)
        (1_000_000, 16_384, 100_000),  # the 100K transcript cap
        (4_096, 1_024, 3_686 - 1_024),  # reserve clamped at 1,024 (614 uncapped)
        (2_000, 1_024, 1_800 - 1_024),
    ],
)
def test_budget_numbers_from_the_design(window: int, reserve: int, expected: int) -> None:
    assert answer_reserve(window) == reserve
    assert budget(window) == expected


def test_budget_subtracts_the_real_system_prompt_and_tools() -> None:
    assert budget(8_192, system_tokens=1_000, tools_tokens=500) == 6_143 - 1_500
    # a 1M window is capped after subtracting, so a big system prompt does not matter there
    assert budget(1_000_000, system_tokens=50_000) == 100_000


@pytest.mark.parametrize("window", [0, -1, -1_000_000, 500, 1_024])
def test_budget_is_zero_for_windows_with_no_room(window: int) -> None:
    assert budget(window) == 0


def test_budget_is_zero_when_the_system_prompt_is_bigger_than_the_window() -> None:
    assert budget(8_192, system_tokens=9_000) == 0
    assert budget(8_192, system_tokens=6_000, tools_tokens=6_000) == 0


def test_budget_survives_absurd_windows() -> None:
    assert budget(10**30) == 100_000
    assert budget(float("inf")) == 0  # type: ignore[arg-type]
    assert budget(float("nan")) == 0  # type: ignore[arg-type]


@given(st.integers(min_value=-(10**9), max_value=10**12), st.integers(0, 10**6))
def test_budget_never_negative_and_never_over_the_cap(window: int, system: int) -> None:
    b = budget(window, system)
    assert 0 <= b <= 100_000
    assert 1_024 <= answer_reserve(window) <= 16_384


# --- factor -----------------------------------------------------------------------------------


def test_factor_only_ever_grows_and_is_capped() -> None:
    assert update_factor(1.0, 1_500, 1_000) == 1.5
    assert update_factor(1.5, 1_000, 1_000) == 1.5  # never downward (Ollama counts less)
    assert update_factor(1.5, 100, 1_000) == 1.5
    assert update_factor(1.0, 10**9, 10) == 4.0  # a bogus report cannot run away
    assert update_factor(1.0, 0, 1_000) == 1.0
    assert update_factor(1.2, 1_000, 0) == 1.2
    assert update_factor(1.2, -5, 100) == 1.2
    assert update_factor(0.0, 100, 100) == 1.0
    assert update_factor(float("nan"), 100, 100) == 1.0


# --- ledger and fold plans --------------------------------------------------------------------


def chat(turn_sizes: Sequence[tuple[int, ...]]) -> list[Message]:
    """Turns as token sizes: (person, answer, tool result, ...)."""
    out: list[Message] = []
    for sizes in turn_sizes:
        out.append(Message(role="user", text="u" * (4 * sizes[0])))
        for j, size in enumerate(sizes[1:]):
            role = "assistant" if j % 2 == 0 else "tool"
            out.append(Message(role=role, text="a" * (4 * size)))
    return out


def test_no_fold_while_it_fits() -> None:
    ledger = Ledger(chat([(100, 200)] * 10))
    plan = ledger.plan(budget=3_000)
    assert plan.drop == 0 and plan.reason == "" and plan.kept_tokens == 3_000
    assert not plan.due


def test_fold_drops_whole_turns_down_to_half_the_budget() -> None:
    messages = chat([(100, 200)] * 10)
    plan = Ledger(messages).plan(budget=2_999)
    assert plan.reason == "budget"
    assert plan.drop == 12  # six turns of 300 go; four stay: 1,200 ≤ 2,999 / 2 < 1,500
    assert messages[plan.drop].role == "user"
    assert plan.kept_tokens == 1_200
    assert plan.shorten_to is None


def test_factor_and_reserved_count_against_the_budget() -> None:
    ledger = Ledger(chat([(100, 200)] * 10))  # 3,000 tokens
    assert ledger.plan(budget=3_000, factor=1.0).drop == 0
    assert ledger.plan(budget=3_000, factor=1.1).reason == "budget"
    assert ledger.plan(budget=3_000, reserved=1).reason == "budget"
    plan = ledger.plan(budget=5_999, factor=1.5, reserved=1_500)
    assert plan.drop == 14  # kept x 1.5 + 1,500 ≤ 2,999.5: three turns of 300 stay
    assert plan.kept_tokens == 900


def test_more_than_600_messages_folds_to_300() -> None:
    messages = chat([(1, 1)] * 301)  # 602 tiny messages
    ledger = Ledger(messages)
    plan = ledger.plan(budget=100_000)
    assert plan.reason == "messages"
    assert len(messages) - plan.drop <= 300
    assert len(messages) - plan.drop >= 299  # no more than needed
    ledger.drop_front(plan.drop)
    assert ledger.plan(budget=100_000).drop == 0


def test_more_than_8_mib_folds_to_4_mib() -> None:
    big = "x" * (1024 * 1024)  # ~1 MiB per message, few tokens against a huge budget
    messages = [Message(role="user" if i % 2 == 0 else "assistant", text=big) for i in range(10)]
    ledger = Ledger(messages)
    assert ledger.size > FOLD_BYTES
    plan = ledger.plan(budget=10**9)
    assert plan.reason == "bytes"
    ledger.drop_front(plan.drop)
    assert ledger.size <= KEEP_BYTES
    assert plan.drop % 2 == 0


def test_the_current_turn_always_stays_and_is_shortened_when_too_big() -> None:
    ledger = Ledger(chat([(100, 100), (100, 100), (5_000,)]))
    plan = ledger.plan(budget=1_000)
    assert plan.drop == 4  # everything before the current turn
    assert plan.kept_tokens == 5_000
    assert plan.shorten_to == 1_000
    plan = ledger.plan(budget=1_000, factor=2.0, reserved=200)
    assert plan.shorten_to == 400  # (1,000 - 200) / 2


def test_a_current_turn_between_half_and_all_of_the_budget_is_kept_whole() -> None:
    ledger = Ledger(chat([(100, 100), (700,)]))
    plan = ledger.plan(budget=800)
    assert plan.drop == 2 and plan.shorten_to is None


def test_forced_fold_keeps_only_the_current_turn() -> None:
    ledger = Ledger(chat([(10, 10)] * 5))
    plan = ledger.plan(budget=100_000, force=True)
    assert plan.reason == "forced" and plan.drop == 8
    one = Ledger(chat([(10, 10)]))
    assert one.plan(budget=100_000, force=True).drop == 0


def test_tool_results_do_not_start_turns() -> None:
    messages = chat([(100, 50, 400, 50), (100, 50, 400, 50), (10,)])
    plan = Ledger(messages).plan(budget=1_200)
    assert plan.drop in (0, 4, 8)
    assert plan.drop == 8


def test_ledger_stays_right_through_appends_drops_and_pops() -> None:
    messages = chat([(3, 5, 7)] * 3000)
    ledger = Ledger()
    for m in messages:
        ledger.append(m)
    ledger.drop_front(4_500)  # crosses the compaction threshold
    ledger.drop_front(3_000)
    kept = messages[7_500:]
    fresh = Ledger(kept)
    assert len(ledger) == len(kept)
    assert ledger.tokens == fresh.tokens == sum(estimate_message(m) for m in kept)
    assert ledger.size == fresh.size
    assert ledger.turn_starts == fresh.turn_starts
    ledger.pop_back(3)
    fresh.pop_back(3)
    assert ledger.tokens == fresh.tokens
    assert ledger.turns == fresh.turns == len(kept) // 3 - 1
    assert ledger.plan(500, 1.0) == fresh.plan(500, 1.0)


def test_an_empty_ledger_plans_nothing() -> None:
    ledger = Ledger()
    assert ledger.plan(0).drop == 0
    assert ledger.last_turn_start() == 0


# --- foreseeing the next fold (prepared summaries) ----------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 800), st.integers(0, 800)), min_size=2, max_size=30),
    st.integers(1, 3_000),
    st.integers(1_000, 12_000),
    st.floats(1.0, 3.0),
)
def test_the_cut_foreseen_is_the_cut_the_next_message_brings(
    turns: list[tuple[int, int]], ahead: int, b: int, factor: float
) -> None:
    messages = chat(turns)
    foreseen = Ledger(messages).cut_ahead(b, factor, 0, ahead)
    # The next message comes, of exactly that size; if it brings a fold, the fold drops the
    # turns foreseen (never the newest turn before it, which the person may still retry).
    later = Ledger([*messages, Message(role="user", text="n" * (4 * ahead))])
    plan = later.plan(b, factor)
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    assert foreseen == 0 or foreseen in starts
    assert foreseen <= starts[-1]
    if plan.reason == "budget" and plan.drop <= starts[-1]:
        assert foreseen == plan.drop


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 800), st.integers(0, 800)), min_size=1, max_size=30),
    st.integers(1, 3_000),
    st.integers(1_000, 12_000),
    st.floats(1.0, 3.0),
    st.integers(0, 300),
)
def test_a_fold_keeping_nothing_is_foreseen_exactly(
    turns: list[tuple[int, int]], ahead: int, b: int, factor: float, reserved: int
) -> None:
    messages = chat(turns)
    foreseen = Ledger(messages).keeps_nothing(b, factor, reserved, ahead)
    # The next message comes, of exactly that size: it brings a fold by the budget that drops
    # every turn before it, or it does not.
    later = Ledger([*messages, Message(role="user", text="n" * (4 * ahead))])
    plan = later.plan(b, factor, reserved)
    assert foreseen == (plan.reason == "budget" and plan.drop == len(messages))


def test_turns_a_fold_dropped_still_count_in_how_big_messages_come() -> None:
    ledger = Ledger(chat([(900, 10), (50, 10), (60, 10)]))
    ledger.drop_front(4)  # a fold kept the newest turn only
    assert ledger.recent_person_tokens(4, largest=True) == 60
    assert ledger.recent_person_tokens(4, largest=True, folded=True) == 900
    assert ledger.recent_person_tokens(2, largest=True, folded=True) == 60


def test_the_fold_is_near_past_a_share_of_any_trigger() -> None:
    ledger = Ledger(chat([(100, 200)] * 10))  # 3,000 tokens
    assert not ledger.near(4_000, share=0.8)  # 3,000 <= 3,200
    assert ledger.near(3_700, share=0.8)
    assert ledger.near(2_000, factor=1.0, reserved=0, share=1.0)
    assert ledger.recent_person_tokens(4) == 100
    bigger = Ledger(chat([(100, 200), (900, 10), (50, 10)]))
    assert bigger.recent_person_tokens(2, largest=True) == 900
    assert bigger.recent_person_tokens(2) == 475


turns_strategy = st.lists(
    st.lists(st.integers(0, 3_000), min_size=1, max_size=5).map(tuple), min_size=1, max_size=40
)


@settings(max_examples=150, deadline=None)
@given(
    turns_strategy,
    st.integers(0, 20_000),
    st.floats(1.0, 3.0),
    st.integers(0, 2_000),
)
def test_fold_plan_properties(
    turns: list[tuple[int, ...]], b: int, factor: float, reserved: int
) -> None:
    messages = chat(turns)
    ledger = Ledger(messages)
    plan = ledger.plan(b, factor, reserved)
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    last = starts[-1]
    # whole turns only, and the current turn always stays
    assert plan.drop == 0 or plan.drop in starts
    assert plan.drop <= last
    kept = messages[plan.drop :]
    kept_tokens = sum(estimate_message(m) for m in kept)
    assert plan.kept_tokens == kept_tokens
    if plan.reason == "":
        assert plan.drop == 0
        assert kept_tokens * factor + reserved <= b
    else:
        # what is kept fits half the budget when some whole-turn cut can make it fit, and
        # no more is dropped than needed; otherwise only the current turn stays
        possible = [
            s
            for s in starts
            if sum(map(estimate_message, messages[s:])) * factor + reserved <= b / 2
        ]
        if possible:
            assert plan.drop == possible[0]
            assert kept_tokens * factor + reserved <= b / 2
        else:
            assert plan.drop == last
    # the current turn is shortened exactly when it alone cannot be sent
    assert (plan.shorten_to is not None) == (kept_tokens * factor + reserved > b)
    # folding twice in a row changes nothing
    ledger.drop_front(plan.drop)
    again = ledger.plan(b, factor, reserved)
    assert again.drop == 0
    forced = ledger.plan(b, factor, reserved, force=True)
    assert forced.reason == "forced"
    ledger.drop_front(forced.drop)
    assert ledger.plan(b, factor, reserved, force=True).drop == 0
    assert ledger.turns == 1


# --- shortening -------------------------------------------------------------------------------


def test_shorten_text_keeps_head_and_tail_and_says_how_much_went() -> None:
    text = "HEAD " + "m" * 1_234_567 + " TAIL"
    out = shorten_text(text, 1_000)
    assert out.startswith("HEAD ")
    assert out.endswith(" TAIL")
    assert estimate_tokens(out) <= 1_000
    found = re.search(r"\[… ([\d,]+) characters left out …\]", out)
    assert found is not None
    left_out = int(found.group(1).replace(",", ""))
    assert left_out == len(text) - (len(out) - len(found.group(0)) - 4)
    assert left_out > 1_200_000


def test_shorten_text_leaves_short_texts_alone() -> None:
    assert shorten_text("short", 10) == "short"


def test_shorten_text_to_nothing_still_shows_the_marker() -> None:
    out = shorten_text("z" * 10_000, 0)
    assert "10,000 characters left out" in out


@given(st.text(min_size=0, max_size=3_000), st.integers(0, 800))
def test_shorten_text_fits_when_it_can(text: str, limit: int) -> None:
    out = shorten_text(text, limit)
    if estimate_tokens(text) <= limit:
        assert out == text
    else:
        assert "characters left out" in out
        # it fits unless even the bare marker is bigger than the limit
        assert estimate_tokens(out) <= max(limit, estimate_tokens(shorten_text(text, 0)))


def test_shorten_turn_cuts_the_longest_person_and_tool_texts_never_the_model() -> None:
    turn = (
        Message(role="user", text="q" * 40_000),
        Message(role="assistant", text="a" * 20_000, raw=({"type": "text", "text": "a"},)),
        Message(role="tool", text="t" * 8_000, untrusted=True),
        Message(role="assistant", text="b" * 400),
    )
    out = shorten_turn(turn, 9_000)
    assert out[1] == turn[1] and out[3] == turn[3]
    assert sum(estimate_message(m) for m in out) <= 9_000
    assert "left out" in out[0].text
    assert out[2] == turn[2]  # the longest went first and that was enough
    assert out[2].untrusted


def test_shorten_turn_stops_when_nothing_more_can_be_cut() -> None:
    turn = (
        Message(role="user", text="q" * 40_000),
        Message(role="assistant", text="a" * 40_000),
    )
    out = shorten_turn(turn, 100)
    assert out[1] == turn[1]
    assert len(out[0].text) < 100


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.integers(0, 5_000)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 6_000),
)
def test_shorten_turn_properties(parts: list[tuple[str, int]], limit: int) -> None:
    turn = tuple(Message(role=r, text="x" * (4 * n)) for r, n in parts)
    out = shorten_turn(turn, limit)
    assert len(out) == len(turn)
    for before, after in zip(turn, out, strict=True):
        if before.role == "assistant":
            assert after == before
        assert estimate_message(after) <= estimate_message(before)
    fixed = sum(estimate_message(m) for m in turn if m.role == "assistant" or not m.text)
    cuttable = [m for m in turn if m.role != "assistant" and m.text]
    marker = estimate_tokens(shorten_text("x" * 100_000, 0))
    if fixed + marker * len(cuttable) <= limit:
        assert sum(estimate_message(m) for m in out) <= limit


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=4).map(tuple), max_size=320),
    st.integers(0, 8_000),
)
def test_fold_plan_meets_the_message_target_with_the_smallest_cut(
    turns: list[tuple[int, ...]], b: int
) -> None:
    turns = [(1, 1), *turns]
    messages = chat(turns)
    ledger = Ledger(messages)
    plan = ledger.plan(b)
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    if not plan.reason:
        assert len(messages) <= 600 and ledger.tokens <= b
        return
    possible = [
        s
        for s in starts
        if len(messages) - s <= 300 and sum(map(estimate_message, messages[s:])) <= b / 2
    ]
    assert plan.drop == (possible[0] if possible else starts[-1])
    ledger.drop_front(plan.drop)
    assert ledger.plan(b).drop == 0
