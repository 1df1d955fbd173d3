"""A hosted MCP server for tests: an ``MCPServer`` over Streamable HTTP (``/mcp``) or the older HTTP+SSE transport
(``/sse``), behind an ASGI middleware that answers 401 unless ``Authorization: Bearer <token>`` is sent.

``python tests/servers/hosted.py --port N [--transport http|sse] [--token T]`` (no ``--token``: no check). Every
request's ``Authorization`` header is appended to ``--log`` if given, so a test can see what the client sent.
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.mcpserver import MCPServer


def build(transport: str) -> MCPServer:
    mcp = MCPServer("hosted", log_level="WARNING")

    @mcp.tool()
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return mcp


class BearerCheck:
    """ASGI middleware: 401 (with ``WWW-Authenticate: Bearer``) unless the request carries the bearer token."""

    def __init__(self, app, token: str | None, log: str | None) -> None:
        self.app, self.token, self.log = app, token, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        got = dict(scope["headers"]).get(b"authorization", b"").decode()
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{scope['method']} {scope['path']} {got}\n")
        if self.token is not None and got != f"Bearer {self.token}":
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})
            return None
        return await self.app(scope, receive, send)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--transport", choices=["http", "sse"], default="http")
    p.add_argument("--token")
    p.add_argument("--log")
    a = p.parse_args()
    mcp = build(a.transport)
    app = mcp.streamable_http_app() if a.transport == "http" else mcp.sse_app()
    uvicorn.run(BearerCheck(app, a.token, a.log), host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
