"""The fact keeper ranks the person's words from another app's export below what they typed
here, yet still keeps them in the sentences they said them in."""

from __future__ import annotations

from pathlib import Path

from app.importers import ImportedChat, ImportedMessage, save
from app.services import history_messages
from app.store import ChatStore
from engines.context.summarise import facts_kept

SAID = [
    "My name is Alina Kowalczyk.",
    "I live in Gdańsk, near the old shipyard.",
    "My wife Ewa keeps the bees on the allotment.",
    "Our rent is 3,100 zloty, due on the 10th of each month.",
    "I work as a nurse at the children's hospital.",
    "My brother Marek lives in Poznań.",
    "My son Kuba plays the cello.",
    "My mother Irena is 82.",
    "My boss Dorota runs the night shift.",
    "My sister Agata moved to Oslo in 2024.",
    "My dog Burek is afraid of thunder.",
    "We decided to buy a second water butt.",
    "We decided to move the piano lessons to Thursdays.",
    "I will repaint the shed in May.",
    "I will order 40 litres of compost on Friday.",
]
TYPED_HERE = "My daughter Zofia starts school in Sopot on 2 September."


def imported(said: list[str]) -> ImportedChat:
    messages: list[ImportedMessage] = []
    for s in said:
        messages.append(ImportedMessage("user", f"{s} Also the beans need water."))
        messages.append(ImportedMessage("assistant", "Noted."))
    return ImportedChat(title="Allotment", messages=tuple(messages))


def kept(store: ChatStore, chat_id: str, window: int) -> str:
    folded = [m for _seq, m in history_messages(store.messages(chat_id))]
    return facts_kept("", "", folded, window)


def test_a_fact_typed_here_outranks_the_imported_ones_when_room_is_short(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        (chat_id,) = save(store, data_dir, [imported(SAID)])
        store.append_message(chat_id, "user", TYPED_HERE)
        store.append_message(chat_id, "assistant", "Noted.")
        summary = kept(store, chat_id, 2_048)
        assert TYPED_HERE.removesuffix(".") in summary  # in the person's own sentence
        # The imported ones that did not fit are said to be left out, by where they came from.
        assert "more facts from imported chats" in summary
        assert "My name is Alina Kowalczyk" in summary  # the earliest imported come first
    finally:
        store.close()


def test_an_imported_chat_alone_keeps_the_persons_sentences(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    try:
        (chat_id,) = save(store, data_dir, [imported(SAID[:3])])
        summary = kept(store, chat_id, 4_096)
        for sentence in SAID[:3]:
            assert sentence.removesuffix(".") in summary
    finally:
        store.close()
