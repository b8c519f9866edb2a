"""The tools a chat may use, under the names the model sees, and their specs as sent.

A tool keeps its own name when no other connected server has one like it and the name fits
every provider (letters, digits, ``_`` and ``-``, at most 64). Otherwise it is named after its
server too ("github_search", "gitlab_search"), so two servers' tools never collide. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

NAME_MAX = 64  # OpenAI's and Anthropic's limit on a function name
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# JSON Schema keywords that tell the model nothing it needs ("title" is what Pydantic-made
# schemas add to every field; "$schema" some providers reject).
_UNSENT_KEYWORDS = frozenset({"$schema", "title", "$id", "$comment"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONES = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


@dataclass(frozen=True)
class ServerTool:
    """One tool of one server. ``exposed`` is the name the model calls it by."""

    server: str  # the server's id
    name: str  # the tool's own name on its server
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)  # the input JSON schema
    exposed: str = ""

    @property
    def call_name(self) -> str:
        return self.exposed or self.name


def clean_schema(schema: Any) -> Any:
    """``schema`` without the keywords that cost tokens and tell the model nothing.

    Only keywords are dropped: a *property* called "title" stays.
    """
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _UNSENT_KEYWORDS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {k: clean_schema(v) for k, v in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [clean_schema(v) for v in value]
        elif key in _SCHEMA_ONES:
            out[key] = (
                [clean_schema(v) for v in value] if isinstance(value, list) else clean_schema(value)
            )
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out:
        out["properties"] = {}  # some providers insist on it
    return out


def tool_spec(tool: ServerTool) -> dict[str, Any]:
    """The neutral ``{name, description, parameters}`` each provider adapter wraps in its shape."""
    parameters = clean_schema(dict(tool.parameters)) if tool.parameters else {}
    if not parameters:
        parameters = {"type": "object", "properties": {}}
    return {"name": tool.call_name, "description": tool.description, "parameters": parameters}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "tool"


def _fit(name: str, taken: set[str]) -> str:
    name = name[:NAME_MAX]
    candidate, n = name, 2
    while candidate in taken:
        suffix = f"_{n}"
        candidate = name[: NAME_MAX - len(suffix)] + suffix
        n += 1
    return candidate


@dataclass(frozen=True)
class Catalogue:
    """The tools of the servers a chat may use, each with the name the model sees."""

    tools: tuple[ServerTool, ...] = ()

    def find(self, name: str) -> ServerTool | None:
        for tool in self.tools:
            if tool.call_name == name:
                return tool
        return None

    def names(self) -> tuple[str, ...]:
        return tuple(t.call_name for t in self.tools)

    def specs(self) -> tuple[dict[str, Any], ...]:
        """Every tool's full spec: what is sent when the window is not small."""
        return tuple(tool_spec(t) for t in self.tools)

    def __len__(self) -> int:
        return len(self.tools)


def build_catalogue(listings: Iterable[tuple[str, Sequence[ServerTool]]]) -> Catalogue:
    """One catalogue from each server's listing (in the order given, each server's tools in its
    own order), with names that are unique and valid for every provider."""
    listings = [(server, list(tools)) for server, tools in listings]
    counts: dict[str, int] = {}
    for _server, tools in listings:
        for tool in tools:
            counts[tool.name] = counts.get(tool.name, 0) + 1
    taken: set[str] = set()
    out: list[ServerTool] = []
    for server, tools in listings:
        for tool in tools:
            if counts[tool.name] == 1 and _NAME_OK.match(tool.name):
                wanted = tool.name
            else:
                wanted = f"{_safe(server)}_{_safe(tool.name)}"
            exposed = _fit(wanted, taken)
            taken.add(exposed)
            out.append(replace(tool, server=server, exposed=exposed))
    return Catalogue(tuple(out))
