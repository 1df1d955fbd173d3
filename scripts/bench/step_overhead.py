"""What does env.step cost on top of the raw SDK call? Measured side by side in one run.

For the same bundled server (``echo`` tool) over stdio and in-process, each round times N raw
``Client.call_tool`` calls (awaited inside the client's own event loop: the SDK floor) and N ``env.step`` calls
(sync face: argument validation, observation building, and running the runtime loop: in the caller's thread by
default, or with a hop onto a loop thread in threaded mode, both measured), interleaved so machine noise hits all
alike. Reports medians and the median of per-round ratios, and this process's CPU time per call (steadier than wall
time on a busy machine; over stdio it is the client's own cost), then where the time goes (thread hop, validation,
async step without the hop), then reset-by-tool vs reset-by-restart (reset_overhead.py compares reset with the raw SDK).

    python scripts/bench/step_overhead.py --rounds 7 --calls 200
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from mcp import Client, StdioServerParameters

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.client.runtime import Runtime
from mcp_gym.servers.counter import make_server

ACTION = {"tool": "echo", "arguments": {"text": "hello"}}
THREADED = Runtime("threaded", threaded=True)


def stdio_spec() -> Stdio:
    return Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")


class RawClient:
    """An SDK Client owned by one task on its own loop; `timed(n)` measures n calls inside that loop."""

    def __init__(self, target: Any) -> None:
        self.rt = Runtime("raw-sdk")
        self.client = Client(target, cache=None)
        self.rt.call(self.client.__aenter__)

    def timed(self, n: int) -> list[float]:
        async def run() -> list[float]:
            out = []
            for _ in range(n):
                t = time.perf_counter()
                await self.client.call_tool("echo", {"text": "hello"})
                out.append(time.perf_counter() - t)
            return out

        return self.rt.call(run)


def timed_steps(env: MCPEnv, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        env.step(ACTION)
        out.append(time.perf_counter() - t)
    return out


def compare(label: str, raw: RawClient, envs: dict[str, MCPEnv], rounds: int, calls: int) -> None:
    """Raw SDK calls vs ``env.step`` on each env (same server), interleaved per round; prints medians and ratios."""
    for env in envs.values():
        env.reset(seed=0)
        timed_steps(env, 20)  # warm up
    raw.timed(20)
    raw_med: list[float] = []
    env_med: dict[str | None, list[float]] = {name: [] for name in envs}
    cpu: dict[str | None, list[float]] = {name: [] for name in [None, *envs]}  # this process's CPU per call
    sides: list[tuple[str | None, Callable[[], list[float]]]] = [(None, lambda: raw.timed(calls))]
    sides += [(name, lambda env=env: timed_steps(env, calls)) for name, env in envs.items()]
    for k in range(rounds):  # the order rotates every round, so drift does not favour one side
        for name, run in sides[k % len(sides):] + sides[: k % len(sides)]:
            c0 = time.process_time()
            (raw_med if name is None else env_med[name]).append(statistics.median(run()))
            cpu[name].append((time.process_time() - c0) / calls)
    raw_us = statistics.median(raw_med) * 1e6
    raw_cpu = statistics.median(cpu[None]) * 1e6
    print(f"{label:<11} raw SDK call_tool {raw_us:6.0f} µs   (client CPU {raw_cpu:5.0f} µs/call)")
    for name, meds in env_med.items():
        ratios = [e / r for e, r in zip(meds, raw_med, strict=True)]
        rounds_txt = ", ".join(f"{x:.2f}" for x in ratios)
        cpu_ratios = [e / r for e, r in zip(cpu[name], cpu[None], strict=True)]
        print(f"  env.step, {name:<26} {statistics.median(meds) * 1e6:6.0f} µs   ratio {statistics.median(ratios):.3f}"
              f"  (per-round: {rounds_txt})   client CPU {statistics.median(cpu[name]) * 1e6:5.0f} µs/call, ratio "
              f"{statistics.median(cpu_ratios):.3f}")


def breakdown(env: MCPEnv, calls: int) -> None:
    rt = env._rt

    async def noop() -> None:
        return None

    def per_call(fn: Callable[[], Any]) -> float:
        ts = []
        for _ in range(calls):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e6

    hop = per_call(lambda: rt.call(noop))
    hop_threaded = per_call(lambda: THREADED.call(noop))
    validate = per_call(lambda: env.action_space.validation_error(ACTION))

    async def async_steps() -> list[float]:
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            await env._astep(ACTION)
            out.append(time.perf_counter() - t)
        return out

    env.reset(seed=0)
    astep = statistics.median(rt.call(async_steps)) * 1e6
    sstep = statistics.median(timed_steps(env, calls)) * 1e6
    mode = "threaded" if rt.threaded else "driven"
    print(f"  where the time goes: empty sync call {hop:.0f} µs ({mode}; threaded hop {hop_threaded:.0f} µs), "
          f"validation {validate:.0f} µs, async step on the loop {astep:.0f} µs, sync env.step {sstep:.0f} µs")


def reset_costs(rounds: int) -> None:
    tool = MCPEnv({"c": stdio_spec()}, ["t"], reset_mode="auto")
    restart = MCPEnv({"c": stdio_spec()}, ["t"], reset_mode="restart")
    t_tool, t_restart = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        tool.reset(seed=0)
        t_tool.append(time.perf_counter() - t)
        t = time.perf_counter()
        restart.reset(seed=0)
        t_restart.append(time.perf_counter() - t)
    a, b = statistics.median(t_tool), statistics.median(t_restart)
    print(f"reset (stdio)  by tool {a * 1e3:7.1f} ms   by restart {b * 1e3:7.1f} ms   restart/tool {b / a:.0f}x")
    tool.close()
    restart.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()

    print(f"env.step vs raw SDK call_tool, median of {a.rounds} interleaved rounds x {a.calls} calls; the sync face "
          "driven (the default: the caller's thread runs the loop) and threaded (a hop onto a loop thread)")
    spec = stdio_spec()
    raw = RawClient(StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env or {})))
    envs = {"driven (default)": MCPEnv({"c": spec}, ["t"], max_steps=10**9, runtime=Runtime()),
            "threaded": MCPEnv({"c": spec}, ["t"], max_steps=10**9, runtime=THREADED)}
    compare("stdio", raw, envs, a.rounds, a.calls)
    breakdown(envs["driven (default)"], a.calls)
    for env in envs.values():
        env.close()

    server = make_server(diagnostics=True)
    raw_ip = RawClient(server.mcp)
    envs = {"driven (default)": MCPEnv({"c": InProcess(server)}, ["t"], max_steps=10**9, runtime=Runtime()),
            "threaded": MCPEnv({"c": InProcess(server)}, ["t"], max_steps=10**9, runtime=THREADED)}
    compare("in-process", raw_ip, envs, a.rounds, a.calls)
    breakdown(envs["driven (default)"], a.calls)
    for env in envs.values():
        env.close()
    reset_costs(max(3, a.rounds))
    print("targets: stdio ratio <= 1.10, in-process ratio <= 1.5")


if __name__ == "__main__":
    main()
