"""A small stdio MCP server that, like PyPI ``mcp-server-sqlite``, reports a failure as an ordinary result
(``isError`` false, the failure in the text): ``read_query`` refuses anything but a ``SELECT`` with
``Error: Only SELECT queries are allowed``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("error-text")


@server.tool()
def read_query(query: str) -> str:
    """Run a SELECT query; the count of rows of table ``t`` is 3."""
    if not query.strip().upper().startswith("SELECT"):
        return "Error: Only SELECT queries are allowed"
    return "3"


if __name__ == "__main__":
    server.run()
