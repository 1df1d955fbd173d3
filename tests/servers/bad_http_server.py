"""A misbehaving MCP server over Streamable HTTP for tests: a raw ASGI app under uvicorn, no SDK.

It answers ``initialize`` (handshake era, 2025-11-25) and refuses ``server/discover`` (JSON-RPC "method not found"), so
the client falls back to the handshake at once; notifications get ``202``, a GET (the client's event stream) ``405``.
``python tests/servers/bad_http_server.py --port N`` serves ``http://127.0.0.1:N/mcp`` (``--port 0``: any free port),
saying ``serving on http://127.0.0.1:N/mcp`` on stderr.

Tools: ``echo`` (``text`` back) and ``huge``: a result whose text is ``mb`` megabytes, streamed in 64 kB chunks at
``rate`` megabytes a second (``0``: as fast as the client reads), as ``application/json`` or, with ``sse``, as one
``text/event-stream`` event; ``length`` sends a ``Content-Length`` header (else the body is chunked). The body is
produced as it is sent, so the server holds 64 kB whatever ``mb`` is. With ``--log PATH`` each ``huge`` answer
appends a line there when it ends: ``sent <bytes> <complete|disconnected>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from typing import Any

import uvicorn

ECHO = {"name": "echo", "description": "Echo text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
HUGE = {"name": "huge", "description": "A very large result, streamed.",
        "inputSchema": {"type": "object", "properties": {
            "mb": {"type": "number"}, "rate": {"type": "number"}, "sse": {"type": "boolean"},
            "length": {"type": "boolean"}}}}
CHUNK = 64 * 1024
LOG: str | None = None


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    if scope["method"] != "POST":
        await reply(send, 405 if scope["method"] == "GET" else 200, b"")
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    msg = json.loads(body)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None or method is None:
        await reply(send, 202, b"")
        return
    if method == "initialize":
        result: Any = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                       "serverInfo": {"name": "bad-http-server", "version": "0.1"}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [ECHO, HUGE]}
    elif method == "tools/call" and msg["params"]["name"] == "echo":
        result = text_result(str((msg["params"].get("arguments") or {}).get("text", "")))
    elif method == "tools/call" and msg["params"]["name"] == "huge":
        await huge(send, receive, rid, msg["params"].get("arguments") or {})
        return
    else:
        answer = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}}
        await reply(send, 200, json.dumps(answer).encode())
        return
    await reply(send, 200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())


async def reply(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def huge(send: Any, receive: Any, rid: Any, args: dict[str, Any]) -> None:
    size, rate, sse = int(float(args.get("mb", 1000)) * 1_000_000), float(args.get("rate", 0)), bool(args.get("sse"))
    head = json.dumps({"jsonrpc": "2.0", "id": rid, "result": text_result("")})
    cut = head.index('"text": ""') + len('"text": "')
    start, end = head[:cut].encode(), head[cut:].encode()
    if sse:
        start, end = b"event: message\ndata: " + start, end + b"\n\n"
    headers = [(b"content-type", b"text/event-stream" if sse else b"application/json")]
    if args.get("length"):
        headers.append((b"content-length", str(len(start) + size + len(end)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": start, "more_body": True})
    chunk = b"x" * CHUNK
    sent = 0
    gone = asyncio.ensure_future(receive())  # completes with http.disconnect when the client closes the connection
    try:
        while sent < size and not gone.done():
            n = min(CHUNK, size - sent)
            await send({"type": "http.response.body", "body": chunk[:n], "more_body": True})
            sent += n
            await asyncio.sleep(n / (rate * 1_000_000) if rate > 0 else 0)
        if not gone.done():
            await send({"type": "http.response.body", "body": end})
    except OSError:
        pass  # the client is gone
    finally:
        if LOG:
            with open(LOG, "a") as f:
                f.write(f"sent {sent} {'complete' if sent >= size and not gone.done() else 'disconnected'}\n")
        gone.cancel()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    global LOG
    LOG = a.log
    sock = socket.socket()
    sock.bind(("127.0.0.1", a.port))  # 0: any free port, said below
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
