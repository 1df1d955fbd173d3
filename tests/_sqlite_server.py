"""A small MCP server over stdio with one tool, ``execute(sql)``, on the SQLite database named on its command line
(the stateful server of the sqlite grader's test)."""

from __future__ import annotations

import sqlite3
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("sqlite-test")


@server.tool()
def execute(sql: str) -> str:
    """Run one SQL statement and commit; returns the rows as text."""
    with sqlite3.connect(sys.argv[1]) as con:
        rows = con.execute(sql).fetchall()
    return repr(rows)


if __name__ == "__main__":
    server.run()
