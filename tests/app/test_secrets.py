"""API keys live in the keyring only; without one they last until Conch quits, with a warning.
The CLI also reads each company's usual environment variable, and never stores it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import keyring
import keyring.errors
import pytest

from app.cli import main
from app.logs import LOG_NAME, configure_logging
from app.providers_config import company_names
from app.secrets import (
    KEY_ENV_VARS,
    KEYRING_TOPIC,
    NO_KEYRING,
    SERVICE,
    EnvironmentKeys,
    KeyringSecrets,
    SessionSecrets,
    open_secrets,
)
from app.services import build_services
from tests.fakes.anthropic_server import AnthropicServer, FakeClaude
from tests.fakes.http import free_port
from tests.fakes.memory_keyring import MemoryKeyring, installed
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer, Script


def _files_holding(folder: Path, secret: str) -> dict[str, bool]:
    """Every file under ``folder`` (by name, its folder too) → whether it holds ``secret``."""
    out: dict[str, bool] = {}
    for path in folder.rglob("*"):
        if path.is_file():
            found = secret.encode() in path.read_bytes()
            out[path.name] = found
            out[path.parent.name] = out.get(path.parent.name, False) or found
    return out


class BrokenKeyring(MemoryKeyring):
    """Looks fine until used, like a Secret Service with no D-Bus session."""

    def get_password(self, service: str, username: str) -> str | None:
        raise keyring.errors.InitError("no D-Bus session")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise keyring.errors.KeyringLocked("locked")


def test_keys_go_to_the_keyring_under_conch_by_provider() -> None:
    backend = MemoryKeyring()
    secrets = KeyringSecrets(backend)
    secrets.set("openai", "  sk-test-1234567890abcdef  ")
    assert backend.entries == {(SERVICE, "openai"): "sk-test-1234567890abcdef"}
    assert secrets.get("openai") == "sk-test-1234567890abcdef"
    assert secrets.warning == ""
    # A second store on the same keyring (the next run) sees the key.
    assert KeyringSecrets(backend).get("openai") == "sk-test-1234567890abcdef"
    secrets.delete("openai")
    secrets.delete("openai")  # deleting what is not there is fine
    assert secrets.get("openai") is None


def test_setting_an_empty_key_removes_it() -> None:
    backend = MemoryKeyring()
    secrets = KeyringSecrets(backend)
    secrets.set("groq", "gsk_abc")
    secrets.set("groq", "   ")
    assert secrets.get("groq") is None
    assert backend.entries == {}


def test_null_keyring_falls_back_to_memory_with_a_warning() -> None:
    # tests/conftest.py makes the null backend the default, as on a headless box.
    secrets = open_secrets()
    assert secrets.warning == NO_KEYRING
    secrets.set("anthropic", "sk-ant-abc")
    assert secrets.get("anthropic") == "sk-ant-abc"
    assert "sk-ant-abc" not in repr(secrets)


def test_fail_keyring_falls_back_too() -> None:
    from keyring.backends import fail

    secrets = KeyringSecrets(fail.Keyring())
    assert secrets.warning == NO_KEYRING
    secrets.set("openai", "sk-x")
    assert secrets.get("openai") == "sk-x"


def test_a_keyring_that_breaks_when_used_falls_back_on_first_use() -> None:
    secrets = KeyringSecrets(BrokenKeyring())
    assert secrets.warning == ""
    assert secrets.get("openai") is None
    assert secrets.warning == NO_KEYRING
    secrets.set("openai", "sk-y")
    assert secrets.get("openai") == "sk-y"


async def test_no_keyring_is_one_log_line_and_one_health_note_not_a_warning(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The suite's null keyring, as on a headless box; the window's logging, stderr included.
    undo = configure_logging(data_dir)
    try:
        services = build_services(data_dir, mock=False)
        try:
            assert services.secrets.warning == NO_KEYRING
            assert services.secrets.get("openai") is None
            services.secrets.set("openai", "sk-kept-in-memory")
            assert services.secrets.get("openai") == "sk-kept-in-memory"
            notes = services.health.notes(topic=KEYRING_TOPIC)
            assert [n.text for n in notes] == [NO_KEYRING]
        finally:
            await services.aclose()
        assert NO_KEYRING.startswith("API keys cannot be saved: no system keyring")
        # The next start on the same machine: still no keyring, and Health says so once.
        again = build_services(data_dir, mock=False)
        try:
            assert again.secrets.warning == NO_KEYRING
            assert [n.text for n in again.health.notes(topic=KEYRING_TOPIC)] == [NO_KEYRING]
        finally:
            await again.aclose()
    finally:
        undo()
    assert capsys.readouterr().err == ""  # nothing on stderr
    lines = (data_dir / "logs" / LOG_NAME).read_text(encoding="utf-8").splitlines()
    said = [line for line in lines if "conch.secrets" in line]
    # Each start says it in the log (it is about that run).
    assert len(said) == 2 and all(
        " INFO conch.secrets: no usable system keyring" in x for x in said
    )


def test_session_secrets_forget_on_a_new_run() -> None:
    first = SessionSecrets(NO_KEYRING)
    first.set("openai", "sk-z")
    assert SessionSecrets(NO_KEYRING).get("openai") is None


def test_open_secrets_uses_a_real_backend_when_there_is_one() -> None:
    backend = MemoryKeyring()
    with installed(backend):
        secrets = open_secrets()
        assert secrets.warning == ""
        secrets.set("mistral", "mk-1")
        assert backend.entries[(SERVICE, "mistral")] == "mk-1"


async def test_a_key_used_for_a_real_chat_is_never_written_to_the_data_dir(data_dir: Path) -> None:
    """Add a key, list models, chat with it, save settings: then scan every file in the dir."""
    key = "sk-proj-" + "Qw3rTy9Uiop" * 4
    with OpenAIStyleServer("openai", models=[FakeModel("gpt-fake", 16_000)], api_key=key) as fake:
        (data_dir / "settings.json").write_text(
            json.dumps(
                {
                    "base_urls": {"openai": fake.base_url},
                    "ollama_url": f"http://127.0.0.1:{free_port()}",
                    "lmstudio_url": f"http://127.0.0.1:{free_port()}",
                    "llamacpp_url": f"http://127.0.0.1:{free_port()}",
                    "vllm_url": f"http://127.0.0.1:{free_port()}",
                    "bundled_model": False,
                }
            )
        )
        services = build_services(data_dir, mock=False, secrets=SessionSecrets())
        try:
            models = await services.set_key("openai", key)
            assert [m.key for m in models if m.ready] == ["openai/gpt-fake"]
            chat = services.store.create_chat()
            conv = services.conversation(chat.id)
            events = [e async for e in conv.turn("Hello there.")]
            await conv.aclose()
            assert any(getattr(e, "kind", "") == "done" for e in events)
            services.settings.update(theme="dark", default_model_key="openai/gpt-fake")
        finally:
            await services.aclose()
        # The key went to the server, in the header only.
        assert fake.chat_requests[-1].headers["authorization"] == f"Bearer {key}"
    assert services.secrets.get("openai") == key
    settings_text = (data_dir / "settings.json").read_text(encoding="utf-8")
    assert key not in settings_text
    # Every file Conch wrote, whatever it is: settings, chat log, transcript, health, memories.
    files = _files_holding(data_dir, key)
    assert "api-sessions" in files  # the transcript was written (and holds no key)
    assert [name for name, found in files.items() if found] == []


# --- keys from the environment (conch ask, conch models) -------------------------------------


def test_every_company_has_its_usual_environment_variable() -> None:
    assert set(KEY_ENV_VARS) == set(company_names())
    assert KEY_ENV_VARS["openai"] == ("OPENAI_API_KEY",)
    assert KEY_ENV_VARS["anthropic"] == ("ANTHROPIC_API_KEY",)


def test_the_keyring_wins_and_the_environment_is_never_stored() -> None:
    backend = MemoryKeyring()
    env = {"OPENAI_API_KEY": "sk-env-1", "GROQ_API_KEY": "  ", "GOOGLE_API_KEY": "g-2"}
    keys = EnvironmentKeys(KeyringSecrets(backend), env)
    assert keys.get("openai") == "sk-env-1"
    assert keys.source("openai") == "environment variable OPENAI_API_KEY"
    assert keys.get("groq") is None and keys.source("groq") == ""  # blank is no key
    assert keys.source("google") == "environment variable GOOGLE_API_KEY"
    assert backend.entries == {}  # reading a variable wrote nothing to the keyring
    keys.set("openai", "sk-ring-2")
    assert keys.get("openai") == "sk-ring-2"
    assert keys.source("openai") == "keyring"
    keys.delete("openai")
    assert keys.get("openai") == "sk-env-1"  # the variable is back in use, untouched
    assert "sk-env-1" not in repr(keys)


@pytest.fixture
def no_local_servers(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Settings that keep a CLI run to the fakes; no company variable but the test's own."""
    for names in KEY_ENV_VARS.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{free_port()}")
    return {
        "lmstudio_url": f"http://127.0.0.1:{free_port()}",
        "llamacpp_url": f"http://127.0.0.1:{free_port()}",
        "vllm_url": f"http://127.0.0.1:{free_port()}",
        "bundled_model": False,
    }


def _cli(*args: str) -> tuple[int, str, str]:

    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), stdout=out, stderr=err, stdin=io.StringIO())
    return code, out.getvalue(), err.getvalue()


@pytest.mark.allow_log("conch.secrets")  # the suite's null keyring
def test_conch_models_and_ask_use_the_usual_environment_variables(
    data_dir: Path, no_local_servers: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_key = "sk-proj-" + "EnvKeyOpenAI7" * 3
    claude_key = "sk-ant-" + "EnvKeyClaude9" * 3
    with (
        OpenAIStyleServer(
            "openai",
            models=[FakeModel("gpt-fake", 16_000)],
            api_key=openai_key,
            script=Script(text=["From ", "the environment."]),
        ) as openai_fake,
        AnthropicServer(models=[FakeClaude("claude-fake-1")], api_key=claude_key) as claude_fake,
    ):
        settings = dict(no_local_servers)
        settings["base_urls"] = {"openai": openai_fake.base_url, "anthropic": claude_fake.base_url}
        (data_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
        monkeypatch.setenv("OPENAI_API_KEY", openai_key)
        monkeypatch.setenv("ANTHROPIC_API_KEY", claude_key)

        code, out, err = _cli("models", "--data-dir", str(data_dir))
        assert code == 0, err
        assert "gpt-fake" in out and "claude-fake-1" in out
        assert "OpenAI key: from the environment variable OPENAI_API_KEY" in out
        assert "Anthropic key: from the environment variable ANTHROPIC_API_KEY" in out
        assert openai_key not in out + err and claude_key not in out + err

        code, out, err = _cli("models", "--json", "--data-dir", str(data_dir))
        assert code == 0, err
        rows = {r["id"]: r for r in json.loads(out)}
        assert rows["gpt-fake"]["key_from"] == "environment variable OPENAI_API_KEY"

        code, out, err = _cli(
            "ask", "--model", "openai/gpt-fake", "--data-dir", str(data_dir), "Where from?"
        )
        assert code == 0, err
        assert out == "From the environment.\n"
        assert openai_fake.chat_requests[-1].headers["authorization"] == f"Bearer {openai_key}"

    # Used, never written: no file in the data dir holds either key.
    for key in (openai_key, claude_key):
        assert [name for name, found in _files_holding(data_dir, key).items() if found] == []


@pytest.mark.allow_log("conch.secrets")  # the suite's null keyring
def test_without_a_variable_conch_models_names_no_company(
    data_dir: Path, no_local_servers: dict[str, object]
) -> None:
    (data_dir / "settings.json").write_text(json.dumps(no_local_servers), encoding="utf-8")
    code, out, err = _cli("models", "--data-dir", str(data_dir))
    assert code == 0
    assert "key: from" not in out
    assert "No model is ready" in err
