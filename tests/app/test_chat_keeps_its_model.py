"""A chat never changes provider by itself.

A chat runs on the bundled model; a cloud company is set up, keyed and ready beside it, so the
bundled model is not started when the models are listed. Sending a turn, through the
``Conversation`` and through the real ``conch ask``, either starts the bundled model for it
(the chat's own model, whatever keys exist) or, when it cannot start, says so in one sentence:
the cloud server receives no chat request and none of the chat's words, and the chat's model
stays what the person chose.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import FAILED
from app.secrets import SessionSecrets
from app.services import AppServices, build_services
from app.settings import SettingsStore
from app.store import ChatStore, Role
from engines.base import Problem, ProblemKind, TextDelta
from engines.local import bundled
from engines.local.bundled import MODEL_ID
from tests.engines.local.test_runtime_crashes import fake_runtime, starts
from tests.fakes.http import free_port
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer

ROOT = Path(__file__).resolve().parents[2]
CLOUD_KEY = "gsk_" + "Qm7Rt2Lp9Vx4" * 4
BUNDLED_KEY = f"local/{MODEL_ID}"
SECRET = "hunter2-Xy!"
EARLIER: list[tuple[Role, str]] = [
    ("user", f"I use {SECRET} as my password for the allotment society site."),
    ("assistant", "Noted; keep it somewhere safe."),
]
ASKED = "Which vegetables grow well in clay?"


@pytest.fixture
def cloud() -> Iterator[OpenAIStyleServer]:
    with OpenAIStyleServer(
        "groq", models=[FakeModel("cloud-model", 131_072)], api_key=CLOUD_KEY
    ) as server:
        yield server


def set_up(data_dir: Path, cloud: OpenAIStyleServer, *, bundled_model: bool) -> None:
    """Only the cloud company can answer at start; the servers of this computer are closed."""
    nowhere = f"http://127.0.0.1:{free_port()}"
    SettingsStore.in_dir(data_dir).update(
        ollama_url=nowhere,
        lmstudio_url=nowhere,
        llamacpp_url=nowhere,
        vllm_url=nowhere,
        companies=("groq",),
        base_urls={"groq": cloud.base_url},
        bundled_model=bundled_model,
    )


def bundled_chat(services: AppServices) -> str:
    chat = services.store.create_chat(title="Allotment", model_key=BUNDLED_KEY)
    for role, text in EARLIER:
        services.store.append_message(chat.id, role, text, model_key=BUNDLED_KEY)
    return chat.id


def assert_cloud_got_nothing_of_the_chat(cloud: OpenAIStyleServer) -> None:
    assert cloud.chat_requests == [], "a bundled chat's turn went to the cloud"
    # The only thing the cloud may have been asked is its list of models (the picker's).
    assert {(r.method, r.path.rstrip("/")) for r in cloud.requests} <= {("GET", "/v1/models")}
    said = b"".join(r.body + r.path.encode() + r.query.encode() for r in cloud.requests).decode()
    assert SECRET not in said and ASKED not in said


async def test_a_bundled_chat_that_cannot_start_says_so_and_sends_nothing_to_the_cloud(
    data_dir: Path, cloud: OpenAIStyleServer
) -> None:
    set_up(data_dir, cloud, bundled_model=False)
    keys = SessionSecrets()
    keys.set("groq", CLOUD_KEY)
    services = build_services(data_dir, mock=False, secrets=keys)
    try:
        await services.refresh_models()
        assert [m.key for m in services.catalogue.ready_models()] == ["groq/cloud-model"]
        chat_id = bundled_chat(services)
        conv = services.conversation(chat_id)
        assert services.store.get_chat(chat_id).model_key == BUNDLED_KEY  # type: ignore[union-attr]
        events = [e async for e in conv.turn(ASKED)]
        chat = services.store.get_chat(chat_id)
        messages = services.store.messages(chat_id)
    finally:
        await services.aclose()

    assert_cloud_got_nothing_of_the_chat(cloud)
    assert chat is not None and chat.model_key == BUNDLED_KEY
    assert not any(isinstance(e, TextDelta) for e in events)
    (problem,) = [e.problem for e in events if isinstance(e, Problem)]
    assert problem.kind is ProblemKind.MODEL_MISSING
    assert problem.message == (
        "SmolLM2 135M is not running, so this chat sent nothing; start it, or pick another "
        "model for this chat."
    )
    assert "turned off in Conch's settings" in problem.detail
    # The message is kept, with the card after it, for when the person has chosen.
    assert [(m.role, m.text) for m in messages[-2:]] == [("user", ASKED), ("assistant", "")]
    assert messages[-1].problem == problem and messages[-1].model_key == BUNDLED_KEY


async def test_a_bundled_chat_starts_its_own_model_though_a_cloud_model_is_ready(
    data_dir: Path, cloud: OpenAIStyleServer
) -> None:
    set_up(data_dir, cloud, bundled_model=True)
    keys = SessionSecrets()
    keys.set("groq", CLOUD_KEY)
    services = build_services(data_dir, mock=False, secrets=keys, runtime=fake_runtime(data_dir))
    try:
        await services.refresh_models()
        assert starts(data_dir) == []  # a cloud model is ready: nothing was started at start
        chat_id = bundled_chat(services)
        conv = services.conversation(chat_id)
        events = [e async for e in conv.turn(ASKED)]
        chat = services.store.get_chat(chat_id)
    finally:
        await services.aclose()

    assert_cloud_got_nothing_of_the_chat(cloud)
    assert len(starts(data_dir)) == 1  # started for the chat that needed it
    assert not any(isinstance(e, Problem) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Red, green and blue."
    assert chat is not None and chat.model_key == BUNDLED_KEY


def bundled_chat_in(data_dir: Path) -> str:
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.create_chat(title="Allotment", model_key=BUNDLED_KEY)
        for role, text in EARLIER:
            store.append_message(chat.id, role, text, model_key=BUNDLED_KEY)
    finally:
        store.close()
    return chat.id


def conch_ask(data_dir: Path, home: Path, chat_id: str) -> subprocess.CompletedProcess[str]:
    """The real ``conch ask`` on the chat, with the cloud's key in the company's own variable."""
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
        OLLAMA_HOST=f"127.0.0.1:{free_port()}",
        GROQ_API_KEY=CLOUD_KEY,
    )
    env[bundled.IDLE_ENV] = "0"  # a runtime this starts stops with the command
    command = ["ask", "--data-dir", str(data_dir), "--chat", chat_id, ASKED]
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def chat_model(data_dir: Path, chat_id: str) -> str:
    store = ChatStore.in_dir(data_dir)
    try:
        chat = store.get_chat(chat_id)
    finally:
        store.close()
    assert chat is not None
    return chat.model_key


def test_conch_ask_on_a_bundled_chat_says_it_cannot_start_and_sends_nothing(
    data_dir: Path, cloud: OpenAIStyleServer, tmp_path: Path
) -> None:
    set_up(data_dir, cloud, bundled_model=False)
    chat_id = bundled_chat_in(data_dir)

    result = conch_ask(data_dir, tmp_path / "home", chat_id)

    assert result.returncode == FAILED, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("SmolLM2 135M is not running, so this chat sent nothing;")
    assert_cloud_got_nothing_of_the_chat(cloud)
    # The cloud was set up: its models were listed, so the key was there to fall back on.
    assert cloud.requests_to("/models")
    assert chat_model(data_dir, chat_id) == BUNDLED_KEY


@pytest.mark.bundled
@pytest.mark.skipif(not bundled.available(), reason="the bundled model is not installed here")
def test_conch_ask_on_a_bundled_chat_starts_the_bundled_model_though_a_cloud_key_is_set(
    data_dir: Path, cloud: OpenAIStyleServer, tmp_path: Path
) -> None:
    set_up(data_dir, cloud, bundled_model=True)
    chat_id = bundled_chat_in(data_dir)

    result = conch_ask(data_dir, tmp_path / "home", chat_id)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()  # the bundled model's answer
    assert_cloud_got_nothing_of_the_chat(cloud)
    assert cloud.requests_to("/models")
    assert chat_model(data_dir, chat_id) == BUNDLED_KEY
    assert not (data_dir / bundled.PID_NAME).exists()  # it stopped with the command


async def test_a_chat_whose_company_is_no_longer_set_up_is_not_moved_to_another(
    data_dir: Path, cloud: OpenAIStyleServer
) -> None:
    set_up(data_dir, cloud, bundled_model=False)
    keys = SessionSecrets()
    keys.set("groq", CLOUD_KEY)  # OpenAI's key was removed; another company is ready
    services = build_services(data_dir, mock=False, secrets=keys)
    try:
        await services.refresh_models()
        chat = services.store.create_chat(title="Taxes", model_key="openai/gpt-4.1")
        services.store.append_message(chat.id, "user", EARLIER[0][1], model_key="openai/gpt-4.1")
        events = [e async for e in services.conversation(chat.id).turn(ASKED)]
        after = services.store.get_chat(chat.id)
    finally:
        await services.aclose()

    assert_cloud_got_nothing_of_the_chat(cloud)
    assert after is not None and after.model_key == "openai/gpt-4.1"
    (problem,) = [e.problem for e in events if isinstance(e, Problem)]
    assert problem.message == (
        "gpt-4.1 is not set up in Conch now, so this chat sent nothing; set it up in Settings, "
        "or pick another model for this chat."
    )
    assert problem.detail == "OpenAI is not set up in Settings"
