"""A stdio MCP server for tests whose one tool answers differently on every call: ``token()`` returns a fresh random
id (a check built on it is flaky by construction). The id is letters only: a hex id's digits can form a run that
looks like a Unix time (``1`` and nine digits between letters: about 1 id in 230), which the task generator rightly
takes for the clock ("check not derivable"), not for a flaky value."""

from __future__ import annotations

import uuid

from mcp.server.mcpserver import MCPServer

_LETTERS = str.maketrans("0123456789", "ghijklmnop")
server = MCPServer("clock-test")


@server.tool()
def token() -> str:
    """A new random id (32 letters)."""
    return uuid.uuid4().hex.translate(_LETTERS)


if __name__ == "__main__":
    server.run()
