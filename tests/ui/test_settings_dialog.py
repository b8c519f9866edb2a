"""Settings: keys go to the keyring only, Test lists models (or says what went wrong in words),
the theme restyles at once, Memory and Health pages show the real stores."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.secrets import NO_KEYRING, SERVICE, KeyringSecrets, SecretStore, SessionSecrets
from app.settings import SettingsStore
from tests.fakes.anthropic_server import AnthropicServer, FakeClaude
from tests.fakes.http import LoopbackServer, Recorded, Reply, free_port
from tests.fakes.memory_keyring import MemoryKeyring, installed
from tests.fakes.openai_server import FakeModel, OpenAIStyleServer
from ui.settings.settings_dialog import SettingsDialog
from ui.theme import ThemeManager, load_theme

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")

KEY = "sk-test-7c1f0e9a2b4d"


class HangingServer(LoopbackServer):
    """Accepts the connection and then says nothing until the test ends."""

    def handle(self, request: Recorded) -> Reply:
        reply = Reply.json({"object": "list", "data": []})
        reply.head_delay = 3600.0  # the server's stop() cuts this short at teardown
        return reply


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    with installed(MemoryKeyring()) as backend:
        yield backend


@pytest.fixture
def stores(data_dir: Path) -> Iterator[tuple[SettingsStore, MemoryBook, HealthLog]]:
    settings = SettingsStore.in_dir(data_dir)
    book = MemoryBook.in_dir(data_dir)
    health = HealthLog.in_dir(data_dir)
    yield settings, book, health
    book.close()
    health.close()


@pytest.fixture
def restore_app(qapp: QApplication) -> Iterator[QApplication]:
    sheet, palette, style = qapp.styleSheet(), qapp.palette(), qapp.style().name()
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


def make_dialog(
    qtbot: QtBot,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
    secrets: SecretStore,
    **kwargs: object,
) -> SettingsDialog:
    settings, book, health = stores
    dialog = SettingsDialog(
        settings=settings,
        secrets=secrets,
        memories=book,
        health=health,
        **kwargs,  # type: ignore[arg-type]
    )
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def enter_text(qtbot: QtBot, dialog: SettingsDialog, provider: str, text: str) -> None:
    field = dialog.rows[provider].field
    field.clear()
    qtbot.keyClicks(field, text)
    qtbot.keyClick(field, Qt.Key.Key_Return)  # Return ends editing, as leaving the field does


def result_text(dialog: SettingsDialog, provider: str) -> str:
    return dialog.rows[provider].result.text()


def wait_for_result(qtbot: QtBot, dialog: SettingsDialog, provider: str) -> str:
    qtbot.waitUntil(lambda: not dialog.running_tests(), timeout=15_000)
    return result_text(dialog, provider)


# --- keys -------------------------------------------------------------------------------------


def test_a_key_goes_to_the_keyring_and_never_into_a_file(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
    data_dir: Path,
) -> None:
    secrets = KeyringSecrets()
    assert secrets.warning == ""
    dialog = make_dialog(qtbot, stores, secrets)
    with qtbot.waitSignal(dialog.providers_changed) as changed:
        enter_text(qtbot, dialog, "openai", KEY)
    assert changed.args == ["openai"]
    assert memory_keyring.entries == {(SERVICE, "openai"): KEY}
    row = dialog.rows["openai"]
    assert row.field.text() == ""  # the key is not left in (or put back into) the field
    assert "Saved" in row.field.placeholderText()
    assert row.forget_button.isVisibleTo(dialog)

    # Other settings are saved too, and still nothing anywhere in the data dir holds the key.
    dialog.theme_buttons["dark"].click()
    enter_text(qtbot, dialog, "ollama", "http://127.0.0.1:11500")
    assert (data_dir / "settings.json").is_file()
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_forgetting_a_key_removes_it_from_the_keyring(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    memory_keyring.entries[(SERVICE, "mistral")] = KEY
    dialog = make_dialog(qtbot, stores, KeyringSecrets())
    row = dialog.rows["mistral"]
    assert row.forget_button.isVisibleTo(dialog)
    qtbot.mouseClick(row.forget_button, Qt.MouseButton.LeftButton)
    assert memory_keyring.entries == {}
    assert row.field.placeholderText() == "Paste an API key"


def test_a_session_only_store_says_keys_last_until_quitting(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets(NO_KEYRING))
    dialog.show_page("providers")
    assert dialog.session_warning.isVisibleTo(dialog)
    assert dialog.session_warning.text() == NO_KEYRING


def test_no_warning_when_the_keyring_works(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    dialog = make_dialog(qtbot, stores, KeyringSecrets())
    assert not dialog.session_warning.isVisibleTo(dialog)


# --- testing a provider -----------------------------------------------------------------------


def test_test_lists_a_local_servers_models(
    qtbot: QtBot,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    models = [FakeModel(f"model-{n}", window=4096) for n in range(3)]
    with OpenAIStyleServer("lmstudio", models=models) as server:
        dialog = make_dialog(qtbot, stores, SessionSecrets())
        enter_text(qtbot, dialog, "lmstudio", server.url)
        qtbot.mouseClick(dialog.rows["lmstudio"].test_button, Qt.MouseButton.LeftButton)
        assert result_text(dialog, "lmstudio") == "Testing…"
        assert wait_for_result(qtbot, dialog, "lmstudio") == "Found 3 models"
        assert server.requests, "the test asked the server itself"
    assert stores[0].settings.lmstudio_url == server.url  # the address was saved as well
    assert dialog.rows["lmstudio"].test_button.isEnabled()


def test_test_pressed_from_the_keyboard_keeps_the_focus_on_its_own_row(
    qtbot: QtBot,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    with OpenAIStyleServer("lmstudio", models=[FakeModel("model-0", window=4096)]) as server:
        dialog = make_dialog(qtbot, stores, SessionSecrets())
        dialog.activateWindow()
        qtbot.waitActive(dialog)
        enter_text(qtbot, dialog, "lmstudio", server.url)
        row, next_row = dialog.rows["lmstudio"], dialog.rows["llamacpp"]
        row.test_button.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(row.test_button.hasFocus)
        qtbot.keyClick(row.test_button, Qt.Key.Key_Space)
        # While it runs, what the person types goes to this server's own address, never into
        # the next server's (where the focus used to land when the button went grey).
        assert result_text(dialog, "lmstudio") == "Testing…"
        assert not next_row.field.hasFocus()
        assert row.field.hasFocus()
        assert wait_for_result(qtbot, dialog, "lmstudio") == "Found 1 model"
        # Done: the focus is back on Test, where the person left it.
        qtbot.waitUntil(row.test_button.hasFocus)
    assert stores[0].settings.llamacpp_url != server.url


def test_test_sends_the_key_to_a_company_and_counts_its_models(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    models = [FakeModel(f"gpt-fake-{n}", window=128_000) for n in range(12)]
    with OpenAIStyleServer("openai", models=models, api_key=KEY) as server:
        stores[0].update(base_urls={"openai": server.base_url})
        dialog = make_dialog(qtbot, stores, KeyringSecrets())
        dialog.rows["openai"].field.setText(KEY)  # typed, then Test straight away
        qtbot.mouseClick(dialog.rows["openai"].test_button, Qt.MouseButton.LeftButton)
        assert wait_for_result(qtbot, dialog, "openai") == "Found 12 models"
        assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert memory_keyring.entries[(SERVICE, "openai")] == KEY


def test_anthropic_is_tested_through_its_own_adapter(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    with AnthropicServer(models=[FakeClaude("claude-fake")], api_key=KEY) as server:
        stores[0].update(base_urls={"anthropic": server.url})
        memory_keyring.entries[(SERVICE, "anthropic")] = KEY
        dialog = make_dialog(qtbot, stores, KeyringSecrets())
        dialog.test("anthropic")
        assert wait_for_result(qtbot, dialog, "anthropic") == "Found 1 model"


def test_a_refused_key_is_explained_and_never_shown(
    qtbot: QtBot,
    memory_keyring: MemoryKeyring,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    with OpenAIStyleServer("openai", api_key="sk-the-right-one") as server:
        stores[0].update(base_urls={"openai": server.base_url})
        dialog = make_dialog(qtbot, stores, KeyringSecrets())
        enter_text(qtbot, dialog, "openai", KEY)
        dialog.test("openai")
        text = wait_for_result(qtbot, dialog, "openai")
    assert text.startswith("The server did not accept the API key.")
    assert KEY not in text
    assert dialog.rows["openai"].result.property("state") == "error"


def test_a_company_without_a_key_asks_for_one(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    dialog.test("groq")
    assert wait_for_result(qtbot, dialog, "groq") == "Add an API key first."


def test_a_server_that_is_not_running_is_explained_in_words(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    enter_text(qtbot, dialog, "ollama", f"http://127.0.0.1:{free_port()}")
    dialog.test("ollama")
    text = wait_for_result(qtbot, dialog, "ollama")
    assert text.startswith("Conch could not reach the model's server.")
    assert dialog.isVisible()


def test_a_hanging_server_times_out_in_words_without_freezing_the_dialog(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    with HangingServer() as server:
        dialog = make_dialog(qtbot, stores, SessionSecrets(), test_timeout=0.5)
        enter_text(qtbot, dialog, "llamacpp", server.url)
        dialog.test("llamacpp")
        # The window keeps working while the test waits: another page opens at once.
        dialog.show_page("appearance")
        assert dialog.current_page() == "appearance"
        # The server never answers: a result at all means the test gave up, as it should.
        text = wait_for_result(qtbot, dialog, "llamacpp")
    assert text.startswith("No answer within 0.5 seconds")
    assert dialog.rows["llamacpp"].test_button.isEnabled()


def test_closing_the_dialog_cancels_a_running_test(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    with HangingServer() as server:
        dialog = make_dialog(qtbot, stores, SessionSecrets(), test_timeout=60)
        enter_text(qtbot, dialog, "lmstudio", server.url)
        task = dialog.test("lmstudio")
        assert task is not None
        qtbot.waitUntil(lambda: bool(server.requests))  # the test is under way
        assert not task.done()
        dialog.close()
        qtbot.waitUntil(task.done, timeout=5000)
        assert task.cancelled()


def test_a_bad_address_is_refused_before_saving(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    enter_text(qtbot, dialog, "ollama", "ftp://not a server")
    assert stores[0].settings.ollama_url == ""
    assert "address looks like" in result_text(dialog, "ollama")
    assert dialog.test("ollama") is None


@pytest.mark.allow_log("conch.ui.settings")  # a tester's bug is logged
def test_a_tester_that_raises_anything_is_reported_not_raised(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    async def broken(name: str, address: str, key: str | None) -> list[object]:
        await asyncio.sleep(0)
        raise RuntimeError("the adapter blew up")

    dialog = make_dialog(qtbot, stores, SessionSecrets(), tester=broken)
    dialog.test("lmstudio")
    text = wait_for_result(qtbot, dialog, "lmstudio")
    assert text == "The test failed (RuntimeError: the adapter blew up)."
    assert dialog.rows["lmstudio"].test_button.isEnabled()


def test_a_test_that_cannot_find_the_server_says_so_without_an_errno(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    # The real adapter, through the system's resolver: ".invalid" never names a computer.
    dialog = make_dialog(qtbot, stores, SessionSecrets(), test_timeout=60.0)
    enter_text(qtbot, dialog, "lmstudio", "http://nosuchhost.invalid:1234")
    dialog.test("lmstudio")
    qtbot.waitUntil(lambda: not dialog.running_tests(), timeout=90_000)  # a hang guard
    text = result_text(dialog, "lmstudio")
    assert "Errno" not in text and "[" not in text
    assert "check the address" in text


def test_an_os_error_from_a_tester_is_said_in_words(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    async def refused(name: str, address: str, key: str | None) -> list[object]:
        await asyncio.sleep(0)
        raise ConnectionRefusedError(111, "Connection refused")

    dialog = make_dialog(qtbot, stores, SessionSecrets(), tester=refused)
    dialog.test("ollama")
    text = wait_for_result(qtbot, dialog, "ollama")
    assert text == "The test failed: nothing answers at that address; is the server running?"


# --- memory, appearance, health ---------------------------------------------------------------


def test_remember_automatically_is_saved_and_the_memories_page_opens(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog], data_dir: Path
) -> None:
    book = stores[1]
    book.add("Has a dog called Pip.")
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    dialog.show_page("memory")
    dialog.remember.click()
    assert SettingsStore.in_dir(data_dir).settings.remember_automatically is False
    assert not dialog.memories_page.remember.isChecked()  # the same setting, shown twice
    qtbot.mouseClick(dialog.open_memories_button, Qt.MouseButton.LeftButton)
    assert dialog.current_page() == "memories"
    assert [r.memory.text for r in dialog.memories_page.rows()] == ["Has a dog called Pip."]


def test_choosing_dark_restyles_the_app_at_once_and_is_saved(
    qtbot: QtBot,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
    restore_app: QApplication,
    data_dir: Path,
) -> None:
    theme = ThemeManager(restore_app, "light")
    try:
        dialog = make_dialog(qtbot, stores, SessionSecrets(), theme=theme)
        dialog.show_page("appearance")
        light = restore_app.styleSheet()
        dialog.theme_buttons["dark"].click()
        assert theme.scheme == "dark"
        assert restore_app.styleSheet() != light
        assert restore_app.styleSheet() == load_theme("dark").stylesheet
        assert SettingsStore.in_dir(data_dir).settings.theme == "dark"
        dialog.theme_buttons["system"].click()
        assert theme.choice == "system"
        assert stores[0].settings.theme == "system"
    finally:
        theme.close()


def test_health_lists_notes_newest_first_with_time_and_model(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    health = stores[2]
    health.add("unreachable", "LM Studio could not be reached.")
    health.add("summary-failed", "The summary was a refusal; turns were dropped anyway.", "qwen")
    health.add("healed", "Folded and sent again.", model="llama3.2:3b", window=8192)
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    dialog.show_page("health")
    rows = dialog.health_page.rows()
    assert [r.text.text() for r in rows] == [
        "Folded and sent again.",
        "The summary was a refusal; turns were dropped anyway.",
        "LM Studio could not be reached.",
    ]
    assert [r.topic.text() for r in rows] == ["Healed", "Summary failed", "Unreachable"]
    assert "llama3.2:3b" in rows[0].meta.text()
    assert "window 8,192 tokens" in rows[0].meta.text()
    assert rows[0].meta.text().startswith("Today ")


def test_health_shows_new_notes_when_opened_again(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    dialog.show_page("health")
    assert dialog.health_page.rows() == []
    assert dialog.health_page.empty.isVisibleTo(dialog)
    stores[2].add("healed", "Folded and sent again.")
    dialog.show_page("providers")
    dialog.show_page("health")
    assert len(dialog.health_page.rows()) == 1


def test_show_page_opens_each_page(
    qtbot: QtBot, stores: tuple[SettingsStore, MemoryBook, HealthLog]
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    for page in ("health", "appearance", "memory", "providers", "memories"):
        dialog.show_page(page)
        assert dialog.current_page() == page
    dialog.show_page("no-such-page")
    assert dialog.current_page() == "providers"
    assert not dialog.isModal()


def test_both_pages_with_the_remember_switch_say_the_same_about_what_waits(
    qtbot: QtBot,
    stores: tuple[SettingsStore, MemoryBook, HealthLog],
) -> None:
    dialog = make_dialog(qtbot, stores, SessionSecrets())
    said: list[str] = []
    for page in ("memory", "memories"):
        dialog.show_page(page)
        shown = dialog.stack.currentWidget()
        assert shown is not None
        said += [
            label.text()
            for label in shown.findChildren(QLabel)
            if label.isVisibleTo(dialog) and label.text().startswith("When this is off")
        ]
    # One sentence, on both pages, naming everything that makes memories wait: pasted text
    # too (README: "Text you paste, however short, is treated like a tool result").
    assert len(said) == 2 and said[0] == said[1]
    assert all(kind in said[0] for kind in ("a file", "a tool result", "a web page", "pasted"))
