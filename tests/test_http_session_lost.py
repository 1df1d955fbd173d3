"""A Streamable HTTP server that no longer knows the client's session (it restarted: sessions live in its process) is
dead for the env: the step says why, the episode ends (``servers_dead``) and the next reset reconnects. Before, the
session was kept: every call failed with "Server returned an error response" (or the server's tools were gone with
status ``ready``) in every later episode of the run.

The servers are real: an ``MCPServer`` app served twice on one kept socket (its 404 to an unknown session, the
spec's signal), and npm ``server-everything`` behind a TCP proxy that switches to a fresh process of it (its HTTP
400 "No valid session ID provided", as servers on the TypeScript SDK answer)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import pytest
from conftest import bound_socket, serve_in_thread, start_everything_http, stop_process
from mcp.server.mcpserver import MCPServer

from mcp_gym import MCPEnv
from mcp_gym.client.specs import Http


def _app() -> Any:
    server = MCPServer("stateful")

    @server.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    return server.streamable_http_app()


def _until_the_loss_is_seen(env: MCPEnv, action: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Step until an error other than a connection broken under the call (the old keep-alive connection may break
    first: the session is then kept, and the next call finds the new server); at most 3 steps."""
    for _ in range(3):
        obs, _, _, truncated, info = env.step(action)
        if info["error"] is not None and info["error"]["kind"] != "connection_lost":
            break
    return obs["result"], info


def _reconnects(env: MCPEnv, action: dict[str, Any], expect: str) -> None:
    obs, info = env.reset(seed=1)
    assert info["servers"]["s"]["status"] == "ready" and info["reset_errors"] == [], info
    obs, *_, info = env.step(action)
    assert info["error"] is None and obs["result"] == expect, obs["result"]


def test_a_python_server_that_restarted_answers_404_and_the_next_reset_reconnects() -> None:
    sock = bound_socket()
    try:
        with serve_in_thread(_app(), sock, timeout_graceful_shutdown=1) as (port, _):  # its GET stream stays open
            env = MCPEnv({"s": Http(f"http://127.0.0.1:{port}/mcp", protocol="legacy")}, ["t"], call_timeout=10)
            env.reset(seed=0)
            assert env.step({"tool": "ping", "arguments": {}})[0]["result"] == "pong"
        with serve_in_thread(_app(), sock):  # a new process in effect: it holds no session
            try:
                result, info = _until_the_loss_is_seen(env, {"tool": "ping", "arguments": {}})
                assert "no longer knows the session (HTTP 404" in result and "Session not found" in result, result
                assert info["termination"] == "servers_dead" and info["error"]["server"] == "s", info
                _reconnects(env, {"tool": "ping", "arguments": {}}, "pong")
            finally:
                env.close()
    finally:
        sock.close()


class SwitchingProxy:
    """A TCP proxy on a port of its own that sends each new connection to ``upstream`` (a port, changeable); ``switch``
    ends every proxied connection, as a server that exits ends them."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def switch(self, upstream: int) -> None:
        self.upstream = upstream
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.switch(self.upstream)
        for s in self.sockets:
            s.close()


@pytest.mark.slow  # a proxy and two npm server starts; fast cover (the same path, a 404):
# test_a_python_server_that_restarted_answers_404_and_the_next_reset_reconnects
def test_server_everything_restarted_answers_400_and_the_next_reset_reconnects() -> None:
    first, port = start_everything_http()
    second = None
    proxy = SwitchingProxy(port)
    env = MCPEnv({"s": Http(proxy.url)}, ["t"], call_timeout=10)
    echo = {"tool": "echo", "arguments": {"message": "hi"}}
    try:
        env.reset(seed=0)
        assert env.step(echo)[0]["result"] == "Echo: hi"
        second, port2 = start_everything_http()
        proxy.switch(port2)  # the server "restarted": a process that never saw the session
        stop_process(first)
        result, info = _until_the_loss_is_seen(env, echo)
        assert "no longer knows the session (HTTP 400" in result and "No valid session ID provided" in result, result
        assert info["termination"] == "servers_dead" and info["error"]["server"] == "s", info
        _reconnects(env, echo, "Echo: hi")
    finally:
        env.close()
        proxy.close()
        for proc in (first, second):
            if proc is not None:
                stop_process(proc)
