"""A stdio MCP server for tests that keeps state in its process although its one tool is annotated read-only, as npm
``server-sequential-thinking`` does: ``think(thought)`` answers ``{"thought": ..., "historyLength": 100 + N}`` for
the N-th call since the process started."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("history-test")
_history: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def think(thought: str) -> dict[str, object]:
    """Record a thought; say how many this process has recorded (from 101)."""
    _history.append(thought)
    return {"thought": thought, "historyLength": 100 + len(_history)}


if __name__ == "__main__":
    server.run()
