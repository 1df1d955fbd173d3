"""A hosted MCP server for tests: an ``MCPServer`` over Streamable HTTP (``/mcp``) or the older HTTP+SSE transport
(``/sse``), behind an ASGI middleware that answers 401 unless ``Authorization: Bearer <token>`` is sent.

``python tests/servers/hosted.py --port N [--transport http|sse] [--token T] [--client ID:SECRET]`` (no ``--token``:
no check; ``--port 0``: any free port), saying ``serving on http://127.0.0.1:PORT/mcp`` (or ``/sse``) on stderr.
Every request's ``Authorization`` header is appended to ``--log`` if given, so a test can see what the client sent.
``--client`` adds a minimal OAuth 2.0 authorization server on the same origin (protected-resource and
authorization-server metadata, a ``/token`` endpoint that grants ``client_credentials`` for that client with HTTP
Basic authentication, issuing the ``--token``), and the 401 points at the metadata as the MCP authorization spec says.
``--auth-server URL`` makes the protected-resource metadata name ``URL`` as the authorization server instead (a
hostile server sending the client's credentials elsewhere); ``--token-endpoint URL`` makes the same-origin
authorization server's metadata name ``URL`` as its token endpoint.
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import sys
from urllib.parse import parse_qs

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

    def __init__(self, app, token: str | None, log: str | None, client: str | None, base: str, mcp_path: str,
                 auth_server: str | None = None, token_endpoint: str | None = None) -> None:
        self.app, self.token, self.log, self.client, self.base, self.mcp_path = app, token, log, client, base, mcp_path
        self.auth_server, self.token_endpoint = auth_server or base, token_endpoint or base + "/token"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        got = dict(scope["headers"]).get(b"authorization", b"").decode()
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{scope['method']} {scope['path']} {got}\n")
        if self.client is not None and (scope["path"].startswith("/.well-known/") or scope["path"] == "/token"):
            return await self.oauth(scope, receive, send, got)
        if self.token is not None and got != f"Bearer {self.token}":
            challenge = b"Bearer"
            if self.client is not None:
                challenge += f' resource_metadata="{self.base}/.well-known/oauth-protected-resource"'.encode()
            await reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", challenge)])
            return None
        return await self.app(scope, receive, send)

    async def oauth(self, scope, receive, send, authorization: str) -> None:
        path = scope["path"]
        if path.startswith("/.well-known/oauth-protected-resource"):
            return await reply(send, 200, {"resource": self.base + self.mcp_path,
                                           "authorization_servers": [self.auth_server]})
        if path.startswith("/.well-known/oauth-authorization-server"):
            return await reply(send, 200, {
                "issuer": self.base, "authorization_endpoint": self.base + "/authorize",
                "token_endpoint": self.token_endpoint, "response_types_supported": ["code"],
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"]})
        if path == "/token" and scope["method"] == "POST":
            body = b""
            while True:
                msg = await receive()
                body += msg.get("body", b"")
                if not msg.get("more_body"):
                    break
            form = parse_qs(body.decode())
            basic = "Basic " + base64.b64encode(self.client.encode()).decode()
            if form.get("grant_type") != ["client_credentials"] or authorization != basic:
                return await reply(send, 401, {"error": "invalid_client"})
            return await reply(send, 200, {"access_token": self.token, "token_type": "Bearer", "expires_in": 3600})
        return await reply(send, 404, {"error": "not found"})


async def reply(send, status: int, body: dict, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *(headers or [])]})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--transport", choices=["http", "sse"], default="http")
    p.add_argument("--token")
    p.add_argument("--log")
    p.add_argument("--client", help="CLIENT_ID:SECRET of the one OAuth client (client_credentials grant)")
    p.add_argument("--auth-server", help="the authorization server the protected-resource metadata names")
    p.add_argument("--token-endpoint", help="the token endpoint the authorization server metadata names")
    a = p.parse_args()
    mcp = build(a.transport)
    app = mcp.streamable_http_app() if a.transport == "http" else mcp.sse_app()
    sock = socket.socket()
    sock.bind(("127.0.0.1", a.port))  # 0: any free port, said below
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    mcp_path = "/mcp" if a.transport == "http" else "/sse"
    print(f"serving on {base}{mcp_path}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(BearerCheck(app, a.token, a.log, a.client, base, mcp_path, a.auth_server,
                                              a.token_endpoint), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
