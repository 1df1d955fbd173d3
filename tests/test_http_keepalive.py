"""Connection reuse over Streamable HTTP: steps against a real server reuse the session's keep-alive connection.

The Node ``server-everything`` (TypeScript SDK) answers every POST with an SSE stream that ends right after the
answer. The SDK closes that response as soon as it has read the answer event, before the stream's last chunk, and
httpx then drops the connection: every call opened a new TCP connection (1.00 connects per call). A counting TCP
proxy on 127.0.0.1 sits between the client and the real server and counts the connections it accepts.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from conftest import start_everything_http, stop_process

from mcp_gym import MCPEnv
from mcp_gym.client.specs import Http

STEPS = 20


class CountingProxy:
    """A TCP proxy on 127.0.0.1 to ``port``, counting the connections it accepts."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.connects = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.connects += 1
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=30)
            upstream.settimeout(None)
            for s in (client, upstream):  # forward each piece at once (else Nagle meets delayed ACKs: 40 ms a step)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._sock.close()


@pytest.fixture
def everything_http() -> Iterator[int]:
    """Port of the Node server-everything over Streamable HTTP."""
    proc, port = start_everything_http()
    try:
        yield port
    finally:
        stop_process(proc)


def test_steps_reuse_the_connection_to_server_everything(everything_http):
    proxy = CountingProxy(everything_http)
    env = MCPEnv({"everything": Http(f"http://127.0.0.1:{proxy.port}/mcp")}, ["say hello"], call_timeout=30.0,
                 max_steps=10 * STEPS)
    try:
        env.reset(seed=0)
        env.step({"tool": "echo", "arguments": {"message": "warm"}})
        before = proxy.connects
        for i in range(STEPS):
            obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"message": f"hi {i}"}})
            assert info.get("error") is None, info
            assert f"hi {i}" in obs["result"], obs
        connects = proxy.connects - before
    finally:
        env.close()
        proxy.close()
    # One connection serves the steps (a server may close an idle one: allow a couple, far below one per step).
    assert connects <= 2, f"{connects} new TCP connections for {STEPS} steps"
