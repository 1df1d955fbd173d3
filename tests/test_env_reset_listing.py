"""Reset without waste: ``reset`` re-lists a server's tools only when they may have changed since the last episode's
listing. Observed on the server side: real in-process MCP servers count the ``tools/list`` requests they receive."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer

from mcp_gym import InProcess, MCPEnv
from mcp_gym.protocol import RESET_TOOL
from mcp_gym.servers.counter import make_server


def counting(server: MCPServer) -> Counter[str]:
    """Count every request method the server receives (a server middleware: nothing on the client side is faked)."""
    seen: Counter[str] = Counter()

    async def count(ctx: Any, call_next: Any) -> Any:
        seen[ctx.method] += 1
        return await call_next(ctx)

    server._lowlevel_server.middleware.append(count)
    return seen


async def tools_changed(ctx: Context) -> None:
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()


def declare_list_changed(mcp: MCPServer) -> None:
    """Make a handshake-era MCPServer declare ``tools.listChanged`` (the SDK declares it only on 2026-07-28)."""
    low = mcp._lowlevel_server
    make = low.create_initialization_options
    low.create_initialization_options = lambda options=None, *a, **kw: make(  # type: ignore[method-assign]
        options or NotificationOptions(tools_changed=True), *a, **kw)


def dynamic_server(reset_adds_tool: bool = False, declared: bool = True) -> MCPServer:
    """A plain MCPServer (no mcp-gym hints: changes arrive only as list_changed notifications)."""
    mcp = MCPServer("dynamic", log_level="WARNING")
    if declared:
        declare_list_changed(mcp)
    grown: list[str] = []

    async def add_tool(ctx: Context) -> str:
        name = f"extra_{len(grown)}"
        grown.append(name)

        async def extra() -> str:
            return "extra"

        mcp.add_tool(extra, name=name)
        await tools_changed(ctx)
        return name

    @mcp.tool()
    async def ping() -> str:
        """Change nothing."""
        return "pong"

    @mcp.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool and say so."""
        return await add_tool(ctx)

    if reset_adds_tool:
        @mcp.tool(name=RESET_TOOL)
        async def reset(ctx: Context, task_id: str | None = None, seed: int = 0) -> str:
            return await add_tool(ctx)

    return mcp


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_reset_lists_tools_only_after_a_change(protocol: str) -> None:
    server = dynamic_server()
    seen = counting(server)
    env = MCPEnv({"s": InProcess(server, protocol=protocol)}, ["t"])
    try:
        env.reset(seed=0)
        assert env.host.connections["s"].capabilities.tools.list_changed is True
        listed = seen["tools/list"]
        for seed in range(1, 4):  # nothing changed: no re-listing, the same catalogue
            _, info = env.reset(seed=seed)
            env.step({"tool": "ping", "arguments": {}})
        assert seen["tools/list"] == listed
        assert info["tools"] == ["ping", "grow", "submit"]
        _, _, _, _, info = env.step({"tool": "grow", "arguments": {}})  # a change during the episode
        assert info["tools_changed"] and seen["tools/list"] == listed + 1
        _, info = env.reset(seed=9)  # the next episode lists again (a per-episode server may differ)
        assert seen["tools/list"] == listed + 2 and "extra_0" in info["tools"]
        env.reset(seed=10)
        assert seen["tools/list"] == listed + 2
    finally:
        env.close()


def test_a_change_during_reset_is_seen_by_that_reset() -> None:
    server = dynamic_server(reset_adds_tool=True)
    seen = counting(server)
    env = MCPEnv({"s": InProcess(server, protocol="legacy")}, ["t"])
    try:
        for k in range(3):  # every reset adds a tool with a list_changed notification: every reset sees it
            _, info = env.reset(seed=k)
            assert f"extra_{k}" in info["tools"] and f"extra_{k}" in env.action_space.tool_names
            _, _, _, _, info = env.step({"tool": f"extra_{k}", "arguments": {}})
            assert info["error"] is None and not info["tools_changed"]
        assert env.host.connections["s"].capabilities.tools.list_changed is True
        assert seen["tools/list"] >= 4
    finally:
        env.close()


def test_a_server_that_declares_no_list_changed_is_listed_every_reset() -> None:
    server = dynamic_server(declared=False)  # it may change its tools without telling: reset cannot trust the list
    seen = counting(server)
    env = MCPEnv({"s": InProcess(server, protocol="legacy")}, ["t"])
    try:
        env.reset(seed=0)
        listed = seen["tools/list"]
        env.reset(seed=1)
        env.reset(seed=2)
        assert env.host.connections["s"].capabilities.tools.list_changed is False
        assert seen["tools/list"] == listed + 2
    finally:
        env.close()


def test_episode_server_reset_skips_listing_and_drops_unlocked_tools() -> None:
    server = make_server(diagnostics=True)
    seen = counting(server.mcp)
    env = MCPEnv({"c": InProcess(server)}, ["t"])
    try:
        env.reset(seed=0)
        listed = seen["tools/list"]
        env.reset(seed=1)
        env.reset(seed=2)
        assert seen["tools/list"] == listed and seen["tools/call"] == 3  # only the three reset-tool calls
        _, _, _, _, info = env.step({"tool": "unlock_bonus", "arguments": {}})
        assert info["tools_changed"] and "bonus" in env.action_space.tool_names
        _, info = env.reset(seed=3)  # a new episode on the server: the gated tool is gone, and the env knows it
        assert "bonus" not in info["tools"] and "bonus" not in env.action_space.tool_names
        assert seen["tools/list"] == listed + 2
        env.reset(seed=4)
        assert seen["tools/list"] == listed + 2
    finally:
        env.close()


def _first_reset_in_loop(spec: Any, seed: int = 0) -> tuple[MCPEnv, dict[str, Any]]:
    """Construct the env inside the runtime loop (it connects in its first ``areset``) and reset once."""
    from mcp_gym.client.runtime import default_runtime

    async def go() -> tuple[MCPEnv, dict[str, Any]]:
        env = MCPEnv({"s": spec}, ["t"])
        _, info = await env.areset(seed=seed)
        return env, info

    return default_runtime().call(go)


def test_connecting_in_the_first_reset_lists_tools_once_for_that_episode() -> None:
    server = make_server(diagnostics=True)
    seen = counting(server.mcp)
    episodes: list[Any] = []

    async def note(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/list":
            episodes.append((ctx.meta or {}).get("mcp-gym/episode"))
        return await call_next(ctx)

    server.mcp._lowlevel_server.middleware.append(note)
    env, info = _first_reset_in_loop(InProcess(server))
    try:
        assert seen["tools/list"] == 1 and seen["tools/call"] == 1  # one listing (at connect), one reset-tool call
        assert episodes == [info["episode_id"]]  # the listing was made for this very episode
        assert "add" in info["tools"]
    finally:
        env.close()


def test_a_change_reported_by_the_first_reset_is_listed_by_it() -> None:
    server = dynamic_server(reset_adds_tool=True)  # its reset tool adds a tool (list_changed)
    seen = counting(server)
    env, info = _first_reset_in_loop(InProcess(server, protocol="legacy"))
    try:
        assert seen["tools/list"] == 2 and "extra_0" in info["tools"]
    finally:
        env.close()


def test_a_listing_made_outside_an_episode_is_not_trusted_by_the_first_reset() -> None:
    server = make_server(diagnostics=True)
    seen = counting(server.mcp)
    env = MCPEnv({"s": InProcess(server)}, ["t"])  # sync construction connects (and lists) before any episode
    try:
        assert seen["tools/list"] == 1
        env.reset(seed=0)  # that listing saw the server's default episode, which meta-less clients share
        assert seen["tools/list"] == 2
    finally:
        env.close()


def test_a_tool_an_earlier_reset_showed_is_not_listed_in_an_episode_that_hides_it() -> None:
    """A server whose reset shows a gated tool for some tasks only (per-task tools, as BFCL's): after an episode that
    showed it, the next episode's listing must not keep it; before, the env listed ``extra`` for task ``a`` and its
    call answered "Unknown tool"."""
    from episodes import per_task_tools_env

    env = per_task_tools_env()
    try:
        for task_id, tools in [("a", ["base", "submit"]), ("b", ["base", "extra", "submit"]), ("a", ["base", "submit"]),
                               ("a", ["base", "submit"]), ("b", ["base", "extra", "submit"])]:
            env.reset(options={"task_id": task_id})
            assert env.action_space.tool_names == tools, task_id
    finally:
        env.close()
