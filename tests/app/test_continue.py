"""Continue after Stop through the real Conversation and engine, across a restart: an answer
stopped before Conch was closed goes on afterwards, and the chat log keeps one answer.

Also who may continue: only the chat's last answer, only one the person stopped with words in
it, and only on an engine that can go on with an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.conversation import Conversation, MessageSaved
from app.secrets import SessionSecrets
from app.services import build_services
from app.store import ChatStore
from engines.base import Done, ModelInfo, ProblemKind, TextDelta, TurnInput, TurnProblem
from engines.mock import MockEngine, Reply
from tests.fakes.ollama_server import FakeModel, FakeReply, running_ollama
from tests.loopback_chat import only_ollama

QUESTION = "Tell me about the garden."
WHOLE = "The garden has twelve beds. Larch lasts ten years. Water them at dawn."
MODEL = "ollama/llama3.2:latest"


def answer(body: dict[str, Any]) -> FakeReply:
    last = body["messages"][-1]
    if last["role"] == "assistant":  # Ollama writes on from a final assistant message
        return FakeReply(text=WHOLE[len(last["content"]) :], chunk=14)
    return FakeReply(text=WHOLE, chunk=14)


async def test_an_answer_stopped_before_a_restart_goes_on_after_it(data_dir: Path) -> None:
    with running_ollama([FakeModel("llama3.2", 131_072)], responder=answer) as ollama:
        only_ollama(data_dir, ollama.url)
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            chat = services.store.create_chat("Garden", model_key=MODEL).id
            turn = services.conversation(chat).turn(QUESTION)
            got = ""
            async for event in turn:
                if isinstance(event, TextDelta):
                    got += event.text
                    if len(got) >= 28:
                        break  # the person pressed Stop
            await turn.aclose()  # type: ignore[attr-defined]
        finally:
            await services.aclose()

        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            await services.refresh_models(start_bundled=False)
            conv = services.conversation(chat)
            (stopped,) = [m for m in services.store.messages(chat) if m.role == "assistant"]
            assert stopped.problem is not None and stopped.problem.kind is ProblemKind.CANCELLED
            assert conv.can_continue(stopped.seq)
            events = [e async for e in conv.continue_answer(stopped.seq)]
            log = [(m.role, m.text, m.problem) for m in services.store.messages(chat)]
        finally:
            await services.aclose()
    assert any(isinstance(e, Done) for e in events), events
    saved = [e for e in events if isinstance(e, MessageSaved)]
    assert [(e.role, e.seq) for e in saved][-1] == ("assistant", stopped.seq)
    assert log == [("user", QUESTION, None), ("assistant", WHOLE, None)]
    assert ollama.chat_requests()[-1]["messages"][-1] == {
        "role": "assistant",
        "content": "The garden has twelve beds.",
    }


class Forgetful:
    """An engine that keeps its own chat and cannot go on with an answer (no
    ``continues_answers``): the person is never offered Continue on it."""

    async def turn(self, turn: TurnInput) -> Any:
        yield Done()

    async def aclose(self) -> None:
        return None


MOCK = ModelInfo(provider="mock", id="m", context=8_192)


def stopped_chat(store: ChatStore, engine: Any) -> tuple[Conversation, int]:
    """A chat whose last answer the person stopped after "The garden has"."""
    chat = store.create_chat(model_key=MOCK.key).id
    conv = Conversation(chat, store=store, engine=engine, model=MOCK)
    store.append_message(chat, "user", QUESTION)
    stopped = store.append_message(
        chat,
        "assistant",
        "The garden has",
        partial=True,
        problem=TurnProblem.of(ProblemKind.CANCELLED, partial=True),
    )
    return conv, stopped.seq


async def test_only_the_last_answer_the_person_stopped_can_continue(store: ChatStore) -> None:
    conv, seq = stopped_chat(store, MockEngine([Reply(" twelve beds.", chunk_delay=0)]))
    assert conv.can_continue(seq)
    events = [e async for e in conv.continue_answer(seq)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == " twelve beds."
    finished = store.message(conv.chat_id, seq)
    assert finished is not None and finished.text == "The garden has twelve beds."
    assert finished.problem is None and not finished.partial
    assert not conv.can_continue(seq)  # finished: nothing to go on with
    with pytest.raises(ValueError):
        [e async for e in conv.continue_answer(seq)]

    conv, seq = stopped_chat(store, MockEngine())
    store.append_message(conv.chat_id, "user", "Never mind.")
    assert not conv.can_continue(seq)  # something came after it

    conv, seq = stopped_chat(store, Forgetful())
    assert not conv.can_continue(seq)
