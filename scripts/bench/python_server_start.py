"""What a per-episode start and stop of a third-party Python MCP server costs, piece by piece.

For a stdio server command (default: PyPI ``mcp-server-git --repository REPO`` on a scratch repository), alternating
round by round:

- **handshake**: the start as an env makes it (``MCPHost.start``: spawn, handshake, first tool listing), with
  ``protocol="auto"`` (the default: a ``server/discover`` probe of at most ``discover_timeout`` = 1 s, then the
  ``initialize`` fallback) against ``protocol="2026-07-28"`` (no probe), and how many of the ``auto`` starts' probes
  were answered late (the SDK's ``dropping response for unknown/late request id`` at DEBUG);
- **stop**: the server process's exit once its stdin closes (what a reset waits for when it replaces the previous
  episode's server), its wall time and the CPU it spent on it (``/proc/PID/stat`` before, ``wait4`` after);
- with ``--resets N``: ``N`` resets of one ``MCPEnv`` whose server names ``{workspace}`` (the pool on, the default),
  ``--think S`` seconds apart as a model's episode would be, each reset's time and the part of it spent closing the
  previous episode's server (``ServerConnection.close``, timed here).

    python scripts/bench/python_server_start.py                  # mcp-server-git, 6 rounds
    python scripts/bench/python_server_start.py --rounds 8 -- mcp-server-time
    python scripts/bench/python_server_start.py --rounds 0 --resets 6 --think 3   # resets with a spare ready

``--compare DIR`` runs the whole measurement twice, each in a child process: ``before`` with the checkout ``DIR``
first on ``PYTHONPATH``, then ``after`` with this one (``--compare-rounds`` pairs, alternating). A reset's close is
counted only where the reset waits for it; a close run in the background (``mcp-gym-retire``: the previous server
exiting off the reset's path) is listed apart::

    git worktree add --detach /tmp/base main
    python scripts/bench/python_server_start.py --rounds 0 --resets 6 --think 3 --compare /tmp/base
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from mcp_gym.client.host import MCPHost
from mcp_gym.client.specs import Stdio

LATE = [0]
BACKGROUND: list[float] = []
"""Closes of a previous episode's server run off the reset's path (a task named ``mcp-gym-retire``)."""


class _Late(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if "unknown/late request id" in record.getMessage():
            LATE[0] += 1


async def start(command: list[str], protocol: str) -> float:
    """Seconds from spawn to the first tool listing (the host's start), then closed."""
    host = MCPHost({"s": Stdio(command[0], command[1:], protocol=protocol)})  # type: ignore[arg-type]
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        took = time.perf_counter() - t0
        if host.connections["s"].status != "ready":
            raise SystemExit(f"server did not start: {host.connections['s'].error}")
        await host.close()
    return took


def stop(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of the server's exit after its stdin closes (started, initialized, then left idle)."""
    init = ('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
            '"capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}\n')
    p = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(init.encode())
    p.stdin.flush()
    p.stdout.readline()  # its initialize answer: booted
    time.sleep(0.2)
    fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    before = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    t0 = time.perf_counter()
    p.stdin.close()
    _, _, usage = os.wait4(p.pid, 0)
    p.returncode = 0
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime - before


def resets(command: list[str], fixture: Path | None, n: int, think: float) -> list[tuple[float, float, int]]:
    """``n`` resets of an env on ``command`` (``{workspace}`` in it, a copy of ``fixture``), ``think`` s apart:
    (reset s, close s, spares taken so far)."""
    from mcp_gym.client import connection
    from mcp_gym.env import MCPEnv

    closes: list[float] = []
    plain = connection.ServerConnection.close

    async def timed(self: connection.ServerConnection) -> None:
        t0 = time.perf_counter()
        try:
            await plain(self)
        finally:
            task = asyncio.current_task()
            (BACKGROUND if task is not None and task.get_name() == "mcp-gym-retire" else closes).append(
                time.perf_counter() - t0)

    connection.ServerConnection.close = timed  # type: ignore[method-assign]
    out = []
    try:
        task = {"id": "t", "prompt": "p", **({"fixture": str(fixture)} if fixture is not None else {})}
        env = MCPEnv({"s": " ".join(command)}, [task])
        try:
            for _ in range(n):
                time.sleep(think)
                closes.clear()
                t0 = time.perf_counter()
                env.reset(options={"task_id": "t"})
                out.append((time.perf_counter() - t0, sum(closes), env.spares.taken))
        finally:
            env.close()
    finally:
        connection.ServerConnection.close = plain  # type: ignore[method-assign]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--resets", type=int, default=0, help="also time this many env resets (the pool on)")
    ap.add_argument("--think", type=float, default=3.0, help="seconds between those resets (a model's episode)")
    ap.add_argument("--compare", type=Path, default=None, metavar="DIR",
                    help="run it all in a child process per checkout: before (DIR first on PYTHONPATH), after (this)")
    ap.add_argument("--compare-rounds", type=int, default=1, help="with --compare: before/after pairs")
    ap.add_argument("command", nargs="*", help="the server's command line (default: mcp-server-git on a scratch repo)")
    a = ap.parse_args()
    if a.compare is not None:
        return compare(a)
    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-bench-pystart-"))
    try:
        command = a.command
        per_episode = a.command
        if not command:
            subprocess.run(["git", "init", "-q", str(tmp / "repo")], check=True)
            command = [shutil.which("mcp-server-git") or "mcp-server-git", "--repository", str(tmp / "repo")]
            per_episode = [command[0], "--repository", "{workspace}"]
        handler = _Late()
        logging.getLogger("mcp").addHandler(handler)
        logging.getLogger("mcp").setLevel(logging.DEBUG)
        times: dict[str, list[float]] = {"auto": [], "2026-07-28": []}
        late = 0
        stops: list[tuple[float, float]] = []
        loads = [os.getloadavg()[0]]
        for _ in range(a.rounds):
            for protocol in times:
                mark = LATE[0]
                times[protocol].append(anyio.run(start, command, protocol))
                late += protocol == "auto" and LATE[0] > mark
            stops.append(stop(command))
            loads.append(os.getloadavg()[0])
        print(f"{' '.join(command)}: {a.rounds} rounds, load average {min(loads):.2f}-{max(loads):.2f} (1 min), "
              f"{os.cpu_count()} cores")
        if a.rounds:
            for protocol, xs in times.items():
                print(f"  start to first listing, protocol={protocol}: median {statistics.median(xs):.3f} s "
                      f"(mean {statistics.fmean(xs):.3f}, {min(xs):.3f}-{max(xs):.3f})")
            print(f"  auto starts whose server/discover probe was answered late: {late} of {a.rounds}")
            walls, cpus = [s[0] for s in stops], [s[1] for s in stops]
            print(f"  exit after stdin closes: median {statistics.median(walls):.3f} s wall "
                  f"({min(walls):.3f}-{max(walls):.3f}), {statistics.median(cpus):.3f} s CPU")
        if a.resets:
            if not any("{workspace}" in x for x in per_episode):
                raise SystemExit("--resets needs a command line naming {workspace}")
            fixture = None if a.command else tmp / "repo"
            done = resets(per_episode, fixture, a.resets, a.think)[1:]  # the first reset starts the first server
            print(f"  resets {a.think:g} s apart (the pool on; the first left out), load average "
                  f"{os.getloadavg()[0]:.2f}: " + ", ".join(f"{r:.3f} s (closing the previous server {c:.3f} s)"
                                                         for r, c, _ in done)
                  + f"; spares taken {done[-1][2] if done else 0}")
            if BACKGROUND:
                print(f"  closed off the reset's path: {len(BACKGROUND)} servers, median "
                      f"{statistics.median(BACKGROUND):.3f} s ({min(BACKGROUND):.3f}-{max(BACKGROUND):.3f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare(a: argparse.Namespace) -> None:
    """``--compare``: the same measurement in a child process per checkout, ``before`` (``a.compare``) and ``after``
    (this one) alternating, each checkout first on the child's ``PYTHONPATH`` (checked: the ``mcp_gym`` it imported)."""
    here = Path(__file__).resolve().parents[2]
    args = [sys.executable, __file__, "--rounds", str(a.rounds), "--resets", str(a.resets), "--think", str(a.think),
            "--", *a.command]
    for _ in range(a.compare_rounds):
        for side, checkout in (("before", a.compare.resolve()), ("after", here)):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), *filter(None, [
                os.environ.get("PYTHONPATH")])])}
            want = str(checkout / "mcp_gym" / "__init__.py")
            found = subprocess.run([sys.executable, "-c", "import mcp_gym; print(mcp_gym.__file__)"], env=env,
                                   capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout.strip()
            if found != want:
                raise SystemExit(f"--compare: the child imports {found}, not {want}")
            print(f"{side} ({checkout}):", flush=True)
            subprocess.run(args, env=env, check=True, cwd=tempfile.gettempdir())


if __name__ == "__main__":
    sys.exit(main())
