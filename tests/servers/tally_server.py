"""A stdio MCP server for tests that keeps a running total in its process, as a database on a fixed path keeps its
rows: ``add(amount)`` (not annotated: it changes state) answers ``added``, ``total()`` (read-only) the sum so far.
A task that reads the total is right only until another task's solution adds to it."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("tally-test")
_total = [0]


@server.tool()
def add(amount: int) -> str:
    """Add to the running total."""
    _total[0] += amount
    return "added"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def total() -> str:
    """The running total."""
    return str(_total[0])


if __name__ == "__main__":
    server.run()
