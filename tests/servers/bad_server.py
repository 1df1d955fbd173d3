"""A misbehaving MCP server for tests: raw newline-delimited JSON-RPC over stdio, no SDK.

It answers ``initialize`` (handshake era, 2025-11-25) and refuses ``server/discover``, so the client falls back to the
handshake at once. What it does wrong is chosen by options:

``--tools JSON``         the raw ``tools`` array it lists (default: one good ``echo`` tool); may be invalid on purpose.
``--pidfile PATH``       write its pid there at start.
``--log PATH``           append each received request's method (one line each) there.
``--list-answers N``     answer only the first N ``tools/list`` requests, then never again (default: all).
``--stderr-mb N``        write N MB of lines to stderr before it reads anything.
``--resources``          declare the resources capability and list one resource, but answer
                         ``resources/templates/list`` (like every other unknown method) with "method not found".
``--modern``             answer ``server/discover`` (2026-07-28 only) instead of refusing it.
``--raw-log PATH``       append each received request line there, as received.
``--listen MODE``        with ``--modern``, declare ``tools.listChanged`` and answer ``subscriptions/listen`` (its id is
                         a string: ``listen-1``): ``refuse`` (method not found) or ``ack`` (acknowledged; the tool
                         ``end_listen`` then ends the stream gracefully, its result sent before the call's answer).

Tools it serves by name (whatever ``--tools`` lists): ``echo`` (``text`` back), ``bad_result`` (a result that is not a
valid ``CallToolResult``), ``big`` (a text of ``mb`` megabytes; ``id_last`` puts the response's ``id`` after the
result), ``change`` (sends ``notifications/tools/list_changed`` first), ``flood`` (``n`` notifications first),
``big_notice`` (a ``mb``-megabyte log notification first), ``die`` (a line on stderr, then exit 3), ``mcp_gym_reset``
(never answers), ``stderr`` (``mb`` megabytes to stderr, then a result), ``garbage`` (a response line that is not
JSON), ``deep`` (structured content nested ``depth`` lists deep), ``surrogate`` (a text with a lone surrogate escape),
``noise`` (``n`` lines of plain text on stdout first), ``stray`` (first, in the same write as the answer, a response
for each id in ``ids``, raw JSON texts of ids no request has, such as ``'"²"'``), ``change_after`` (the answer, then
``notifications/tools/list_changed``, in one write).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ECHO = {"name": "echo", "description": "Echo text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
"""The ``_meta`` key of every frame of a listen stream (2026-07-28): the ``subscriptions/listen`` request's id."""

MODERN = {"resultType": "complete"}
"""What a 2026-07-28 result carries besides its own fields (``--modern``; empty otherwise)."""


def send(obj: dict) -> None:
    if isinstance(obj.get("result"), dict):
        obj["result"] = {**obj["result"], **MODERN}
    sys.stdout.buffer.write(json.dumps(obj).encode() + b"\n")
    sys.stdout.buffer.flush()


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def spew_stderr(mb: float) -> None:
    line = ("e" * 1023 + "\n").encode()
    for _ in range(int(mb * 1024)):
        sys.stderr.buffer.write(line)
    sys.stderr.buffer.write(b"stderr spew done\n")
    sys.stderr.buffer.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default=None)
    ap.add_argument("--pidfile", default=None)
    ap.add_argument("--log", default=None)
    ap.add_argument("--list-answers", type=int, default=-1)
    ap.add_argument("--stderr-mb", type=float, default=0.0)
    ap.add_argument("--resources", action="store_true")
    ap.add_argument("--modern", action="store_true")
    ap.add_argument("--raw-log", default=None)
    ap.add_argument("--listen", choices=["refuse", "ack"], default=None)
    a = ap.parse_args()
    listening: list = []  # the id of the acknowledged listen stream
    if not a.modern:
        MODERN.clear()
    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(str(os.getpid()))
    if a.stderr_mb:
        spew_stderr(a.stderr_mb)
    tools = json.loads(a.tools) if a.tools is not None else [ECHO]
    lists = 0
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None or method is None:
            continue  # a notification or a response
        if a.log:
            with open(a.log, "a") as f:
                f.write(method + "\n")
        if a.raw_log:
            with open(a.raw_log, "ab") as f:
                f.write(raw.rstrip(b"\n") + b"\n")
        if method == "server/discover" and a.modern:
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "supportedVersions": ["2026-07-28"], "resultType": "complete",
                "capabilities": {"tools": {"listChanged": True} if a.listen else {}}}})
        elif method == "subscriptions/listen" and a.listen == "ack":
            listening.append(rid)
            send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
                "notifications": {"toolsListChanged": True}, "_meta": {SUBSCRIPTION_ID: rid}}})
        elif method == "initialize":
            caps: dict = {"tools": {"listChanged": True}, **({"resources": {}} if a.resources else {})}
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": "2025-11-25", "capabilities": caps,
                "serverInfo": {"name": "bad-server", "version": "0.1"}}})
        elif method == "resources/list" and a.resources:
            send({"jsonrpc": "2.0", "id": rid, "result": {"resources": [{"uri": "bad://one", "name": "one"}]}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/list":
            lists += 1
            if a.list_answers < 0 or lists <= a.list_answers:
                cache = {"ttlMs": 0, "cacheScope": "private"} if a.modern else {}
                send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools, **cache}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            args = msg["params"].get("arguments") or {}
            if name == "echo":
                send({"jsonrpc": "2.0", "id": rid, "result": text_result(str(args.get("text", "")))})
            elif name == "bad_result":
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text"}], "isError": "maybe"}})
            elif name == "big":
                text = "x" * int(float(args.get("mb", 1)) * 1_000_000)
                if args.get("id_last"):
                    body = json.dumps({"jsonrpc": "2.0", "result": text_result(text)})
                    sys.stdout.buffer.write(body[:-1].encode() + f', "id": {json.dumps(rid)}}}\n'.encode())
                    sys.stdout.buffer.flush()
                else:
                    send({"jsonrpc": "2.0", "id": rid, "result": text_result(text)})
            elif name == "big_notice":
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": "n" * int(float(args.get("mb", 1)) * 1_000_000)}})
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("after notice")})
            elif name == "change":
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("changed")})
            elif name == "flood":
                note = (json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) + "\n").encode()
                sys.stdout.buffer.write(note * int(args.get("n", 1000)))
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("flooded")})
            elif name == "die":
                sys.stderr.write("dying on purpose\n")
                sys.stderr.flush()
                os._exit(3)
            elif name == "stderr":
                spew_stderr(float(args.get("mb", 1)))
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("spewed")})
            elif name == "garbage":
                head = b'{"jsonrpc": "2.0", "id": ' + json.dumps(rid).encode()
                sys.stdout.buffer.write(head + b', "result": nope}\n')
                sys.stdout.buffer.flush()
            elif name == "deep":  # written by hand: json.dumps itself stops at this process's recursion limit
                depth = int(args.get("depth", 250))
                deep = "[" * depth + '"bottom"' + "]" * depth
                body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {**text_result("deep"),
                                                                         "structuredContent": {"v": None}}})
                sys.stdout.buffer.write(body.replace('{"v": null}', '{"v": ' + deep + "}").encode() + b"\n")
                sys.stdout.buffer.flush()
            elif name == "surrogate":
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("bad \udcff text")})
            elif name == "noise":
                sys.stdout.buffer.write(b"a log line on stdout, not JSON-RPC\n" * int(args.get("n", 1000)))
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("noisy")})
            elif name == "stray":
                strays = b"".join(b'{"jsonrpc": "2.0", "id": ' + raw.encode() + b', "result": ' +
                                  json.dumps(text_result("stray")).encode() + b"}\n" for raw in args.get("ids", []))
                answer = json.dumps({"jsonrpc": "2.0", "id": rid, "result": text_result("answer")}).encode()
                sys.stdout.buffer.write(strays + answer + b"\n")  # one write: the answer shares the chunk
                sys.stdout.buffer.flush()
            elif name == "change_after":  # the answer, then list_changed, in one write: they share a chunk
                answer = json.dumps({"jsonrpc": "2.0", "id": rid, "result": text_result("changed after")})
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                sys.stdout.buffer.write(f"{answer}\n{note}\n".encode())
                sys.stdout.buffer.flush()
            elif name == "end_listen":
                for listen_id in listening:
                    send({"jsonrpc": "2.0", "id": listen_id, "result": {"_meta": {SUBSCRIPTION_ID: listen_id}}})
                listening.clear()
                send({"jsonrpc": "2.0", "id": rid, "result": text_result("ended")})
            elif name == "mcp_gym_reset":
                pass  # never answers
            else:
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"unknown tool {name}"}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    main()
