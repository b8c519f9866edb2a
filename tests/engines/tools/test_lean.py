"""Lean mode: tools on demand for small windows, measured on realistic tool lists."""

from __future__ import annotations

import json

from bench.tools import FETCH, FILESYSTEM, GITHUB, server
from engines.tools.catalogue import Catalogue, build_catalogue
from engines.tools.lean import (
    GET_TOOL_SCHEMA,
    LIST_TOOLS,
    LOADED_MAX,
    answer,
    lean_specs,
    one_line,
)
from engines.tools.rules import tool_list_tokens
from engines.window import budget


def catalogue() -> Catalogue:
    return build_catalogue(
        [
            ("filesystem", server("filesystem", FILESYSTEM, python=False)),
            ("fetch", server("fetch", FETCH, python=True)),
            ("github", server("github", GITHUB, python=False)),
        ]
    )


def test_at_8k_lean_sends_a_tenth_of_what_every_schema_costs_at_most() -> None:
    tools = catalogue()
    b = budget(8_192)
    assert len(tools) == 41
    assert tool_list_tokens(tools.specs()) >= 0.6 * b
    assert tool_list_tokens(lean_specs(tools)) <= 0.1 * b
    # However many schemas the model fetched, lean stays within a tenth of the budget.
    everything = tools.names()
    assert tool_list_tokens(lean_specs(tools, everything)) <= 0.1 * b
    assert [s["name"] for s in lean_specs(tools)] == [LIST_TOOLS, GET_TOOL_SCHEMA]


def test_list_tools_names_each_tool_with_what_it_does_in_a_line() -> None:
    reply = answer(catalogue(), LIST_TOOLS, {})
    assert reply is not None and not reply.error
    lines = reply.text.splitlines()
    assert len(lines) == 41
    assert lines[0] == "read_file: Read the complete contents of a file as text."
    assert "fetch: Fetches a URL from the internet and optionally extracts its" in reply.text
    assert "internet access" not in reply.text  # only the first sentence is listed


def test_a_tool_becomes_callable_after_its_schema_was_fetched() -> None:
    tools = catalogue()
    fetched = answer(tools, GET_TOOL_SCHEMA, {"name": "read_text_file"})
    assert fetched is not None and not fetched.error
    spec = json.loads(fetched.text)
    assert spec["name"] == "read_text_file"
    assert spec["parameters"]["required"] == ["path"]
    assert fetched.loaded == ("read_text_file",)

    sent = [s["name"] for s in lean_specs(tools, fetched.loaded)]
    assert sent == [LIST_TOOLS, GET_TOOL_SCHEMA, "read_text_file"]
    assert answer(tools, "read_text_file", {"path": "/tmp/a"}, fetched.loaded) is None  # run it


def test_a_tool_called_before_its_schema_gets_the_schema_back_and_is_loaded() -> None:
    tools = catalogue()
    reply = answer(tools, "search_repositories", {"q": "conch"})
    assert reply is not None and reply.error
    assert reply.text.startswith("search_repositories was called before its parameters were known")
    assert '"query"' in reply.text
    assert reply.loaded == ("search_repositories",)
    assert answer(tools, "search_repositories", {"query": "conch"}, reply.loaded) is None


def test_only_the_most_recently_fetched_schemas_are_kept() -> None:
    tools = catalogue()
    loaded: tuple[str, ...] = ()
    names = ["get_issue", "get_pull_request", "add_issue_comment", "search_code", "fork_repository"]
    for name in names:
        reply = answer(tools, GET_TOOL_SCHEMA, {"name": name}, loaded)
        assert reply is not None
        loaded = reply.loaded
    assert len(loaded) <= LOADED_MAX
    assert loaded[-1] == "fork_repository"
    assert "get_issue" not in loaded
    # A dropped one is simply fetched again when called.
    again = answer(tools, "get_issue", {}, loaded)
    assert again is not None and again.error and again.loaded[-1] == "get_issue"


def test_mistakes_are_answered_in_words() -> None:
    tools = catalogue()
    no_name = answer(tools, GET_TOOL_SCHEMA, {})
    assert no_name is not None and no_name.error and LIST_TOOLS in no_name.text
    unknown = answer(tools, GET_TOOL_SCHEMA, {"name": "read"})
    assert unknown is not None and unknown.error
    assert unknown.text.startswith("There is no tool called “read”.")
    assert answer(tools, "rm_rf", {}) is not None
    assert lean_specs(Catalogue()) == ()
    empty = answer(Catalogue(), LIST_TOOLS, {})
    assert empty is not None and empty.text == "No tools are available in this chat."


def test_one_line_is_the_first_sentence_and_never_too_long() -> None:
    assert one_line("Shows the working tree status") == "Shows the working tree status"
    assert one_line("Read a file. Then more.\nAnd more.") == "Read a file."
    assert len(one_line("word " * 100)) <= 80
