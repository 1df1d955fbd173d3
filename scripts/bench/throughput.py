"""Env steps per second with many concurrent episodes against stdio MCP servers, three ways, on the Counter env.

* ``mcp-gym``: :class:`mcp_gym.vector.VectorMCPEnv` -- N episodes on one event loop, sharing ``--servers`` long-lived
  stdio server processes (one session each; the server keeps a state per episode).
* ``per-call``: the tutorial pattern -- a new stdio session (a new server process) for every tool call (2 calls
  per episode slot, timed).
* ``AsyncVectorEnv``: Gymnasium's ``AsyncVectorEnv(shared_memory=False)``, a worker process per env, each env with its
  own stdio server.

Every step is the same tool call (``add(amount=1)``; episodes end at the target or after 10 steps, then reset).
Each measurement runs in a fresh interpreter; start-up is timed separately, and steps/s is counted over a window of
``--seconds`` once every episode is running. The defaults finish in about 2-3 minutes on 2 cores; the slow baselines
stop at ``--max-per-call`` and ``--max-async`` episodes (use ``--full`` to run them at every level)::

    python scripts/bench/throughput.py
    python scripts/bench/throughput.py --concurrency 1 8 32 128 512 --servers 4 --seconds 10 --full
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from typing import Any

COUNTER_SERVER = "mcp_gym.servers.counter"
ACTION = {"tool": "add", "arguments": {"amount": 1}}
MODES = ("mcp-gym", "per-call", "AsyncVectorEnv")


# -- the measurements, each in its own process ------------------------------------------------------------------------
def counter_env() -> Any:
    """The Counter env over a stdio server subprocess (a long connect timeout: many servers may start at once)."""
    from mcp_gym.client.specs import Stdio
    from mcp_gym.env import MCPEnv
    from mcp_gym.envs import env_module, load_env_tasks

    mod = env_module("Counter")
    return MCPEnv({mod.SERVER: Stdio.python_module(COUNTER_SERVER, connect_timeout=600.0)}, load_env_tasks("Counter"),
                  max_steps=mod.MAX_STEPS, observe_resources=mod.OBSERVE_RESOURCES, verifier=mod.verify,
                  env_id="mcp_gym/Counter-v0")


def tree_rss_mb() -> float:
    """Resident memory of this process and all its descendants, in MB (Linux ``/proc``; 0 elsewhere)."""
    import os

    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        children = [c for c, parent in parents.items() if parent == pid]
        tree.update(children)
        frontier.extend(children)
    return sum(rss.get(pid, 0) for pid in tree) / 2**20


def measure_ours(n: int, seconds: float, servers: int) -> dict[str, float]:
    import anyio

    from mcp_gym.client.runtime import default_runtime
    from mcp_gym.policies import Agent, Policy
    from mcp_gym.vector import EpisodeSpec, VectorMCPEnv

    class AddOne(Agent, Policy):
        name = "add-one"

        def agent(self, env: Any, obs: Any, info: Any, seed: int) -> Agent:
            return self

        async def act(self, obs: Any, info: Any) -> dict[str, Any]:
            return dict(ACTION)

    plan = (EpisodeSpec(f"e{i}", f"counter-{i % 120:04d}", i) for i in itertools.count())
    out: dict[str, float] = {}

    async def main() -> None:
        t0 = time.perf_counter()
        vec = VectorMCPEnv(lambda i: counter_env(), n, share_servers=servers, max_connecting=2)
        async with vec, anyio.create_task_group() as tg:
            tg.start_soon(vec.run, AddOne(), plan)
            while vec.steps < 2 * n:  # every episode is running
                await anyio.sleep(0.01)
            out["startup_s"] = time.perf_counter() - t0
            out["rss_mb"] = tree_rss_mb()
            s0, t1 = vec.steps, time.perf_counter()
            await anyio.sleep(seconds)
            out["steps_per_s"] = (vec.steps - s0) / (time.perf_counter() - t1)
            tg.cancel_scope.cancel()

    default_runtime().call(main)
    return out


def measure_per_call(n: int, calls: int) -> dict[str, float]:
    """Each of ``n`` workers makes ``calls`` tool calls, each on a new session to a new server process."""
    import os

    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", COUNTER_SERVER],
                                   env={"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})

    async def worker() -> None:
        for _ in range(calls):
            async with Client(params, mode="legacy") as client:  # connect, call, disconnect
                await client.call_tool("add", {"amount": 1})

    async def main() -> float:
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(worker)
        return n * calls / (time.perf_counter() - t0)

    return {"startup_s": 0.0, "steps_per_s": anyio.run(main)}


def measure_async_vector(n: int, seconds: float) -> dict[str, float]:
    import multiprocessing

    import gymnasium as gym

    # Not "fork": AsyncVectorEnv builds one env in this process first, and a forked child would inherit its event-loop
    # thread's state without the thread. Workers fork from a clean server process that has imported mcp_gym once.
    multiprocessing.set_forkserver_preload(["mcp_gym"])
    t0 = time.perf_counter()
    envs = gym.vector.AsyncVectorEnv([counter_env] * n, shared_memory=False, context="forkserver")
    envs.reset(seed=0)
    startup = time.perf_counter() - t0
    rss = tree_rss_mb()
    steps, resetting, t1 = 0, 0, time.perf_counter()
    while time.perf_counter() - t1 < seconds:
        _, _, terminated, truncated, _ = envs.step(tuple(dict(ACTION) for _ in range(n)))
        steps += n - resetting  # (autoreset: the step after an episode's end resets it and ignores the action)
        resetting = int((terminated | truncated).sum())
    rate = steps / (time.perf_counter() - t1)
    envs.close()
    return {"startup_s": startup, "steps_per_s": rate, "rss_mb": rss}


def worker(mode: str, n: int, seconds: float, servers: int) -> None:
    if mode == "mcp-gym":
        result = measure_ours(n, seconds, servers)
    elif mode == "per-call":
        result = measure_per_call(n, calls=2)
    else:
        result = measure_async_vector(n, seconds)
    print(json.dumps(result), flush=True)


# -- the driver -------------------------------------------------------------------------------------------------------
def run_one(mode: str, n: int, args: argparse.Namespace) -> dict[str, float] | None:
    cmd = [sys.executable, __file__, "--worker", mode, str(n), "--seconds", str(args.seconds),
           "--servers", str(args.servers)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"  {mode} x{n}: timed out after {args.timeout:g} s", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"  {mode} x{n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--servers", type=int, default=2, help="stdio server processes shared by mcp-gym's episodes")
    p.add_argument("--seconds", type=float, default=5.0, help="measurement window per run")
    p.add_argument("--max-per-call", type=int, default=8, help="largest concurrency for the per-call baseline")
    p.add_argument("--max-async", type=int, default=32, help="largest concurrency for AsyncVectorEnv")
    p.add_argument("--full", action="store_true", help="run the baselines at every concurrency")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--worker", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.seconds, args.servers)
        return
    limits = {"mcp-gym": None, "per-call": args.max_per_call, "AsyncVectorEnv": args.max_async}
    results: dict[str, dict[int, dict[str, float] | None]] = {m: {} for m in MODES}
    t0 = time.perf_counter()
    for n in args.concurrency:
        for mode in MODES:
            if args.full or limits[mode] is None or n <= limits[mode]:
                print(f"measuring {mode} with {n} concurrent episodes...", file=sys.stderr, flush=True)
                results[mode][n] = run_one(mode, n, args)
    _print_table(results, args)
    print(f"(benchmark took {time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({m: {str(n): r for n, r in rs.items()} for m, rs in results.items()}, f, indent=1)


def _print_table(results: dict[str, dict[int, dict[str, float] | None]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    def rate(mode: str, n: int) -> float | None:
        r = results[mode].get(n)
        return r["steps_per_s"] if r else None

    table = Table(title=f"Counter env over stdio: steps/s of mcp-gym ({args.servers} shared server processes), a "
                        f"session per call, and AsyncVectorEnv ({args.seconds:g} s windows); start-up and memory: "
                        "mcp-gym / AsyncVectorEnv", title_justify="left")
    for col in ("episodes", "mcp-gym", "per-call", "Async", "vs per-call", "vs Async", "start-up s", "memory MB"):
        table.add_column(col, justify="right")
    for n in args.concurrency:
        ours, per_call, vec = rate("mcp-gym", n), rate("per-call", n), rate("AsyncVectorEnv", n)
        starts = [results[m].get(n) for m in ("mcp-gym", "AsyncVectorEnv")]
        table.add_row(
            str(n), *(f"{v:.1f}" if v is not None else "-" for v in (ours, per_call, vec)),
            f"{ours / per_call:.0f}x" if ours and per_call else "-",
            f"{ours / vec:.1f}x" if ours and vec else "-",
            " / ".join(f"{s['startup_s']:.1f}" if s else "-" for s in starts),
            " / ".join(f"{s['rss_mb']:.0f}" if s else "-" for s in starts),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
