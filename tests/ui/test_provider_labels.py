"""A provider has one name everywhere a person reads it: the Providers page, the model picker's
headings and the adapters' own words (Health notes, errors) all come from the registry."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.health import HealthLog
from app.memories import MemoryBook
from app.providers_config import build_adapters
from app.secrets import SessionSecrets
from app.settings import SettingsStore
from engines.base import ModelInfo
from engines.local.bundled import BundledAdapter
from engines.providers.registry import COMPANIES, LOCAL_SERVERS, PROVIDERS
from tests.waits import HANG_MS, HANG_SECONDS
from ui.chat.model_picker import ModelPicker
from ui.settings.settings_dialog import SettingsDialog

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support")


@pytest.fixture
def dialog(qtbot: QtBot, data_dir: Path) -> Iterator[SettingsDialog]:
    book, health = MemoryBook.in_dir(data_dir), HealthLog.in_dir(data_dir)
    shown = SettingsDialog(
        settings=SettingsStore.in_dir(data_dir),
        secrets=SessionSecrets(),
        memories=book,
        health=health,
    )
    qtbot.addWidget(shown)
    yield shown
    book.close()
    health.close()


def test_the_providers_page_lists_every_server_and_company_by_its_name(
    dialog: SettingsDialog,
) -> None:
    names = {name: row.title.text() for name, row in dialog.rows.items()}
    assert list(names) == [*LOCAL_SERVERS, *COMPANIES]
    assert names == {name: PROVIDERS[name].label for name in names}
    assert dialog.rows["lmstudio"].field.placeholderText() == "http://127.0.0.1:1234"


def test_the_picker_and_the_adapters_use_the_same_names(qtbot: QtBot, data_dir: Path) -> None:
    picker = ModelPicker()
    qtbot.addWidget(picker)
    bundled = ModelInfo(provider="local", id="smollm2", context=8_192, local=True)
    ollama = ModelInfo(provider="ollama", id="llama3", context=32_768, local=True)
    picker.set_models([bundled, ollama], bundled.key)
    assert picker.entries()[0] == "Bundled with Conch" == PROVIDERS["local"].label
    assert "Ollama" in picker.entries()

    secrets = SessionSecrets()
    for name in COMPANIES:
        secrets.set(name, "sk-test")
    setup = build_adapters(SettingsStore.in_dir(data_dir).settings, secrets)
    labels = {a.name: a.label for a in setup.adapters}
    closing = asyncio.get_running_loop().create_task(
        asyncio.wait_for(asyncio.gather(*(a.aclose() for a in setup.adapters)), HANG_SECONDS)
    )
    qtbot.waitUntil(closing.done, timeout=HANG_MS)
    assert labels == {name: PROVIDERS[name].label for name in [*LOCAL_SERVERS, *COMPANIES]}
    assert BundledAdapter.label == PROVIDERS["local"].label
