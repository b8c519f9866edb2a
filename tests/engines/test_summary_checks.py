"""The checks that turn a model's reply down as a summary: a word or line over and over, code or
markup, another language, invented names and numbers. Fair summaries of varied chats pass.

Each junk reply here is one a small model wrote (or the shape of one): the bundled 135M model
repeated one word 24 times, wrote a <script> block and invented topics.
"""

from __future__ import annotations

import pytest

from engines.context.summarise import judge

TRIP = """Person: Hi, I'm Priya Raman. I live in Pune and I work as a nurse at the city hospital.
Assistant: Nice to meet you, Priya. How can I help?
Person: We are planning a trip to Lisbon with Tomás on 2026-11-29. Budget is 3,100 euros.
Assistant: Lisbon in late November is mild. 3,100 euros for two is enough for a week.
Person: We decided to stay in Alfama. The flight leaves at 14:30 and my bag can be 23 kg.
Assistant: Alfama is lovely. Do you want a list of restaurants near Miradouro de Santa Luzia?
Person: Yes please, and remind me to book the airport transfer."""

CODE = """Person: My parser crashes. Here is the function:
```python
def parse(line):
    key, value = line.split("=")
    return key.strip(), value.strip()
```
Assistant: A line without "=" makes split return one part. Use line.partition("=") instead.
Person: That fixed it. Next I need to read config.ini from /etc/myapp and skip comments.
Assistant: Skip lines that start with "#" or ";" before calling parse."""

HTML = """Person: How do I centre a <div> inside another <div> on my page?
Assistant: Give the outer <div> display: flex and justify-content: center.
Person: Done, it works on the landing page for Kestrel Books."""

GERMAN = """Person: Ich heiße Jonas und ich wohne in Leipzig. Ich suche eine neue Wohnung.
Assistant: Hallo Jonas! Wie viel möchtest du für die Miete ausgeben?
Person: Die Miete soll nicht mehr als 850 Euro sein, und ich brauche einen Balkon für die Katze.
Assistant: Das ist in Leipzig gut möglich. Schau in Plagwitz und in der Südvorstadt.
Person: Wir haben entschieden, dass wir ab März umziehen. Ist das realistisch?"""

RUSSIAN = """Person: Меня зовут Ольга, я живу в Казани и работаю учителем математики.
Assistant: Здравствуйте, Ольга! Чем могу помочь?
Person: Мне нужно составить план уроков на сентябрь для седьмого класса, 32 ученика.
Assistant: Давайте начнём с тем: дроби, уравнения и геометрия."""

JAPANESE = """Person: 私の名前は佐藤です。東京に住んでいて、来月大阪に引っ越します。
Assistant: 佐藤さん、こんにちは。引っ越しの準備を手伝いましょうか。
Person: はい、荷物は段ボール20箱です。予算は8万円です。"""

GOOD: list[tuple[str, str]] = [
    (
        TRIP,
        "What the person wants: a week in Lisbon with Tomás from 2026-11-29.\n"
        "Decided or done: they will stay in Alfama; the budget is 3100 euros.\n"
        "Facts to keep: Priya Raman, a nurse at the City Hospital in Pune; flight at 14:30; "
        "bag up to 23 kg.\n"
        "Still open: restaurants near Miradouro de Santa Luzia; booking the airport transfer.",
    ),
    (
        TRIP,
        "The person wants to plan a Lisbon trip. The person lives in Pune. The person works "
        "as a nurse. The person decided to stay in Alfama. The person still has to book the "
        "airport transfer. The person's budget is 3,100 euros.",
    ),
    (
        CODE,
        "What the person wants: a parser that does not crash.\n"
        'Decided or done: parse() now uses line.partition("=") instead of split:\n'
        '```python\nkey, _, value = line.partition("=")\n```\n'
        "Still open: reading config.ini from /etc/myapp and skipping comment lines.",
    ),
    (
        HTML,
        "What the person wants: to centre a <div> inside another <div>.\n"
        "Decided or done: the outer <div> got display: flex; it works on the Kestrel Books "
        "landing page.",
    ),
    (
        GERMAN,
        "Was die Person will: eine neue Wohnung in Leipzig, Miete höchstens 850 Euro, mit "
        "Balkon für die Katze.\nEntschieden: Jonas zieht ab März um.\n"
        "Offen: ob das realistisch ist; Plagwitz und Südvorstadt ansehen.",
    ),
    (
        GERMAN,  # the prompt's language is always fine, whatever the chat's
        "What the person wants: a new flat in Leipzig for at most 850 euros, with a balcony "
        "for the cat.\nDecided or done: Jonas moves from March.\nStill open: whether that "
        "is realistic; look at Plagwitz and Südvorstadt.",
    ),
    (
        RUSSIAN,
        "Чего хочет человек: план уроков на сентябрь для седьмого класса (32 ученика).\n"
        "Факты: Ольга, учитель математики из Казани.\nОткрыто: темы — дроби, уравнения, "
        "геометрия.",
    ),
    (
        JAPANESE,
        "希望：東京から大阪への引っ越しの準備。\n事実：佐藤さん、段ボール20箱、予算8万円。",
    ),
]


@pytest.mark.parametrize(("piece", "summary"), GOOD)
def test_fair_summaries_of_varied_chats_pass(piece: str, summary: str) -> None:
    assert judge(summary, piece, "", 512) == (summary, "")


def test_a_summary_in_the_persons_language_passes_beside_long_tool_results() -> None:
    result = "The shop is open from nine to five and the staff is friendly. " * 20
    piece = (
        "Person: Szukam sklepu z farbami w Gdańsku, który jest otwarty w sobotę.\n"
        f"Tool result (web_search): {result}\n"
        "Person: Jest też ważne, że nie mam samochodu, więc to musi być blisko tramwaju."
    )
    summary = (
        "Czego chce osoba: sklep z farbami w Gdańsku, otwarty w sobotę, blisko tramwaju, "
        "bo nie ma samochodu. To jest ważne dla niej i jest to jedyna prośba."
    )
    assert judge(summary, piece, "", 512) == (summary, "")


def test_a_summary_may_name_what_the_person_asked_to_keep() -> None:
    summary = (
        "What the person wants: a Lisbon trip; keep Dr Okafor and the 0800 clinic shift in "
        "mind, as Priya asked, with Okafor and 0800 and Santos too."
    )
    assert judge(summary, TRIP, "", 512)[0] is None
    assert judge(summary, TRIP, "", 512, focus="Dr Okafor, the 0800 shift, Santos")[0] == summary


def test_secrets_left_out_many_times_are_not_repetition() -> None:
    piece = "\n".join(f"Person: key {i} is [secret left out]" for i in range(12))
    summary = "Facts to keep:\n" + "\n".join(f"- key {i}: [secret left out]" for i in range(12))
    assert judge(summary, piece, "", 512) == (summary, "")


def test_a_summary_carrying_the_summary_so_far_forward_passes() -> None:
    previous = "Facts to keep: Kestrel Books sells maps. The shop opened in 1987."
    summary = previous + "\nDecided or done: the outer <div> uses display: flex."
    assert judge(summary, HTML, previous, 512) == (summary, "")


JUNK: list[tuple[str, str, str]] = [
    (TRIP, "budget " * 24, "repeated"),
    (TRIP, "Lisbon Lisbon Lisbon Lisbon is where the person goes with Tomás.", "repeated"),
    (TRIP, "The person wants to go to Lisbon with Tomás.\n" * 5, "repeated"),
    (
        TRIP,
        "and then the trip and then the trip and then the trip and then the trip and then the "
        "trip and then the trip",
        "repeated",
    ),
    (
        # One part loops while the others read well (the bundled model wrote this shape).
        TRIP,
        "What the person wants: a week in Lisbon with Tomás from 2026-11-29.\n"
        "Decided or done: "
        + "the next day we decided to go, "
        * 10
        + "\nFacts to keep: Priya Raman, a nurse in Pune; the budget is 3,100 euros; the flight "
        "leaves at 14:30 and the bag may weigh 23 kg; they stay in Alfama.\n"
        "Still open: restaurants near Miradouro de Santa Luzia; booking the airport transfer; "
        "whether Tomás needs a visa; where to eat on the first evening in the city.",
        "repeated",
    ),
    (TRIP, "The person wants Lisbon. <script>alert('hi')</script>", "markup"),
    (TRIP, "<div><p>Priya plans a trip to Lisbon with Tomás.</p></div>", "markup"),
    (TRIP, "Priya plans a trip to <a href='javascript:void(0)'>Lisbon</a>.", "markup"),
    (
        TRIP,
        "Priya plans a Lisbon trip.\n```js\nconst trip = 'Lisbon';\n```",
        "markup",
    ),
    (
        TRIP,
        "function plan() {\n  console.log('Lisbon');\n}\nPriya plans a trip to Lisbon.",
        "markup",
    ),
    (TRIP, "用户想去里斯本旅行，预算是三千一百欧元，住在阿尔法玛。", "language"),
    (
        GERMAN,
        "La personne veut un nouvel appartement à Leipzig pour 850 euros avec un balcon pour "
        "le chat. Elle déménage en mars et elle cherche dans les quartiers du sud.",
        "language",
    ),
    (
        TRIP,
        "Facts to keep: the person, Maria Gonzalez, lives in Madrid, was born in 1984 and "
        "paid 4,500 euros to Iberia for the trip to Lisbon.",
        "never mentioned",
    ),
]


@pytest.mark.parametrize(("piece", "summary", "why"), JUNK)
def test_junk_is_turned_down_with_a_reason(piece: str, summary: str, why: str) -> None:
    text, reason = judge(summary, piece, "", 512)
    assert text is None
    assert why in reason
