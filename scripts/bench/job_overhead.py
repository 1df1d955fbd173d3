"""What an ``mcp-gym`` job process costs besides its episodes, per command, side by side in one run (issue 40).

Each command runs as a process of its own, as a user starts it (``python -c "... mcp_gym.cli.run()"``, what the
``mcp-gym`` console script runs), the commands interleaved round by round so machine noise hits them alike.
From outside the process, with no hook in it:

* **to first reset**: from the launch to the start of the job's first reset (the earliest recorded episode's
  ``started_at`` minus its ``reset_seconds``): the interpreter, the imports, Hydra, the plan and the envs;
* **to first step**: from the launch to the first episode's start (its reset done: servers up);
* **episodes**: from the first reset's start to the last episode's end;
* **end of job**: from the last episode's end to the process's exit: closing the envs and servers, flushing the
  recorder, scoring, the report and its plots, the interpreter's exit;

each as wall time and as the job process's own CPU time (user + system of all its threads, read from
``/proc/PID/stat`` every few milliseconds, and at its exit before it is reaped; its servers' CPU is the ``children``
column: the processes it started and reaped). Commands without episodes (``export-sft``) have the whole run only.
Ratios against two floors measured in the same rounds: ``python -c pass`` and ``python -c "import mcp_gym"``.

Commands: ``eval`` of the bundled default env (``sql``) with ``policy=oracle``, the same with ``plots=false``,
``collect``, ``export-sft`` of that collection, and (``--fs``, needs the tests' npm install of
``server-filesystem``) the per-episode-server ``eval`` of ``benchmark_eval.py`` (18 tasks x 4 samples, 2 slots), and
the same task set once with a model in the loop (``policy=openai`` against the tests' scripted chat endpoint on
127.0.0.1 answering each request after ``--model-latency`` s: 18 episodes of two replies). ``--compare DIR`` runs
every command and floor also with another checkout's ``mcp_gym/`` first on ``PYTHONPATH`` (``before``), side by side,
and prints the ratios after/before. Linux only (``/proc``).

    python scripts/bench/job_overhead.py                 # 5 rounds
    python scripts/bench/job_overhead.py --rounds 3 --fs # with the server-filesystem evals
    git worktree add --detach /tmp/base main && python scripts/bench/job_overhead.py --fs --compare /tmp/base
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")
RUN = "import sys, mcp_gym.cli as c; c.run() if hasattr(c, 'run') else sys.exit(c.main())"
"""What the ``mcp-gym`` console script runs (``run``; before it existed, ``main``)."""


def _cpu(pid: int) -> tuple[float, float] | None:
    """``(own CPU, reaped children's CPU)`` in seconds of a process (a zombie's too), or ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


def run_process(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``argv`` to its end; its launch and exit time (wall clock, as the recording's), CPU samples and totals."""
    samples: list[tuple[float, float]] = []
    launch = time.time()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            c = _cpu(proc.pid)
            if c is not None:
                samples.append((time.time(), c[0]))
            time.sleep(0.004)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its /proc/PID/stat is final
    exit_time = time.time()
    done.set()
    poller.join()
    own, children = _cpu(proc.pid) or (samples[-1][1] if samples else 0.0, 0.0)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = proc.wait()
    if code != 0:
        raise SystemExit(f"{' '.join(argv[2:])} exited {code}:\n{stderr[-3000:]}")
    samples.append((exit_time, own))
    return {"launch": launch, "exit": exit_time, "samples": samples, "cpu": own, "children": children}


def cpu_at(samples: list[tuple[float, float]], t: float) -> float:
    """The process's CPU time at wall time ``t``: the last sample at or before it."""
    before = [c for s, c in samples if s <= t]
    return before[-1] if before else 0.0


def episode_times(run: Path) -> tuple[float, float, float]:
    """``(first reset's start, first episode's start, last episode's end)`` of a run directory, wall clock."""
    table = pq.read_table(run / "episodes", columns=["started_at", "ended_at", "metadata"]).to_pylist()
    resets = [r["started_at"].timestamp() - float(json.loads(r["metadata"] or "{}").get("reset_seconds") or 0.0)
              for r in table]
    return min(resets), min(r["started_at"].timestamp() for r in table), max(r["ended_at"].timestamp() for r in table)


def measure(argv: list[str], cwd: Path, run: Path | None, env: dict[str, str] | None = None) -> dict[str, float]:
    """One run of a command: its phases' wall and CPU times (see the module's docstring)."""
    p = run_process(argv, cwd, env)
    m = {"wall": p["exit"] - p["launch"], "cpu": p["cpu"], "children": p["children"]}
    if run is not None:
        reset, first, last = episode_times(run)
        m |= {"to_reset": reset - p["launch"], "to_reset_cpu": cpu_at(p["samples"], reset),
              "to_step": first - p["launch"], "episodes": last - reset,
              "episodes_cpu": cpu_at(p["samples"], last) - cpu_at(p["samples"], reset),
              "end": p["exit"] - last, "end_cpu": p["cpu"] - cpu_at(p["samples"], last)}
    return m


def commands(tmp: Path, fs: bool, model_url: str | None = None,
             latency: float = 0.0) -> dict[str, tuple[list[str], Path | None, bool]]:
    """Name -> (mcp-gym arguments, the run directory whose episodes to read or None, removed before each run)."""
    quiet = ["launcher.progress=false"]
    cmds: dict[str, tuple[list[str], Path | None, bool]] = {
        "eval sql oracle": (["eval", "policy=oracle", f"out={tmp / 'eval'}", *quiet], tmp / "eval", True),
        "eval sql oracle plots=false": (["eval", "policy=oracle", "plots=false", f"out={tmp / 'eval-np'}", *quiet],
                                        tmp / "eval-np", True),
        "collect sql oracle": (["collect", "policy=oracle", f"out={tmp / 'collect'}", *quiet], tmp / "collect", True),
        "export-sft": (["export-sft", f"runs=[{tmp / 'collect'}]", f"out={tmp / 'sft'}", "overwrite=true"], None,
                       False),
    }
    if fs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchmark_eval import make_fixtures, write_tasks
        from startup import server_command

        make_fixtures(tmp, 1, 40)
        tasks = write_tasks(tmp, 18, 1)
        server = " ".join(server_command("local"))
        cmds["eval server-filesystem 18x4"] = (
            ["eval", "env=custom", f'+env.servers.fs="{server}"', f"env.tasks={tasks}", "policy=oracle", "samples=4",
             "launcher.num_envs=2", f"out={tmp / 'eval-fs'}", "env.connect_timeout=120", *quiet],
            tmp / "eval-fs", True)
        if model_url is not None:
            cmds[f"eval server-filesystem 18x1 model {latency:g}s"] = (
                ["eval", "env=custom", f'+env.servers.fs="{server}"', f"env.tasks={tasks}", "policy=openai",
                 f"policy.base_url={model_url}", "policy.model=scripted", "policy.api_key=sk-bench", "samples=1",
                 "launcher.num_envs=2", f"out={tmp / 'eval-fs-model'}", "env.connect_timeout=120", *quiet],
                tmp / "eval-fs-model", True)
    return cmds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="runs of every command, interleaved")
    ap.add_argument("--fs", action="store_true", help="add the per-episode server-filesystem eval (npm install)")
    ap.add_argument("--model-latency", type=float, default=0.2, metavar="S",
                    help="with --fs: also an eval whose policy is a scripted chat endpoint answering in S s (0: none)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="only commands whose name has NAME")
    ap.add_argument("--compare", metavar="DIR", type=Path,
                    help="also run every command with DIR first on PYTHONPATH (a checkout of another mcp-gym commit: "
                         "its mcp_gym/ package; envs/, servers/ and conf/ come from the installed one), as 'before'")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-overhead-"))
    py = sys.executable
    floors = {"python -c pass": [py, "-c", "pass"], "python -c 'import mcp_gym'": [py, "-c", "import mcp_gym"]}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        url = None
        if a.fs and a.model_latency > 0:
            sys.path.insert(0, str(ROOT / "tests"))
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from _chat_server import serve_chat_completions
            from benchmark_eval import scripted_model

            url = stack.enter_context(serve_chat_completions(scripted_model, delay=a.model_latency))
        run_all(a, tmp, py, floors, commands(tmp, a.fs, url, a.model_latency))


def run_all(a: argparse.Namespace, tmp: Path, py: str, floors: dict[str, list[str]],
            cmds: dict[str, tuple[list[str], Path | None, bool]]) -> None:
    """Every command and floor, ``a.rounds`` times interleaved (after a warm-up round), and the table."""
    try:
        if a.only:
            cmds = {k: v for k, v in cmds.items() if any(o in k for o in a.only) or k == "collect sql oracle"}
        arms: dict[str, dict[str, str] | None] = {"": None}
        if a.compare is not None:
            before = {**os.environ, "PYTHONPATH": os.pathsep.join([str(a.compare.resolve()),
                                                                    *filter(None, [os.environ.get("PYTHONPATH")])])}
            arms = {"before: ": before, "after: ": None}
        names = [*(f"{arm}{name}" for name in [*floors, *cmds] for arm in arms)]
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        loads = [os.getloadavg()[0]]
        for r in range(a.rounds + 1):  # round 0 warms up (compiles, fills caches): not counted
            for name, argv in floors.items():
                for arm, env in arms.items():
                    m = measure(argv, tmp, None, env)
                    if r:
                        rows[f"{arm}{name}"].append(m)
            for name, (args, run, fresh) in cmds.items():
                for arm, env in arms.items():
                    if fresh and run is not None:
                        shutil.rmtree(run, ignore_errors=True)
                    m = measure([py, "-c", RUN, *args], tmp, run, env)
                    if r:
                        rows[f"{arm}{name}"].append(m)
            loads.append(os.getloadavg()[0])
        report(rows, a.rounds, loads, list(arms))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(rows: dict[str, list[dict[str, float]]], rounds: int, loads: list[float], arms: list[str]) -> None:
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rows.items()}
    print(f"mcp-gym job overhead, medians of {rounds} runs per command (interleaved); load average "
          f"{min(loads):.2f}-{max(loads):.2f} (1 min), {os.cpu_count()} cores; wall / job-process CPU in s")
    head = (f"{'command':<46} {'to first reset':>15} {'x pass':>7} {'x import':>8} {'to 1st step':>11} "
            f"{'episodes':>13} {'end of job':>13} {'total':>13} {'children':>8}")
    print(head)
    print("-" * len(head))

    def pair(w: float | None, c: float | None) -> str:
        return "-" if w is None else f"{w:.2f}/{c:.2f}"

    for name, m in med.items():
        arm = next(a for a in arms if name.startswith(a))
        floor, pkg = med[f"{arm}python -c pass"], med[f"{arm}python -c 'import mcp_gym'"]
        to_reset = m.get("to_reset", m["wall"])
        print(f"{name:<46} {pair(m.get('to_reset'), m.get('to_reset_cpu')):>15} "
              f"{to_reset / floor['wall']:>7.1f} {to_reset / pkg['wall']:>8.2f} "
              f"{('-' if 'to_step' not in m else format(m['to_step'], '.2f')):>11} "
              f"{pair(m.get('episodes'), m.get('episodes_cpu')):>13} {pair(m.get('end'), m.get('end_cpu')):>13} "
              f"{pair(m['wall'], m['cpu']):>13} {m['children']:>8.2f}")
    print("(x pass, x import: the time to first reset (the whole run where there are no episodes) over the same "
          "arm's floor's whole run)")
    if len(arms) == 2:
        print("\nafter / before (medians of per-round ratios): total wall, total job CPU, end-of-job wall, "
              "end-of-job CPU, servers' CPU")
        for name in [n.removeprefix(arms[1]) for n in rows if n.startswith(arms[1])]:
            b, a = rows[arms[0] + name], rows[arms[1] + name]

            def ratio(key: str, b: list[dict[str, float]] = b, a: list[dict[str, float]] = a) -> str:
                if key not in a[0] or not all(x[key] for x in b):
                    return "-"
                return f"x{statistics.median(y[key] / x[key] for x, y in zip(b, a, strict=True)):.2f}"

            print(f"  {name:<44} {ratio('wall'):>7} {ratio('cpu'):>7} {ratio('end'):>7} {ratio('end_cpu'):>7} "
                  f"{ratio('children'):>7}")


if __name__ == "__main__":
    main()
