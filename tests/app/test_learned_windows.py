"""A window a server on this computer named in a refusal is a fact kept in the settings, keyed
by the server's address and the model: every process (the window, each ``conch ask``) lists the
model with it, so the same window is never healed twice, and a paste that only fits a bigger
ready model offers that model. The servers are loopback fakes: a llama.cpp-style server with no
``/props`` (as llama-cpp-python has none) loaded at 2,048, and an LM Studio at 16,384."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.catalogue import ModelCatalogue
from app.settings import SettingsStore
from engines.base import Done, Event, Healed, ModelInfo, Problem, Shortened, TurnInput
from engines.context.session import ApiSession
from engines.providers.openai import ROWS, OpenAIAdapter
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer

SYSTEM = "Be brief."
# Prose of about 1,700 tokens: more than a 2,048 window holds beside the answer's room, far less
# than the 8,192 a server that does not say its window is assumed to have.
ARTICLE = "The hedge along the fence turned the garden into a quiet room of its own. " * 140
PASTE = "The river rose all night and the bridge was closed before dawn. " * 320  # 20 KB


@pytest.fixture
def small() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("llamacpp", models=[FakeModel("gemma-2k", window=None)], window=2_048)
    s.props = False  # like llama-cpp-python: no /props, no window in its list
    s.meta_n_ctx = False
    s.start()
    yield s
    s.stop()


@pytest.fixture
def big() -> Iterator[OpenAIStyleServer]:
    s = OpenAIStyleServer("lmstudio", models=[FakeModel("qwen-16k", window=16_384)]).start()
    yield s
    s.stop()


class Process:
    """What one process of Conch opens on the data dir: its settings, its catalogue, a chat."""

    def __init__(
        self,
        data_dir: Path,
        chat_id: str,
        client: httpx.AsyncClient,
        *servers: tuple[str, OpenAIStyleServer],
    ) -> None:
        self.settings = SettingsStore.in_dir(data_dir)
        adapters = [
            OpenAIAdapter(ROWS[row], base_url=s.base_url, client=client) for row, s in servers
        ]
        self.catalogue = ModelCatalogue(adapters, windows=self.settings)
        self.chat_id = chat_id
        self.session = ApiSession(
            chat_id=chat_id,
            data_dir=data_dir,
            adapters=self.catalogue.live_adapters,
            directory=self.catalogue,
        )

    def model(self) -> ModelInfo:
        found = self.catalogue.find("llamacpp/gemma-2k")
        assert found is not None
        return found

    async def turn(self, seq: int, text: str) -> list[Event]:
        turn = TurnInput(
            chat_id=self.chat_id, seq=seq, text=text, model=self.model(), system=SYSTEM
        )
        return [e async for e in self.session.turn(turn)]


async def test_a_window_learned_by_one_process_is_used_by_the_next(
    small: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    first = Process(tmp_path, "chat-1", client, ("llamacpp", small))
    await first.catalogue.refresh()
    assert first.model().context == 8_192  # the server does not say: assumed

    events = await first.turn(0, ARTICLE)
    assert isinstance(events[-1], Done), events[-1]
    assert [e for e in events if isinstance(e, Healed)]  # refused once, healed
    assert first.model().context == 2_048  # listed with what it said from now on
    kept = json.loads((tmp_path / "settings.json").read_text())["learned_windows"]
    assert [fact["window"] for fact in kept.values()] == [2_048]

    # Another process (``conch ask`` again) on the same data dir: a new chat, the same server.
    second = Process(tmp_path, "chat-2", client, ("llamacpp", small))
    await second.catalogue.refresh()
    assert second.model().context == 2_048
    sent_before = len(small.chat_requests)
    events = await second.turn(0, ARTICLE)
    assert isinstance(events[-1], Done), events[-1]
    assert not [e for e in events if isinstance(e, Healed | Problem)]
    assert len(small.chat_requests) == sent_before + 1  # no refusal, no second send


async def test_a_paste_only_the_bigger_ready_model_holds_offers_it(
    small: OpenAIStyleServer,
    big: OpenAIStyleServer,
    client: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    first = Process(tmp_path, "chat-1", client, ("llamacpp", small), ("lmstudio", big))
    await first.catalogue.refresh()
    assert isinstance((await first.turn(0, ARTICLE))[-1], Done)

    second = Process(tmp_path, "chat-2", client, ("llamacpp", small), ("lmstudio", big))
    await second.catalogue.refresh()
    events = await second.turn(0, PASTE)

    assert isinstance(events[-1], Done), events[-1]
    (cut,) = [e for e in events if isinstance(e, Shortened)]
    assert cut.next_step is not None and cut.next_step.model is not None
    assert cut.next_step.model.key == "lmstudio/qwen-16k"
    assert cut.next_step.label == f"Switch to {cut.next_step.model.name}"
    assert not [e for e in events if isinstance(e, Healed)]  # planned at 2,048, never refused


async def test_a_server_listing_another_window_drops_the_fact(
    small: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    first = Process(tmp_path, "chat-1", client, ("llamacpp", small))
    await first.catalogue.refresh()
    assert isinstance((await first.turn(0, ARTICLE))[-1], Done)
    assert first.model().context == 2_048

    # Started again with a window it now names in its list.
    small.models = [FakeModel("gemma-2k", window=4_096)]
    small.meta_n_ctx = True
    small.window = 4_096
    second = Process(tmp_path, "chat-2", client, ("llamacpp", small))
    await second.catalogue.refresh()

    assert second.model().context == 4_096
    assert json.loads((tmp_path / "settings.json").read_text())["learned_windows"] == {}


def test_two_processes_keep_each_others_windows(tmp_path: Path) -> None:
    window_app = SettingsStore.in_dir(tmp_path)
    ask = SettingsStore.in_dir(tmp_path)  # opened before the other learned anything

    window_app.learn_window("llamacpp http://127.0.0.1:8000/v1 gemma-2k", 2_048, 8_192)
    ask.learn_window("lmstudio http://127.0.0.1:1234/v1 qwen", 4_096, 32_768)

    again = SettingsStore.in_dir(tmp_path).settings.learned_windows
    assert {key: fact.window for key, fact in again.items()} == {
        "llamacpp http://127.0.0.1:8000/v1 gemma-2k": 2_048,
        "lmstudio http://127.0.0.1:1234/v1 qwen": 4_096,
    }
    ask.forget_window("llamacpp http://127.0.0.1:8000/v1 gemma-2k")
    assert list(SettingsStore.in_dir(tmp_path).settings.learned_windows) == [
        "lmstudio http://127.0.0.1:1234/v1 qwen"
    ]


async def test_a_server_that_reads_more_than_the_kept_window_drops_it(
    small: OpenAIStyleServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    first = Process(tmp_path, "chat-1", client, ("llamacpp", small))
    await first.catalogue.refresh()
    assert isinstance((await first.turn(0, ARTICLE))[-1], Done)

    # Started again with a larger window, which its list does not say; it now reads a
    # request of 2,500 tokens by its own count.
    small.window = None
    small.script.prompt_tokens = 2_500
    second = Process(tmp_path, "chat-2", client, ("llamacpp", small))
    await second.catalogue.refresh()
    assert second.model().context == 2_048
    assert isinstance((await second.turn(0, "What grows well by a fence?"))[-1], Done)

    assert second.model().context == 8_192
    assert json.loads((tmp_path / "settings.json").read_text())["learned_windows"] == {}
