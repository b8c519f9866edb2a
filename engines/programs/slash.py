"""A program's own slash commands, as the composer and the palette offer them.

An ACP agent lists its commands (``available_commands_update``); its engine keeps the last
list as ``slash_commands``. A command is typed as ``/<name> [input]`` and goes to the
program as the message itself, as ACP has it: Conch does nothing else with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlashCommand:
    """One of the program's own commands."""

    name: str
    description: str = ""
    hint: str = ""  # what to type after the name, when the program says

    @property
    def text(self) -> str:
        return f"/{self.name}"


def slash_commands_of(engine: object) -> tuple[SlashCommand, ...]:
    """The commands a chat's engine offers (none for an engine that has no such list)."""
    found = getattr(engine, "slash_commands", ())
    return tuple(c for c in found if isinstance(c, SlashCommand))


def matching(commands: tuple[SlashCommand, ...], typed: str) -> list[SlashCommand]:
    """The commands whose ``/name`` starts with what was typed of it (``/`` lists them all)."""
    word = typed.strip().split(" ", 1)[0].lower()
    if not word.startswith("/"):
        return []
    return [c for c in commands if c.text.lower().startswith(word)]
