"""Constrained output: the request fields that make a server on this computer answer in JSON.

A small local model asked for "a JSON array of strings" rarely writes one; the servers can
force the shape with a grammar built from a JSON schema. Company APIs are left alone (their
strict modes want an object at the root, and their models follow the instruction anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS

LIST_OF_STRINGS: Mapping[str, Any] = {"type": "array", "items": {"type": "string"}}

# llama-cpp-python (the bundled runtime) and llama-server both read a schema inside a
# json_object response format.
_RESPONSE_FORMAT_ROWS = frozenset({ROWS["local"].name, ROWS["llamacpp"].name})


def constrained_output(provider: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Fields for ``ChatRequest.extra`` asking ``provider`` for JSON matching ``schema``;
    empty where the provider has no such switch Conch trusts."""
    if provider == OllamaAdapter.name:
        return {"format": dict(schema)}
    if provider in _RESPONSE_FORMAT_ROWS:
        return {"response_format": {"type": "json_object", "schema": dict(schema)}}
    return {}
