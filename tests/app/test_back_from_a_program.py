"""A chat that went to a program and comes back to a model of Conch's: the model is given the
whole chat from the log, the program's turns included, and nothing says its copy "did not
match the chat log" (the copy it kept went stale when the program took the chat over)."""

from __future__ import annotations

from pathlib import Path

from app.secrets import SessionSecrets
from app.services import build_services
from bench._scripted import Answer, ScriptedAdapter
from engines.base import Done, ModelInfo, Note
from engines.context.transcript import transcript_path
from tests.loopback_chat import only_ollama

LOCAL = ModelInfo(provider="openai", id="garden-7b", label="Garden 7B", context=32_768)


async def test_a_chat_back_from_a_program_is_rebuilt_from_the_log_without_a_notice(
    data_dir: Path,
) -> None:
    only_ollama(data_dir)  # and no Ollama either: the chat's model is the scripted one
    services = build_services(data_dir, mock=False, secrets=SessionSecrets())
    adapter = ScriptedAdapter(name="openai", models=[LOCAL], default=Answer("noted"))
    try:
        await services.catalogue.add_provider(adapter)
        model = services.catalogue.find(LOCAL.key)
        assert model is not None and model.ready
        chat = services.store.create_chat(model_key=LOCAL.key)
        conv = services.conversation(chat.id)
        for word in ("one", "two"):
            [e async for e in conv.turn(word)]
        await conv.aclose()
        assert transcript_path(data_dir, chat.id).exists()

        # The chat goes to Claude Code, which answers two turns (kept in the chat log).
        claude = next(m for m in services.programs() if m.id == "claude-code")
        moved = services.conversation(chat.id, model=claude)
        await moved.aclose()
        for word in ("three", "four"):
            services.store.append_message(chat.id, "user", word, model_key=claude.key)
            services.store.append_message(chat.id, "assistant", "heard", model_key=claude.key)

        # Back on the model: it reads the whole chat, and no mismatch is reported.
        back = services.conversation(chat.id, model=model)
        events = [e async for e in back.turn("five")]
        await back.aclose()
        assert any(isinstance(e, Done) for e in events)
        assert not [e for e in events if isinstance(e, Note)]
        sent = [m.text for m in adapter.requests[-1].messages]
        assert sent == ["one", "noted", "two", "noted", "three", "heard", "four", "heard", "five"]
        assert not services.health.notes(topic="transcript-recovered")
    finally:
        await services.aclose()
