"""What a person pastes into a chat, and learning's request to the chat's own model.

Used by ``bench.recall --person``: pasted texts of a few kilobytes (meeting notes, a table of
numbers, a machine's log) that carry none of the planted facts, and the ``ask_model`` callable
``QuietLearning`` needs, sent as background work so it gives way to the person's turn (as the
app sends it).
"""

from __future__ import annotations

from app.learning import ModelCaller
from engines.base import Done, Message, ModelInfo, TextDelta
from engines.local.gate import background
from engines.providers.base import ChatRequest, ProviderAdapter, ProviderError, closing_stream
from engines.window import answer_reserve

_ITEMS = (
    ("compost turning rota", "Ines"),
    ("shed roof repair", "the committee"),
    ("seed swap stall", "Jonas"),
    ("pond netting", "Ines"),
    ("hedge along the lane", "Jonas"),
    ("wheelbarrow tyres", "the committee"),
    ("bee hotel", "Ines"),
    ("leaf mould cage", "Jonas"),
    ("water butt stands", "the committee"),
    ("signs for the beds", "Ines"),
    ("first-aid box", "Jonas"),
    ("autumn bulb order", "the committee"),
)
NOTES = "Notes from the last committee meeting, as I typed them.\n" + "\n".join(
    f"- {n}. The {thing} needs a decision before the next work day; {who} will ask the "
    "Saturday volunteers what they think and report back."
    for n, (thing, who) in enumerate(_ITEMS, start=1)
)
TABLE = "bed,holder,area_m2,fee,paid\n" + "\n".join(
    f"{n},{name},{10 + n % 7},{35 + 4 * (n % 6)},{'yes' if n % 4 else 'no'}"
    for n, name in enumerate(
        ["Adeyemi", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Gallo", "Horvat"] * 8,
        start=1,
    )
)
LOG = "\n".join(
    f"2026-05-{1 + n % 28:02d} 06:{n % 60:02d}:41 irrigation INFO zone {1 + n % 4} "
    f"moisture={18 + n % 9}% run={4 + n % 6}min valve=closed"
    for n in range(45)
)
PASTES = (NOTES, TABLE, LOG)


def asker(adapter: ProviderAdapter, model: ModelInfo) -> ModelCaller:
    """Learning's request to the chat's own model, as background work on its server."""

    async def ask(prompt: str, text: str, *, model_key: str = "") -> str | None:
        request = ChatRequest(
            model=model.id,
            system=prompt,
            messages=(Message(role="user", text=text),),
            max_output_tokens=min(1_024, answer_reserve(model.context)),
            window=model.context,
        )
        parts: list[str] = []
        try:
            with background():
                async with closing_stream(adapter.stream(request)) as events:
                    async for event in events:
                        if isinstance(event, TextDelta):
                            parts.append(event.text)
                        elif isinstance(event, Done):
                            break
        except ProviderError:
            return None  # gave way to a turn, or failed: nothing is marked read
        return "".join(parts).strip() or None

    return ask
