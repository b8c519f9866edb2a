"""Chat states for packaging/screenshots.py: a message's buttons, coloured code, the versions of
an answer, Continue after Stop, a chat's settings and Settings → Trash.

The chats are written through the chat log's own API (as a finished turn, a regenerate or a
Stop leave them) and shown by the real window; the pointer is moved over a message the way a
person's would be, so the buttons are the ones the window paints on hover.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Settle = Callable[[float], Awaitable[None]]
Shot = Callable[[str, Callable[[], Any]], Awaitable[None]]

QUESTION = "How much soil do the 24 beds need? Each is 1.2 × 3 m, filled 30 cm deep."
FIRST_TRY = "About 26 cubic metres in all: each bed holds 1.08 m³."
ANSWER = """Each bed holds 1.2 × 3 × 0.3 = **1.08 m³**, so all 24 need about **26 m³**. A small
script does the sum for any size:

```python
BEDS = 24
WIDTH, LENGTH, DEPTH = 1.2, 3.0, 0.30  # metres


def soil_needed(beds: int = BEDS) -> float:
    \"\"\"Cubic metres of soil for ``beds`` raised beds.\"\"\"
    return round(beds * WIDTH * LENGTH * DEPTH, 2)


print(f"{soil_needed()} m³")  # 25.92 m³
```

Order a little more (about 10 %): fresh soil settles in the first weeks."""

STOPPED_QUESTION = "Which wood lasts longest without treatment, and why?"
STOPPED = (
    "Larch and Douglas fir are the usual choices. Larch heartwood is rich in resin, which "
    "keeps water and fungi out, so untreated boards last eight to ten years in contact with "
    "soil. Douglas fir is a little softer and"
)
DELETED = ("Seed order for spring", "Compost rota", "Questions for the landlord")
OWN_PROMPT = (
    "You help a community garden group. Keep answers short and practical, give quantities "
    "in metric units, and say when something depends on the local climate."
)


def add_code_chat(services: Any, model_key: str) -> str:
    """A chat whose answer was regenerated once: the second version, with code, shows."""
    store = services.store
    chat = store.create_chat(title="Soil for the beds", model_key=model_key)
    store.append_message(chat.id, "user", QUESTION, model_key=model_key)
    first = store.append_message(chat.id, "assistant", FIRST_TRY, model_key=model_key)
    # As Regenerate leaves it: the first version shelved, the new one a version of it.
    store.set_shelved(chat.id, first.seq, True)
    store.append_message(chat.id, "assistant", ANSWER, model_key=model_key, version_of=first.seq)
    return str(chat.id)


def add_stopped_chat(services: Any, model_key: str) -> str:
    """A chat whose last answer the person stopped, as Stop leaves it."""
    from engines.base import ProblemKind, TurnProblem

    store = services.store
    chat = store.create_chat(title="Wood for the beds", model_key=model_key)
    store.append_message(chat.id, "user", STOPPED_QUESTION, model_key=model_key)
    store.append_message(
        chat.id,
        "assistant",
        STOPPED,
        partial=True,
        problem=TurnProblem.of(ProblemKind.CANCELLED, partial=True),
        model_key=model_key,
    )
    return str(chat.id)


def set_own_settings(services: Any, chat_id: str) -> None:
    """The chat's own prompt, temperature and answer length (the settings panel shows them)."""
    from app.store import ChatSettings

    settings = ChatSettings(system_prompt=OWN_PROMPT, temperature=0.7, max_answer_tokens=800)
    services.store.set_chat_settings(chat_id, settings)


def point_at_last_answer(window: Any) -> None:
    """Move the pointer over the chat's last answer, as a person would: its buttons show."""
    from PySide6.QtTest import QTest

    from ui.chat.chat_model import RowKind

    view = window.chat_view
    rows = view.chat_model.rows()
    i = max(
        n
        for n, r in enumerate(rows)
        if r.kind is RowKind.MESSAGE and r.message is not None and r.message.role == "assistant"
    )
    index = view.chat_model.index(i, 0)
    view.scrollTo(index)
    rect = view.visualRect(index)
    QTest.mouseMove(view.viewport(), rect.center())
    if not view.hovered(index):
        # Offscreen, a synthetic move may not reach the view; hover the row as a move does.
        view._hover(index)


def scroll_to_top_of_last_answer(window: Any) -> None:
    from PySide6.QtWidgets import QAbstractItemView

    view = window.chat_view
    last = view.chat_model.index(view.chat_model.rowCount() - 1, 0)
    view.scrollTo(last, QAbstractItemView.ScrollHint.PositionAtTop)
    bar = view.verticalScrollBar()
    bar.setValue(max(0, bar.value() - 90))  # the question above it, in part


async def render_chat_states(
    window: Any, services: Any, settle: Settle, shot: Shot, model_key: str = ""
) -> None:
    """code.png, actions.png, versions.png, continue.png, chat-settings.png, trash.png; the
    chats answer as ``model_key`` (default: the model of the chat showing)."""
    if not model_key:
        chat = services.store.get_chat(window.current_chat_id)
        model_key = chat.model_key if chat is not None else ""
    view = window.chat_view

    # Coloured code in an answer (the second version of it).
    code_chat = add_code_chat(services, model_key)
    stopped_chat = add_stopped_chat(services, model_key)
    set_own_settings(services, stopped_chat)
    window.sidebar.refresh()
    window.open_chat(code_chat)
    await settle(0.3)
    scroll_to_top_of_last_answer(window)
    await shot("code.png", window.grab)

    # The pointer over that answer: Copy, Regenerate and Delete, and its versions "‹ 2/2 ›".
    point_at_last_answer(window)
    await shot("actions.png", window.grab)

    # The earlier version, flipped to with "‹".
    view._hover(view.chat_model.index(-1, 0))
    last = view.chat_model.rowCount() - 1
    view.step_version(last, -1)
    await settle(0.2)
    view.scrollToBottom()
    await shot("versions.png", window.grab)

    # An answer the person stopped: "Stopped · Continue" under it, and Continue on hover.
    window.open_chat(stopped_chat)
    await settle(0.3)
    view.scroll_to_bottom()
    point_at_last_answer(window)
    await shot("continue.png", window.grab)
    view._hover(view.chat_model.index(-1, 0))

    # The chat's own settings: model, system prompt, temperature, answer length.
    window.show_chat_settings()
    panel = window._chat_settings
    if panel is not None:
        await settle(0.2)
        await shot("chat-settings.png", panel.grab)
        panel.hide()

    # Settings → Trash with a few deleted chats.
    for title in DELETED:
        gone = services.store.create_chat(title=title, model_key=model_key)
        services.store.append_message(gone.id, "user", f"Notes: {title.lower()}.")
        services.store.delete_chat(gone.id)
    window.sidebar.refresh()
    window.show_settings("trash")
    dialog = window._settings_dialog
    await settle(0.2)
    await shot("trash.png", dialog.grab)
    dialog.hide()
