"""Opening a long chat colours only the code that shows: rows off screen are measured with
their code uncoloured (the same lines, so the same height) and coloured when painted."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pytestqt.qtbot import QtBot

from tests.ui.conftest import Chat
from ui.chat.chat_model import Row, RowKind
from ui.chat.chat_view import ChatView

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


def code_answer(n: int) -> str:
    return (
        f"Step {n}:\n\n```python\ndef bed_{n}(width: int) -> int:\n"
        f"    return width * {n}  # larch\n```\n\nThat sizes bed {n}."
    )


def coloured(view: ChatView, row: Row, *, lit: bool) -> set[str]:
    """The colours the word ``def`` is drawn in, in the row's document."""
    doc = view.delegate.document(row, view.delegate.content_width(), lit=lit)
    found: set[str] = set()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.isValid() and "def" in fragment.text():
                found.add(fragment.charFormat().foreground().color().name())
            it += 1
        block = block.next()
    return found


def lit_rows(view: ChatView) -> set[int]:
    """The rows the delegate has a coloured document of."""
    rows = view.chat_model.rows()
    keys = {key[: len(key) - 2] for key in view.delegate._docs if key[-1] is True}
    return {i for i, row in enumerate(rows) if row.cache_key in keys}


def test_only_rows_on_screen_get_coloured_code_and_heights_do_not_change(
    qtbot: QtBot, chat_factory: Callable[..., Chat]
) -> None:
    chat = chat_factory()
    for n in range(30):
        chat.store.append_message(chat.chat_id, "user", f"How big is bed {n}?")
        chat.store.append_message(chat.chat_id, "assistant", code_answer(n), model_key="m/x")
    view = ChatView(chat.store, chat.book)
    qtbot.addWidget(view)
    view.resize(700, 420)
    view.show()
    qtbot.waitExposed(view)
    view.set_chat(chat.chat_id)
    view.executeDelayedItemsLayout()
    view.viewport().grab()  # painted, as on screen

    rows = view.chat_model.rows()
    answers = [
        i
        for i, r in enumerate(rows)
        if r.kind is RowKind.MESSAGE and r.message is not None and "```" in r.message.text
    ]
    area = view.viewport().rect()
    shown = {i for i in answers if view.visualRect(view.chat_model.index(i, 0)).intersects(area)}
    assert shown and len(shown) < len(answers)
    # What shows is coloured; what does not was never coloured.
    assert lit_rows(view) & set(answers) == shown
    last = rows[max(shown)]
    assert len(coloured(view, last, lit=True)) == 1
    assert coloured(view, last, lit=True) != coloured(view, last, lit=False)
    # Coloured or not, a row is as tall: measuring it uncoloured leaves no jump on paint.
    width = view.delegate.content_width()
    for i in answers:
        plain = view.delegate.document(rows[i], width, lit=False).size().height()
        lit = view.delegate.document(rows[i], width, lit=True).size().height()
        assert plain == lit
