"""Engines that keep their own chat (Claude Code, Codex) and ACP programs handed one each turn."""
