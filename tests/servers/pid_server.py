"""A per-episode MCP server over stdio for the spare-server tests: started as ``pid_server.py WORKSPACE PIDS``, it
writes its process id into the folder ``PIDS`` (one empty file per process, named by the pid) and serves
``write_file(name, content)`` and ``read_file(name)`` on files directly inside ``WORKSPACE``.

``pid_server.py WORKSPACE PIDS NOTES LINGER`` also notes, in the folder ``NOTES``, how many servers of ``PIDS`` were
alive when it started (``<pid>.start``), and behaves at its exit as a slow one may (issue 40, the background close):
once its stdin closes it writes ``late.txt`` into its workspace if the workspace is still there, then stays alive
for ``LINGER`` seconds (``gate``: until a file ``<pid>.go`` or ``all.go`` appears in ``NOTES``, at most 600 s) while
counting the live servers, and notes ``{"workspace": bool, "live_max": int}`` in ``<pid>.exit``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PIDS = Path(sys.argv[2])
(PIDS / str(os.getpid())).touch()  # first: a test counting processes sees this one from its start


def live() -> int:
    """Servers of ``PIDS`` running now (an exited one not yet reaped, a zombie, does not count)."""
    count = 0
    for entry in PIDS.iterdir():
        try:
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        count += state != "Z"
    return count


NOTES = Path(sys.argv[3]) if len(sys.argv) > 4 else None
if NOTES is not None:
    (NOTES / f"{os.getpid()}.start").write_text(str(live()))

from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the pid file

WORKSPACE = Path(sys.argv[1]).resolve()
server = MCPServer("pid-test")


@server.tool()
def write_file(name: str, content: str) -> str:
    """Write a text file directly inside the workspace."""
    (WORKSPACE / Path(name).name).write_text(content, encoding="utf-8")
    return f"wrote {name} in {WORKSPACE}"


@server.tool()
def read_file(name: str) -> str:
    """Read a text file directly inside the workspace."""
    return (WORKSPACE / Path(name).name).read_text(encoding="utf-8")


def linger(notes: Path, until: str) -> None:
    """After stdin closed: write into the workspace, stay a while counting live servers, note what was seen."""
    there = WORKSPACE.is_dir()
    if there:
        (WORKSPACE / "late.txt").write_text(f"written by {os.getpid()} after its stdin closed")
    gates = [notes / f"{os.getpid()}.go", notes / "all.go"]
    end = time.monotonic() + (600.0 if until == "gate" else float(until))
    most = live()
    while time.monotonic() < end and not (until == "gate" and any(g.exists() for g in gates)):
        most = max(most, live())
        time.sleep(0.005)
    (notes / f"{os.getpid()}.exit").write_text(json.dumps({"workspace": there, "live_max": max(most, live())}))


if __name__ == "__main__":
    server.run()
    if NOTES is not None:
        linger(NOTES, sys.argv[4])
