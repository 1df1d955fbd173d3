"""A busy Streamable HTTP server is not a dead one: an HTTP timeout fails that request (kind ``timeout``) and the
session stays open, and the sessions of one process keep at most ``max_in_flight`` requests waiting on one server.
A connection that breaks under a request (reset or closed, as when a server's keep-alive timer fires just as the
request arrives) fails that request (kind ``connection_lost``), and the session stays open too.

The server is a real ``MCPServer`` served by uvicorn on 127.0.0.1 in a thread of this process, so the test can stall
its event loop (what a CPU-saturated server looks like from outside: nothing accepted, read or answered) and count the
HTTP requests it holds at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import serve_in_thread, start_http_server, stop_process
from mcp.server.mcpserver import MCPServer

from mcp_gym import MCPEnv
from mcp_gym.client.runtime import default_runtime
from mcp_gym.client.specs import Http

STALL_BOUND = 60.0  # the server's loop is never held longer than this, whatever happens to the test


@dataclass
class Served:
    url: str
    loop: asyncio.AbstractEventLoop
    in_flight: int = 0
    peak: int = 0
    requests: int = 0
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def stall(self) -> None:
        """Hold the server's event loop (until :attr:`release` is set); returns once it is held."""
        self.stalled.clear()
        self.release.clear()

        def hold() -> None:
            self.stalled.set()
            self.release.wait(STALL_BOUND)

        self.loop.call_soon_threadsafe(hold)
        assert self.stalled.wait(STALL_BOUND)


@pytest.fixture()
def served() -> Iterator[Served]:
    srv = MCPServer("busy", log_level="WARNING")

    @srv.tool()
    async def ping() -> str:
        """Answer at once."""
        return "pong"

    @srv.tool()
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    @srv.tool()
    async def hold() -> str:
        """Answer after a moment (so that requests overlap)."""
        await anyio.sleep(0.2)
        return "held"

    inner = srv.streamable_http_app(host="127.0.0.1")
    state = Served("", loop=None)  # type: ignore[arg-type]  # the URL and loop once it serves

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        """The app, counting HTTP requests from arrival to the start of their response."""
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        state.requests += 1
        state.in_flight += 1
        state.peak = max(state.peak, state.in_flight)
        open_ = [True]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and open_[0]:
                open_[0] = False
                state.in_flight -= 1
            await send(message)

        try:
            await inner(scope, receive, sending)
        finally:
            if open_[0]:
                state.in_flight -= 1

    with serve_in_thread(counting) as (port, state.loop):
        state.url = f"http://127.0.0.1:{port}/mcp"
        try:
            yield state
        finally:
            state.release.set()


def test_a_stalled_server_times_the_request_out_and_the_session_survives(served: Served) -> None:
    """While the server's loop is held, a step waits for its answer only ``read_timeout`` seconds and reports kind
    ``timeout`` (it used to read ``server_dead: Connection closed``: the SDK closed the whole session on the HTTP
    timeout). Once the server is free again, the same session answers the next step: nothing reconnected."""
    env = MCPEnv({"busy": Http(served.url, read_timeout=3.0)}, ["Ping."], call_timeout=300.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["busy"]
        _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        assert info["error"] is None
        served.stall()
        try:
            _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        finally:
            served.release.set()
        assert info["error"] is not None
        assert info["error"]["kind"] == "timeout", info["error"]
        assert "read timeout" in info["error"]["message"] and "server is busy" in info["error"]["message"]
        assert conn.status == "ready" and env.host.connections["busy"] is conn
        _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        assert info["error"] is None, info["error"]
        assert info["structured_content"] == {"result": "pong"}
        assert env.host.connections["busy"] is conn and conn.status == "ready"
    finally:
        env.close()


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_sessions_keep_at_most_max_in_flight_requests_on_one_server(served: Served) -> None:
    """12 sessions call a slow tool at once with ``max_in_flight=3``: the server never holds more than 3 of their
    requests (the rest queue in the client, in order), and every call succeeds."""
    n, limit = 12, 3
    results: list[Any] = []

    async def main() -> None:
        envs = [MCPEnv({"busy": Http(served.url, max_in_flight=limit)}, ["Hold."], call_timeout=300.0)
                for _ in range(n)]
        try:
            for i, env in enumerate(envs):
                await env.areset(seed=i)
            served.peak = served.in_flight
            before = served.requests

            async def call(env: MCPEnv) -> None:
                _, _, _, _, info = await env.astep({"tool": "hold", "arguments": {}})
                results.append(info["error"] or info["structured_content"])

            async with anyio.create_task_group() as tg:
                for env in envs:
                    tg.start_soon(call, env)
            assert served.requests - before >= n  # each call reached the server over HTTP
        finally:
            for env in envs:
                await env.aclose()

    default_runtime().call(main)
    assert results == [{"result": "held"}] * n
    assert 1 <= served.peak <= limit


@pytest.mark.parametrize("bad", [{"max_in_flight": 0}, {"read_timeout": 0}, {"http_timeout": -1.0}])
def test_http_limits_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Http("http://127.0.0.1:9/mcp", **bad)


class BreakingProxy:
    """A TCP proxy in front of the server that breaks the client's connection when a request carrying ``marker``
    arrives: with ``how="reset"`` it closes with an RST (SO_LINGER 0: what a server closing a connection with unread
    data sends), with ``how="close"`` it closes it cleanly (FIN) without an answer. With ``forward`` the request
    reaches the server first (the server runs the call; its answer is not passed on). Counts the connections it
    accepted."""

    def __init__(self, upstream_port: int, marker: bytes, how: str, forward: bool) -> None:
        self.upstream_port, self.marker, self.how, self.forward = upstream_port, marker, how, forward
        self.accepted = 0
        self.broken = 0
        self.sockets: list[socket.socket] = []
        self.accepting = threading.Event()  # cleared: connections wait in the listen backlog (1), then are dropped
        self.accepting.set()
        self.parked = threading.Event()  # set while the accepting thread waits for `accepting`, not in accept()
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            if not self.accepting.is_set():
                self.parked.set()  # outside accept(): connections now stay in the listen backlog
                self.accepting.wait()
                self.parked.clear()
            try:  # a short wait for a connection, so that a pause takes effect without one
                ready, _, _ = select.select([self.listener], [], [], 0.05)
                if not ready:
                    continue
                client, _ = self.listener.accept()
            except (OSError, ValueError):  # closed
                return
            self.accepted += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.sockets += [client, upstream]
            muted = threading.Event()  # this connection's answers are no longer passed on
            threading.Thread(target=self._pipe, args=(client, upstream, True, muted), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False, muted), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool, muted: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                if from_client and self.marker in data:
                    self.broken += 1
                    if self.forward:
                        muted.set()
                        dst.sendall(data)
                        threading.Event().wait(0.5)  # the server runs the call
                    if self.how == "reset":
                        src.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
                if not muted.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # shutdown, not only close: the other pipe's thread is blocked reading one of them
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def pause(self) -> None:
        """Stop accepting; returns once the accepting thread is parked (no connection accepted from now on)."""
        self.accepting.clear()
        assert self.parked.wait(STALL_BOUND), "the proxy's accepting thread did not park"

    def close(self) -> None:
        """Stop listening and end every proxied connection (``shutdown`` wakes the pipes blocked reading it)."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone would not)
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.mark.parametrize(("how", "forward"), [("reset", False), ("close", False), ("reset", True)])
def test_a_connection_broken_under_a_call_fails_that_call_and_the_session_survives(
        served: Served, how: str, forward: bool) -> None:
    """The connection carrying a call is reset or closed before the answer: the step reports ``connection_lost``
    (saying the call may or may not have run), the session stays ready and the next step succeeds on a new
    connection. It used to read ``server_dead: Connection closed``: the SDK ended the session on the HTTP error."""
    port = int(served.url.rsplit(":", 1)[1].split("/")[0])
    proxy = BreakingProxy(port, b"break-me", how, forward)
    env = MCPEnv({"busy": Http(proxy.url)}, ["Echo."], call_timeout=60.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["busy"]
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "break-me"}})
        assert proxy.broken == 1
        assert info["error"] is not None and info["error"]["kind"] == "connection_lost", info["error"]
        assert "may or may not have run" in info["error"]["message"] and "'echo'" in info["error"]["message"]
        assert conn.status == "ready" and env.host.connections["busy"] is conn
        accepted = proxy.accepted
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hello"}})
        assert info["error"] is None, info["error"]
        assert info["structured_content"] == {"result": "hello"}
        assert proxy.accepted > accepted  # a new connection carried it
        assert env.host.connections["busy"] is conn and conn.status == "ready"
    finally:
        env.close()
        proxy.close()


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_an_idle_connection_is_not_reused_past_the_keepalive_expiry(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers close idle connections after a few seconds (uvicorn, Node: 5 s) and a request sent on one as the server
    closes it is lost, so the client drops its idle connections first (``KEEPALIVE_EXPIRY``, here shortened): a
    call after a longer pause opens a new connection, one right after the last reuses it."""
    from mcp_gym.client import _http

    # 2 s (uvicorn closes at 5 s): two steps in a row stay within it however busy the machine is
    monkeypatch.setattr(_http, "KEEPALIVE_EXPIRY", 2.0)
    port = int(served.url.rsplit(":", 1)[1].split("/")[0])
    proxy = BreakingProxy(port, b"never-sent", "close", False)
    env = MCPEnv({"busy": Http(proxy.url)}, ["Ping."], call_timeout=60.0)
    try:
        env.reset(seed=0)
        env.step({"tool": "ping", "arguments": {}})
        accepted = proxy.accepted
        _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        assert info["error"] is None and proxy.accepted == accepted  # kept alive
        threading.Event().wait(2.5)
        _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        assert info["error"] is None and proxy.accepted > accepted  # expired: a new connection
    finally:
        env.close()
        proxy.close()


@pytest.mark.parametrize(("header", "seconds"), [
    ("timeout=30", 15.0), ("timeout=30, max=100", 15.0), ("max=100, Timeout = 8", 4.0), ("timeout=5", 2.0),
    ("timeout=2", 1.0), ("timeout=100000", 60.0), ("timeout=abc", None), ("timeout=-3", None), ("timeout=nan", None),
    ("timeout=inf", None), ("max=100", None), ("", None), (None, None),
])
def test_keepalive_for_takes_half_the_servers_timeout_within_bounds(header: str | None, seconds: float | None) -> None:
    from mcp_gym.client._http import keepalive_for

    assert keepalive_for(header) == seconds


@pytest.mark.slow
def test_a_bundled_server_keeps_idle_connections_and_the_client_follows_its_header() -> None:
    """The bundled servers keep idle connections 30 s and say so (``Keep-Alive: timeout=30``); the client then keeps
    its own 15 s instead of 2 s: a step after a 2.5 s pause reuses the connection (a new one was opened before, one
    TCP connection per step for sessions that step less often than every 2 s, e.g. 1,000 sessions on 2 cores)."""
    import httpx2

    from mcp_gym.serverkit import SERVER_KEEPALIVE

    proc, url = start_http_server("mcp_gym.servers.counter")
    proxy = BreakingProxy(int(url.rsplit(":", 1)[1].split("/")[0]), b"never-sent", "close", False)
    env = MCPEnv({"testing": Http(proxy.url)}, ["Count."], call_timeout=60.0)
    try:
        assert httpx2.get(url, timeout=10).headers.get("keep-alive") == f"timeout={SERVER_KEEPALIVE}"
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None, info["error"]
        accepted = proxy.accepted
        threading.Event().wait(2.5)
        _, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None, info["error"]
        assert proxy.accepted == accepted  # kept alive across the pause
    finally:
        env.close()
        proxy.close()
        stop_process(proc)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads connection states from Linux's /proc/net/tcp")
def test_a_session_that_dies_leaves_the_other_sessions_alone(served: Served) -> None:
    """Session A's server goes away (its connection is reset and nothing listens any more: the SDK ends A's session by
    cancelling its task group) while session B's call is in flight on the same loop: B's call and B's next step
    succeed, A reports ``server_dead``, and a new session C connects. A's death used to leave its owner task with the
    SDK's cancellation, which cancelled the runtime's task group: every other session was cancelled, and the next
    env waited for a connection task that never ran.

    A's call waits until A's client has closed its connections to the gone server: on a loaded machine the close can
    reach the socket after the call went out on it, and a call on a connection that breaks under it is
    ``connection_lost`` (the test beside it), not ``server_dead``."""
    port = int(served.url.rsplit(":", 1)[1].split("/")[0])
    proxy = BreakingProxy(port, b"break-me", "reset", False)
    proxy_port = int(proxy.url.split(":")[2].split("/")[0])
    out: dict[str, Any] = {}

    async def main() -> None:
        a = MCPEnv({"busy": Http(proxy.url)}, ["A."], call_timeout=60.0)
        b = MCPEnv({"busy": Http(served.url)}, ["B."], call_timeout=60.0)
        c = None
        try:
            with anyio.fail_after(120):  # the old code waited forever for C
                await a.areset(seed=0)
                await b.areset(seed=0)

                async def call_b() -> None:
                    out["b1"] = (await b.astep({"tool": "hold", "arguments": {}}))[4]

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call_b)
                    proxy.close()  # A's connection is reset and its server no longer listens
                    with anyio.fail_after(60):  # A's client has closed its pooled connections: A's call finds
                        while _open_client_sockets(proxy_port):  # nothing listening (not a connection whose
                            await anyio.sleep(0.01)  # close the loop has not yet read: that is connection_lost)
                    out["a"] = (await a.astep({"tool": "echo", "arguments": {"text": "x"}}))[4]
                await a.aclose()
                await anyio.sleep(0.5)  # A's connection task has ended
                out["b2"] = (await b.astep({"tool": "echo", "arguments": {"text": "still here"}}))[4]
                c = MCPEnv({"busy": Http(served.url)}, ["C."], call_timeout=60.0)
                await c.areset(seed=0)
                out["c"] = (await c.astep({"tool": "ping", "arguments": {}}))[4]
        finally:
            for env in (a, b, c):
                if env is not None:
                    await env.aclose()

    default_runtime().call(main)
    assert out["a"]["error"] is not None and out["a"]["error"]["kind"] == "server_dead", out["a"]["error"]
    assert out["b1"]["error"] is None and out["b1"]["structured_content"] == {"result": "held"}, out["b1"]
    assert out["b2"]["error"] is None and out["b2"]["structured_content"] == {"result": "still here"}, out["b2"]
    assert out["c"]["error"] is None and out["c"]["structured_content"] == {"result": "pong"}, out["c"]


def _open_client_sockets(port: int) -> int:
    """How many of this machine's TCP sockets connected to 127.0.0.1:``port`` are still open on the client's side
    (ESTABLISHED, or CLOSE_WAIT: the other side closed and the client has not yet read that)."""
    return sum(1 for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
               if line.split()[3] in ("01", "08") and line.split()[2] == f"0100007F:{port:04X}")


def _connecting_ports(port: int) -> set[int]:
    """Local ports of this machine's TCP sockets waiting in connect (SYN_SENT) to 127.0.0.1:``port``."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state == "02" and remote == f"0100007F:{port:04X}":
            found.add(int(local.split(":")[1], 16))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads connection states from Linux's /proc/net/tcp")
def test_a_connect_timeout_is_tried_again_within_the_read_timeout(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server stops accepting connections and its listen backlog is full (what thousands of sessions reconnecting
    at once do to it): a new connection attempt times out after ``http_timeout`` (1 s here). Nothing was sent, so the
    request tries again while its ``read_timeout`` lasts, and the step succeeds once the server accepts again. It used
    to fail at the first connect timeout (kind ``timeout``; at 10,000 sessions, 269 steps per run).

    Nothing here depends on timing: the proxy is parked outside ``accept()`` before the backlog is filled, and it
    accepts again only once the client has been seen waiting in connect on two different sockets (its first attempt
    timed out and it tried again)."""
    from mcp_gym.client import _http

    monkeypatch.setattr(_http, "KEEPALIVE_EXPIRY", 0.2)  # the step below needs a new connection
    port = int(served.url.rsplit(":", 1)[1].split("/")[0])
    proxy = BreakingProxy(port, b"never-sent", "close", False)
    proxy_port = int(proxy.url.split(":")[2].split("/")[0])
    env = MCPEnv({"busy": Http(proxy.url, http_timeout=1.0, read_timeout=60.0)}, ["Ping."], call_timeout=120.0)
    fillers: list[socket.socket] = []
    attempts: set[int] = set()
    stepped = threading.Event()

    def resume_after_a_retry() -> None:
        deadline = time.monotonic() + STALL_BOUND
        while len(attempts) < 2 and not stepped.is_set() and time.monotonic() < deadline:
            attempts.update(_connecting_ports(proxy_port))
            time.sleep(0.02)
        proxy.accepting.set()

    try:
        env.reset(seed=0)
        proxy.pause()
        time.sleep(0.5)  # longer than KEEPALIVE_EXPIRY: the session's idle connections are not used again
        accepted = proxy.accepted
        # Fill the listen backlog (Linux queues backlog + 1 = 2 connections): the kernel drops further attempts.
        for _ in range(2):
            fillers.append(socket.create_connection(("127.0.0.1", proxy_port), timeout=STALL_BOUND))
        resumer = threading.Thread(target=resume_after_a_retry)
        resumer.start()
        try:
            _, _, _, _, info = env.step({"tool": "ping", "arguments": {}})
        finally:
            stepped.set()
            resumer.join()
        assert info["error"] is None, info["error"]
        assert len(attempts) >= 2, f"the client never tried to connect twice: {attempts}"
        assert info["structured_content"] == {"result": "pong"}
        assert proxy.accepted > accepted + len(fillers)  # it came over a connection accepted after the pause
    finally:
        env.close()
        for f in fillers:
            f.close()
        proxy.accepting.set()
        proxy.close()
