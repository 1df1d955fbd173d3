"""A small MCP server over stdio that calls out with the user's API key, as API clients do: its one tool,
``call_api()``, sends ``GET {base}/status`` with ``Authorization: Bearer $API_KEY``, where ``base`` is
``$CALLOUT_BASE_URL`` or else ``$API_BASE``, through any proxy the environment names (urllib reads ``http_proxy``)."""

from __future__ import annotations

import os
import urllib.request

from mcp.server.mcpserver import MCPServer

server = MCPServer("callout-test")


@server.tool()
def call_api() -> str:
    """Ask the configured API for its status (with the user's key)."""
    base = os.environ.get("CALLOUT_BASE_URL") or os.environ["API_BASE"]
    request = urllib.request.Request(base.rstrip("/") + "/status",
                                     headers={"Authorization": f"Bearer {os.environ.get('API_KEY', '')}"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.read().decode()


if __name__ == "__main__":
    server.run()
