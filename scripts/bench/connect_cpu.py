"""Client CPU per episode for connect + first reset over Streamable HTTP: mcp-gym vs the raw SDK, side by side.

One bundled Counter server (``python -m mcp_gym.servers.counter --transport http``, as ``scale.py`` starts it)
serves every round. Each round runs in a fresh client interpreter (cold process caches, as a training job starts):
N sessions open concurrently (at most ``--connect-concurrency`` at a time) and each does its first reset, then all
close. Measured: client CPU (``time.process_time``) from the first connect to the last first reset, divided by N.

* ``mcp-gym``: N :class:`~mcp_gym.env.MCPEnv` objects (the Counter env, ``counter://state`` observed) awaiting
  ``areset`` on the runtime loop.
* ``raw-sdk``: N SDK ``Client`` sessions making the equivalent requests by hand: the handshake, ``tools/list``, the
  hidden ``mcp_gym_reset`` tool and ``resources/read`` (an ``httpx2.AsyncClient`` on one shared TLS context each, as
  ``scale.py``'s raw side).
* floors (``--modes``): ``raw-sdk-adopt``, the raw SDK adopting one ``server/discover`` answer fetched before the
  measured phase (``Client(mode=version, prior_discover=...)``, as mcp-gym's sessions do while the server's ``ttlMs``
  lasts: 3 requests); ``httpx``, those 3 requests as plain ``httpx2`` POSTs and ``json`` (no SDK).

The sides alternate (ABBA) over ``--rounds``; each round prints both sides and their ratio, then the medians.
``--requests`` counts the HTTP requests per episode by JSON-RPC method (and GETs / DELETEs); ``--profile K`` prints
cProfile's top K functions (by internal and by cumulative time) of one extra round per side.

    python scripts/bench/connect_cpu.py                  # N=200, 4 rounds
    python scripts/bench/connect_cpu.py --n 200 --rounds 2 --requests --profile 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import raise_nofile, start_server  # noqa: E402 - the same server start as scale.py

MODES = ("mcp-gym", "raw-sdk", "raw-sdk-adopt", "httpx")
STATE_URI = "counter://state"


def worker(mode: str, n: int, port: int, concurrency: int, count: bool, profile: int) -> dict[str, Any]:
    import collections
    import cProfile
    import gc
    import io
    import pstats

    import anyio
    import httpx2

    from mcp_gym.client.runtime import default_runtime

    raise_nofile()
    url = f"http://127.0.0.1:{port}/mcp"
    errors: list[str] = []
    requests: collections.Counter[str] = collections.Counter()
    if count:
        _send = httpx2.AsyncClient.send

        async def counted(self: Any, request: Any, **kw: Any) -> Any:
            what = request.method
            if what == "POST":
                try:
                    body = json.loads(request.content)
                    what = body.get("method") or "response"
                except ValueError:
                    what = "POST ?"
            requests[what] += 1
            return await _send(self, request, **kw)

        httpx2.AsyncClient.send = counted  # type: ignore[method-assign]

    if mode == "mcp-gym":
        from mcp_gym import MCPEnv
        from mcp_gym.client.specs import Http
        from mcp_gym.envs.counter.tasks import generate_tasks

        tasks = generate_tasks()

        async def open_(i: int) -> Any:
            env = MCPEnv({"counter": Http(url, connect_timeout=600.0)}, tasks, max_steps=10,
                         observe_resources=[STATE_URI], call_timeout=600.0, reset_timeout=600.0)
            _, info = await env.areset(seed=i)
            if info["error"] is not None:
                errors.append(str(info["error"])[:200])
            return env

        async def close(env: Any) -> None:
            await env.aclose()
    else:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        from mcp_gym.client._http import shared_ssl_context
        from mcp_gym.protocol import EPISODE_META_KEY, RESET_TOOL

        prior: list[Any] = []  # raw-sdk-adopt: one discover answer, fetched before the measured phase

        class Raw:
            def __init__(self, i: int) -> None:
                self.i = i
                self.http = httpx2.AsyncClient(verify=shared_ssl_context(), timeout=httpx2.Timeout(30.0, read=300.0))
                kw: dict[str, Any] = {"mode": prior[1], "prior_discover": prior[0]} if prior else {}
                self.client = Client(streamable_http_client(url, http_client=self.http), cache=None, **kw)

            async def run(self, opened: anyio.Event, release: anyio.Event) -> None:
                if mode == "httpx":
                    await self.plain(opened, release)
                    return
                async with self.http, self.client:
                    await self.client.list_tools()
                    meta = {EPISODE_META_KEY: f"raw-{self.i}"}
                    r = await self.client.call_tool(RESET_TOOL, {"task_id": f"counter-{self.i % 120:04d}",
                                                                 "seed": self.i}, meta=meta)
                    if r.is_error:
                        errors.append("reset: tool error")
                    await self.client.read_resource(STATE_URI, meta=meta)
                    opened.set()
                    await release.wait()

            async def plain(self, opened: anyio.Event, release: anyio.Event) -> None:
                """The same three JSON-RPC requests as plain httpx2 POSTs (no SDK): the HTTP client's own floor."""
                meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
                        "io.modelcontextprotocol/clientCapabilities": {}, EPISODE_META_KEY: f"raw-{self.i}"}
                calls = [("tools/list", {}, None),
                         ("tools/call", {"name": RESET_TOOL, "arguments": {"task_id": f"counter-{self.i % 120:04d}",
                                                                           "seed": self.i}}, RESET_TOOL),
                         ("resources/read", {"uri": STATE_URI}, STATE_URI)]
                async with self.http:
                    for k, (method, params, name) in enumerate(calls):
                        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                                   "mcp-protocol-version": "2026-07-28", "mcp-method": method}
                        if name is not None:
                            headers["mcp-name"] = name
                        body = {"jsonrpc": "2.0", "id": k, "method": method, "params": {**params, "_meta": meta}}
                        r = await self.http.post(url, content=json.dumps(body).encode(), headers=headers)
                        if "result" not in json.loads(r.content):
                            errors.append(f"{method}: {r.text[:100]}")
                    opened.set()
                    await release.wait()

    async def main() -> dict[str, Any]:
        if mode == "raw-sdk-adopt":
            async with httpx2.AsyncClient() as h, Client(streamable_http_client(url, http_client=h), cache=None) as c:
                prior.extend([c.session.discover_result, c.protocol_version])
        gc.collect()
        sem = anyio.Semaphore(concurrency)
        release = anyio.Event()
        done = [0]
        all_open = anyio.Event()
        envs: list[Any] = []
        prof = cProfile.Profile() if profile else None

        async def episode(i: int) -> None:
            try:
                if mode == "mcp-gym":
                    async with sem:
                        envs.append(await open_(i))
                    done[0] += 1
                    if done[0] == n:
                        all_open.set()
                    return
                opened = anyio.Event()
                raw = Raw(i)
                async with anyio.create_task_group() as tg:
                    async with sem:
                        tg.start_soon(raw.run, opened, release)
                        await opened.wait()
                    done[0] += 1
                    if done[0] == n:
                        all_open.set()
            except Exception as e:  # noqa: BLE001 - counted
                errors.append(f"{type(e).__name__}: {e}"[:200])
                done[0] += 1
                if done[0] == n:
                    all_open.set()

        gc_time = [0.0, 0]
        gc_t = [0.0]
        gc_gen: collections.Counter[str] = collections.Counter()

        def gc_cb(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_t[0] = time.process_time()
            else:
                dt = time.process_time() - gc_t[0]
                gc_time[0] += dt
                gc_time[1] += 1
                gc_gen[f"gen{info['generation']}"] += 1
                gc_gen[f"gen{info['generation']}_ms"] += round(dt * 1000)

        gc.callbacks.append(gc_cb)
        if os.environ.get("CONNECT_CPU_GC_OFF"):  # --gc-off: what the sessions cost without the cyclic collector
            gc.disable()
        cpu0, t0 = time.process_time(), time.perf_counter()
        if prof is not None:
            prof.enable()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(episode, i)
            await all_open.wait()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
            gc.callbacks.remove(gc_cb)
            if prof is not None:
                prof.disable()
            release.set()
            for env in envs:
                tg.start_soon(close, env)
        out: dict[str, Any] = {"mode": mode, "n": n, "cpu_ms_per_ep": cpu * 1000 / n, "wall_s": wall,
                               "errors": len(errors), "error_sample": errors[:2],
                               "gc_ms_per_ep": gc_time[0] * 1000 / n, "gc_runs": gc_time[1], "gc": dict(gc_gen),
                               "objects": len(gc.get_objects())}
        if count:
            out["requests_per_ep"] = {k: round(v / n, 2) for k, v in requests.most_common()}
        if prof is not None:
            text = io.StringIO()
            for key in ("tottime", "cumulative"):
                pstats.Stats(prof, stream=text).sort_stats(key).print_stats(profile)
            out["profile"] = text.getvalue()
        return out

    return default_runtime().call(main)


def run(mode: str, n: int, port: int, a: argparse.Namespace, *, profile: int = 0) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", mode, str(n), str(port), "--connect-concurrency",
           str(a.connect_concurrency), "--profile", str(profile)] + (["--requests"] if a.requests else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if r.returncode != 0:
        return {"mode": mode, "n": n, "failed": r.stderr.strip().splitlines()[-3:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200, help="sessions per round")
    p.add_argument("--rounds", type=int, default=4, help="rounds per side, the sides alternating (ABBA)")
    p.add_argument("--connect-concurrency", type=int, default=100, help="sessions connecting at once")
    p.add_argument("--requests", action="store_true", help="count HTTP requests per episode by JSON-RPC method")
    p.add_argument("--profile", type=int, default=0, metavar="K", help="cProfile top K of one extra round per side")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES[:2]),
                   help="sides (default: mcp-gym raw-sdk); floors: raw-sdk-adopt (the raw SDK adopting one discover "
                        "answer, as mcp-gym does: 3 requests), httpx (the 3 requests as plain httpx2 POSTs, no SDK)")
    p.add_argument("--gc-off", action="store_true", help="diagnostic: the cyclic GC off in the measured phase")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per round")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        mode, n, port = a.worker
        print(json.dumps(worker(mode, int(n), int(port), a.connect_concurrency, a.requests, a.profile)))
        return
    raise_nofile()
    if a.gc_off:
        os.environ["CONNECT_CPU_GC_OFF"] = "1"
    proc, port = start_server()
    results: dict[str, list[float]] = {m: [] for m in a.modes}
    try:
        for k in range(a.rounds):
            row = {}
            for mode in a.modes if k % 2 == 0 else a.modes[::-1]:
                r = run(mode, a.n, port, a)
                if "failed" in r:
                    print(f"round {k + 1} {mode}: failed {r['failed']}", flush=True)
                    continue
                row[mode] = r
                results[mode].append(r["cpu_ms_per_ep"])
                extra = f"; requests/episode {r['requests_per_ep']}" if "requests_per_ep" in r else ""
                print(f"round {k + 1} {mode:8}: {r['cpu_ms_per_ep']:6.2f} ms CPU/episode, wall {r['wall_s']:.1f} s, "
                      f"(GC {r['gc_ms_per_ep']:.2f} ms in {r['gc_runs']} runs), errors {r['errors']}"
                      f"{' ' + str(r['error_sample']) if r['errors'] else ''}{extra}", flush=True)
            if "mcp-gym" in row and "raw-sdk" in row:
                print(f"round {k + 1} mcp-gym / raw SDK: "
                      f"{row['mcp-gym']['cpu_ms_per_ep'] / row['raw-sdk']['cpu_ms_per_ep']:.2f}x", flush=True)
        if a.profile:
            for mode in a.modes:
                r = run(mode, a.n, port, a, profile=a.profile)
                print(f"\n===== {mode}: cProfile of one round (N={a.n}) =====\n{r.get('profile') or r}")
    finally:
        proc.terminate()
        proc.wait(10)
    med = {m: statistics.median(v) for m, v in results.items() if v}
    print(f"\nN={a.n}, {a.rounds} rounds, load {os.getloadavg()[0]:.2f}: " + ", ".join(
        f"{m} median {v:.2f} ms CPU/episode" for m, v in med.items())
        + (f"; mcp-gym / raw SDK {med['mcp-gym'] / med['raw-sdk']:.2f}x" if {"mcp-gym", "raw-sdk"} <= set(med) else ""))


if __name__ == "__main__":
    main()
