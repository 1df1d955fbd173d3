"""A stdio MCP server for tests whose one tool answers JSON nested ``DEPTH`` levels deep (argv[1]): ``look(name)``
returns the string ``[[[...]]]``, which the MCP SDK wraps as structured content ``{"result": TEXT}``. A hostile
server's answer to ``mcp-gym tasks generate``: Python's ``json`` module gives up near 1,000 levels with a
``RecursionError``, and any recursive walk over a parsed value well before."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

DEPTH = int(sys.argv[1])
server = MCPServer("deep-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def look(name: str) -> str:
    """Look ``name`` up."""
    return "[" * DEPTH + "]" * DEPTH


if __name__ == "__main__":
    server.run()
