"""N concurrent episodes in one client process against ONE bundled Streamable HTTP server, mcp-gym vs the raw SDK.

For each N (default 128, 1,000 and 10,000) and each side, a fresh Counter server (``python -m
mcp_gym.servers.counter --transport http``, SSE responses as ``mcp-gym serve counter --transport http`` does) and a
fresh client interpreter:

* ``mcp-gym``: N :class:`~mcp_gym.env.MCPEnv` objects (one session each, the Counter env: tool ``add``, resource
  ``counter://state`` observed), driven with the async face ``areset`` / ``astep`` on the runtime's loop.
* ``raw-sdk``: N SDK ``Client`` sessions making the same calls by hand (``tools/list`` once, then per reset the
  hidden ``mcp_gym_reset`` tool and ``resources/read``; per step ``tools/call add`` and ``resources/read``, with the
  episode id in ``_meta``). Each raw client gets an ``httpx2.AsyncClient`` on one shared TLS context, as mcp-gym's
  sessions do (with the SDK's default client, a TLS context each, ~27 ms CPU and ~0.8 MB per session, 10,000 raw
  sessions would need ~8 GB), and keeps idle connections as mcp-gym's do against this server (half the 30 s the
  server says in its ``Keep-Alive`` header; httpx's own 5 s equals uvicorn's, and a request sent as the server closes
  an idle connection meets a ReadError, which ends a raw SDK session and with it the run).

Phases: every episode connects and resets (at most ``--connect-concurrency`` at a time), then all N take ``--steps``
steps concurrently (``add(1)``; a reset when an episode ends), then all close. Reported: steps/s (all steps / the
wall time from the first to the last; a fixed window would be shorter than one step at 10,000 on a busy 2-core
machine), p50/p99 step latency, client memory per episode (RSS delta over the connect phase; tracemalloc in a separate
run of the connect phase, ``--trace-max``), server RSS (after connecting, after the window, after every session
closed), errors, client CPU ms per episode for connect + first reset, client CPU ms per step in the step phase (the
client's share of the limit: the server has the other core) and how much of it the cyclic garbage collector took,
and mcp-gym / raw-sdk ratios at the same N.
``--profile PREFIX`` writes a cProfile of each side's step phase (``python -m pstats``) for finding the difference.

The soft open-file limit is raised to the hard limit (each session holds a connection: ~N descriptors per process).

    python scripts/bench/scale.py                       # 128 / 1,000 / 10,000 (10,000: ~30 min per side, busy 2 cores)
    python scripts/bench/scale.py --n 128 1000 --steps 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

SERVER_MODULE = "mcp_gym.servers.counter"
MODES = ("mcp-gym", "raw-sdk")
STATE_URI = "counter://state"


def raise_nofile() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the new (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def rss_kb(pid: int | str = "self") -> float:
    """Resident memory of a process in kB (Linux ``/proc``)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return float("nan")


# -- the client side, in its own interpreter ---------------------------------------------------------------------------
def worker(mode: str, n: int, port: int, server_pid: int, steps: int, connect_concurrency: int,
           trace: bool, max_in_flight: int | None = None, profile: str | None = None,
           gc_threshold: int | None = None) -> dict[str, Any]:
    import collections
    import cProfile
    import gc
    import tracemalloc

    import anyio

    from mcp_gym.client.runtime import default_runtime

    raise_nofile()
    if gc_threshold:  # both sides: the young-generation threshold of the cyclic GC (Python's default: 700)
        gc.set_threshold(gc_threshold, *gc.get_threshold()[1:])
    url = f"http://127.0.0.1:{port}/mcp"
    out: dict[str, Any] = {"mode": mode, "n": n}
    errors: list[str] = []
    latencies: list[float] = []
    finished = [0]
    state = {"steps": 0}
    http_errors: collections.Counter[str] = collections.Counter()

    # Count what the HTTP layer raises (both sides' sessions use httpx2.AsyncClient.send): the kinds of failure behind
    # a session that died, which the SDK reports only as "Connection closed".
    import httpx2

    _send = httpx2.AsyncClient.send

    async def counted_send(self: Any, request: Any, **kw: Any) -> Any:
        try:
            return await _send(self, request, **kw)
        except Exception as e:
            http_errors[f"{type(e).__name__}: {str(e)[:60]}"] += 1
            raise

    httpx2.AsyncClient.send = counted_send  # type: ignore[method-assign]

    if mode == "mcp-gym":
        from mcp_gym import MCPEnv
        from mcp_gym.client.specs import Http
        from mcp_gym.envs.counter.tasks import generate_tasks

        tasks = generate_tasks()

        async def open_episode(i: int) -> Any:
            spec = Http(url, connect_timeout=600.0, max_in_flight=max_in_flight)
            env = MCPEnv({"testing": spec}, tasks, max_steps=10, observe_resources=[STATE_URI], call_timeout=600.0,
                         reset_timeout=600.0)
            _, info = await env.areset(seed=i)
            if info["error"] is not None:
                errors.append(f"reset: {info['error']}")
            return env

        async def reset(env: Any, i: int) -> None:
            _, info = await env.areset(seed=i)
            if info["error"] is not None:
                errors.append(f"reset: {info['error']}")

        async def step(env: Any) -> bool:
            _, _, terminated, truncated, info = await env.astep({"tool": "add", "arguments": {"amount": 1}})
            if info["error"] is not None:
                errors.append(f"step: {info['error']}")
            return terminated or truncated

        async def close(env: Any) -> None:
            await env.aclose()

        def session(i: int) -> Any:
            return _Null()
    else:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        from mcp_gym.client._http import keepalive_for, shared_ssl_context
        from mcp_gym.protocol import EPISODE_META_KEY, RESET_TOOL
        from mcp_gym.serverkit import SERVER_KEEPALIVE

        class Raw:
            def __init__(self, i: int) -> None:
                self.i = i
                self.http = httpx2.AsyncClient(verify=shared_ssl_context(), timeout=httpx2.Timeout(30.0, read=300.0),
                                               limits=httpx2.Limits(keepalive_expiry=keepalive_for(f"timeout={SERVER_KEEPALIVE}")))
                self.client = Client(streamable_http_client(url, http_client=self.http), cache=None)
                self.steps = 0
                self.meta = {EPISODE_META_KEY: f"raw-{i}-0"}

            async def __aenter__(self) -> Raw:
                await self.http.__aenter__()
                await self.client.__aenter__()
                await self.client.list_tools()
                return self

            async def __aexit__(self, *exc: Any) -> None:
                await self.client.__aexit__(None, None, None)
                await self.http.__aexit__(None, None, None)

        async def open_episode(i: int) -> Any:
            raise AssertionError  # a raw session is entered by its own task (session())

        async def reset(raw: Any, i: int) -> None:
            raw.steps = 0
            raw.meta = {EPISODE_META_KEY: f"raw-{raw.i}-{i}"}
            r = await raw.client.call_tool(RESET_TOOL, {"task_id": f"counter-{i % 120:04d}", "seed": i},
                                           meta=raw.meta)
            if r.is_error:
                errors.append("reset: tool error")
            await raw.client.read_resource(STATE_URI, meta=raw.meta)

        async def step(raw: Any) -> bool:
            raw.steps += 1
            r = await raw.client.call_tool("add", {"amount": 1}, meta=raw.meta)
            if r.is_error:
                errors.append("step: tool error")
            await raw.client.read_resource(STATE_URI, meta=raw.meta)
            sc = r.structured_content or {}
            return bool(sc.get("done")) or raw.steps >= 10

        async def close(raw: Any) -> None:
            pass  # the session's own task leaves its context

        def session(i: int) -> Any:
            return Raw(i)

    async def main() -> None:
        gc.collect()
        if trace:
            tracemalloc.start()
        ready = anyio.Event()
        window_over = anyio.Event()
        opened = [0]
        sem = anyio.Semaphore(connect_concurrency)
        objects0 = len(gc.get_objects())
        rss0, cpu0, t0 = rss_kb(), time.process_time(), time.perf_counter()

        async def episode(i: int) -> None:
            counted = False
            s = session(i)
            entered = False
            try:
                async with sem:
                    raw = await s.__aenter__()
                    entered = True
                    obj = await open_episode(i) if raw is None else raw
                    if raw is not None:
                        await reset(obj, i)
                counted = True
                opened[0] += 1
                if opened[0] == n:
                    ready.set()
                await ready.wait()
                k = i
                for j in range(0 if trace else steps):
                    t = time.perf_counter()
                    done = await step(obj)
                    latencies.append(time.perf_counter() - t)
                    state["steps"] += 1
                    if done and j < steps - 1:
                        k += n
                        await reset(obj, k)
                await window_over.wait()
                if raw is None:
                    await close(obj)
                finished[0] += 1
            except Exception as e:  # noqa: BLE001 - counted, the run goes on
                errors.append(f"{type(e).__name__}: {e}"[:300])
                if not counted:
                    opened[0] += 1
                    if opened[0] == n:
                        ready.set()
            finally:
                if entered:
                    try:
                        await s.__aexit__(None, None, None)
                    except Exception as e:  # noqa: BLE001 - counted
                        errors.append(f"close: {type(e).__name__}: {e}"[:300])

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(episode, i)
            await ready.wait()
            out["connect_s"] = time.perf_counter() - t0
            out["connect_cpu_ms_per_ep"] = (time.process_time() - cpu0) * 1000 / n
            gc.collect()
            out["client_rss_kb_per_ep"] = (rss_kb() - rss0) / n
            out["gc_objects_per_ep"] = (len(gc.get_objects()) - objects0) / n  # what a full collection walks
            out["server_rss_mb_open"] = rss_kb(server_pid) / 1024
            if trace:
                out["traced_kb_per_ep"] = tracemalloc.get_traced_memory()[0] / 1024 / n
                tracemalloc.stop()
                window_over.set()
                return
            gcs = {"s": 0.0, "full_s": 0.0, "n": 0, "full_n": 0, "t0": 0.0}  # the cyclic GC in the step phase

            def gc_timer(phase: str, info: dict[str, Any]) -> None:
                if phase == "start":
                    gcs["t0"] = time.perf_counter()
                    return
                took, full = time.perf_counter() - gcs["t0"], info.get("generation") == 2
                gcs["s"] += took
                gcs["n"] += 1
                if full:
                    gcs["full_s"] += took
                    gcs["full_n"] += 1

            gc.callbacks.append(gc_timer)
            w0, cpu_w0 = time.perf_counter(), time.process_time()
            prof = cProfile.Profile() if profile else None
            if prof is not None:
                prof.enable()
            while state["steps"] < n * steps and len(errors) < n:
                await anyio.sleep(0.05)
            out["steps_per_s"] = state["steps"] / (time.perf_counter() - w0)
            steps_done = max(1, state["steps"])
            out["step_cpu_ms"] = (time.process_time() - cpu_w0) * 1000 / steps_done
            gc.callbacks.remove(gc_timer)
            out["step_gc_ms"], out["gcs_per_step"] = gcs["s"] * 1000 / steps_done, gcs["n"] / steps_done
            out["full_gcs"], out["full_gc_ms"] = gcs["full_n"], gcs["full_s"] * 1000 / max(1, gcs["full_n"])
            if prof is not None:
                prof.disable()
                prof.dump_stats(f"{profile}.{mode}.{n}.prof")
            out["server_rss_mb_window"] = rss_kb(server_pid) / 1024
            window_over.set()
        out["finished"] = finished[0]
        out["errors"] = len(errors)
        out["error_sample"] = errors[:3]
        out["http_errors"] = dict(http_errors.most_common(6))
        if latencies:
            qs = statistics.quantiles(latencies, n=100)
            out["p50_ms"], out["p99_ms"] = statistics.median(latencies) * 1000, qs[98] * 1000

    default_runtime().call(main)
    time.sleep(2.0)
    out["server_rss_mb_closed"] = rss_kb(server_pid) / 1024
    return out


class _Null:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        return None


# -- the driver -------------------------------------------------------------------------------------------------------
def start_server(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """The Counter server over HTTP (``extra``: more of its arguments) on a port it takes itself (``--port 0``; a
    port picked here and bound by the server later could be taken in between), ``(process, port)`` once it says it
    listens there (``serving ... on http://127.0.0.1:PORT/mcp`` on stderr, read from an unnamed temporary file)."""
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, "--transport", "http", "--port", "0", *extra],
                                stdout=subprocess.DEVNULL, stderr=said)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            found = re.search(rb" on http://127\.0\.0\.1:(\d+)/mcp", os.pread(said.fileno(), 1 << 16, 0))
            if found:
                return proc, int(found[1])
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the Counter HTTP server did not start within 60 s")


def run(mode: str, n: int, a: argparse.Namespace, trace: bool) -> dict[str, Any]:
    proc, port = start_server()
    try:
        cmd = [sys.executable, __file__, "--worker", mode, str(n), str(port), str(proc.pid), "--steps",
               str(a.steps), "--connect-concurrency", str(a.connect_concurrency)] + (["--trace"] if trace else []) \
            + (["--max-in-flight", str(a.max_in_flight)] if a.max_in_flight else [])
        cmd += ["--profile", a.profile] if a.profile else []
        cmd += ["--gc-threshold", str(a.gc_threshold)] if a.gc_threshold else []
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        if r.returncode != 0:
            lines = [x.strip(" |+-") for x in r.stderr.strip().splitlines()]
            return {"mode": mode, "n": n, "failed": [x for x in lines if "Error" in x][-2:] or lines[-1:] or ["?"]}
        return json.loads(r.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"mode": mode, "n": n, "failed": [f"timed out after {a.timeout:g} s"]}
    finally:
        proc.terminate()
        proc.wait(10)


def fmt(x: Any, spec: str = ".0f") -> str:
    return "-" if x is None or (isinstance(x, float) and x != x) else format(x, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[128, 1000, 10000], help="concurrent episodes")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--steps", type=int, default=3, help="steps per episode, all episodes at once")
    p.add_argument("--connect-concurrency", type=int, default=100, help="sessions connecting at once")
    p.add_argument("--trace-max", type=int, default=10000, help="largest N with a tracemalloc run (0: none)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--max-in-flight", type=int, default=None,
                   help="mcp-gym side: Http(max_in_flight=...), requests waiting on the server at once (default: none)")
    p.add_argument("--rounds", type=int, default=1, help="runs per N and side, the sides alternating")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--gc-threshold", type=int, default=None,
                   help="both sides: gc.set_threshold(N) in the client (Python's default 700; see the README)")
    p.add_argument("--profile", help="cProfile the step phase into PREFIX.<side>.<N>.prof (slows both sides)")
    p.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        mode, n, port, pid = a.worker
        print(json.dumps(worker(mode, int(n), int(port), int(pid), a.steps, a.connect_concurrency, a.trace,
                                a.max_in_flight, a.profile, a.gc_threshold)))
        return
    soft, hard = raise_nofile()
    print(f"RLIMIT_NOFILE soft limit raised to {soft} (hard {hard}); {os.cpu_count()} cores", file=sys.stderr)
    results: list[dict[str, Any]] = []
    for n in a.n:
        for k in range(a.rounds):
            for mode in a.modes if k % 2 == 0 else a.modes[::-1]:  # ABBA: neither side always runs first
                print(f"{mode}: {n} concurrent episodes (round {k + 1})...", file=sys.stderr, flush=True)
                r = run(mode, n, a, trace=False)
                r["round"] = k
                if k == 0 and n <= a.trace_max and "failed" not in r:
                    print(f"{mode}: {n} episodes, tracemalloc run...", file=sys.stderr, flush=True)
                    r["traced_kb_per_ep"] = run(mode, n, a, trace=True).get("traced_kb_per_ep")
                print(json.dumps(r), file=sys.stderr, flush=True)
                results.append(r)
    by = {(r["mode"], r["n"], r["round"]): r for r in results}
    cols = ["N", "side", "steps/s", "p50 ms", "p99 ms", "kB/ep RSS", "kB/ep traced", "server MB open/win/closed",
            "errors", "finished", "connect CPU ms/ep", "step CPU ms (GC)", "steps/s vs raw", "CPU vs raw"]
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in results:
        if "failed" in r:
            print(f"{r['n']} | {r['mode']} | failed: {r['failed']}")
            continue
        raw = by.get(("raw-sdk", r["n"], r["round"]), {})
        ratio = (r["steps_per_s"] / raw["steps_per_s"]) if r["mode"] != "raw-sdk" and raw.get("steps_per_s") else None
        cpu = (r["connect_cpu_ms_per_ep"] / raw["connect_cpu_ms_per_ep"]) if r["mode"] != "raw-sdk" and \
            raw.get("connect_cpu_ms_per_ep") else None
        print(" | ".join([
            str(r["n"]), r["mode"], fmt(r.get("steps_per_s")), fmt(r.get("p50_ms"), ".1f"), fmt(r.get("p99_ms"), ".1f"),
            fmt(r.get("client_rss_kb_per_ep")), fmt(r.get("traced_kb_per_ep")),
            f"{fmt(r.get('server_rss_mb_open'))}/{fmt(r.get('server_rss_mb_window'))}/"
            f"{fmt(r.get('server_rss_mb_closed'))}",
            str(r.get("errors")), f"{r.get('finished')}/{r['n']}", fmt(r.get("connect_cpu_ms_per_ep"), ".1f"),
            f"{fmt(r.get('step_cpu_ms'), '.2f')} ({fmt(r.get('step_gc_ms'), '.2f')})",
            fmt(ratio, ".2f") + ("x" if ratio else ""),
            fmt(cpu, ".2f") + ("x" if cpu else ""),
        ]))
    for n in a.n:
        pairs = [(by.get(("mcp-gym", n, k), {}).get("steps_per_s"), by.get(("raw-sdk", n, k), {}).get("steps_per_s"))
                 for k in range(a.rounds)]
        ratios = [m / r for m, r in pairs if m and r]
        if len(ratios) > 1:
            print(f"N={n}: mcp-gym / raw SDK steps/s per round {', '.join(f'{x:.2f}' for x in ratios)}; "
                  f"median {statistics.median(ratios):.2f}x")
    for r in results:
        if r.get("http_errors"):
            print(f"N={r['n']} {r['mode']} round {r['round'] + 1}: HTTP exceptions {r['http_errors']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
