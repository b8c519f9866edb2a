"""Agents added by command, and Zed's ``agent_servers`` read into them."""

from __future__ import annotations

import sys

from engines.programs.agents import agent_command, import_agents, make_agent
from engines.programs.catalogue import program_models
from engines.tools.config import SecretRef

ZED_SETTINGS = """// Zed settings
{
  "theme": "One Dark",
  "agent_servers": {
    "claude": {"env": {"CLAUDE_CODE_EXECUTABLE": "/opt/claude"}},
    "Codex ACP": {
      "type": "custom",
      "command": "codex-acp",
      "args": [],
      "env": {"OPENAI_API_KEY": "sk-proj-abcdefghijklmnopqrstuvwx", "RUST_LOG": "info"},
    },
    /* an agent being written */
    "My Agent": {"command": "node", "args": ["~/agent/index.js", "--acp"]},
    "From the registry": {"type": "registry"},
  },
}
"""


def test_zed_agent_servers_become_agents_with_secrets_in_the_keyring() -> None:
    got = import_agents(ZED_SETTINGS)
    assert [(a.name, a.command) for a in got.agents] == [
        ("Codex ACP", "codex-acp"),
        ("My Agent", "node"),
    ]
    codex, mine = got.agents
    assert codex.args == () and codex.env["RUST_LOG"] == "info"
    # The key is a keyring entry, not a setting.
    ref = codex.env["OPENAI_API_KEY"]
    assert isinstance(ref, SecretRef)
    assert got.secrets == {ref.secret: "sk-proj-abcdefghijklmnopqrstuvwx"}
    assert mine.args == ("~/agent/index.js", "--acp")  # as given: nothing added or removed
    assert codex.key == "agent-codex-acp" and mine.key == "agent-my-agent"
    # Zed's own agents and registry entries have no command: said, not silently dropped.
    assert len(got.problems) == 2
    assert "“claude”" in got.problems[0] and "Zed's own agents" in got.problems[0]
    assert "“From the registry”" in got.problems[1]


def test_the_agent_servers_object_alone_is_read_and_ids_stay_unique() -> None:
    got = import_agents('"agent_servers": {"Agent": {"command": "a"}}', taken_ids={"agent"})
    assert [a.id for a in got.agents] == ["agent-2"]
    alone = import_agents('{"Agent": {"command": "a"}, "Other": {"command": "b", "args": ["x"]}}')
    assert [a.name for a in alone.agents] == ["Agent", "Other"] and not alone.problems


def test_text_that_is_not_json_is_one_sentence() -> None:
    got = import_agents('{"agent_servers": {"A": {"command": "a"}')
    assert not got.agents
    (problem,) = got.problems
    assert problem.startswith("This is not valid JSON") and problem.endswith("paste it again.")
    assert import_agents("").problems[0].startswith("There is nothing to import")
    assert import_agents('{"theme": "x"}').problems[0].startswith("No agents found")


def test_an_added_agent_starts_with_its_secrets_read_back() -> None:
    agent, secrets = make_agent(
        "Tester", "tester", ["--token", "abc123"], {"TESTER_TOKEN": "t-1", "MODE": "fast"}
    )
    assert isinstance(agent.args[1], SecretRef) and isinstance(agent.env["TESTER_TOKEN"], SecretRef)
    assert agent.env["MODE"] == "fast"
    command, env = agent_command(agent, secrets.get)
    assert command == ("tester", "--token", "abc123")
    assert env == {"TESTER_TOKEN": "t-1", "MODE": "fast"}


def test_added_agents_are_listed_after_the_programs() -> None:
    found, _ = make_agent("Here", sys.executable, [], {})
    gone, _ = make_agent("Gone", "conch-no-such-agent", [], {}, taken={found.id})
    listed = program_models({}, [found, gone])
    assert [m.label for m in listed[-2:]] == ["Here", "Gone"]
    here, missing = listed[-2:]
    assert here.key == f"programs/{found.key}" and here.ready
    assert not missing.ready and "Settings → Programs" in missing.status
