"""A stdio MCP server for the close tests: started as ``peer_exit_server.py FOLDER NAME PEER``, it serves ``ping``;
when its stdin closes it writes ``FOLDER/NAME.eof``, waits (20 s at most) for ``FOLDER/PEER.eof``, and if that came,
writes ``FOLDER/NAME.clean`` and exits. Two of them both write ``.clean`` only when they are told to stop together:
one told after the other has exited waits in vain, and its client terminates it first."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

FOLDER, NAME, PEER = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
server = MCPServer("peer-exit-test")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    server.run()
    (FOLDER / f"{NAME}.eof").touch()
    deadline = time.monotonic() + 20.0
    while not (FOLDER / f"{PEER}.eof").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    if (FOLDER / f"{PEER}.eof").exists():
        (FOLDER / f"{NAME}.clean").touch()
