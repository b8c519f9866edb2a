"""Constrained output: the request fields that make a server on this computer answer in JSON.

A small local model asked for "a JSON array of strings" rarely writes one; the servers can
force the shape with a grammar built from a JSON schema. Each server reads the schema from its
own field:

- Ollama: ``format`` holds the schema.
- llama.cpp's server (the bundled runtime and llama-server): ``response_format`` of type
  ``json_object`` with the schema beside it (it reads ``json_schema`` too).
- LM Studio and vLLM: ``response_format`` of type ``json_schema``, OpenAI's form, whose schema
  has an object at the root: a list is sent wrapped as ``{"memories": [...]}``, which
  ``app.learning.parse_memories`` reads as well.

Company APIs are left alone (their strict modes differ, and their models follow the
instruction anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engines.providers.ollama import OllamaAdapter
from engines.providers.openai import ROWS

# What learning asks for: a few short sentences. Tiny on purpose: the bounds stop a small model
# that would otherwise write one string for ever, and end the list after the most it may keep.
LIST_OF_STRINGS: Mapping[str, Any] = {
    "type": "array",
    "items": {"type": "string", "minLength": 8, "maxLength": 200},
    "maxItems": 8,
}
WRAPPED_KEY = "memories"  # the key a list is sent under where the root must be an object

_JSON_OBJECT_ROWS = frozenset({ROWS["local"].name, ROWS["llamacpp"].name})
_JSON_SCHEMA_ROWS = frozenset({ROWS["lmstudio"].name, ROWS["vllm"].name})


def _object_rooted(schema: Mapping[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "object":
        return dict(schema)
    return {
        "type": "object",
        "properties": {WRAPPED_KEY: dict(schema)},
        "required": [WRAPPED_KEY],
        "additionalProperties": False,
    }


def constrained_output(provider: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Fields for ``ChatRequest.extra`` asking ``provider`` for JSON matching ``schema``;
    empty where the provider has no such switch Conch trusts."""
    if provider == OllamaAdapter.name:
        return {"format": dict(schema)}
    if provider in _JSON_OBJECT_ROWS:
        return {"response_format": {"type": "json_object", "schema": dict(schema)}}
    if provider in _JSON_SCHEMA_ROWS:
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": WRAPPED_KEY,
                    "strict": True,
                    "schema": _object_rooted(schema),
                },
            }
        }
    return {}
