"""The import paths other code and checks rely on (DESIGN §3) still work after the transcript-
keeping engine moved from ``engines.api`` to ``engines.context``."""

from __future__ import annotations

import importlib

import engines.providers.too_long
import engines.window


def test_the_contract_paths_give_the_same_functions() -> None:
    context = importlib.import_module("engines.api.context")
    too_long = importlib.import_module("engines.api.too_long")
    assert context.estimate_tokens is engines.window.estimate_tokens
    assert context.budget is engines.window.budget
    assert too_long.is_too_long is engines.providers.too_long.is_too_long
    assert too_long.window_in is engines.providers.too_long.window_in
    assert context.estimate_tokens("a" * 400) == 100
    assert too_long.window_in("maximum context length is 8192 tokens") == 8192
