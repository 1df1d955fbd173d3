"""Serving a cassette as a real MCP server over stdio or Streamable HTTP (``mcp-gym serve --replay``,
``python -m mcp_gym.cassette``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import anyio

from mcp_gym.cassette.reader import Cassette
from mcp_gym.cassette.replay import ReplayServer

__all__ = ["serve_replay", "main"]

def serve_replay(
    path: str | os.PathLike[str],
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    strict: bool = False,
    json_response: bool = False,
) -> None:
    """Serve a cassette as a real MCP server over ``stdio`` or Streamable ``http`` (``http://host:port/mcp``)
    until stopped (``mcp-gym serve --replay PATH``). Over HTTP, ``port=0`` takes any free port, and once the server
    listens it says ``serving PATH on http://HOST:PORT/mcp`` (the port it got) on stderr."""
    import logging

    server = ReplayServer(Cassette.load(path), strict=strict)
    logging.getLogger("mcp").setLevel(logging.WARNING)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async def run() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run)
    elif transport in ("http", "streamable-http"):
        from mcp_gym.serverkit import serve_http, transport_security

        serve_http(server.streamable_http_app(json_response=json_response, host=host,
                                                transport_security=transport_security(host)), host, port,
                   ready=lambda bound: print(f"serving {path} on http://{host}:{bound}/mcp", file=sys.stderr,
                                             flush=True))
    else:
        raise ValueError(f"unknown transport {transport!r}: use 'stdio' or 'http'")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mcp_gym.cassette PATH [--transport stdio|http] [--port N] [--strict]``: serve a cassette."""
    p = argparse.ArgumentParser(prog="python -m mcp_gym.cassette", description="Serve an MCP cassette (replay).")
    p.add_argument("path", help="cassette file (.jsonl)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: any free one, named on stderr)")
    p.add_argument("--strict", action="store_true", help="JSON-RPC error for unrecorded tool calls")
    p.add_argument("--json-response", action="store_true", help="plain JSON responses over HTTP (no SSE)")
    a = p.parse_args(argv)
    serve_replay(a.path, a.transport, a.host, a.port, strict=a.strict, json_response=a.json_response)
