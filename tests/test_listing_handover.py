"""mcp-gym's checked tool listing reaches the SDK's session through its public API (the client's response-cache store
serves it to ``Client.list_tools``), and ``tools/call`` results are checked against the listed output schemas by
mcp-gym on every path (the fast lanes and the SDK's own ``Client.call_tool``)."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
import mcp.types as mt
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcp_gym import Http, InProcess, MCPEnv
from mcp_gym._compat import mcp_wire
from mcp_gym.client._http_lane import HttpWire
from mcp_gym.client._tools import ListingHandOver, list_tools_checked, listing_cache


class CountingServer(MCPServer):
    """An in-process server that counts the ``tools/list`` requests it answers, lists tool ``bad`` with an
    ``x-mcp-header`` on an array (invalid, 2026-07-28; ``MCPServer`` refuses to register one), and answers ``wrong``
    with a negative ``x`` outside its output schema (``MCPServer`` checks its tools' output)."""

    listings = 0

    async def list_tools(self) -> Any:
        type(self).listings += 1
        tools = await super().list_tools()
        for tool in tools:
            if tool.name == "bad":
                tool.input_schema["properties"]["k"]["x-mcp-header"] = "K"
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name == "wrong" and arguments.get("x", 0) < 0:
            return mt.CallToolResult(content=[], structured_content={"y": "not an int"})
        return await super().call_tool(name, arguments, context)


def server() -> CountingServer:
    mcp = CountingServer("handover")

    @mcp.tool(structured_output=True)
    def where(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> dict[str, str]:
        """Where the call goes."""
        return {"r": region}

    @mcp.tool(structured_output=True)
    def bad(k: list[str]) -> dict[str, str]:
        """Listed with an x-mcp-header on its array (see CountingServer)."""
        return {"r": ""}

    @mcp.tool(structured_output=True)
    def wrong(x: int) -> dict[str, int]:
        """For a negative x: structured content its output schema refuses (see CountingServer)."""
        return {"y": x}

    return mcp


def bad_tool() -> mt.Tool:
    """Tool ``bad`` as the server lists it (its ``x-mcp-header`` on an array: the session drops it)."""
    schema = {"type": "object", "properties": {"k": {"type": "array", "items": {"type": "string"},
                                                      "x-mcp-header": "K"}}, "required": ["k"]}
    return mt.Tool(name="bad", input_schema=schema)


def test_the_checked_listing_is_handed_to_the_session_without_a_second_request() -> None:
    """On a 2026-07-28 connection the session drops the tool with an invalid ``x-mcp-header`` (listed as skipped,
    with that reason), and knows the listed tools: the SDK's own ``Client.call_tool`` lists nothing again. The
    HTTP lane makes the same ``Mcp-Param-*`` headers from the kept tools (``HttpWire.listed``; on the wire:
    ``tests/test_http_lane.py``). The hand-over store caches nothing."""
    CountingServer.listings = 0

    async def main() -> None:
        async with Client(server(), mode="2026-07-28", cache=listing_cache()) as client:
            good, skipped, result = await list_tools_checked(client, None, 10)
            assert CountingServer.listings == 1  # the hand-over sent no request
            assert sorted(t.name for t in good) == ["where", "wrong"] == sorted(t.name for t in result.tools)
            assert skipped == [{"name": "bad", "reason": "invalid x-mcp-header annotation"}]
            wire = HttpWire(Http("http://127.0.0.1:9/mcp"))
            wire.listed(good + [bad_tool()], client.protocol_version)
            assert sorted(wire.param_maps) == ["where", "wrong"] and wire.param_maps["where"] == {("region",): "Region"}
            called = await mcp_wire.call_tool(client, "where", {"region": "eu"}, wire=None, read_timeout_seconds=10,
                                              progress_callback=None, meta=None)
            assert called.structured_content == {"r": "eu"}
            assert CountingServer.listings == 1  # the SDK's path knew the tool: no listing before its check
            assert isinstance(client.cache.store, ListingHandOver) and client.cache.store.pending is None
            assert await client.cache.store.get(type("K", (), {"method": "tools/list"})()) is None  # once only

    anyio.run(main)


def test_an_output_schema_is_enforced_on_the_sdks_path_with_the_sdks_message() -> None:
    """An in-process server (no fast lane: the SDK's ``Client.call_tool``) whose result breaks the tool's output
    schema: the step fails ``invalid_result`` with the message the SDK's own check gives."""
    srv = server()

    async def sdk_message() -> str:
        async with Client(srv, cache=None) as client:  # the SDK alone: its own listing and check
            await client.list_tools()
            with pytest.raises(RuntimeError) as e:
                await client.call_tool("wrong", {"x": -1})
            return str(e.value)

    expected = anyio.run(sdk_message)
    assert expected.startswith("Invalid structured content returned by tool wrong")
    env = MCPEnv({"s": InProcess(srv)}, ["t"], call_timeout=10)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step({"tool": "wrong", "arguments": {"x": 2}})
        assert info["error"] is None and info["structured_content"] == {"y": 2}
        _, _, _, _, info = env.step({"tool": "wrong", "arguments": {"x": -1}})
        assert info["error"] is not None and info["error"]["kind"] == "invalid_result", info["error"]
        assert expected in info["error"]["message"], (expected, info["error"]["message"])
    finally:
        env.close()
