"""Importing chats from Conch's own export, ChatGPT and Open WebUI (fixtures in
tests/data/imports, described in its README), into a real chat log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.conversation import Conversation
from app.export import to_json
from app.health import HealthLog
from app.importers import ImportedChat, ImportFailedError, parse_bytes, read_file, save
from app.services import history_messages
from app.store import ChatStore, StoredMessage, StoreError
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Compacted, Done, ModelInfo
from engines.context.session import ApiSession
from engines.window import budget, estimate_tokens

DATA = Path(__file__).parent.parent / "data" / "imports"


def _texts(chat: ImportedChat) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in chat.messages]


def test_chatgpt_export_follows_the_branch_last_shown_and_leaves_out_the_machinery() -> None:
    parsed = read_file(DATA / "chatgpt-conversations.json")

    assert parsed.source == "chatgpt"
    sourdough, bike = parsed.chats
    assert sourdough.title == "Sourdough starter"
    assert _texts(sourdough) == [
        ("user", "My sourdough starter smells like nail polish. Is it dead?"),
        ("assistant", "Not dead: an acetone smell means it is hungry. Feed it twice a day."),
        (
            "user",
            "[A picture that was not part of the export]\n\n"
            "Here is a photo of it. How much flour and water per feeding?",
        ),
        ("assistant", "Feed it 1:1:1 by weight: 50 g starter, 50 g flour, 50 g water."),
    ]
    assert _texts(bike) == [
        ("user", "Which lube for a wet climate?"),
        ("assistant", "A wet lube: it lasts through rain."),
    ]


def test_chatgpt_without_a_current_node_takes_the_newest_branch() -> None:
    data = json.loads((DATA / "chatgpt-conversations.json").read_text(encoding="utf-8"))
    del data[0]["current_node"]

    parsed = parse_bytes(json.dumps(data).encode())

    assert parsed.chats[0].messages[-1].text.startswith("Feed it 1:1:1")


def test_open_webui_export_follows_current_id_with_reasoning_and_earlier_versions() -> None:
    parsed = read_file(DATA / "open-webui-chat-export.json")

    assert parsed.source == "open-webui"
    [chat] = parsed.chats
    assert chat.title == "Tomato blight"
    assert _texts(chat) == [
        ("user", "Brown spots on my tomato leaves, what is it?"),
        ("assistant", "Likely early blight (Alternaria). Remove the lower leaves."),
        ("user", "Should I spray copper?"),
        ("assistant", "Copper fungicide helps as a preventive; start early in the season."),
    ]
    assert chat.messages[1].thinking == "Spots on lower leaves first."
    assert [v.text for v in chat.messages[1].other_versions] == [
        "An earlier answer that was regenerated."
    ]


def test_open_webui_legacy_export_reads_its_message_list() -> None:
    parsed = read_file(DATA / "open-webui-legacy-export.json")

    assert parsed.source == "open-webui"
    assert parsed.chats[0].title == "Packing list"
    assert [m.role for m in parsed.chats[0].messages] == ["user", "assistant"]


def test_conchs_own_export_comes_back_whole(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    chat = store.create_chat("Round trip")
    store.append_message(chat.id, "user", "Question", pictures=[])
    first = store.append_message(chat.id, "assistant", "First answer", thinking="hmm")
    second = store.append_message(chat.id, "assistant", "Second answer", version_of=first.seq)
    store.show_version(chat.id, second.seq)

    parsed = parse_bytes(to_json(store, chat.id).encode(), "chat.json")
    [new_id] = save(store, data_dir, parsed.chats)

    assert parsed.source == "conch"
    assert [m.text for m in store.messages(new_id)] == ["Question", "Second answer"]
    answer = store.messages(new_id)[1]
    versions = store.versions(new_id, answer.seq)
    assert len(versions.seqs) == 2
    shelved = [store.message(new_id, s) for s in versions.seqs if s != answer.seq]
    assert [(m.text, m.thinking) for m in shelved if m] == [("First answer", "hmm")]


def test_saved_chats_show_in_the_sidebar_list_and_learning_waits(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    parsed = read_file(DATA / "chatgpt-conversations.json")

    ids = save(store, data_dir, parsed.chats)
    store.close()

    again = ChatStore.in_dir(data_dir)
    assert {c.id for c in again.list_chats()} == set(ids)
    assert again.deleted_chats() == []
    assert all(again.get_chat(i).untrusted for i in ids)  # type: ignore[union-attr]
    assert [m.role for m in again.messages(ids[0])] == ["user", "assistant"] * 2


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'[{"mapping": {"a": ', "is damaged or not JSON (line 1"),
        (b"\xff\xfe\x00garbage", "is not a text file"),
        (b'{"hello": "world"}', "is not a chat export Conch knows"),
        (b"[]", "is not a chat export Conch knows"),
        (b'[{"mapping": {"a": 5}, "current_node": "a"}]', "could not be read"),
        (
            b'[{"mapping": {"a": {"message": {"author": {"role": "user"}, '
            b'"content": {"content_type": "text", "parts": "oops"}}}}, "current_node": "a"}]',
            "could not be read",
        ),
        (b'[{"mapping": {}, "title": "empty"}]', "could not be read"),
        (b'[{"chat": {"messages": [{"role": "system", "content": ""}]}}]', "no messages"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_bad_input_is_one_sentence_and_creates_nothing(
    data_dir: Path, tmp_path: Path, raw: bytes, words: str
) -> None:
    store = ChatStore.in_dir(data_dir)
    path = tmp_path / "export.json"
    path.write_bytes(raw)

    with pytest.raises(ImportFailedError) as caught:
        read_file(path)

    sentence = str(caught.value)
    assert words in sentence and sentence.startswith("export.json ")
    assert sentence.count(". ") == 0 and sentence.endswith(".")
    assert store.list_chats() == [] and store.deleted_chats() == []


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_bytes(b" " * 3 * 1024 * 1024)

    with pytest.raises(ImportFailedError) as caught:
        read_file(path, max_bytes=2 * 1024 * 1024)

    assert str(caught.value) == (
        "conversations.json is 3 MB, more than the 2 MB Conch imports at once; "
        "export fewer chats and try again."
    )


class FullDiskStore(ChatStore):
    """A chat log whose disk fills up after ``room`` more messages."""

    room = 4

    def append_message(self, *args: Any, **kwargs: Any) -> StoredMessage:
        if self.room == 0:
            raise StoreError("The disk is full; free some space and try again.")
        self.room -= 1
        return super().append_message(*args, **kwargs)


def test_a_failure_while_saving_leaves_no_chat_half_made(data_dir: Path) -> None:
    store = FullDiskStore.in_dir(data_dir)
    parsed = read_file(DATA / "chatgpt-conversations.json")  # 4 messages, then 2

    with pytest.raises(ImportFailedError) as caught:
        save(store, data_dir, parsed.chats)

    assert "The disk is full" in str(caught.value)
    assert store.list_chats() == [] and store.deleted_chats() == []
    assert store.query("SELECT COUNT(*) FROM messages") == [(0,)]


# --- an imported long chat folds on first use, like any long chat ------------------------------


class Directory:
    def __init__(self, models: list[ModelInfo]) -> None:
        self.models = models

    def ready_models(self) -> list[ModelInfo]:
        return self.models


def _long_chatgpt_chat(turns: int) -> list[dict[str, Any]]:
    mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None}}
    parent = "root"
    for i in range(turns * 2):
        role = "user" if i % 2 == 0 else "assistant"
        words = f"Turn {i // 2} about the shed roof and the rain barrels. " * 12
        mapping[f"n{i}"] = {
            "id": f"n{i}",
            "parent": parent,
            "children": [],
            "message": {
                "author": {"role": role},
                "content": {"content_type": "text", "parts": [words]},
                "recipient": "all",
            },
        }
        mapping[parent].setdefault("children", []).append(f"n{i}")
        parent = f"n{i}"
    return [{"title": "Shed", "mapping": mapping, "current_node": parent}]


async def test_an_imported_long_chat_folds_on_its_first_turn(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    small = ModelInfo(provider="openai", id="gpt-small", label="GPT Small", context=8_192)
    parsed = parse_bytes(json.dumps(_long_chatgpt_chat(120)).encode())
    [chat_id] = save(store, data_dir, parsed.chats)
    imported = sum(estimate_tokens(m.text) for m in store.messages(chat_id))
    assert imported > 4 * budget(small.context)  # far more than the model reads

    adapter = ScriptedAdapter(default=Answer("Fix the roof first."))
    session = ApiSession(
        chat_id=chat_id,
        data_dir=data_dir,
        adapters={adapter.name: adapter},
        directory=Directory([small]),
        history=lambda: history_messages(store.messages(chat_id)),
    )
    conv = Conversation(chat_id, store=store, engine=session, model=small, health=health)
    events = [e async for e in conv.turn("What did we decide first?")]

    [fold] = [e for e in events if isinstance(e, Compacted)]
    assert fold.first_kept_seq > 100  # the model's memory starts near the end
    assert isinstance(events[-2], Done)
    request = adapter.requests[-1]
    sent = sum(estimate_tokens(m.text) for m in request.messages)
    assert sent <= budget(small.context)
    assert request.messages[-1].text.endswith("What did we decide first?")
    health.close()
    store.close()


# --- every word kept: voice turns, pictures named, thinking, branches as versions ----------------


def test_chatgpt_voice_turns_pictures_thinking_and_branches_keep_every_word() -> None:
    [chat] = read_file(DATA / "chatgpt-voice-branches.json").chats

    assert _texts(chat) == [
        ("user", "What should I plant in a shady corner?"),
        ("assistant", "Ferns and hostas do well in shade."),
        (
            "user",
            "[A picture, corner.jpg, that was not part of the export]\n\n"
            "This is the corner. Draw me a plan?",
        ),
        (
            "assistant",
            "[A picture DALL·E made from “a shady garden corner with ferns and hostas”, "
            "not part of the export]\n\nHere is a plan for the corner.",
        ),
        ("user", "How often should I water ferns?"),
        ("assistant", "Twice a week, more in a dry spell."),
        ("user", "And hostas in pots?"),
        ("assistant", "Potted hostas: every other day."),
    ]
    # A voice turn is its words, never a picture.
    assert chat.messages[0].text.count("[A picture") == 0
    # o3's thoughts are thinking, beside the answer they led to; model names are kept.
    assert chat.messages[5].thinking == "Ferns like moist soil, but not waterlogged."
    assert chat.messages[5].model_key == "chatgpt/o3"
    assert chat.messages[1].model_key == "chatgpt/gpt-4o"
    # A regenerated answer: the earlier try is a version, before the shown one.
    regenerated = chat.messages[5]
    assert [v.text for v in regenerated.in_order()] == [
        "First try: every day.",
        "Twice a week, more in a dry spell.",
    ]
    # An edited question: the first wording and its answer are versions, in order.
    assert [v.text for v in chat.messages[6].in_order()] == ["And hostas?", "And hostas in pots?"]
    assert [v.text for v in chat.messages[7].in_order()] == [
        "Hostas: once a week.",
        "Potted hostas: every other day.",
    ]


def test_imported_versions_show_in_their_order_with_the_shown_one_in_view(
    data_dir: Path,
) -> None:
    store = ChatStore.in_dir(data_dir)
    [chat_id] = save(store, data_dir, read_file(DATA / "chatgpt-voice-branches.json").chats)

    shown = store.messages(chat_id)
    last_turn = [m.text for m in shown][-2:]
    assert last_turn == ["And hostas in pots?", "Potted hostas: every other day."]
    answer = shown[-1]
    versions = store.versions(chat_id, answer.seq)
    texts = [m.text for m in (store.message(chat_id, s) for s in versions.seqs) if m]
    assert texts == ["Hostas: once a week.", "Potted hostas: every other day."]
    assert versions.shown == 1  # "‹ 2/2 ›": the one the person last saw
    # What the model is sent is the branch that was shown, nothing of the other.
    said = [m.text for _, m in history_messages(store.messages(chat_id))]
    assert "Hostas: once a week." not in said and "Potted hostas: every other day." in said


def test_open_webui_versions_are_in_order_with_model_names_and_pictures() -> None:
    data = json.loads((DATA / "open-webui-chat-export.json").read_text(encoding="utf-8"))
    messages = data[0]["chat"]["history"]["messages"]
    messages["m-user-1"]["files"] = [
        {"type": "image", "name": "leaf.png", "url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "image", "name": "plant.jpg", "url": "/api/v1/files/abc/content"},
    ]
    messages["m-user-2"]["timestamp"] = "not a time"  # one bad timestamp, not a failed import

    [chat] = parse_bytes(json.dumps(data).encode()).chats

    first, answer = chat.messages[0], chat.messages[1]
    assert [p.name for p in first.pictures] == ["leaf.png"] and first.pictures[0].data
    assert first.text.startswith("[A picture, plant.jpg, that was not part of the export]")
    assert answer.model_key == "open-webui/llama3.1:8b"
    # The regenerated answer came first, the shown one second: in that order.
    assert [v.text for v in answer.in_order()] == [
        "An earlier answer that was regenerated.",
        "Likely early blight (Alternaria). Remove the lower leaves.",
    ]


def test_a_bad_timestamp_without_a_current_pointer_does_not_fail_the_import() -> None:
    data = json.loads((DATA / "open-webui-chat-export.json").read_text(encoding="utf-8"))
    history = data[0]["chat"]["history"]
    del history["currentId"]
    history["messages"]["m-asst-1a"]["timestamp"] = "yesterday"

    [chat] = parse_bytes(json.dumps(data).encode()).chats

    assert chat.messages[-1].text.startswith("Copper fungicide")


def test_an_import_says_how_many_messages_it_has_written_as_it_goes(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    parsed = read_file(DATA / "chatgpt-conversations.json")
    heard: list[tuple[int, int]] = []

    save(store, data_dir, parsed.chats, lambda done, total: heard.append((done, total)))

    total = sum(len(c.messages) for c in parsed.chats)
    assert len(heard) == len(parsed.chats)  # once a chat
    assert [t for _, t in heard] == [total] * len(heard)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard) and heard[-1][0] == total


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b'{"title": "<b>x', "(line 1, column 11: unterminated string);"),
        (b'{"title": "a\x01"}', "(line 1, column 13: invalid control character);"),
        (b'{"a": 1}\n[', "(line 2, column 1: extra data);"),
    ],
)
def test_a_damaged_file_says_where_in_words_that_end(raw: bytes, said: str) -> None:
    with pytest.raises(ImportFailedError) as caught:
        parse_bytes(raw, "bad.json")
    assert said in str(caught.value)
    assert " at)" not in str(caught.value)
