"""A local chat's words never go to a cloud model to be learned from.

A chat runs on Ollama; a cloud company is set up and ready beside it. While Ollama is down, the
daily tidy-up and a fold's review both find the chat's own model not ready: the cloud server
receives nothing, nothing is marked read and nothing is learned. When Ollama comes back, the
chat that waited is read on Ollama, with its secrets left out of what is sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.secrets import SessionSecrets
from app.services import build_services
from app.settings import SettingsStore
from tests.fakes.http import free_port
from tests.fakes.ollama_server import FakeModel, FakeOllama, FakeReply
from tests.fakes.openai_server import FakeModel as CloudModel
from tests.fakes.openai_server import OpenAIStyleServer, Script

CLOUD_KEY = "gsk_" + "Qm7Rt2Lp9Vx4" * 4
PASTED_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2n" * 3
LEARNED = "The person manages their type 2 diabetes with a morning walk."
SAID = [
    f"My OpenAI key is {PASTED_KEY}, keep it for the script.",
    "I was diagnosed with type 2 diabetes in March and I walk every morning.",
    "What should I eat before the walk?",
]


def learn(body: dict[str, Any]) -> FakeReply:
    """Ollama's answer: a memory to the learning prompt, a plain reply to anything else."""
    system = " ".join(
        str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "system"
    )
    if "JSON array of strings" in system:
        return FakeReply(text=json.dumps([LEARNED]))
    return FakeReply(text="A banana is fine.")


async def test_a_local_chat_waits_for_its_own_model_and_never_goes_to_the_cloud(
    data_dir: Path,
) -> None:
    port = free_port()
    nowhere = f"http://127.0.0.1:{free_port()}"
    cloud = OpenAIStyleServer(
        "groq",
        models=[CloudModel("cloud-model", 131_072)],
        script=Script(text=[json.dumps(["The person's key is " + PASTED_KEY])]),
        api_key=CLOUD_KEY,
    )
    ollama = FakeOllama([FakeModel("llama3.2", 131_072)], responder=learn)
    with cloud:
        SettingsStore.in_dir(data_dir).update(
            ollama_url=f"http://127.0.0.1:{port}",
            lmstudio_url=nowhere,
            llamacpp_url=nowhere,
            vllm_url=nowhere,
            companies=("groq",),
            base_urls={"groq": cloud.base_url},
            bundled_model=False,
            remember_automatically=True,
        )
        keys = SessionSecrets()
        keys.set("groq", CLOUD_KEY)
        services = build_services(data_dir, mock=False, secrets=keys)
        try:
            await services.refresh_models(start_bundled=False)
            ready = {m.key for m in services.catalogue.ready_models()}
            assert ready == {"groq/cloud-model"}, ready  # the cloud is there to fall back on
            chat = services.store.create_chat(title="Walks", model_key="ollama/llama3.2:latest")
            for text in SAID:
                services.store.append_message(chat.id, "user", text)
                services.store.append_message(chat.id, "assistant", "Noted.")

            # Ollama is down: the tidy-up at window start and a fold's review both wait.
            assert await services.tidy_up_now() == []
            assert await services.learner.review(chat.id, before_seq=6) is None
            assert await services.tidy_if_due() == []
            assert cloud.chat_requests == [], "a local chat's words went to the cloud"
            waited = services.store.get_chat(chat.id)
            assert waited is not None and waited.read_until == -1 and waited.learned_at is None
            assert services.memories.list() == []

            # Ollama comes back: the chat that waited is read on it, and only on it.
            ollama.start(port)
            await services.catalogue.refresh()
            assert services.catalogue.find("ollama/llama3.2:latest") is not None
            runs = await services.tidy_if_due()
            memories = [m.text for m in services.memories.list()]
            read = services.store.get_chat(chat.id)
        finally:
            ollama.stop()
            await services.aclose()

    assert cloud.chat_requests == [], "a local chat's words went to the cloud"
    assert [len(r.memories) for r in runs] == [1]
    assert memories == [LEARNED]
    assert read is not None and read.read_until == 5
    learning = [
        r
        for r in ollama.chat_requests()
        if "JSON array of strings" in json.dumps(r.get("messages", []))
    ]
    assert len(learning) == 1
    assert learning[0]["model"] == "llama3.2:latest"
    sent = json.dumps(learning[0]["messages"])
    assert "diagnosed with type 2 diabetes" in sent  # the chat's own model may read its words
    assert PASTED_KEY not in sent  # but never a secret
