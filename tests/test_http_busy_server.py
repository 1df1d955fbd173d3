"""A busy Streamable HTTP server is not a dead one: an HTTP timeout fails that request (kind ``timeout``) and the
session stays open, and the sessions of one process keep at most ``max_in_flight`` requests waiting on one server.

The server is a real ``MCPServer`` served by uvicorn on 127.0.0.1 in a thread of this process, so the test can stall
its event loop (what a CPU-saturated server looks like from outside: nothing accepted, read or answered) and count the
HTTP requests it holds at once.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import uvicorn
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def served() -> Iterator[Served]:
    srv = MCPServer("busy", log_level="WARNING")

    @srv.tool()
    async def ping() -> str:
        """Answer at once."""
        return "pong"

    @srv.tool()
    async def hold() -> str:
        """Answer after a moment (so that requests overlap)."""
        await anyio.sleep(0.2)
        return "held"

    inner = srv.streamable_http_app(host="127.0.0.1")
    port = _free_port()
    state = Served(f"http://127.0.0.1:{port}/mcp", loop=None)  # type: ignore[arg-type]

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

    server = uvicorn.Server(uvicorn.Config(counting, host="127.0.0.1", port=port, log_level="warning"))
    started = threading.Event()

    async def run() -> None:
        state.loop = asyncio.get_running_loop()
        started.set()
        await server.serve()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert started.wait(30)
    for _ in range(300):
        if server.started:
            break
        threading.Event().wait(0.1)
    assert server.started
    try:
        yield state
    finally:
        state.release.set()
        server.should_exit = True
        thread.join(30)


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
