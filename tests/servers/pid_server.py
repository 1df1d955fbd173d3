"""A per-episode MCP server over stdio for the spare-server tests: started as ``pid_server.py WORKSPACE PIDS``, it
writes its process id into the folder ``PIDS`` (one empty file per process, named by the pid) and serves
``write_file(name, content)`` and ``read_file(name)`` on files directly inside ``WORKSPACE``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

(Path(sys.argv[2]) / str(os.getpid())).touch()  # first: a test counting processes sees this one from its start

from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the pid file

WORKSPACE = Path(sys.argv[1]).resolve()
server = MCPServer("pid-test")


@server.tool()
def write_file(name: str, content: str) -> str:
    """Write a text file directly inside the workspace."""
    (WORKSPACE / Path(name).name).write_text(content, encoding="utf-8")
    return f"wrote {name} in {WORKSPACE}"


@server.tool()
def read_file(name: str) -> str:
    """Read a text file directly inside the workspace."""
    return (WORKSPACE / Path(name).name).read_text(encoding="utf-8")


if __name__ == "__main__":
    server.run()
