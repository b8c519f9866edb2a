"""Tools: MCP servers, the tool list a chat sends, and the context rules for tool results.

``config`` (settings and the mcpServers import), ``catalogue``, ``rules`` and ``lean`` are pure
and cheap to import; ``servers`` and ``stdio`` run the servers and load the ``mcp`` SDK only
when a server starts.
"""
