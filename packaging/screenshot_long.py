"""Long-chat states for packaging/screenshots.py: the first screen, the sidebar's folders and
pins with a forked chat, the divider opened to a summary in its four parts, the divider while
its summary is still being written, and an answer's placeholder while the model reads the chat.

The chats are written through the chat log's own API; the summaries are what the engine's own
functions make of those chats (``facts_kept``: the model's lines in the four parts, with what
Conch keeps word for word); the window, its sidebar and its dividers are the real ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Settle = Callable[[float], Awaitable[None]]
Shot = Callable[[str, Callable[[], Any]], Awaitable[None]]

# A short plan for the build day: the first four turns are folded, the last two kept.
BUILD_DAY = (
    (
        "I'm Ana, I coordinate the community garden behind the library. We build the beds on "
        "Saturday 14 June and I need a plan for the day.",
        "Happy to help. How many people are coming, and how many beds are you building?",
    ),
    (
        "Twelve volunteers so far. We're building 24 larch beds, 1.2 by 3 metres. Marta is "
        "bringing the drill and Tom has the van.",
        "With twelve people, two teams of six can build the frames while the others fill "
        "them. Start at 9:00 with a short safety talk.",
    ),
    (
        "The soil arrives at 8:30 from Greenway, 26 cubic metres, €1,300 paid on delivery. "
        "Our budget is €2,500 in all.",
        "Then the soil is about half the budget. Keep €150 back for screws and brackets, and "
        "have it tipped beside the first row of beds.",
    ),
    (
        "We decided to skip the bench this year and use the offcuts for compost bays instead.",
        "Good: three bays from the offcuts is about two hours' work for two people.",
    ),
    (
        "I still don't know if the library will let us use their toilets that day.",
        "Ask the library this week. If they say no, hiring a toilet for the day is about €90.",
    ),
    (
        "Can you write the timetable as a short list for the volunteers?",
        "- 9:00 coffee and safety talk\n- 9:30 mark the beds with string\n- 10:00 two teams "
        "build frames\n- 13:00 lunch\n- 14:00 fill the beds\n- 17:00 photos",
    ),
)
FOLDED_TURNS = 4
# What the chat's model wrote for the folded turns, in the summary's four parts.
MODEL_SUMMARY = (
    "What the person wants: a plan for the build day of the community garden behind the "
    "library.\n"
    "Decided or done: two teams build the frames while the others fill them; no bench this "
    "year.\n"
    "Facts to keep: the soil is about half the budget.\n"
    "Still open: whether the library's toilets can be used."
)
FOLDER = "Garden"
PINNED = "Build day plan"
READING_QUESTION = "Which of the 24 beds should the children's club get, and why?"
READING_STEP = (1_050, 3_000)  # the server has read 35% of the prompt


def add_build_day(services: Any, model_key: str, *, summary: str) -> str:
    """The build-day chat, its first ``FOLDED_TURNS`` turns folded into a summary; ``summary``
    "model": the model's four parts with Conch's kept lines; "" only Conch's (a fold that went
    ahead before the model's summary was written)."""
    from engines.base import Message
    from engines.context.summarise import facts_kept

    store = services.store
    model = services.catalogue.find(model_key)
    window = model.context if model is not None else 8_192
    name = model.name if model is not None else "the model"
    chat = store.create_chat(title=PINNED, model_key=model_key)
    folded: list[Message] = []
    first_kept = 0
    for i, (question, answer) in enumerate(BUILD_DAY):
        asked = store.append_message(chat.id, "user", question, model_key=model_key)
        store.append_message(chat.id, "assistant", answer, model_key=model_key)
        if i < FOLDED_TURNS:
            folded += [Message(role="user", text=question), Message(role="assistant", text=answer)]
        elif i == FOLDED_TURNS:
            first_kept = asked.seq
    written = facts_kept(MODEL_SUMMARY if summary == "model" else "", "", folded, window)
    store.add_compaction(chat.id, first_kept, written, name)
    store.set_read_until(chat.id, first_kept - 1)
    return str(chat.id)


async def open_divider(window: Any, settle: Settle) -> None:
    """Open the chat's divider and scroll it near the top, the summary under it."""
    from PySide6.QtWidgets import QAbstractItemView

    from ui.chat.chat_model import RowKind

    view = window.chat_view
    divider = view.widget_at(RowKind.DIVIDER)
    if divider is not None and hasattr(divider, "set_open"):
        divider.set_open(True)
    await settle(0.2)  # the row grows to the opened summary before it is scrolled to
    i = view.chat_model.find(RowKind.DIVIDER)
    if i >= 0:
        view.scrollTo(view.chat_model.index(i, 0), QAbstractItemView.ScrollHint.PositionAtTop)
        bar = view.verticalScrollBar()
        bar.setValue(max(0, bar.value() - 60))


async def render_long_states(
    window: Any, services: Any, settle: Settle, shot: Shot, model_key: str, demo_chat: str
) -> None:
    """first-screen.png, summary-parts.png, summary-writing.png, sidebar.png (a fork of
    ``demo_chat``), reading.png."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.forks import fork_from
    from engines.mock import MockEngine, ReadFirst, Reply

    store = services.store

    # An empty chat: who answers and why, the servers found, one click to each.
    empty = window.new_chat()
    await settle(0.3)
    await shot("first-screen.png", window.grab)
    store.delete_chat(empty)  # an empty chat is left out of the sidebar's picture

    # The divider opened to the summary's four parts: the model's lines and Conch's.
    parts = add_build_day(services, model_key, summary="model")
    store.set_folder(parts, FOLDER)
    store.set_pinned(parts, True)
    window.sidebar.refresh()
    window.open_chat(parts)
    await settle(0.3)
    await open_divider(window, settle)
    await shot("summary-parts.png", window.grab)

    # The same chat's fold while the model's summary is still being written: Conch's kept
    # lines stand in. The flag is the one a fold that went ahead sets (``Compacted.writing``).
    writing = add_build_day(services, model_key, summary="")
    store.rename_chat(writing, "Build day plan (draft)")
    store.set_folder(writing, FOLDER)
    window.sidebar.refresh()
    window.open_chat(writing)
    await settle(0.3)
    view = window.chat_view
    view.chat_model.set_compaction(store.latest_compaction(writing), True)
    await settle(0.2)
    await open_divider(window, settle)
    await shot("summary-writing.png", window.grab)

    # Folders, a pinned chat and a fork of the demo chat, with its link back.
    # Forked at an answer a little before the end: the copy ends on that answer.
    answers = [m for m in store.messages(demo_chat)[:-2] if m.role == "assistant"]
    if answers:
        fork = fork_from(store, demo_chat, answers[-1].seq)
        store.set_folder(demo_chat, FOLDER)
        window.sidebar.refresh()
        window.open_chat(fork.id)
        await settle(0.3)
        view.scroll_to_bottom()
        await shot("sidebar.png", window.grab)

    # An answer's placeholder while a local model reads the chat before its first word.
    window.open_chat(parts)
    await settle(0.3)
    bridge = window.bridge()
    engine = bridge.conversation.engine if bridge is not None else None
    if isinstance(engine, MockEngine):
        go = asyncio.Event()
        engine.extend([ReadFirst((READING_STEP,), until=go), Reply("The two beds by the gate.")])
        view.reading_after_ms = 0  # the two seconds a wait must last to count, passed at once
        window.composer.edit.setFocus()
        QTest.keyClicks(window.composer.edit, READING_QUESTION)
        QTest.keyClick(window.composer.edit, Qt.Key.Key_Return)
        for _ in range(50):  # a hang guard: the placeholder says so on the engine's first step
            await settle(0.1)
            if view.chat_model.stream_status:
                break
        view.scroll_to_bottom()
        await shot("reading.png", window.grab)
        go.set()
        for _ in range(50):
            await settle(0.1)
            if bridge is not None and not bridge.busy:
                break
