"""The fast lane owns its requests on the wire (issue 40): its own request ids beside the SDK session's, and the
courtesy ``notifications/cancelled`` of a call that timed out reaches the server, on a real stdio server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from pydantic import ValidationError

from mcp_gym import MCPEnv, Stdio
from mcp_gym._compat.mcp_wire import LANE_IDS_FROM

SERVER = '''
import anyio
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("owner")
cancelled: list[str] = []


@mcp.tool()
async def request_id(ctx: Context) -> str:
    """The id of this request, as the server read it."""
    return ctx.request_id


@mcp.tool()
async def slow(ctx: Context) -> str:
    """Waits a minute, noting a cancellation."""
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        cancelled.append(ctx.request_id)
        raise
    return "done"


@mcp.tool()
async def cancellations() -> str:
    """The ids of the cancelled requests (waits up to 20 s for a first one)."""
    with anyio.move_on_after(20):
        while not cancelled:
            await anyio.sleep(0.01)
    return ",".join(cancelled)


mcp.run()
'''


@pytest.fixture
def env(tmp_path: Path) -> Iterator[MCPEnv]:
    script = tmp_path / "owner_server.py"
    script.write_text(SERVER, encoding="utf-8")
    e = MCPEnv({"s": Stdio(sys.executable, [str(script)])}, ["t"], max_steps=100, call_timeout=30.0)
    e.reset(seed=0)
    try:
        yield e
    finally:
        e.close()


def test_lane_requests_carry_ids_of_their_own(env: MCPEnv) -> None:
    conn = env.host.connections["s"]
    ids = []
    for _ in range(3):
        obs, _, _, _, info = env.step({"tool": "request_id", "arguments": {}})
        assert info["error"] is None, info["error"]
        ids.append(int(obs["result"]))
    assert all(i >= LANE_IDS_FROM for i in ids) and len(set(ids)) == 3, ids
    client = conn.client
    assert client is not None

    async def listing() -> list[str]:  # the SDK session's own requests go on beside them, with its own ids
        return [t.name for t in (await client.list_tools()).tools]

    assert "slow" in env.runtime.call(listing)
    obs, _, _, _, info = env.step({"tool": "request_id", "arguments": {}})
    assert info["error"] is None and int(obs["result"]) == ids[-1] + 1, (obs, info["error"])


def test_a_timed_out_call_is_cancelled_on_the_server(env: MCPEnv) -> None:
    conn = env.host.connections["s"]

    async def timed_out() -> str:
        from mcp import MCPError

        with pytest.raises(MCPError) as caught:
            await conn.call_tool("slow", {}, timeout=0.5)
        return str(caught.value)

    message = env.runtime.call(timed_out)
    assert "timed out" in message, message
    obs, _, _, _, info = env.step({"tool": "cancellations", "arguments": {}})
    assert info["error"] is None, info["error"]
    cancelled = [int(i) for i in obs["result"].split(",") if i]
    assert len(cancelled) == 1 and cancelled[0] >= LANE_IDS_FROM, obs["result"]


# -- tools/list: fetched raw on the lane (one bad tool costs only that tool), the SDK's bytes --------------------------
BAD_SERVER = str(Path(__file__).resolve().parent / "servers" / "bad_server.py")
ECHO = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object",
                                                                 "properties": {"text": {"type": "string"}}}}


def _raw_lines(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp / "raw").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
def test_the_tool_listing_goes_on_the_lane_and_a_bad_tool_costs_only_that_tool(tmp_path: Path, era: str) -> None:
    """A listing with a tool the protocol schema refuses (no ``inputSchema``): only that tool is skipped. The listing
    is the lane's own request (its own id), written as the SDK writes one (``params`` left out when empty; on
    2026-07-28 the era ``_meta`` the session stamped on its own request). On 2026-07-28 the first listing goes
    through the session (the lane has no stamp yet), which refuses the page whole; the lane fetches it again raw."""
    args = [BAD_SERVER, "--tools", json.dumps([ECHO, {"name": "bad"}]), "--raw-log", str(tmp_path / "raw")]
    env = MCPEnv({"s": Stdio(sys.executable, args + (["--modern"] if era != "handshake" else []))}, ["t"],
                 call_timeout=10.0)
    try:
        _, info = env.reset(seed=0)
        srv = info["servers"]["s"]
        assert srv["tools_error"] is None and env.action_space.tool_names == ["echo", "submit"], srv
        assert [t["name"] for t in srv["skipped_tools"]] == ["bad"], srv["skipped_tools"]
        client = env.host.connections["s"].client
        assert client is not None
        env.runtime.call(lambda: client.session.send_request(  # the SDK's own listing, for its bytes
            mt.ListToolsRequest(params=mt.PaginatedRequestParams()), mt.ListToolsResult))
    except ValidationError:
        pass  # the SDK refuses the page (the bad tool): its request is written all the same
    finally:
        env.close()
    listings = [m for m in _raw_lines(tmp_path) if m.get("method") == "tools/list"]
    sdk = [m for m in listings if m["id"] < LANE_IDS_FROM]
    lane = [m for m in listings if m["id"] >= LANE_IDS_FROM]
    assert len(sdk) == (1 if era == "handshake" else 2) and lane, listings  # the test's own (+ the first, 2026)
    first = lane[0]
    assert {k: v for k, v in first.items() if k != "id"} == {k: v for k, v in sdk[-1].items() if k != "id"}, \
        (first, sdk[-1])
    if era != "handshake":
        assert first["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    else:
        assert "params" not in first


def test_without_a_lane_a_tool_the_schema_refuses_fails_the_listing_by_name(tmp_path: Path) -> None:
    """Where no lane serves the session (here the SDK's own stdio transport; in-process and old-SSE servers, an HTTP
    session with ``auth=``) the listing comes through the session's public ``send_request``, validated whole: a tool
    the protocol schema refuses fails the listing, with one line naming where; the other checks still cost only the
    tool (here a duplicate name)."""
    import anyio
    from mcp import Client, StdioServerParameters

    from mcp_gym.client._tools import ListingError, list_tools_checked, listing_cache

    async def listing(tools: list[Any]) -> Any:
        params = StdioServerParameters(command=sys.executable, args=[BAD_SERVER, "--tools", json.dumps(tools)])
        async with Client(params, cache=listing_cache()) as client:
            try:
                return await list_tools_checked(client, None, 10)
            except ListingError as e:
                return str(e)

    assert anyio.run(listing, [ECHO, {"name": "bad"}]) == "tools/list result is invalid: tools.1.inputSchema: Field " \
        "required"
    good, skipped, _ = anyio.run(listing, [ECHO, ECHO])
    assert [t.name for t in good] == ["echo"] and [s["reason"] for s in skipped] == [
        "duplicate name (an earlier tool of this server has it; the first one is kept)"]


# -- the session's own requests whose ids are names (the SDK's subscriptions/listen: "listen-1", ...) ------------------
def _listen_env(mode: str) -> MCPEnv:
    tools = [{**tool, "annotations": {"readOnlyHint": True}} for tool in (ECHO, {**ECHO, "name": "end_listen"})]
    args = [BAD_SERVER, "--modern", "--listen", mode, "--tools", json.dumps(tools)]
    return MCPEnv({"s": Stdio(sys.executable, args)}, ["t"], call_timeout=10.0)


def test_a_refused_listen_stream_is_the_sessions_answer_not_a_stray(caplog: pytest.LogCaptureFixture) -> None:
    """A 2026-07-28 server that declares ``tools.listChanged`` but refuses ``subscriptions/listen``: the error's id is
    the SDK's ``listen-1``, a string. It reaches the session (the stream is known refused), instead of being ignored
    as a response no request has (then the first reset waited 10 s for an acknowledgment that could not come)."""
    env = _listen_env("refuse")
    try:
        with caplog.at_level("WARNING", logger="mcp_gym.client"):
            env.reset(seed=0)
        conn = env.host.connections["s"]
        assert conn._listening == 0 and not conn.reports_tool_changes
        _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
        assert info["error"] is None, info["error"]
    finally:
        env.close()
    assert "which no request has" not in caplog.text, caplog.text


def test_a_listen_stream_the_server_ends_is_seen_ended() -> None:
    """The server ends its acknowledged listen stream (its result to ``listen-1``): the connection no longer counts
    it, so tool changes are no longer taken as reported (before, the result was dropped as a stray and the stream
    counted as listening for good: a later change of the tools would have gone unseen)."""
    import anyio

    env = _listen_env("ack")
    try:
        env.reset(seed=0)
        conn = env.host.connections["s"]
        assert conn._listening == 1 and conn.reports_tool_changes
        _, _, _, _, info = env.step({"tool": "end_listen", "arguments": {}})
        assert info["error"] is None, info["error"]

        async def ended() -> None:
            with anyio.fail_after(30):  # a bound, not a timing: it ends as soon as the session read the result
                while conn._listening:
                    await anyio.sleep(0.01)

        env.runtime.call(ended)
        assert not conn.reports_tool_changes
    finally:
        env.close()
