"""How much of a per-episode-server benchmark is waiting for servers to start? Pool off vs on, side by side in one run.

An MCPMark-like task set: ``@modelcontextprotocol/server-filesystem`` started per episode, rooted in the episode's
workspace (``{workspace}`` on its command line), a fixture folder (``--files`` files in a few sub-folders) copied into
every workspace; each task writes one file and submits, and is graded by a state check (the written file's content in
the episode's workspace, read before the next reset). The policy is scripted (the tasks' reference solutions, as the
``oracle`` policy plays them), so the numbers are the env's and the servers', not a model's.

Two arms over the same tasks, in one process, their rounds interleaved so machine noise hits both alike: ``off``
(``MCPEnv(..., spare_servers=0)``: the reset starts the episode's server) and ``on`` (the default pool: the warm
server re-rooted to the next workspace over MCP roots, or a spare server prepared while the episode runs). Per arm:
episodes per second, start-up share (the time from the start of ``reset`` to the episode's server answering
``initialize``, zero when it answered before the reset began, over the episodes' time), reset share (the whole
reset's time over the episodes'), time to first step (the start of ``reset`` to the first step's answer), the
client's CPU per episode, the spares taken and re-roots, and the ratios on/off. The server comes from
``tests/conftest.py``'s npm cache (``local``, installed on first use) and ``npx -y`` (``npx``, what the MCPMark import
prints, resolved from the npm cache; its later starts run what npx ran, directly, unless ``--no-resolve-npx``);
``--server both`` (the default) runs the two one after the other.

    python scripts/bench/startup.py --rounds 3 --episodes 6
    python scripts/bench/startup.py --think 0.5   # a policy taking 0.5 s per step, as a model does
    python scripts/bench/startup.py --server npx
    python scripts/bench/startup.py --server npx --no-resolve-npx   # npx at every start
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp_gym import MCPEnv, Stdio

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "@modelcontextprotocol/server-filesystem"


def server_command(kind: str) -> list[str]:
    """The server's command line (``{workspace}`` its root)."""
    if kind == "npx":
        return ["npx", "-y", PACKAGE, "{workspace}"]
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import npm_bin  # the tests' pinned npm install (.mcp-gym-cache/npm)

    return [npm_bin("mcp-server-filesystem"), "{workspace}"]


def make_fixture(folder: Path, files: int) -> None:
    """A small repository-like state: ``files`` text files in four sub-folders."""
    for i in range(files):
        path = folder / f"dir{i % 4}" / f"file{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i}\n" * 20)


def make_tasks(fixture: Path, n: int) -> list[dict[str, Any]]:
    write = [{"tool": "write_file", "arguments": {"path": "{workspace}/out.txt", "content": f"answer {i}"}}
             for i in range(n)]
    return [{"id": f"t{i}", "fixture": str(fixture), "prompt": f"Write 'answer {i}' to out.txt in the workspace.",
             "solution": [write[i], {"tool": "submit", "arguments": {"answer": "done"}}]} for i in range(n)]


def episode(env: MCPEnv, task: dict[str, Any], think: float = 0.0) -> dict[str, float]:
    """One scripted episode, graded by a state check; its timings (seconds)."""
    t0, m0 = time.perf_counter(), time.monotonic()
    env.reset(options={"task_id": task["id"]})
    reset = time.perf_counter() - t0
    conn = env.host.connections["fs"]
    startup = max(0.0, (conn.connected_at or m0) - m0)  # anyio's clock on asyncio is time.monotonic()
    first = None
    for action in env.task.solution:  # the oracle policy: the reference solution, {workspace} filled
        time.sleep(think)
        _, _, term, trunc, info = env.step(action)
        if info.get("error"):
            raise RuntimeError(f"task {task['id']}: {info['error']}")
        first = first if first is not None else time.perf_counter() - t0
        if term or trunc:
            break
    workspace = env.workspace
    assert workspace is not None
    if (workspace / "out.txt").read_text() != task["solution"][0]["arguments"]["content"]:  # the grading script
        raise RuntimeError(f"task {task['id']}: out.txt is wrong")
    return {"wall": time.perf_counter() - t0, "startup": startup, "first": first or 0.0, "reset": reset}


def run(kind: str, a: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    """Both arms on one server kind, rounds interleaved; prints the table and returns the arms' figures."""
    command = server_command(kind)
    tasks = make_tasks(tmp / "fixture", a.episodes)
    spec = Stdio(command=command[0], args=command[1:], connect_timeout=120.0, resolve_npx=not a.no_resolve_npx)
    arms = {"off": 0, "on": a.spares}
    envs = {arm: MCPEnv({"fs": spec}, tasks, spare_servers=size, reset_timeout=180.0) for arm, size in arms.items()}
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    cpu: dict[str, float] = dict.fromkeys(arms, 0.0)
    loads = [os.getloadavg()[0]]
    try:
        for env in envs.values():  # warm up: the first reset also lists the tools; node's disk cache
            for t in tasks[:a.warmup]:
                episode(env, t)
        for _ in range(a.rounds):
            for arm, env in envs.items():
                c0 = time.process_time()
                results[arm] += [episode(env, t, a.think) for t in tasks]
                cpu[arm] += time.process_time() - c0
            loads.append(os.getloadavg()[0])
        taken = {arm: env.spares.taken for arm, env in envs.items()}
        rerooted = {arm: env.spares.rerooter.rerooted for arm, env in envs.items()}
    finally:
        for env in envs.values():
            env.close()

    print(f"\nserver-filesystem per episode ({kind}: {' '.join(command[:3])}), fixture {a.files} files, "
          f"{a.rounds} rounds x {a.episodes} episodes per arm after {a.warmup} warm-up, policy {a.think:g} s per "
          f"step, on: spare_servers={a.spares}, concurrency 1{', resolve_npx=False' if a.no_resolve_npx else ''}; "
          f"load average "
          f"{min(loads):.2f}-{max(loads):.2f} (1 min), {os.cpu_count()} cores")
    print(f"{'arm':>4} {'episodes/s':>11} {'start-up share':>15} {'reset share':>12} {'first step ms':>14} "
          f"{'episode ms':>11} {'client CPU ms/ep':>17} {'spares taken':>13} {'re-rooted':>10}")
    stats = {}
    for arm, rows in results.items():
        wall = sum(r["wall"] for r in rows)
        stats[arm] = {"eps": len(rows) / wall, "share": sum(r["startup"] for r in rows) / wall,
                      "reset": sum(r["reset"] for r in rows) / wall,
                      "first": statistics.median(r["first"] for r in rows) * 1e3,
                      "ep": statistics.median(r["wall"] for r in rows) * 1e3, "cpu": cpu[arm] / len(rows) * 1e3}
        s = stats[arm]
        print(f"{arm:>4} {s['eps']:>11.2f} {s['share']:>14.1%} {s['reset']:>11.1%} {s['first']:>14.1f} "
              f"{s['ep']:>11.1f} {s['cpu']:>17.1f} {taken[arm]:>13} {rerooted[arm]:>10}")
    on, off = stats["on"], stats["off"]
    print(f"on/off: episodes/s x{on['eps'] / off['eps']:.2f}, time to first step x{on['first'] / off['first']:.2f}, "
          f"client CPU per episode x{on['cpu'] / off['cpu']:.2f}")
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["local", "npx", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per arm, interleaved")
    ap.add_argument("--episodes", type=int, default=6, help="episodes per round")
    ap.add_argument("--warmup", type=int, default=3, help="episodes per arm before the timed rounds")
    ap.add_argument("--files", type=int, default=40, help="files in the fixture")
    ap.add_argument("--think", type=float, default=0.0, help="seconds the policy takes per step (a model's latency)")
    ap.add_argument("--spares", type=int, default=1, help="the on arm's spare_servers")
    ap.add_argument("--no-resolve-npx", action="store_true",
                    help="npx at every start (Stdio(resolve_npx=False)), not only at the first")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-startup-"))
    try:
        make_fixture(tmp / "fixture", a.files)
        for kind in (["local", "npx"] if a.server == "both" else [a.server]):
            run(kind, a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
