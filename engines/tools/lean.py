"""Tools on demand for small windows (lean mode, 8K and below) and for tool lists too big to send.

Forty tools' schemas take most of an 8K model's budget, and a server with 500 tools would take
more than a 32K model's whole window, so a lean chat is not sent them (``use_lean`` decides,
for the engine, the system prompt, the meter and the conversation alike). It gets
two small tools instead: ``list_tools`` (each tool's name and what it does, in a line) and
``get_tool_schema`` (one tool's full spec). A tool whose schema the model fetched is sent in
full from then on, so the model calls it like any other; the most recently fetched are, up to
``LOADED_MAX`` tools and ``LOADED_TOKENS`` tokens. A model that calls a tool it never fetched
gets the schema back and is asked to call again, which costs one round instead of two.

The chat keeps ``loaded`` (the names fetched) between turns; everything here is pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engines.tools.catalogue import Catalogue, tool_spec
from engines.tools.rules import tool_list_tokens, unknown_tool
from engines.window import LEAN_WINDOW, budget

LIST_TOOLS = "list_tools"
GET_TOOL_SCHEMA = "get_tool_schema"
LOADED_MAX = 4  # fetched schemas sent at most, the most recent first
LOADED_TOKENS = 480  # and at most this many tokens of them (the newest is always sent)
LINE_CHARS = 80  # a tool's description in the list is cut to its first sentence, at most this

LIST_TOOLS_SPEC: dict[str, Any] = {
    "name": LIST_TOOLS,
    "description": "List the tools you can use, one line each. Call it when a task needs a tool.",
    "parameters": {"type": "object", "properties": {}},
}
GET_TOOL_SCHEMA_SPEC: dict[str, Any] = {
    "name": GET_TOOL_SCHEMA,
    "description": "Get one tool's parameters. Then call that tool by its name.",
    "parameters": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}
META = (LIST_TOOLS, GET_TOOL_SCHEMA)
TOOLS_SHARE = 10  # percent of the budget the full tool list may take before it goes on demand


def use_lean(window: int, full_schema_tokens: int = 0) -> bool:
    """Whether a chat on a model with ``window`` tokens is lean: the short prompts, and tools
    on demand. It is when the window is small (``LEAN_WINDOW`` or less), or when the full
    tool list (``full_schema_tokens``, every schema as it would be sent) would take more than
    ``TOOLS_SHARE`` percent of the budget, whatever the window. The one place this is decided."""
    if window <= LEAN_WINDOW:
        return True
    return full_schema_tokens * 100 > TOOLS_SHARE * budget(window)


def lean_for(window: int, catalogue: Catalogue) -> bool:
    """``use_lean`` for a chat whose tools are ``catalogue`` (each schema weighed as sent)."""
    return use_lean(window, tool_list_tokens(catalogue.specs()) if len(catalogue) else 0)


def is_meta(name: str) -> bool:
    return name in META


def one_line(description: str) -> str:
    """The first sentence of a description, on one line, at most ``LINE_CHARS``."""
    text = " ".join(description.split())
    m = re.search(r"(?<=[.!?])\s", text)
    if m:
        text = text[: m.start()]
    if len(text) > LINE_CHARS:
        text = text[: LINE_CHARS - 1].rstrip() + "…"
    return text


def tool_lines(catalogue: Catalogue) -> str:
    """``list_tools``' answer: "name: what it does", a line per tool."""
    if not len(catalogue):
        return "No tools are available in this chat."
    return "\n".join(
        f"{t.call_name}: {one_line(t.description)}" if t.description.strip() else t.call_name
        for t in catalogue.tools
    )


def sent_loaded(catalogue: Catalogue, loaded: Sequence[str]) -> tuple[str, ...]:
    """Which fetched tools are sent in full: the most recent, up to ``LOADED_MAX`` and
    ``LOADED_TOKENS`` (the newest always, however big), oldest first."""
    kept: list[str] = []
    tokens = 0
    for name in reversed(loaded):
        tool = catalogue.find(name)
        if tool is None or name in kept:
            continue
        cost = tool_list_tokens([tool_spec(tool)])
        if kept and (len(kept) >= LOADED_MAX or tokens + cost > LOADED_TOKENS):
            break
        kept.append(name)
        tokens += cost
    return tuple(reversed(kept))


def lean_specs(catalogue: Catalogue, loaded: Sequence[str] = ()) -> tuple[dict[str, Any], ...]:
    """The tool list a lean chat sends: the two small tools, then the fetched ones in full."""
    if not len(catalogue):
        return ()
    specs = [LIST_TOOLS_SPEC, GET_TOOL_SCHEMA_SPEC]
    for name in sent_loaded(catalogue, loaded):
        tool = catalogue.find(name)
        assert tool is not None
        specs.append(tool_spec(tool))
    return tuple(specs)


def _load(catalogue: Catalogue, loaded: Sequence[str], name: str) -> tuple[str, ...]:
    """``loaded`` with ``name`` as the newest, trimmed to what is sent."""
    return sent_loaded(catalogue, [*(n for n in loaded if n != name), name])


def _schema_text(catalogue: Catalogue, name: str) -> str:
    tool = catalogue.find(name)
    assert tool is not None
    return json.dumps(tool_spec(tool), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class LeanReply:
    """The answer to a call in lean mode that Conch gives itself, without running a tool."""

    text: str
    loaded: tuple[str, ...]
    error: bool = False


def answer(
    catalogue: Catalogue, name: str, arguments: Mapping[str, Any], loaded: Sequence[str] = ()
) -> LeanReply | None:
    """Conch's own answer to a lean chat's tool call, or None when the tool is to be run.

    ``list_tools`` and ``get_tool_schema`` are answered here; so is a real tool called before
    its schema was fetched (with that schema). A loaded tool returns None: run it.
    """
    kept = tuple(loaded)
    if name == LIST_TOOLS:
        return LeanReply(tool_lines(catalogue), kept)
    if name == GET_TOOL_SCHEMA:
        wanted = arguments.get("name")
        if not isinstance(wanted, str) or not wanted.strip():
            return LeanReply(
                f"Pass the tool's name, for example {GET_TOOL_SCHEMA}(name=…). "
                f"{LIST_TOOLS} gives the names.",
                kept,
                error=True,
            )
        wanted = wanted.strip()
        if catalogue.find(wanted) is None:
            return LeanReply(unknown_tool(wanted, catalogue.names()), kept, error=True)
        return LeanReply(_schema_text(catalogue, wanted), _load(catalogue, kept, wanted))
    if catalogue.find(name) is None:
        return LeanReply(unknown_tool(name, catalogue.names()), kept, error=True)
    if name in sent_loaded(catalogue, kept):
        return None
    return LeanReply(
        f"{name} was called before its parameters were known. Here they are; call {name} "
        f"again with arguments that fit them.\n{_schema_text(catalogue, name)}",
        _load(catalogue, kept, name),
        error=True,
    )
