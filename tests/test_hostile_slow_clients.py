"""Round 8: a client of an HTTP server mcp-gym runs (``serve-openenv``, ``serve --transport http``, a cassette's
server: all through :func:`mcp_gym.serverkit.serve_http`) that sends its request a byte at a time (slowloris), or
opens connections and sends nothing, is disconnected within the server's bound while a normal client is still served;
past the connection cap a new connection is answered 503. Before, uvicorn bounded only the idle time between
requests, restarted at every byte, so such a client held its connection (and a file descriptor) for good."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time

import pytest

SERVER = """
import asyncio, sys
from mcp_gym.serverkit import serve_http

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/slow":  # a long answer (a tool call, an SSE stream): the request was whole, it stays open
        await asyncio.sleep(3 * float(sys.argv[1]))
    body = b"ok " + body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

serve_http(app, "127.0.0.1", 0, read_timeout=float(sys.argv[1]), max_connections=int(sys.argv[2]),
           ready=lambda port: print(port, flush=True))
"""
HANG = 60.0
"""A generous bound on a hang: the server's own bound is 1 s; nothing here measures how fast it acts."""


@pytest.fixture
def server() -> object:
    def start(read_timeout: float, max_connections: int = 1024) -> int:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(read_timeout), str(max_connections)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server prints its port once it listens (or dies: an empty line)
        assert line.strip().isdigit(), proc.communicate(timeout=HANG)
        return int(line)

    procs: list[subprocess.Popen[str]] = []
    yield start
    for proc in procs:
        proc.kill()
        proc.communicate(timeout=HANG)


def _get(port: int, body: bytes = b"hi", path: str = "/") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as s:
        s.sendall(b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
                  % (path.encode(), len(body), body))
        return _read_all(s)


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def _closed_by_server(s: socket.socket, trickle: bytes) -> bool:
    """Send ``trickle`` a byte at a time (a slowloris client) until the server closes the connection or
    :data:`HANG` passes; whether the server closed it."""
    deadline = time.monotonic() + HANG
    s.settimeout(0.05)
    i = 0
    while time.monotonic() < deadline:
        try:
            if s.recv(1) == b"":
                return True
        except TimeoutError:
            pass
        except ConnectionError:
            return True
        try:
            s.send(trickle[i % len(trickle):i % len(trickle) + 1])
        except (BrokenPipeError, ConnectionError):
            return True
        i += 1
    return False


@pytest.mark.parametrize("stall", ["headers", "body", "nothing", "second request"])
def test_a_slow_client_is_disconnected_while_a_normal_one_is_served(server, stall: str) -> None:
    port = server(1.0)
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as slow:
        if stall == "body":  # whole headers, then the body a byte at a time without end
            slow.sendall(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100000000\r\n\r\n")
        elif stall == "second request":  # a keep-alive connection's first request is answered; its second trickles
            slow.sendall(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            slow.settimeout(HANG)
            assert slow.recv(65536).startswith(b"HTTP/1.1 200")
        assert _get(port).endswith(b"ok hi")  # a normal client is served meanwhile
        if stall == "nothing":
            slow.settimeout(HANG)
            with contextlib.suppress(ConnectionError):
                assert slow.recv(1) == b""
        else:
            assert _closed_by_server(slow, b"x" if stall == "body" else b"GET / HTTP/1.1\r\nx-pad: " + b"a" * 100)
    assert _get(port, b"x" * 200_000).endswith(b"ok " + b"x" * 200_000)  # and after; a body sent at once is fine


def test_a_whole_request_answered_slowly_is_not_cut(server) -> None:
    """The bound is on receiving the request, never on the answer: an answer that takes three times the bound (a long
    tool call, an SSE stream) arrives whole, on a fresh connection and on a kept-alive one."""
    port = server(1.0)
    assert _get(port, path="/slow").endswith(b"ok hi")
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as s:
        for _ in range(2):
            s.sendall(b"POST /slow HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\nhi")
            answer = b""
            while not answer.endswith(b"ok hi"):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk


def test_connections_past_the_cap_are_answered_503(server) -> None:
    port = server(HANG, max_connections=4)
    held = [socket.create_connection(("127.0.0.1", port), timeout=HANG) for _ in range(4)]
    try:
        extra = _get(port)
        assert extra.startswith(b"HTTP/1.1 503") and extra.endswith(b"too many open connections"), extra
    finally:
        for s in held:
            s.close()
    for _ in range(int(HANG * 10)):  # the server sees the held connections go
        if _get(port).endswith(b"ok hi"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the server never served again after the held connections closed")
