"""A stdio MCP server for tests whose one tool answers differently on every call: ``token()`` returns a fresh random
id (a check built on it is flaky by construction)."""

from __future__ import annotations

import uuid

from mcp.server.mcpserver import MCPServer

server = MCPServer("clock-test")


@server.tool()
def token() -> str:
    """A new random id."""
    return uuid.uuid4().hex


if __name__ == "__main__":
    server.run()
