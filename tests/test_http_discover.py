"""Sessions to one Streamable HTTP server share its ``server/discover`` answer while the server says it is fresh
(``ttlMs``): a server that declares none is asked by every session, other credentials ask again, an expired answer is
asked again, and a session whose first request fails after adopting an answer drops it and reconnects.

Real ``MCPServer``s served by uvicorn on 127.0.0.1 in a thread of this process; a server middleware counts the requests
each one receives (nothing on the client side is faked).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from conftest import bound_socket, serve_in_thread
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer

from mcp_gym import MCPEnv
from mcp_gym.client import _discovery
from mcp_gym.client.host import ServerUnavailableWarning
from mcp_gym.client.runtime import default_runtime
from mcp_gym.client.specs import Http
from mcp_gym.servers.counter import make_server


@dataclass
class Served:
    url: str
    seen: Counter[str] = field(default_factory=Counter)
    broken: bool = False  # answer every POST with 404 (another server behind the URL)


@pytest.fixture(autouse=True)
def _no_remembered_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no ``server/discover`` answer remembered. The answers are kept per URL for their
    ``ttlMs`` (600 s here, 60 s for an mcp-gym server) in this worker process, and a new server's free port can be one
    an earlier test's server of the same name had: its session would adopt that answer and send no
    ``server/discover``, and a count below would be one short."""
    monkeypatch.setattr(_discovery, "_CACHE", {})
    monkeypatch.setattr(_discovery, "_UNCACHEABLE", {})


@contextlib.contextmanager
def serve(mcp: MCPServer, sock: socket.socket | None = None) -> Iterator[Served]:
    """``mcp`` served on ``sock``'s port (default: a port of its own), counting the requests it receives."""
    state = Served("")  # the URL once it serves

    async def count(ctx: Any, call_next: Any) -> Any:
        state.seen[ctx.method] += 1
        return await call_next(ctx)

    mcp._lowlevel_server.middleware.append(count)
    inner = mcp.streamable_http_app(host="127.0.0.1")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and state.broken:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"not here"})
            return
        await inner(scope, receive, send)

    with serve_in_thread(app, sock) as (port, _):
        state.url = f"http://127.0.0.1:{port}/mcp"
        yield state


def plain_server(ttl_ms: int | None = None, name: str = "plain") -> MCPServer:
    mcp = MCPServer(name, log_level="WARNING",
                    cache_hints={"server/discover": CacheHint(ttl_ms=ttl_ms)} if ttl_ms is not None else None)

    @mcp.tool()
    async def ping() -> str:
        """Answer at once."""
        return "pong"

    return mcp


def reset_and_ping(spec: Http, tool: str = "ping", args: dict[str, Any] | None = None) -> MCPEnv:
    env = MCPEnv({"s": spec}, ["t"])
    _, info = env.reset(seed=0)
    assert info["error"] is None, info["error"]
    _, _, _, _, info = env.step({"tool": tool, "arguments": args or {}})
    assert info["error"] is None, info["error"]
    return env


def test_sessions_adopt_the_discover_answer_of_an_mcp_gym_server() -> None:
    with serve(make_server().mcp) as srv:  # an EpisodeServer declares ttlMs for server/discover
        first = reset_and_ping(Http(srv.url), "add", {"amount": 1})
        assert srv.seen["server/discover"] == 1
        envs = [reset_and_ping(Http(srv.url), "add", {"amount": 1}) for _ in range(3)]
        assert srv.seen["server/discover"] == 1  # the next sessions asked nothing: the same answer, adopted
        for env in envs:
            conn = env.host.connections["s"]
            assert conn.protocol_version == first.host.connections["s"].protocol_version == "2026-07-28"
            assert conn.capabilities == first.host.connections["s"].capabilities
            assert conn.info()["name"] == "mcp-gym-counter"
        for env in [first, *envs]:
            env.close()


def test_sessions_that_connect_together_wait_for_one_handshake() -> None:
    with serve(make_server().mcp) as srv:
        async def main() -> None:
            envs = [MCPEnv({"s": Http(srv.url)}, ["t"]) for _ in range(20)]
            infos: list[dict[str, Any]] = []

            async def one(env: MCPEnv) -> None:
                infos.append((await env.areset(seed=0))[1])

            async with anyio.create_task_group() as tg:
                for env in envs:
                    tg.start_soon(one, env)
            assert [i["error"] for i in infos] == [None] * 20
            for env in envs:
                await env.aclose()

        default_runtime().call(main)
        assert srv.seen["server/discover"] == 1 and srv.seen["tools/list"] == 20


def test_a_server_without_ttl_is_asked_by_every_session() -> None:
    with serve(plain_server()) as srv:  # the SDK's default ttlMs is 0: stale at once
        envs = [reset_and_ping(Http(srv.url)) for _ in range(3)]
        assert srv.seen["server/discover"] == 3
        for env in envs:
            env.close()


def test_other_credentials_ask_again() -> None:
    with serve(plain_server(ttl_ms=600_000)) as srv:
        a = [reset_and_ping(Http(srv.url, headers={"Authorization": "Bearer a"})) for _ in range(2)]
        b = [reset_and_ping(Http(srv.url, headers={"Authorization": "Bearer b"})) for _ in range(2)]
        assert srv.seen["server/discover"] == 2  # one per authorization context
        for env in a + b:
            env.close()


def test_an_expired_answer_is_asked_again() -> None:
    with serve(plain_server(ttl_ms=50)) as srv:
        first = reset_and_ping(Http(srv.url))
        time.sleep(0.2)  # past the 50 ms the server allowed
        second = reset_and_ping(Http(srv.url))
        assert srv.seen["server/discover"] == 2
        first.close()
        second.close()


def test_a_failed_first_request_drops_the_answer_and_reconnects() -> None:
    with serve(plain_server(ttl_ms=600_000)) as srv:
        first = reset_and_ping(Http(srv.url))
        srv.broken = True  # something else answers at the URL now
        env = MCPEnv({"s": Http(srv.url)}, ["t"])
        with pytest.warns(ServerUnavailableWarning, match="404 Not Found"):
            _, info = env.reset(seed=0)  # the adopted answer failed; connecting again (asking) fails too
        conn = env.host.connections["s"]
        assert conn.status == "failed" and "404" in (conn.error or ""), conn.error
        assert info["error"]["kind"] == "server_dead" and "ping" not in info["tools"]
        srv.broken = False
        _, info = env.reset(seed=1)  # the next reset connects and asks the server again
        assert info["error"] is None and "ping" in info["tools"]
        assert srv.seen["server/discover"] == 2
        for e in (first, env):
            e.close()


def test_another_server_on_the_same_port_is_asked_again() -> None:
    """A server stopped and another started on its port within the first one's ttlMs: the adopted answer names the
    first server, the second's listing says who it is, and the env connects again at once (no error, right name)."""
    two = plain_server(ttl_ms=600_000, name="second")

    @two.tool()
    async def only_here() -> str:
        """Only on the second server."""
        return "here"

    with bound_socket() as port:  # the port stays this test's between the two servers
        with serve(plain_server(ttl_ms=600_000, name="first"), port) as one:
            reset_and_ping(Http(one.url)).close()
        with serve(two, port) as srv:
            assert srv.url == one.url
            env = reset_and_ping(Http(srv.url), "only_here")
            conn = env.host.connections["s"]
            assert conn.status == "ready" and conn.info()["name"] == "second"
            assert srv.seen["server/discover"] == 1
            listed = srv.seen["tools/list"]
            again = reset_and_ping(Http(srv.url), "only_here")  # the second server's answer is the one kept now
            assert srv.seen["server/discover"] == 1 and srv.seen["tools/list"] > listed
            assert again.host.connections["s"].info()["name"] == "second"
            env.close()
            again.close()


def test_two_servers_never_share_an_answer() -> None:
    one, two = plain_server(ttl_ms=600_000), plain_server(ttl_ms=600_000)
    two._lowlevel_server.name = "other"  # what each server says it is, in its discover answer

    @two.tool()
    async def only_here() -> str:
        """A tool the first server does not have."""
        return "here"

    with serve(one) as a, serve(two) as b:
        envs = [reset_and_ping(Http(url)) for url in (a.url, b.url, a.url, b.url)]
        assert a.seen["server/discover"] == 1 and b.seen["server/discover"] == 1
        names = [env.host.connections["s"].info()["name"] for env in envs]
        assert names == ["plain", "other", "plain", "other"]
        assert ["only_here" in env.action_space.tool_names for env in envs] == [False, True, False, True]
        for env in envs:
            env.close()
