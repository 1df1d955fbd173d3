"""A filesystem-style MCP server over stdio for tests, shaped like npm ``mcp-server-filesystem``: it serves the
directory named on its command line, its tools take absolute paths, and a path outside that directory is an error
result ("Access denied"). Tools: ``write_file(path, content)``, ``read_file(path)``, ``list_directory(path)``."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

ROOT = Path(sys.argv[1]).resolve()
server = MCPServer("fs-test")


def _inside(path: str) -> Path:
    p = Path(path)
    if not p.is_absolute() or not p.resolve().is_relative_to(ROOT):
        raise ToolError(f"Access denied - path outside allowed directories: {path} not in {ROOT}")
    return p.resolve()


@server.tool()
def write_file(path: str, content: str) -> str:
    """Write a text file (an absolute path inside the served directory)."""
    target = _inside(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"Successfully wrote to {path}"


@server.tool()
def read_file(path: str) -> str:
    """Read a text file (an absolute path inside the served directory)."""
    return _inside(path).read_text(encoding="utf-8")


@server.tool()
def list_directory(path: str) -> str:
    """List a directory (an absolute path inside the served directory)."""
    return "\n".join(sorted(p.name for p in _inside(path).iterdir()))


if __name__ == "__main__":
    server.run()
