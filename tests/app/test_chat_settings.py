"""A chat's settings on the wire: the person's system prompt (their default, or the chat's own),
the temperature and the answer length reach the request body a real server receives, on Ollama
and on an OpenAI-style server (LM Studio), and are still there after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.conversation import Conversation
from app.secrets import SessionSecrets
from app.services import OWN_PROMPT_HEADING, AppServices, build_services
from app.settings import SettingsStore
from app.store import ChatSettings
from engines.base import Done
from tests.fakes.http import free_port
from tests.fakes.ollama_server import FakeModel, FakeOllama, running_ollama
from tests.fakes.openai_server import FakeModel as ApiModel
from tests.fakes.openai_server import OpenAIStyleServer

DEFAULT_PROMPT = "Answer in plain English, without jargon."
OWN_PROMPT = "Answer like a ship's captain."


def point_at(data_dir: Path, ollama: FakeOllama, lmstudio: OpenAIStyleServer) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    SettingsStore.in_dir(data_dir).update(
        ollama_url=ollama.url,
        lmstudio_url=lmstudio.url,
        llamacpp_url=nowhere,
        vllm_url=nowhere,
        bundled_model=False,
        system_prompt=DEFAULT_PROMPT,
    )


async def send(services: AppServices, chat_id: str, text: str) -> Conversation:
    conv = services.conversation(chat_id)
    events = [e async for e in conv.turn(text)]
    assert any(isinstance(e, Done) for e in events), events
    return conv


def system_of(messages: list[dict[str, Any]]) -> str:
    return "".join(m["content"] for m in messages if m["role"] == "system")


async def test_the_settings_reach_each_server_and_survive_a_restart(data_dir: Path) -> None:
    with (
        running_ollama([FakeModel("llama3.2", 131_072)]) as ollama,
        OpenAIStyleServer("lmstudio", models=[ApiModel("qwen3-8b", 32_768)]) as lmstudio,
    ):
        point_at(data_dir, ollama, lmstudio)
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            local = services.store.create_chat("Captain", model_key="ollama/llama3.2:latest")
            services.store.set_chat_settings(
                local.id,
                ChatSettings(system_prompt=OWN_PROMPT, temperature=0.3, max_answer_tokens=300),
            )
            studio = services.store.create_chat("Studio", model_key="lmstudio/qwen3-8b")
            services.store.set_chat_settings(
                studio.id, ChatSettings(temperature=1.5, max_answer_tokens=700)
            )
            plain = services.store.create_chat("Plain", model_key="ollama/llama3.2:latest")
            await send(services, local.id, "Where are we headed?")
            await send(services, studio.id, "Hello there")
            await send(services, plain.id, "Hi")
        finally:
            await services.aclose()

        captain, default = ollama.chat_requests()
        assert captain["options"]["temperature"] == 0.3
        assert captain["options"]["num_predict"] == 300
        # The chat's own prompt replaces the default; it is said to be the person's.
        said = system_of(captain["messages"])
        assert f"{OWN_PROMPT_HEADING}\n{OWN_PROMPT}" in said and DEFAULT_PROMPT not in said
        # A chat with nothing set: the person's default, the server's own temperature, and
        # Conch's own room for the answer.
        assert "temperature" not in default["options"]
        assert default["options"]["num_predict"] != 300
        assert DEFAULT_PROMPT in system_of(default["messages"])

        body = lmstudio.chat_requests[-1].json
        assert body["temperature"] == 1.5 and body["max_tokens"] == 700
        assert DEFAULT_PROMPT in system_of(body["messages"])

        # After a restart: the same settings, the same request.
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            assert services.store.chat_settings(local.id).temperature == 0.3
            await send(services, local.id, "And after that?")
        finally:
            await services.aclose()
        again = ollama.chat_requests()[-1]
        assert (again["options"]["temperature"], again["options"]["num_predict"]) == (0.3, 300)
        assert OWN_PROMPT in system_of(again["messages"])


async def test_no_system_prompt_for_one_chat_leaves_the_default_out(data_dir: Path) -> None:
    with (
        running_ollama([FakeModel("llama3.2", 131_072)]) as ollama,
        OpenAIStyleServer("lmstudio", models=[]) as lmstudio,
    ):
        point_at(data_dir, ollama, lmstudio)
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            chat = services.store.create_chat("Bare", model_key="ollama/llama3.2:latest")
            services.store.set_chat_settings(chat.id, ChatSettings(system_prompt=""))
            await send(services, chat.id, "Hi")
        finally:
            await services.aclose()
        said = system_of(ollama.chat_requests()[-1]["messages"])
        assert DEFAULT_PROMPT not in said and OWN_PROMPT_HEADING not in said


async def test_the_meter_counts_the_system_prompt_and_the_answer_length(data_dir: Path) -> None:
    services = build_services(data_dir, mock=True)
    try:
        await services.refresh_models()
        chat = services.store.create_chat("Meter")
        conv = services.conversation(chat.id)
        usage = conv.context_usage()
        assert usage is not None
        _, before = usage
        services.store.set_chat_settings(chat.id, ChatSettings(system_prompt="Be kind. " * 400))
        usage = conv.context_usage()
        assert usage is not None
        _, longer_prompt = usage
        assert longer_prompt < before - 800
        services.store.update_chat_settings(chat.id, max_answer_tokens=6_000)
        usage = conv.context_usage()
        assert usage is not None
        assert usage[1] < longer_prompt
    finally:
        await services.aclose()
