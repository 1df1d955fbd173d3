"""Client CPU cost of large tool results over stdio: mcp-gym's transport vs the SDK's ``stdio_client``.

A raw JSON-RPC server (``tests/servers/bad_server.py``, tool ``big``) answers one ``tools/call`` with a text of N MB.
The client process's CPU time (``time.process_time``, the server is another process) is measured around the call, for
the same ``mcp.Client`` over each transport, and end to end through ``MCPEnv.step`` with mcp-gym's. Linear reading
costs ~4x for 4x the bytes; the SDK's reader re-joins its buffer per chunk and costs ~16x.

    python scripts/bench/large_results.py                 # 10 MB and 40 MB, 3 rounds each
    python scripts/bench/large_results.py --sizes 5 20 --rounds 1 --no-sdk
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_gym import MCPEnv, Stdio
from mcp_gym.client._stdio import StdioState, stdio_transport

SERVER = str(Path(__file__).resolve().parents[2] / "tests" / "servers" / "bad_server.py")
TOOLS = '[{"name": "big", "inputSchema": {"type": "object"}}]'
CAP = 1 << 30


def params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[SERVER, "--tools", TOOLS])


async def client_cpu(transport: Any, mb: float) -> float:
    async with Client(transport, mode="legacy", cache=None) as client:
        await client.list_tools()
        t0 = time.process_time()
        res = await client.call_tool("big", {"mb": mb})
        cpu = time.process_time() - t0
        assert len(res.content[0].text) == int(mb * 1_000_000), "wrong result size"
    return cpu


def env_cpu(env: MCPEnv, mb: float) -> float:
    t0 = time.process_time()
    _, _, _, _, info = env.step({"tool": "big", "arguments": {"mb": mb}})
    cpu = time.process_time() - t0
    assert info["error"] is None, info["error"]
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs=2, default=[10.0, 40.0], metavar=("SMALL_MB", "LARGE_MB"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-sdk", action="store_true", help="skip the SDK's stdio_client (slow: quadratic)")
    a = ap.parse_args()
    small, large = a.sizes
    rows: list[tuple[str, float, float]] = []

    def med(fn: Any) -> float:
        return statistics.median(fn() for _ in range(a.rounds))

    ours = {mb: med(lambda mb=mb: anyio.run(client_cpu, stdio_transport(params(), StdioState(),
                                                                     max_message_bytes=CAP), mb))
            for mb in (small, large)}
    rows.append(("mcp-gym stdio transport (Client.call_tool)", ours[small], ours[large]))
    env = MCPEnv({"s": Stdio(sys.executable, [SERVER, "--tools", TOOLS], max_message_bytes=CAP)}, ["t"],
                 call_timeout=None)
    env.reset(seed=0)
    envs = {mb: med(lambda mb=mb: env_cpu(env, mb)) for mb in (small, large)}
    env.close()
    rows.append(("mcp-gym MCPEnv.step (end to end)", envs[small], envs[large]))
    if not a.no_sdk:
        sdk = {mb: med(lambda mb=mb: anyio.run(client_cpu, stdio_client(params()), mb)) for mb in (small, large)}
        rows.append(("SDK stdio_client (Client.call_tool)", sdk[small], sdk[large]))

    print(f"client CPU seconds per result, median of {a.rounds} (size ratio {large / small:g}x)")
    print(f"| path | {small:g} MB | {large:g} MB | ratio | CPU s per 10 MB at {large:g} MB |")
    print("|---|---|---|---|---|")
    for name, s, lg in rows:
        print(f"| {name} | {s:.2f} | {lg:.2f} | {lg / s:.1f}x | {lg / large * 10:.2f} |")
    if not a.no_sdk:
        print(f"SDK / mcp-gym at {large:g} MB: {rows[-1][2] / rows[0][2]:.1f}x")


if __name__ == "__main__":
    main()
