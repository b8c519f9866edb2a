"""The fact keeper: the exact names, numbers, dates, amounts, paths and links survive a summary."""

from __future__ import annotations

import pytest

from engines.base import Message
from engines.context.facts import (
    BY_BOTH,
    BY_MODEL,
    DONE,
    FACTS,
    FACTS_SHARE,
    HEADING,
    LEFT_OUT,
    NOTHING,
    OPEN,
    SECTIONS,
    compose,
    extract_facts,
    facts_cap,
    keep_facts,
    kept_parts,
    missing_facts,
    split_kept,
)
from engines.context.summarise import FACTS_MAX_CHARS, facts_kept
from engines.scrub import MARKER, scrub
from engines.window import budget, estimate_tokens
from tests.cost import LINEAR_GROWTH, growth


@pytest.mark.parametrize(
    ("text", "fact"),
    [
        # names
        ("We met Priya Raman at the station.", "Priya Raman"),
        ("I wrote to Tomás Oliveira yesterday.", "Tomás Oliveira"),
        ("Remember Bank of America charges fees.", "Bank of America"),
        ("Yesterday Ana Costa called.", "Ana Costa"),
        # numbers with units
        ("My bag can weigh 23 kg at most.", "23 kg"),
        ("The CPU runs at 3.5 GHz.", "3.5 GHz"),
        ("Put down a 40% deposit.", "40%"),
        ("Keep it under 2,000 tokens please.", "2,000 tokens"),
        ("It needs 16GB of memory.", "16GB"),
        # dates
        ("We fly on 2026-11-29 in the morning.", "2026-11-29"),
        ("Back on 29 November 2026, I think.", "29 November 2026"),
        ("The summit starts Nov 29.", "Nov 29"),
        ("Meet at 14:30 sharp.", "14:30"),
        # money
        ("The budget is $1,200 per person.", "$1,200"),
        ("Transfer costs €30 each way.", "€30"),
        ("The fee is 15 EUR a month.", "15 EUR"),
        # paths and files
        ("Edit /etc/nginx/nginx.conf and reload.", "/etc/nginx/nginx.conf"),
        ("Saved to C:\\Users\\Priya\\report.txt today.", "C:\\Users\\Priya\\report.txt"),
        ("The entry point is src/app/main.py now.", "src/app/main.py"),
        ("Attach report.pdf to the mail.", "report.pdf"),
        ("Look in ~/notes/trip.md first.", "~/notes/trip.md"),
        # links and e-mail
        (
            "Read https://example.org/docs/setup?lang=en, then reply.",
            "https://example.org/docs/setup?lang=en",
        ),
        ("Write to bookings@alfama-hotel.pt for changes.", "bookings@alfama-hotel.pt"),
        ("See www.visitlisbon.com for events.", "www.visitlisbon.com"),
        # code
        ("Call `plan_itinerary(days=5)` first.", "plan_itinerary(days=5)"),
        ("The helper build_day_plan does it.", "build_day_plan"),
        ("Set dayCount before calling.", "dayCount"),
        ("It uses os.path.join() for that.", "os.path.join()"),
        ("Read OPENAI_BASE_URL from the environment.", "OPENAI_BASE_URL"),
        ("Order #48213 is late.", "#48213"),
        ("Python 3.11.4 is installed.", "3.11.4"),
    ],
)
def test_each_kind_of_fact_is_found(text: str, fact: str) -> None:
    assert fact in extract_facts(text)


@pytest.mark.parametrize(
    ("text", "not_a_fact"),
    [
        ("The Weather is nice. Then We left.", "The Weather"),
        ("Thanks Again for that.", "Thanks Again"),
        ("Run /compact when it is long.", "/compact"),
        ("Tea and/or coffee.", "and/or"),
        ("Speed in km/h matters.", "km/h"),
        ("That is e.g. fine.", "e.g"),
        ("The password is [secret left out] now.", MARKER),
    ],
)
def test_ordinary_words_are_not_facts(text: str, not_a_fact: str) -> None:
    facts = extract_facts(text)
    assert not any(not_a_fact in f for f in facts), facts


def test_facts_come_in_order_of_first_appearance_once_each() -> None:
    text = (
        "Person: Book 2 rooms for Priya Raman on 2026-11-29.\n"
        "Assistant: Booked for Priya Raman on 2026-11-29 at $1,200 total.\n"
        "Person: And mail bookings@alfama-hotel.pt about the $1200 deposit."
    )
    facts = extract_facts(text)
    assert facts == ["2 rooms", "Priya Raman", "2026-11-29", "$1,200", "bookings@alfama-hotel.pt"]


def test_missing_facts_ignores_case_spacing_and_thousands_separators() -> None:
    facts = ["$1,200", "12 kg", "2,000 Tokens", "Priya  Raman", "src/app/main.py"]
    summary = "Costs $1200; weighs 12kg; limit 2000 tokens; PRIYA RAMAN owns src/app/main.py."
    assert missing_facts(facts, summary) == []


def test_a_fact_inside_a_longer_one_does_not_count() -> None:
    assert missing_facts(["12 kg", "$30"], "It weighs 112 kg and costs $300.") == ["12 kg", "$30"]


def test_keep_facts_appends_only_what_the_summary_left_out() -> None:
    folded = (
        "Person: I fly with Priya Raman on 2026-11-29; the budget is $1,200 and the bag 23 kg.\n"
        "Assistant: Noted, itinerary saved to /home/priya/trips/lisbon.md."
    )
    summary = "What the person wants: a Lisbon trip with Priya Raman on a $1200 budget."
    kept = keep_facts(summary, folded, 1_000)
    body, items = split_kept(kept)
    # The model's words stay under the part it put them in; the kept lines come under theirs.
    assert body == "What the person wants:\na Lisbon trip with Priya Raman on a $1200 budget."
    # Every fact with the words it was said in, never bare.
    assert items == [
        "I fly with Priya Raman on 2026-11-29",
        "the budget is $1,200 and the bag 23 kg",
        "Noted, itinerary saved to /home/priya/trips/lisbon.md",
    ]
    facts_part = kept.split(f"{SECTIONS[FACTS]}\n", 1)[1]
    assert facts_part.startswith("- " + "\n- ".join(items) + f"\n{SECTIONS[OPEN]}")
    assert kept.endswith(BY_BOTH)


def test_keep_facts_changes_nothing_when_every_fact_is_there() -> None:
    summary = "Priya Raman flies on 2026-11-29 with 23 kg."
    kept = keep_facts(summary, "Person: Priya Raman, 2026-11-29, 23 kg.", 1_000)
    assert split_kept(kept) == (f"{SECTIONS[DONE]}\n{summary}", [])
    assert kept.endswith(BY_MODEL) and kept.count(NOTHING) == 3


def test_over_the_limit_the_persons_own_words_go_before_what_the_assistant_said() -> None:
    folded = (
        "Person: Priya Raman and Tomás Oliveira fly on 2026-11-29 for $1,200.\n"
        "Assistant: Booked flight TP-1234 at 07:45 (confirmation ABC12345), details in "
        "/srv/flights/tp1234.json and https://example.org/booking/99887766."
    )
    person = ["Priya Raman", "Tomás Oliveira", "2026-11-29", "$1,200"]
    limit = len(HEADING) + sum(len(x) + 3 for x in person) + 100
    kept = keep_facts("A trip.", folded, limit)
    _body, items, note = kept_parts(kept)
    assert missing_facts(person, "\n".join(items)) == [] and len(items) < 6
    # What the cap left out is said in words under the list.
    assert note.startswith(LEFT_OUT) and note.endswith("from the assistant's answers.)")
    assert len(HEADING) + sum(len(x) + 3 for x in [*items, note]) <= limit


# A person's chat as the summariser reads it: their facts, then a pasted log full of numbers,
# an answer and a tool result with numbers of their own.
PLANTED = [
    "Priya Raman",
    "Tomasz Wójcik",
    "€1,250",
    "GR-2026-0417",
    "garden_layout_v3.xlsx",
    "~/garden/rota/spring.csv",
    "https://forms.example.org/larch-garden/2026",
    "17.5%",
    "07700 900123",
]
PERSON_TURNS = (
    "Person: Priya Raman chairs the garden committee. Our treasurer is Tomasz Wójcik.\n"
    "Assistant: Noted.\n"
    "Person: The grant gives us €1,250 and its reference is GR-2026-0417.\n"
    "Assistant: Good to know.\n"
    "Person: The layout is in garden_layout_v3.xlsx; the rota lives at "
    "~/garden/rota/spring.csv. Sign-ups go through https://forms.example.org/larch-garden/2026.\n"
    "Assistant: I will remember that.\n"
    "Person: Tools may take at most 17.5% of the budget. Call Marta on 07700 900123.\n"
    "Person: And we decided: no pesticides anywhere in the garden, not even on the roses.\n"
    "Assistant: Understood.\n"
)
LOG = "\n".join(
    f"2026-05-{1 + n % 28:02d} 06:{n % 60:02d}:41 irrigation INFO zone {1 + n % 4} "
    f"moisture={18 + n % 9}% run={4 + n % 6}min host=10.0.{n % 7}.{n + 10} valve=closed"
    for n in range(60)
)
PASTED_TURN = f"Person: I pasted this from our files:\n\n{LOG}\n\nWhat am I missing?\n"
ANSWER = "Assistant: Zone 3 ran 9min at 2026-05-07 06:12:41 with 24% moisture; 4.2 L/min.\n"


def test_a_pasted_log_full_of_numbers_does_not_crowd_out_the_persons_facts() -> None:
    folded = PERSON_TURNS + PASTED_TURN + ANSWER
    returned = "Tool result (weather): 2026-05-08 rain 12 mm, 2026-05-09 rain 3 mm, 14.5 °C"
    kept = keep_facts(
        "The person runs a garden.",
        folded,
        FACTS_MAX_CHARS,
        minor_text=returned,
        limit_tokens=facts_cap(8_192),
    )
    _, items, _note = kept_parts(kept)
    assert missing_facts(PLANTED, "\n".join(items)) == []
    # The decision is kept in the person's words, not only as "a decision was made".
    assert any("no pesticides" in x for x in items)
    # The log's sixty lines of numbers are one line saying what it held, not its numbers.
    assert "Pasted: a log of 60 lines, 2026-05-01 to 2026-05-28" in items
    assert [x for x in items if x in LOG and x not in returned] == []


def test_the_person_who_came_first_is_not_the_first_to_go() -> None:
    # Fold after fold the list carries over; new pasted numbers never push out the start.
    summary = "The person runs a garden."
    summary = keep_facts(summary, PERSON_TURNS, 3_000, limit_tokens=facts_cap(8_192))
    for k in range(4):
        carried = "\n".join(kept_parts(summary)[1])
        folded = carried + "\n" + PASTED_TURN.replace("06:", f"0{k}:") + ANSWER
        summary = keep_facts(summary, folded, 3_000, limit_tokens=facts_cap(8_192))
    _, items, _note = kept_parts(summary)
    assert missing_facts(PLANTED, "\n".join(items)) == []


@pytest.mark.parametrize("window", [2_048, 4_096, 8_192, 32_768])
def test_the_cap_holds(window: int) -> None:
    folded = [
        Message(role="user", text=PERSON_TURNS.replace("Person: ", "").replace("Assistant: ", "")),
        Message(role="assistant", text="Noted, " + LOG[:2_000]),
        Message(role="user", text="I pasted this from our files:\n\n" + LOG + "\n\nAnd?"),
        Message(role="assistant", text=ANSWER),
    ]
    result = facts_kept("The person runs a garden.", "", folded, window)
    _body, items, note = kept_parts(result)
    block = "\n".join([HEADING, *(f"- {x}" for x in items), note])
    assert all(SECTIONS[i] in result for i in range(4))
    # Its share of the budget, by the estimate (a digit a token, as the tokenizers count).
    assert estimate_tokens(block) <= FACTS_SHARE * budget(window)
    if window <= 4_096:
        assert LEFT_OUT in block  # not everything fit: said in words


def _cap_just_short(summary: str, folded: str) -> int:
    """The largest token cap at which ``keep_facts`` leaves something of ``folded`` out."""
    whole = len(kept_parts(keep_facts(summary, folded, 3_000))[1])
    lo, hi = 0, 2 * estimate_tokens(folded)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        fewer = len(kept_parts(keep_facts(summary, folded, 3_000, limit_tokens=mid))[1]) < whole
        lo, hi = (mid, hi) if fewer else (lo, mid - 1)
    return lo


def test_what_the_cap_left_out_is_said_once_and_not_kept_as_summary() -> None:
    cap = _cap_just_short("A garden.", PERSON_TURNS + PASTED_TURN)
    first = keep_facts("A garden.", PERSON_TURNS + PASTED_TURN, 3_000, limit_tokens=cap)
    body, items, note = kept_parts(first)
    assert note and body == f"{SECTIONS[DONE]}\nA garden." and first.count(LEFT_OUT) == 1
    # The next pass (on a model's summary that copied the old one whole) ends with one such
    # line, about what it left out itself.
    folded = "\n".join(items) + "\nPerson: The hotel costs €480.\n" + PASTED_TURN
    second = keep_facts(f"A garden.\n{note}\n\n{first}", folded, 3_000, limit_tokens=cap)
    assert second.count(LEFT_OUT) == 1
    assert "The hotel costs €480" in kept_parts(second)[1]
    assert kept_parts(second)[0] == f"{SECTIONS[DONE]}\nA garden.\nA garden."


def test_a_second_pass_merges_into_the_kept_list_instead_of_adding_another() -> None:
    first = keep_facts("A trip.", "Person: We fly on 2026-11-29 with Priya Raman.", 1_000)
    # The next summary copies the old list; the next folded part adds a new fact.
    second = keep_facts(first, first + "\nPerson: The hotel costs €480.", 1_000)
    assert second.count(SECTIONS[FACTS]) == 1
    _, items = split_kept(second)
    assert items == ["We fly on 2026-11-29 with Priya Raman", "The hotel costs €480"]


def test_a_fact_an_earlier_list_kept_stays_when_the_model_drops_it() -> None:
    previous = f"A trip.\n\n{HEADING}\n- 2026-11-29\n- /srv/trips/lisbon.md"
    new_summary = "A trip; the hotel is booked."
    kept = keep_facts(new_summary, "Person: The hotel is booked.", 1_000)
    assert split_kept(kept)[1] == []  # nothing of the earlier list was in the text given
    kept = keep_facts(previous.replace("A trip.", new_summary), "Person: ok.", 1_000)
    assert split_kept(kept)[1] == ["2026-11-29", "/srv/trips/lisbon.md"]


def test_scrubbed_text_keeps_its_secrets_out_of_the_kept_list() -> None:
    folded = scrub("Person: my password is hunter2 and the key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv")
    kept = keep_facts("The person shared credentials.", folded, 1_000)
    assert "hunter2" not in kept and "sk-proj" not in kept
    assert "[secret" not in split_kept(kept)[1]


def _find_and_keep(text: str) -> None:
    extract_facts(text)
    keep_facts("x", text, 500)


@pytest.mark.parametrize(
    "unit", ["a@", "a.", "Ab ", "1,", "`"], ids=["at", "dots", "capitals", "digits", "backticks"]
)
def test_a_huge_paste_costs_linear_time(unit: str) -> None:
    # Near-misses of the patterns, repeated: fuel for a backtracking regex. Counted in work
    # done, not seconds, so a busy machine cannot fail it (and a quadratic pass on a long
    # paste would take hours, so a short one shows the growth).
    assert growth(_find_and_keep, unit, 5_000) < LINEAR_GROWTH


def test_facts_only_a_tool_returned_give_way_to_what_the_person_said() -> None:
    said = "Person: We fly on 2026-11-29 with Priya Raman.\nAssistant: Booked."
    returned = "Tool result (web_search): " + " ".join(
        f"https://example.org/page{i}" for i in range(50)
    )
    limit = len(HEADING) + (len("2026-11-29") + 3) + (len("Priya Raman") + 3) + 100
    kept = keep_facts("A trip.", said, limit, minor_text=returned)
    _, items, note = kept_parts(kept)
    assert items == ["We fly on 2026-11-29 with Priya Raman"]
    assert note.endswith("from tool results.)")
    # With more room, the newest of what a tool returned comes first.
    _, items, note = kept_parts(keep_facts("A trip.", said, limit + 60, minor_text=returned))
    assert items[:1] == ["We fly on 2026-11-29 with Priya Raman"]
    assert len(items) > 1
    assert items[1:] == [f"https://example.org/page{i}" for i in range(51 - len(items), 50)]


def test_numbers_ending_a_clause_references_and_phone_numbers_are_facts() -> None:
    text = (
        "The ticket is 48213, and the grant is GR-2026-0417. Call 07700 900123 or "
        "+44 7700 900123 (US office: 555-123-4567). Invoice INV-2041 and order AB12345."
    )
    facts = extract_facts(text)
    for expected in (
        "48213",
        "GR-2026-0417",
        "07700 900123",
        "+44 7700 900123",
        "555-123-4567",
        "INV-2041",
        "AB12345",
    ):
        assert expected in facts
    assert "2026" not in facts  # the reference stays whole, not a stray year


# --- the list goes out on every turn: never a secret in it ----------------------------------


def test_no_secret_or_piece_of_one_is_kept_word_for_word() -> None:
    said = (
        "Person: My netrc has machine nas.local login sam password swordfish99 in it.\n"
        "Person: Pay the invoice from card 4111 1111 1111 1111 or IBAN GB82 WEST 1234 5698 "
        "7654 32, the plumber is Priya Raman at 14 Mill Lane.\n"
        "Person: The NAS is at /srv/nas/backup and it holds 4 TB."
    )
    kept = keep_facts("The person is paying the plumber.", scrub(said), 3_000)
    _, items = split_kept(kept)
    assert missing_facts(["Priya Raman", "/srv/nas/backup"], "\n".join(items)) == []
    assert not any("[secret" in x for x in items)
    listed = "\n".join(items)
    for piece in ("swordfish", "4111", "1111", "GB82", "WEST", "5698", "7654"):
        assert piece not in listed, piece


def test_a_secret_carried_in_an_older_list_is_dropped() -> None:
    # A summary written before a scrubbing rule existed carries its list into the next one.
    older = (
        f"The person is paying the plumber.\n\n{HEADING}\n"
        "- Priya Raman\n- 4111 1111 1111 1111\n- GB82 WEST 1234 5698 7654 32\n"
        "- password hunter22"
    )
    _, items = split_kept(keep_facts(older, "Person: The plumber comes on 2026-11-29.", 3_000))
    assert missing_facts(["Priya Raman", "2026-11-29"], "\n".join(items)) == []
    listed = "\n".join(items)
    for piece in ("4111", "GB82", "hunter22", MARKER):
        assert piece not in listed, piece


def test_a_decision_is_kept_in_the_persons_words_fold_after_fold() -> None:
    said = (
        "Person: The controller runs firmware v2.4.1; we agreed not to update it mid-season. "
        "And we decided: no pesticides anywhere in the garden, not even on the roses.\n"
        "Assistant: We decided nothing yet about the shed."
    )
    first = keep_facts("A garden.", said, 3_000)
    _, items = split_kept(first)
    assert "we agreed not to update it mid-season" in items  # not "1; we agreed …"
    assert "And we decided: no pesticides anywhere in the garden, not even on the roses" in items
    assert not any("shed" in x for x in items)  # the assistant's words are no decision
    # The next fold reads only the list and new turns: the decisions stay.
    carried = "\n".join(split_kept(first)[1])
    second = keep_facts("A vague summary.", carried + "\nPerson: Thanks.", 3_000)
    assert missing_facts(items, "\n".join(split_kept(second)[1])) == []


def test_who_the_person_is_outlives_a_model_that_copied_it_once_and_then_dropped_it() -> None:
    # Seen on the bundled model: the first summary copied the person's sentences into its own
    # words, so nothing was kept; the second summary (which reads only the first and the new
    # turns) left the town out, and it was gone for good.
    said = [
        Message(
            role="user",
            text="My name is Alina Kowalczyk and I live in Gdańsk. "
            "We decided to move the piano lessons to Thursdays.",
        ),
        Message(role="assistant", text="Here is a plan for the week."),
    ]
    copied = compose(
        [
            ["My name is Alina Kowalczyk and I live in Gdańsk."],
            ["We decided to move the piano lessons to Thursdays."],
            [],
            [],
        ],
        [],
        "",
    )
    first = facts_kept(copied, "", said, 2_048)
    _, items = split_kept(first)
    assert items == [
        "We decided to move the piano lessons to Thursdays",
        "My name is Alina Kowalczyk and I live in Gdańsk",
    ]
    assert first.count("Gdańsk") == 1  # the model's copy of a kept line is not said twice
    later = [
        Message(role="user", text="The herbs are doing well."),
        Message(role="assistant", text="Alina Kowalczyk, the one who grows herbs, waters them."),
    ]
    dropped = compose([["The person wants the bamboo."], [], [], []], [], "")
    second = facts_kept(dropped, first, later, 2_048)
    kept = " ".join(split_kept(second)[1])
    for fact in ("Alina Kowalczyk", "Gdańsk", "Thursdays"):
        assert fact in kept, second


def test_an_answers_facts_are_kept_as_readable_words_not_markup_or_cut_numbers() -> None:
    # From the demo chat: a Markdown answer with a table, bold text and sums in sentences.
    answer = (
        "Here is the plan.\n\n"
        "| Item | Cost |\n|---|---|\n| Screws and brackets | €150 |\n| Water butts, 4 | €240 |\n"
        "| Larch boards, 420 m | €2,100 |\n| **Total** | **€4,090** |\n\n"
        "Then 420 m of larch costs about €1,260 instead of €2,100 — that brings back all 24 beds. "
        "About 5 litres per m² on a hot day: 12 beds × 3.6 m² × 5 l ≈ **216 litres a day**."
    )
    kept = facts_kept(
        "",
        "",
        [
            Message(role="user", text="What does the garden cost?"),
            Message(role="assistant", text=answer),
        ],
        8_192,
    )
    _body, items, _note = kept_parts(kept)
    assert items, kept
    for item in items:
        assert "**" not in item and not item.startswith("|") and "| " not in item, item
    larch = [x for x in items if "€1,260" in x]
    assert larch and all("420 m of larch" in x for x in larch), items
    # A row's cells read as "item: value", a sum keeps its signs, a clause ends at its dash.
    assert "Larch boards, 420 m: €2,100" in items, items
    assert "12 beds × 3.6 m² × 5 l ≈ 216 litres a day" in items, items
    assert "420 m of larch costs about €1,260 instead of €2,100" in items, items
