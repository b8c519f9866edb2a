"""Memories carry where they were learned.

A memory learned in a chat on Ollama goes into the system prompt of chats on this computer only;
a chat on a cloud company (a loopback fake that records every request) never receives it until
the person marks it "use everywhere". A memory the person typed goes everywhere. A memories file
from before the mark gets it from the chat each memory came from, when it is opened.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from app.memories import MemoryBook
from app.secrets import SessionSecrets
from app.services import AppServices, build_services, learned_reach
from app.settings import SettingsStore
from app.store import ChatStore
from tests.app.test_sqlite_versions import FIXTURES, copies_beside, raw, user_version
from tests.fakes.http import free_port
from tests.fakes.ollama_server import FakeModel, running_ollama
from tests.fakes.openai_server import FakeModel as CloudModel
from tests.fakes.openai_server import OpenAIStyleServer

CLOUD_KEY = "gsk_" + "Qm7Rt2Lp9Vx4" * 4
LOCAL_KEY = "ollama/llama3.2:latest"
CLOUD_MODEL_KEY = "groq/cloud-model"
LEARNED = "Sam is being treated for a heart condition at St Mary's."
TYPED = "Sam prefers answers in metric units."


def system_of(messages: list[dict[str, Any]]) -> str:
    return " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")


async def ask(services: AppServices, chat_id: str) -> None:
    conv = services.conversation(chat_id)
    async for _ in conv.turn("What should I cook tonight?"):
        pass
    await conv.aclose()


async def test_a_memory_learned_in_a_local_chat_reaches_a_cloud_chat_only_when_marked(
    data_dir: Path,
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with (
        OpenAIStyleServer(
            "groq", models=[CloudModel("cloud-model", 131_072)], api_key=CLOUD_KEY
        ) as cloud,
        running_ollama([FakeModel("llama3.2", 131_072)]) as ollama,
    ):
        SettingsStore.in_dir(data_dir).update(
            ollama_url=ollama.url,
            lmstudio_url=nowhere,
            llamacpp_url=nowhere,
            vllm_url=nowhere,
            companies=("groq",),
            base_urls={"groq": cloud.base_url},
            bundled_model=False,
        )
        keys = SessionSecrets()
        keys.set("groq", CLOUD_KEY)
        services = build_services(data_dir, mock=False, secrets=keys)
        try:
            await services.refresh_models()
            local = services.store.create_chat(title="Health", model_key=LOCAL_KEY)
            services.store.append_message(local.id, "user", "My cardiologist is at St Mary's.")
            services.store.append_message(local.id, "assistant", "Noted.", model_key=LOCAL_KEY)
            # What a fold's review of the local chat keeps (app/learning.py does this).
            run = services.memories.add_run(
                local.id, [LEARNED], seq_from=0, seq_to=1, waiting=False, source="fold"
            )
            assert run is not None
            (learned,) = run.memories
            typed = services.memories.add(TYPED)  # the Memories page's "Add"
            assert (learned.reach, typed.reach) == ("local", "everywhere")

            cloudy = services.store.create_chat(title="Recipes", model_key=CLOUD_MODEL_KEY)
            await ask(services, cloudy.id)
            first_cloud = system_of(cloud.chat_requests[-1].json["messages"])
            await ask(services, local.id)
            first_local = system_of(ollama.chat_requests()[-1]["messages"])

            services.memories.set_reach(learned.id, "everywhere")  # "Use everywhere", ticked
            await ask(services, cloudy.id)
            marked_cloud = system_of(cloud.chat_requests[-1].json["messages"])
        finally:
            await services.aclose()

    assert len(cloud.chat_requests) == 2
    assert LEARNED not in first_cloud, "a local chat's memory went to the cloud"
    assert "St Mary" not in first_cloud
    assert TYPED in first_cloud  # the person's own words go where they chat
    assert LEARNED in first_local and TYPED in first_local
    assert LEARNED in marked_cloud and TYPED in marked_cloud


def test_an_older_memories_file_gets_each_memory_marked_from_its_chat(data_dir: Path) -> None:
    # A memories file as the Conch before marks wrote it (tests/data/databases/), beside a
    # chat log that says where its chats ran: the garden chat on Ollama, the weather on OpenAI.
    old = FIXTURES / "v5" / MemoryBook.FILE_NAME
    path = data_dir / MemoryBook.FILE_NAME
    shutil.copyfile(old, path)
    assert user_version(path) == 1
    before = raw(path, "SELECT id, text, chat_id, status FROM memories ORDER BY id")
    store = ChatStore.in_dir(data_dir)
    store.create_chat("Garden plans", "ollama/llama3.2", chat_id="garden000001")
    store.create_chat("Weather lookup", "openai/gpt-4.1-mini", chat_id="tools0000002")

    book = MemoryBook.in_dir(data_dir, reach_of=learned_reach(store))
    try:
        marks = {m.text: (m.chat_id, m.reach) for m in book.list()}
        cloud_prompt = book.kept_for_prompt(4_000, local=False)
        local_prompt = book.kept_for_prompt(4_000, local=True)
    finally:
        book.close()
        store.close()

    assert marks == {
        "The person's name is Sam.": ("", "everywhere"),  # typed by the person
        "Sam grows tomatoes in the south beds.": ("garden000001", "local"),
        "Sam's north bed is clay.": ("garden000001", "local"),
        "Sam lives in Lyon.": ("tools0000002", "everywhere"),
        "Sam dislikes slugs.": ("garden000001", "local"),
        "Sam works nights.": ("", "everywhere"),
    }
    assert user_version(path) == 2
    assert copies_beside(path) == ["memories.sqlite3.before-v2"]
    assert raw(path, "SELECT id, text, chat_id, status FROM memories ORDER BY id") == before
    assert "The person's name is Sam." in cloud_prompt  # Lyon waits for an OK: in neither
    assert "tomatoes" not in cloud_prompt and "tomatoes" in local_prompt


def test_a_memory_whose_chat_is_gone_or_unknown_stays_local(data_dir: Path) -> None:
    store = ChatStore.in_dir(data_dir)
    cloud = store.create_chat("Trip", "anthropic/claude-sonnet-4-5")
    switched = store.create_chat("Switched", "openai/gpt-4.1")
    store.append_message(switched.id, "user", "I live in Leeds.", model_key=LOCAL_KEY)
    book = MemoryBook.in_dir(data_dir, reach_of=learned_reach(store))
    try:
        gone = book.add("Sam likes trains.", chat_id="purged000009", seq_from=0, seq_to=0)
        far = book.add("Sam is going to Oslo.", chat_id=cloud.id, seq_from=0, seq_to=0)
        # Said to a model on this computer, learned after the chat moved to a cloud model.
        moved = book.add("Sam lives in Leeds.", chat_id=switched.id, seq_from=0, seq_to=0)
    finally:
        book.close()
        store.close()
    assert (gone.reach, far.reach, moved.reach) == ("local", "everywhere", "local")
