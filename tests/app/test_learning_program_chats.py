"""A chat a program keeps (Claude Code, Codex, an ACP agent) is never read by a model of
Conch's: its words go only to that program. Learning keeps the person's own plain statements,
waiting for their OK, and marks the chat read, instead of waiting for a model that never comes.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.learning import WAITING_KEY
from app.secrets import SessionSecrets
from app.services import build_services
from app.settings import SettingsStore
from tests.fakes.http import free_port
from tests.loopback_chat import only_ollama

SAID = [
    "I live in Leeds and I grow larch for raised beds.",
    "How deep should a bed be?",
]


async def test_a_program_chat_keeps_what_the_person_said_and_never_waits(data_dir: Path) -> None:
    only_ollama(data_dir)  # and no Ollama either: no model of Conch's is there to read it
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    try:
        chat = services.store.create_chat(title="Beds", model_key="programs/claude-code")
        for text in SAID:
            services.store.append_message(chat.id, "user", text)
            services.store.append_message(chat.id, "assistant", "Noted.")

        # Claude Code compacted: the review reads the chat without any model.
        run = await services.learner.review(chat.id, before_seq=4)
        assert run is not None and run.waiting  # kept as said: it waits for the person's OK
        kept = [m.text for m in run.memories]
        assert any("Leeds" in t for t in kept) and not any("deep" in t for t in kept)
        read = services.store.get_chat(chat.id)
        assert read is not None and read.read_until == 3
        # Nothing waits for a model, so the next tidy-up has nothing left to do here.
        assert await services.learner.catch_up() == []
        assert await services.tidy_up_now() == []
    finally:
        await services.aclose()


async def test_a_program_chat_left_waiting_by_an_earlier_conch_is_read_at_the_next_catch_up(
    data_dir: Path,
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    SettingsStore.in_dir(data_dir).update(
        ollama_url=nowhere, lmstudio_url=nowhere, llamacpp_url=nowhere, vllm_url=nowhere
    )
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    try:
        chat = services.store.create_chat(title="Beds", model_key="programs/codex")
        services.store.append_message(chat.id, "user", SAID[0])
        # An earlier Conch put it among the chats waiting for their model.
        services.memories.set_meta(WAITING_KEY, json.dumps([chat.id]))
        (run,) = await services.learner.catch_up()
        assert run.chat_id == chat.id and run.waiting
        assert json.loads(services.memories.get_meta(WAITING_KEY) or "[]") == []
    finally:
        await services.aclose()
