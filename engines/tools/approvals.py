"""What "Always for this tool" allows: one tool of one server, as that server is defined now.

An approval is kept under the server's identity (``config.server_identity``: what it runs or
reaches) and the tool's own name on it. So when a chat's tools move to another server that has
a tool of the same name, or a server's command, arguments or address change, the person is
asked again. An approval kept under a tool's name alone (as Conch once did) matches nothing
and asks once more, which is the safe way round.

``conch ask --allow-tools NAME`` is different: the person names tools for that one run, on the
servers configured then, so those are kept by the name the model calls them (``by_name``).
Nothing here is written to disk; a chat's approvals last as long as the chat is open.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from engines.tools.catalogue import ServerTool
from engines.tools.config import HttpServer, StdioServer, server_identity

_NAMED = "*"  # the server part of a ``by_name`` key: any server


def approval_key(identity: str, tool: str) -> str:
    """The key of an approval of ``tool`` (its own name on the server) on the server whose
    identity is ``identity``."""
    return f"{identity}/{tool}"


def by_name(call_name: str) -> str:
    """The key of ``--allow-tools NAME``: the tool the model calls ``NAME``, on any server."""
    return f"{_NAMED}/{call_name}"


def identity_of(runner: Any, server_id: str) -> str:
    """The identity of the server ``server_id`` among ``runner``'s servers (each has ``id``
    and ``config``: ``ToolServers`` and the app's settings-backed runner). A runner that does
    not list its servers (a test's stand-in) is taken at its word: the id is the identity."""
    servers: Iterable[Any] = runner if isinstance(runner, Iterable) else ()
    for server in servers:
        config = getattr(server, "config", None)
        if str(getattr(server, "id", "")) == server_id and isinstance(
            config, StdioServer | HttpServer
        ):
            return server_identity(config)
    return f"id:{server_id}"


def key_for(runner: Any, tool: ServerTool) -> str:
    """The key an "Always for this tool" on ``tool`` is kept under."""
    return approval_key(identity_of(runner, tool.server), tool.name)


def allowed(always: Collection[str], runner: Any, tool: ServerTool) -> bool:
    """Whether ``tool`` runs without asking: approved on this very server, or named on the
    command line."""
    return key_for(runner, tool) in always or by_name(tool.call_name) in always
