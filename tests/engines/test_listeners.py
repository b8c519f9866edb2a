"""Listeners of a change: each is told, one's bug stops neither the others nor the change."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.settings import SettingsStore
from engines.listeners import Listeners


@pytest.mark.allow_error_log
def test_a_failing_listener_is_logged_and_the_others_are_still_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[str] = []
    changes: Listeners[[str]] = Listeners("a test listener")

    def broken(_text: str) -> None:
        raise RuntimeError("bug")

    changes.add(broken)
    changes.add(heard.append)
    with caplog.at_level(logging.ERROR, logger="conch"):
        changes.tell("ready")
    assert heard == ["ready"]
    assert "a test listener failed" in caplog.text


def test_a_stopped_listener_hears_nothing_more_and_may_stop_while_it_is_told() -> None:
    heard: list[str] = []
    changes: Listeners[[str]] = Listeners("a test listener")

    def once(text: str) -> None:
        heard.append(text)
        stop_once()

    stop_once = changes.add(once)
    stop_other = changes.add(lambda text: heard.append(text.upper()))
    changes.tell("a")
    assert heard == ["a", "A"]  # the one stopping itself did not make the next one miss it
    stop_other()
    stop_other()  # twice is fine
    changes.tell("b")
    assert heard == ["a", "A"]


@pytest.mark.allow_error_log
def test_settings_are_saved_even_when_a_listener_fails(tmp_path: Path) -> None:
    store = SettingsStore.in_dir(tmp_path)

    def broken(_settings: object) -> None:
        raise RuntimeError("bug")

    store.on_change(broken)
    store.update(theme="dark")
    assert SettingsStore.in_dir(tmp_path).settings.theme == "dark"
