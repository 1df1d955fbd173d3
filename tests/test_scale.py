"""Many concurrent episodes in one process against one real Streamable HTTP server (a reduced
``scripts/bench/scale.py``), and the shared TLS context that keeps an HTTP session cheap."""

from __future__ import annotations

import ssl
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import Context, MCPServer

from mcp_gym import InProcess, MCPEnv
from mcp_gym.client._http import shared_ssl_context
from mcp_gym.client.runtime import default_runtime
from mcp_gym.client.specs import Http
from mcp_gym.envs.counter.tasks import generate_tasks

N = 300
STEPS = 2


@pytest.mark.slow
def test_300_concurrent_episodes_over_one_http_server(http_counter: str) -> None:
    """300 MCPEnv sessions on one loop, each connects, resets and steps concurrently: no error, every episode ends,
    and each episode's counter moved by its own steps only (no state crosses episodes)."""
    tasks = [t for t in generate_tasks() if abs(int(t.data["target"])) > STEPS]  # never reached in STEPS adds
    errors: list[Any] = []
    finished: list[int] = []
    counts: dict[int, list[int]] = {}

    async def episode(i: int, gate: anyio.Semaphore) -> None:
        env = MCPEnv({"testing": Http(http_counter, connect_timeout=300.0)}, tasks, max_steps=STEPS,
                     call_timeout=300.0, reset_timeout=300.0)
        try:
            async with gate:  # connecting at most 50 at a time, as a training loop's warm-up would
                _, info = await env.areset(seed=i)
            errors.extend(info["reset_errors"])
            amount = 1 if i % 2 else -1
            seen = counts.setdefault(i, [])
            done = False
            while not done:
                _, _, terminated, truncated, info = await env.astep({"tool": "add", "arguments": {"amount": amount}})
                if info["error"] is not None:
                    errors.append(info["error"])
                    break
                seen.append(info["structured_content"]["count"])
                done = terminated or truncated
            if done:
                finished.append(i)
        finally:
            await env.aclose()

    async def main() -> None:
        gate = anyio.Semaphore(50)
        async with anyio.create_task_group() as tg:
            for i in range(N):
                tg.start_soon(episode, i, gate)

    default_runtime().call(main)
    assert errors == []
    assert sorted(finished) == list(range(N))
    for i, seen in counts.items():
        sign = 1 if i % 2 else -1
        assert seen == [sign * k for k in range(1, STEPS + 1)], f"episode {i} saw {seen}"


def test_http_sessions_share_one_tls_context(http_counter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connecting HTTP sessions loads no CA bundle once the shared TLS context exists (the SDK's default client
    loads one per session: ~27 ms of CPU and ~0.8 MB each)."""
    shared_ssl_context()
    loads: list[Any] = []
    original = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *a: Any, **kw: Any) -> None:
        loads.append(a or kw)
        original(self, *a, **kw)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    from mcp.shared._httpx_utils import create_mcp_http_client

    create_mcp_http_client()  # the SDK's default client for one session: the probe sees its CA bundle load
    assert len(loads) == 1
    loads.clear()
    envs = [MCPEnv({"testing": Http(http_counter)}, ["Move the counter."]) for _ in range(5)]
    try:
        for env in envs:
            env.reset(seed=0)
            assert env.host.connections["testing"].status == "ready"
    finally:
        for env in envs:
            env.close()
    assert loads == []


def test_change_stream_opens_after_the_first_listing_for_a_plain_server() -> None:
    """A server without mcp-gym's reset tool (no changes in result _meta) still gets its ``tools/list_changed``
    through the 2026-era change stream, which now opens after the first listing instead of at connect."""
    srv = MCPServer("plain", log_level="WARNING")

    @srv.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `extra` and say so."""

        async def extra() -> str:
            """A tool that appears later."""
            return "extra"

        srv.add_tool(extra, name="extra")
        await ctx.notify_tools_changed()
        return "grown"

    @srv.tool()
    async def noop() -> str:
        """Nothing."""
        return "ok"

    env = MCPEnv({"plain": InProcess(srv)}, ["Grow."])
    try:
        env.reset(seed=0)
        assert env.host.connections["plain"].modern
        assert "extra" not in env.action_space.tool_names
        _, _, _, _, info = env.step({"tool": "grow", "arguments": {}})
        changed = info["tools_changed"]
        for _ in range(100):  # the event travels on its own stream: a later step applies it
            if changed:
                break
            _, _, _, _, info = env.step({"tool": "noop", "arguments": {}})
            changed = info["tools_changed"]
        assert changed and "extra" in env.action_space.tool_names
    finally:
        env.close()
