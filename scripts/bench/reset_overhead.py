"""What does env.reset cost on top of the server work it must do? Measured side by side in one run.

For the bundled Counter server, in-process and over stdio, each round times N raw SDK ``Client.call_tool`` calls of its
hidden reset tool (``mcp_gym_reset``, awaited inside the client's own loop: the SDK floor of a reset by tool) and N
``env.reset`` calls (episode bookkeeping, the reset tool, re-listing tools only if they may have changed, observed
resources), interleaved so machine noise hits both alike. Prints medians, the overhead (env.reset minus the raw call)
in ms, and the ratio. A second env observes a resource (``counter://state``: one more read per reset).

    python scripts/bench/reset_overhead.py --rounds 7 --resets 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mcp import Client, StdioServerParameters

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime
from mcp_gym.protocol import RESET_TOOL
from mcp_gym.servers.counter import make_server


class RawClient:
    """An SDK Client owned by one task on its own loop; `timed(n)` times n reset-tool calls inside that loop."""

    def __init__(self, target: Any) -> None:
        self.rt = Runtime("raw-sdk")
        self.client = Client(target, cache=None)
        self.rt.call(self.client.__aenter__)

    def timed(self, n: int) -> list[float]:
        async def run() -> list[float]:
            out = []
            for i in range(n):
                t = time.perf_counter()
                await self.client.call_tool(RESET_TOOL, {"task_id": "t", "seed": i}, meta={"mcp-gym/episode": "raw"})
                out.append(time.perf_counter() - t)
            return out

        return self.rt.call(run)


def timed_resets(env: MCPEnv, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        env.reset(seed=i)
        out.append(time.perf_counter() - t)
    return out


def compare(label: str, raw: RawClient, envs: dict[str, MCPEnv], rounds: int, n: int) -> None:
    for env in envs.values():
        timed_resets(env, 5)  # warm up (the first reset lists the tools)
    raw.timed(5)
    raw_med: list[float] = []
    env_med: dict[str, list[float]] = {name: [] for name in envs}
    sides: list[tuple[str | None, Any]] = [(None, lambda: raw.timed(n))]
    sides += [(name, lambda env=env: timed_resets(env, n)) for name, env in envs.items()]
    for k in range(rounds):  # the order rotates every round, so drift does not favour one side
        for name, run in sides[k % len(sides):] + sides[: k % len(sides)]:
            (raw_med if name is None else env_med[name]).append(statistics.median(run()))
    raw_ms = statistics.median(raw_med) * 1e3
    print(f"{label:<11} raw SDK call_tool({RESET_TOOL}) {raw_ms:6.3f} ms")
    for name, meds in env_med.items():
        ratios = [e / r for e, r in zip(meds, raw_med, strict=True)]
        over = [e - r for e, r in zip(meds, raw_med, strict=True)]
        print(f"  env.reset, {name:<22} {statistics.median(meds) * 1e3:6.3f} ms   overhead "
              f"{statistics.median(over) * 1e3:6.3f} ms   ratio {statistics.median(ratios):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--resets", type=int, default=100)
    a = p.parse_args()
    print(f"env.reset vs the raw SDK reset-tool call, median of {a.rounds} interleaved rounds x {a.resets} resets")

    server = make_server()
    raw = RawClient(server.mcp)
    envs = {"tools only": MCPEnv({"c": InProcess(server)}, ["t"], runtime=Runtime()),
            "+ observed resource": MCPEnv({"c": InProcess(server)}, ["t"], runtime=Runtime(),
                                          observe_resources=["counter://state"])}
    compare("in-process", raw, envs, a.rounds, a.resets)
    for env in envs.values():
        env.close()

    spec = Stdio.python_module("mcp_gym.servers.counter")
    raw = RawClient(StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env or {})))
    envs = {"tools only": MCPEnv({"c": spec}, ["t"], runtime=Runtime()),
            "+ observed resource": MCPEnv({"c": spec}, ["t"], runtime=Runtime(), observe_resources=["counter://state"])}
    compare("stdio", raw, envs, a.rounds, a.resets)
    for env in envs.values():
        env.close()
    print("target: in-process reset overhead <= 1 ms")


if __name__ == "__main__":
    main()
