"""The Streamable HTTP fast lane (``mcp_gym/client/_http_lane.py``) against real servers over 127.0.0.1.

A step's ``tools/call`` and the observed ``resources/read`` are POSTed by the lane (one ``aiohttp`` request each, the
answer read from the response): no ``httpx2`` request and no memory-object stream per step. Whatever in a response is
not the request's plain answer (progress notifications, a server's sampling request) is handed to the SDK's session,
which handles it as before; a redirect sends the call the SDK's way. Checked on a bundled Counter server (SSE answers,
``mcp-gym serve``'s way) and on the Node server-everything (TypeScript SDK, SSE answers with event ids).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import httpx2
import pytest
from anyio.streams import memory
from conftest import serve_in_thread, start_everything_http, start_http_server, stop_process
from pydantic import Field

from mcp_gym import MCPEnv
from mcp_gym.client.specs import Http

pytestmark = pytest.mark.xdist_group("http_lane")  # one worker: `counter_url`, `everything_url`: HTTP servers made once

STEPS = 10


@pytest.fixture(scope="module")
def counter_url() -> Iterator[str]:
    """A bundled Counter server over Streamable HTTP (SSE answers)."""
    proc, url = start_http_server("mcp_gym.servers.counter", "--diagnostics")
    try:
        yield url
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def everything_url() -> Iterator[str]:
    """The Node server-everything over Streamable HTTP."""
    proc, port = start_everything_http()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)


def counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts httpx2 requests (the SDK's path) and memory-object streams made from now on."""
    made = {"httpx2": 0, "streams": 0}
    send, init = httpx2.AsyncClient.send, memory._MemoryObjectStreamState.__init__

    async def counted_send(self: Any, request: Any, **kw: Any) -> Any:
        made["httpx2"] += 1
        return await send(self, request, **kw)

    def counted_init(self: Any, *args: Any, **kw: Any) -> None:
        made["streams"] += 1
        init(self, *args, **kw)

    monkeypatch.setattr(httpx2.AsyncClient, "send", counted_send)
    monkeypatch.setattr(memory._MemoryObjectStreamState, "__init__", counted_init)
    return made


def test_counter_steps_take_the_lane(counter_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = MCPEnv({"c": Http(counter_url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0,
                 observe_resources=["counter://state"])
    try:
        env.reset(seed=0)
        env.step({"tool": "echo", "arguments": {"text": "warm"}})
        made = counting(monkeypatch)
        for i in range(STEPS):
            obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": f"hi {i}"}})
            assert info["error"] is None, info["error"]
            assert obs["result"] == f"hi {i}" and "count=0 " in obs["resources"]["counter://state"], obs
        obs, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None and "count=1 " in obs["resources"]["counter://state"], obs
        assert made == {"httpx2": 0, "streams": 0}, made  # main: an httpx2 request and a stream per request
        wire = env.host.connections["c"].http_wire
        assert wire.off is None
        # the reset's tools/list, mcp_gym_reset and resources/read, the warm-up, one tools/call per echo step (nothing
        # changed: no resource read), add's call and the changed resource's read
        assert wire.calls == 3 + 1 + STEPS + 2, wire.calls
        assert wire.handed == 0
    finally:
        env.close()


def test_an_unknown_tool_comes_back_as_on_the_sdk_path(counter_url: str) -> None:
    env = MCPEnv({"c": Http(counter_url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["c"]
        calls = conn.http_wire.calls

        async def unknown() -> Any:
            return await conn.call_tool("no_such_tool", {}, timeout=30.0)

        out = env.runtime.call(unknown)
        assert out.is_error and "no_such_tool" in str(out.content), out
        assert conn.http_wire.calls == calls + 1
    finally:
        env.close()


def test_progress_in_an_sse_answer_is_handed_to_the_sdk(everything_url: str) -> None:
    """server-everything sends progress notifications in the POST's SSE stream before the answer (event ids on
    every event): the lane hands them to the SDK's session, whose progress callback records them."""
    env = MCPEnv({"e": Http(everything_url)}, ["Wait."], max_steps=1000, call_timeout=60.0)
    try:
        env.reset(seed=0)
        wire = env.host.connections["e"].http_wire
        calls, handed = wire.calls, wire.handed
        _, _, _, _, info = env.step({"tool": "trigger-long-running-operation", "arguments": {"duration": 1,
                                                                                            "steps": 2}})
        assert info["error"] is None, info["error"]
        assert [p["progress"] for p in info["progress"]] == [1, 2], info["progress"]
        assert wire.calls == calls + 1 and wire.handed >= handed + 2 and wire.off is None
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"message": "after"}})
        assert info["error"] is None and "after" in str(obs["result"]), info["error"]
        assert wire.calls == calls + 2
    finally:
        env.close()


def test_a_sampling_request_in_an_sse_answer_is_answered_by_the_sdk(everything_url: str) -> None:
    """A server request in the answer's stream (sampling/createMessage) goes to the SDK's session, which answers it
    through the host's sampling callable; the tool's answer then comes back on the lane."""
    asked: list[Any] = []

    def sample(messages: Any, params: Any) -> str:
        asked.append(messages)
        return "sampled hello"

    env = MCPEnv({"e": Http(everything_url)}, ["Sample."], max_steps=1000, call_timeout=60.0, sampling=sample)
    try:
        env.reset(seed=0)
        wire = env.host.connections["e"].http_wire
        calls, handed = wire.calls, wire.handed
        obs, _, _, _, info = env.step({"tool": "trigger-sampling-request", "arguments": {"prompt": "Say hi",
                                                                                        "maxTokens": 20}})
        assert info["error"] is None, info["error"]
        assert "sampled hello" in str(obs["result"]) and len(asked) == 1, obs
        assert wire.calls == calls + 1 and wire.handed == handed + 1
    finally:
        env.close()


class _Redirect(threading.Thread):
    """An HTTP server on 127.0.0.1 whose every POST and GET is answered ``307`` to ``target`` (same origin rules: a
    307 to another port is not followed by the SDK either)."""

    def __init__(self, target: str) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        self.posts = 0

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                self.posts += 1
                conn.sendall(f"HTTP/1.1 307 Temporary Redirect\r\nlocation: {self.target}\r\ncontent-length: 0\r\n"
                             "connection: close\r\n\r\n".encode())


def test_a_redirect_sends_the_call_the_sdk_s_way(counter_url: str) -> None:
    """A POST the server redirects ran nothing: the lane steps aside for good and the SDK's path, which follows a
    same-origin redirect, makes the call (here the redirect is to another origin: the SDK's error names it)."""
    env = MCPEnv({"c": Http(counter_url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["c"]
        wire = conn.http_wire
        redirect = _Redirect(counter_url)
        redirect.start()
        wire.url = redirect.url  # the lane's next POST meets a redirect; the SDK's path still reaches the server
        obs, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert redirect.posts == 1 and wire.off is not None and "redirect" in wire.off
        assert info["error"] is None and not wire.open(), info["error"]
        obs, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 1}})
        assert info["error"] is None and redirect.posts == 1
        redirect.sock.close()
    finally:
        env.close()


async def _read_body(receive: Any) -> bytes:
    """An ASGI request's whole body."""
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    return body


def _replaying(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``body`` (already read) once, then what ``receive`` gives."""
    replayed = [False]

    async def replay() -> Any:
        if not replayed[0]:
            replayed[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


@contextlib.contextmanager
def _serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 in a thread of its own: its ``/mcp`` URL, while the block runs."""
    with serve_in_thread(app) as (port, _):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture()
def resumable_url() -> Iterator[str]:
    """A real ``MCPServer`` (uvicorn, 127.0.0.1) behind an ASGI layer that, for ``echo("resume me")``, ends the POST's
    SSE answer after a priming event (an event id, no data) and gives the answer to the ``GET`` that resumes it with
    ``Last-Event-ID`` (what a server with an event store may do, e.g. to free a connection during a long call)."""
    import json

    from mcp.server.mcpserver import MCPServer

    srv = MCPServer("resumable", log_level="WARNING")

    @srv.tool()
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    inner = srv.streamable_http_app(host="127.0.0.1")
    asked: dict[str, Any] = {}
    sse = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        headers = dict(scope["headers"])
        if scope["method"] == "GET" and headers.get(b"last-event-id") == b"ev-1":
            asked["resumed"] = asked.get("resumed", 0) + 1
            answer = {"jsonrpc": "2.0", "id": asked["id"],
                      "result": {"content": [{"type": "text", "text": "resumed answer"}], "isError": False,
                                 "structuredContent": {"result": "resumed answer"}}}
            await send({"type": "http.response.start", "status": 200, "headers": sse})
            await send({"type": "http.response.body", "body": b"id: ev-2\ndata: " + json.dumps(answer).encode()
                        + b"\n\n"})
            return
        if scope["method"] != "POST":
            return await inner(scope, receive, send)
        body = await _read_body(receive)
        data = json.loads(body) if body else None
        if isinstance(data, dict) and data.get("method") == "tools/call" and \
                data["params"].get("arguments") == {"text": "resume me"}:
            asked["id"] = data["id"]
            await send({"type": "http.response.start", "status": 200, "headers": sse})
            retry = asked.get("retry", b"10")  # a test may make it hostile
            await send({"type": "http.response.body", "body": b"id: ev-1\nretry: " + retry + b"\ndata: \n\n"})
            return
        return await inner(scope, _replaying(body, receive), send)

    with _serving(app) as url:
        yield url, asked  # type: ignore[misc]


def test_an_sse_answer_that_ends_early_is_resumed_with_last_event_id(resumable_url: Any) -> None:
    url, asked = resumable_url
    env = MCPEnv({"r": Http(url, protocol="legacy")}, ["Echo."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        wire = env.host.connections["r"].http_wire
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "plain"}})
        assert info["error"] is None and obs["result"] == "plain", info["error"]
        calls = wire.calls
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "resume me"}})
        assert info["error"] is None, info["error"]
        assert obs["result"] == "resumed answer" and asked.get("resumed") == 1, (obs, asked)
        assert wire.calls == calls + 1 and wire.off is None
    finally:
        env.close()


HOSTILE_RETRIES = ["²".encode(), b"9" * 400, b"-5", b"1e3"]
"""``retry:`` values that are not ASCII digits or past 10 minutes. The issue's two (``²``, 400 digits) stay in the fast
lane on the lane's path, ``²`` on the SDK's too; the other variants are slow (also checked without a server, on every
path through the lane's filter, by test_a_refused_retry_line_is_removed_wherever_the_chunks_split)."""


@pytest.mark.parametrize(("retry", "sdk"), [
    pytest.param(retry, sdk, id=f"{retry.decode('latin-1')}-{'sdk' if sdk else 'lane'}",
                 marks=() if retry == HOSTILE_RETRIES[0] or (retry == HOSTILE_RETRIES[1] and not sdk)
                 else pytest.mark.slow)
    for sdk in (False, True) for retry in HOSTILE_RETRIES])
def test_a_hostile_sse_retry_field_is_ignored(resumable_url: Any, retry: bytes, sdk: bool) -> None:
    """Issue 36, item 10: a ``retry:`` of 400 digits overflowed the sleep before the resume, one of ``²`` (a digit
    to ``str.isdigit``, not to ``int``) raised ValueError; both surfaced as the call's error. Ignored, as the SSE
    spec says for a value that is not ASCII digits (and for one past 10 minutes): the answer is resumed, on the lane
    and on the SDK's path (httpx2's SSE decoder)."""
    url, asked = resumable_url
    asked["retry"] = retry
    env = MCPEnv({"r": Http(url, protocol="legacy")}, ["Echo."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        if sdk:
            env.host.connections["r"].http_wire.off = "the test takes the SDK's path"
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "resume me"}})
        assert info["error"] is None, info["error"]
        assert obs["result"] == "resumed answer" and asked.get("resumed") == 1, (obs, asked)
    finally:
        env.close()


@pytest.mark.parametrize(("stream", "passed"), [
    (b"retry: -5\r\nid: 1\r\ndata: x\r\n\r\n", b"id: 1\r\ndata: x\r\n\r\n"),
    (b"retry: 3000\nid: 1\ndata: x\n\n", b"retry: 3000\nid: 1\ndata: x\n\n"),
    (b"id: 1\rretry: " + b"9" * 400 + b"\rdata: retry: -5\r\r", b"id: 1\rdata: retry: -5\r\r"),
    ("retry:\u00b2\ndata: y\n\n".encode(), b"data: y\n\n"),
    (b"data: a\nretry:1e3\n\nretry", b"data: a\n\nretry"),
    (b"data: a\nretry: -1", b"data: a\n"),
    (b"data: a\nretr\n\n", b"data: a\nretr\n\n"),
    (b": c\nretry:600000\n\n", b": c\nretry:600000\n\n"),
    (b": c\nretry:600001\n\n", b": c\n\n"),
])
def test_a_refused_retry_line_is_removed_wherever_the_chunks_split(stream: bytes, passed: bytes) -> None:
    """The SDK's path reads SSE through httpx2's decoder, which takes any ``int()``: mcp-gym removes a ``retry:``
    line the SSE spec ignores from the byte stream (public API), whatever the chunking (a ``\\r\\n`` split between
    chunks is one line end: a left-over ``\\n`` would end the event early)."""
    from mcp_gym.client._http import RetryLines

    for k in (1, 2, 3):
        for cuts in itertools.islice(itertools.combinations(range(1, len(stream)), k), 3000):
            bounds = [0, *cuts, len(stream)]
            lines = RetryLines()
            out = b"".join(lines.feed(stream[a:b]) for a, b in itertools.pairwise(bounds)) + lines.flush()
            assert out == passed, (stream, cuts, out)


def test_the_session_reads_the_transport_and_the_lane_through_public_streams(counter_url: str) -> None:
    """The session's read stream is mcp-gym's own (a public anyio memory stream fed by the SDK transport's messages
    and the lane's hand-over): the SDK's requests and the lane's calls both work on it, and closing ends it."""
    env = MCPEnv({"c": Http(counter_url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["c"]
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "mine"}})
        assert info["error"] is None and obs["result"] == "mine", info["error"]
        assert conn.http_wire is not None and conn.http_wire.calls >= 1  # on the lane
        assert env.reset(seed=1)[1]["servers"]["c"]["status"] == "ready"  # the SDK's own traffic goes on
    finally:
        env.close()
    assert env.host.connections["c"].status == "closed"


def _client_ports(port: int) -> set[int]:
    """Local ports of this machine's established TCP connections to 127.0.0.1:``port`` (the client ends)."""
    found = set()
    with open("/proc/net/tcp", encoding="ascii") as f:
        for line in f.read().splitlines()[1:]:
            local, remote, state = line.split()[1:4]
            if state == "01" and remote == f"0100007F:{port:04X}":
                found.add(int(local.split(":")[1], 16))
    return found


def test_the_sdks_idle_connection_is_closed_when_the_calls_move_to_the_lane() -> None:
    """The handshake and the first listing leave the session's httpx2 connection idle (the server keeps it 30 s); the
    first request on the lane (the reset's ``mcp_gym_reset``) closes it (public API: the session's transport lets go
    of its request pool), so after the reset a session keeps no idle socket beside the lane's. Later calls close
    nothing more."""
    proc, url = start_http_server("mcp_gym.servers.counter", "--diagnostics")  # its own: no other lane connection
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    env = MCPEnv({"c": Http(url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    try:
        env.reset(seed=0)
        assert env.host.connections["c"].http_wire.calls >= 1  # the reset's calls went on the lane
        before = _client_ports(port)
        assert len(before) == 1, before  # the lane's: the SDK's idle connection is closed
        obs, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "first"}})
        assert info["error"] is None and obs["result"] == "first", info["error"]
        after = _client_ports(port)
        assert after == before, (before, after)
        env.step({"tool": "echo", "arguments": {"text": "second"}})
        assert after <= _client_ports(port)  # no SDK traffic since: nothing more to close
    finally:
        env.close()
        stop_process(proc)


@pytest.fixture(scope="module")
def recorded_url() -> Iterator[tuple[str, list[tuple[dict[str, str], Any]]]]:
    """A real ``MCPServer`` (uvicorn, 127.0.0.1) with a tool whose ``region`` argument is an ``x-mcp-header``
    (``Mcp-Param-Region``), behind an ASGI layer that records each POST's headers and JSON body."""
    import json

    from mcp.server.mcpserver import MCPServer

    srv = MCPServer("recorded", log_level="WARNING")

    @srv.tool()
    async def where(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """Where the call goes."""
        return region

    inner = srv.streamable_http_app(host="127.0.0.1")
    posts: list[tuple[dict[str, str], Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await inner(scope, receive, send)
        body = await _read_body(receive)
        posts.append(({k.decode().lower(): v.decode() for k, v in scope["headers"]}, json.loads(body)))
        return await inner(scope, _replaying(body, receive), send)

    with _serving(app) as url:
        yield url, posts


def _wire_form(post: tuple[dict[str, str], Any]) -> tuple[dict[str, str], Any]:
    """A POST as the server reads it: its MCP headers (and content headers), its JSON-RPC body without the id."""
    headers, body = post
    kept = {k: v for k, v in headers.items() if k.startswith("mcp-") or k in ("accept", "content-type")}
    return kept, {k: v for k, v in body.items() if k != "id"}


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_the_lane_stamps_its_requests_as_the_session_stamps_its_own(
        recorded_url: tuple[str, list[Any]], protocol: str) -> None:
    """The lane's ``tools/list`` and ``tools/call`` reach the server as the SDK session's own do (the same MCP
    headers: ``MCP-Protocol-Version``, and on 2026-07-28 ``Mcp-Method``, ``Mcp-Name`` and the tool's
    ``Mcp-Param-Region``; the same body, era ``_meta`` included), with the lane's own ids; no private name of the SDK
    makes the stamp (``tests/test_private_names.py``)."""
    import mcp.types as mt

    from mcp_gym._compat import mcp_wire

    url, posts = recorded_url
    env = MCPEnv({"s": Http(url, protocol=protocol)}, ["t"], max_steps=100, call_timeout=30.0)
    try:
        env.reset(seed=0)
        conn = env.host.connections["s"]
        client, wire = conn.client, conn.http_wire
        assert client is not None and wire is not None

        async def both() -> list[Any]:
            del posts[:]
            await client.session.send_request(mt.ListToolsRequest(params=mt.PaginatedRequestParams()),
                                              mt.ListToolsResult)
            await mcp_wire.list_tools_raw(client, wire, {})
            await client.call_tool("where", {"region": "eu"})
            return [await mcp_wire.call_tool(client, "where", {"region": "eu"}, wire=wire, read_timeout_seconds=None,
                                             progress_callback=None, meta=None)]

        assert env.runtime.call(both)[0].structured_content == {"result": "eu"}
        assert [body["method"] for _, body in posts] == ["tools/list"] * 2 + ["tools/call"] * 2, posts
        sdk_list, lane_list, sdk_call, lane_call = posts
        assert sdk_list[1]["id"] < mcp_wire.LANE_IDS_FROM <= lane_list[1]["id"]
        assert sdk_call[1]["id"] < mcp_wire.LANE_IDS_FROM <= lane_call[1]["id"]
        assert _wire_form(lane_list) == _wire_form(sdk_list)
        assert _wire_form(lane_call) == _wire_form(sdk_call)
        headers = _wire_form(lane_call)[0]
        if protocol == "auto":
            assert conn.modern and "_meta" in lane_call[1]["params"]
            assert headers["mcp-method"] == "tools/call" and headers["mcp-name"] == "where"
            assert headers["mcp-param-region"] == "eu", headers
        else:
            assert not conn.modern and headers == {"mcp-protocol-version": conn.protocol_version,
                                                   "accept": headers["accept"],
                                                   "content-type": headers["content-type"],
                                                   "mcp-session-id": headers["mcp-session-id"]}, headers
    finally:
        env.close()


def test_the_lane_sends_nothing_before_the_sdk_has_ended_the_handshake(
        recorded_url: tuple[str, list[Any]]) -> None:
    """A legacy session's id reaches the lane with the SDK's first POST after ``initialize`` (its
    ``notifications/initialized``): the lane steps aside until the SDK has sent it, so every lane request carries the
    session id and none reaches the server before the handshake's end (a stateful server answers a request without
    the id with 400, which failed the first listing; the conformance suite's elicitation server caught it)."""
    from mcp_gym._compat import mcp_wire

    url, posts = recorded_url
    del posts[:]
    env = MCPEnv({"s": Http(url, protocol="legacy")}, ["t"], max_steps=100, call_timeout=30.0)
    try:
        for seed in range(2):
            env.reset(seed=seed)
            env.step({"tool": "where", "arguments": {"region": "eu"}})
    finally:
        env.close()
    methods = [body.get("method") for _, body in posts]
    end = methods.index("notifications/initialized")
    lane = [i for i, (_, body) in enumerate(posts) if isinstance(body.get("id"), int)
            and body["id"] >= mcp_wire.LANE_IDS_FROM]
    assert len(lane) >= 3, methods  # the steps and the second reset's listing take the lane
    for i in lane:
        assert i > end and posts[i][0].get("mcp-session-id"), (i, methods)
