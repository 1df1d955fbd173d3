"""What does a trainer face add per step on top of ``MCPEnv.step``? Measured side by side in one run.

Each face gets its own env over the same server (the Counter server's ``echo`` tool, over stdio and in-process) and
plays what its trainer sends: ``MCPEnv.step({"tool": "echo", ...})`` is the base; the SkyRL face
(``mcp_gym.skyrl.MCPGymTextEnv.step``) and ``TextEnvBatch.step`` (n=1) get the model's text with the same call in a
Hermes ``<tool_call>`` block, so they also parse it and build the chat view's tool message; the OpenEnv face's session
(``mcp_gym.openenv.MCPGymEnvironment.step``, what its server runs per WebSocket ``step``, without the network) gets
OpenEnv's ``CallToolAction``. Rounds interleave the sides
(the order rotates) so machine noise hits all alike; reported: median wall time per step, this process's CPU per step
(the client's own cost; over stdio the server's CPU is another process) and the ratios to ``MCPEnv.step``. With
``--record`` every side records into a run directory (RecordTrajectories; the face with ``record_to``).

    python scripts/bench/trainer_faces.py --rounds 7 --steps 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from mcp_gym import InProcess, MCPEnv, Stdio
from mcp_gym.envs.counter.server import make_server
from mcp_gym.recording import RecordTrajectories
from mcp_gym.textenv import TextEnvBatch

ACTION = {"tool": "echo", "arguments": {"text": "hello"}}
TEXT = '<tool_call>\n{"name": "echo", "arguments": {"text": "hello"}}\n</tool_call>'


def faces(make: Callable[[], MCPEnv], record: str | None) -> dict[str, tuple[Callable[[], Any], Callable[[], None]]]:
    """name -> (one step, close) for the base env and every face available here, each over its own env."""
    out: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {}
    base: Any = make() if record is None else RecordTrajectories(make(), f"{record}/mcpenv")
    base.reset(seed=0)
    out["MCPEnv.step"] = (lambda: base.step(ACTION), base.close)
    wrapped: Any = make() if record is None else RecordTrajectories(make(), f"{record}/textenv")
    batch = TextEnvBatch([wrapped])
    batch.reset(seed=0)
    out["TextEnvBatch.step (n=1)"] = (lambda: batch.step([TEXT]), batch.close)
    try:
        from mcp_gym.skyrl import MCPGymTextEnv
    except ImportError:
        print("  (SkyRL face skipped: pip install 'mcp-gym[skyrl]')")
    else:
        sky = MCPGymTextEnv(None, {}, env=make, record_to=None if record is None else f"{record}/skyrl")
        sky.init([])
        out["SkyRL MCPGymTextEnv.step"] = (lambda: sky.step(TEXT), sky.close)
    try:
        from openenv.core.env_server.mcp_types import CallToolAction

        from mcp_gym.openenv import MCPGymEnvironment
    except ImportError:
        print("  (OpenEnv face skipped: pip install 'mcp-gym[openenv]')")
    else:
        session = MCPGymEnvironment(make, record_to=None if record is None else f"{record}/openenv")
        session.reset(seed=0)
        call = CallToolAction(tool_name=ACTION["tool"], arguments=ACTION["arguments"])
        out["OpenEnv session.step"] = (lambda: session.step(call), session.close)
    return out


def compare(label: str, make: Callable[[], MCPEnv], rounds: int, steps: int, record: str | None) -> None:
    sides = faces(make, record)
    for step, _ in sides.values():  # warm up
        for _ in range(20):
            step()
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for k in range(rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            step = sides[name][0]
            times = []
            c0 = time.process_time()
            for _ in range(steps):
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
            cpu[name].append((time.process_time() - c0) / steps)
            wall[name].append(statistics.median(times))
    base = names[0]
    print(f"{label}{' (recorded)' if record else ''}")
    for name in names:
        w, c = statistics.median(wall[name]) * 1e6, statistics.median(cpu[name]) * 1e6
        line = f"  {name:<27} {w:6.0f} µs/step  client CPU {c:6.0f} µs/step"
        if name != base:
            wr = statistics.median(a / b for a, b in zip(wall[name], wall[base], strict=True))
            cr = statistics.median(a / b for a, b in zip(cpu[name], cpu[base], strict=True))
            best = min(cpu[name]) / min(cpu[base])  # the quietest round of each side: steadier on a loaded machine
            line += f"   ratio to {base}: wall {wr:.3f}, client CPU {cr:.3f} (best rounds {best:.3f})"
        print(line)
    for _, close in sides.values():
        close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--record", action="store_true", help="every side records its steps (RecordTrajectories)")
    a = p.parse_args()
    print(f"a face's step vs MCPEnv.step, median of {a.rounds} interleaved rounds x {a.steps} steps (goal: <= 1.10)")
    stdio = Stdio.python_module("mcp_gym.envs.counter.server", "--diagnostics")
    server = make_server(diagnostics=True)
    with tempfile.TemporaryDirectory() as tmp:
        record = tmp if a.record else None
        compare("stdio", lambda: MCPEnv({"c": stdio}, ["t"], max_steps=10**9), a.rounds, a.steps, record)
        compare("in-process", lambda: MCPEnv({"c": InProcess(server)}, ["t"], max_steps=10**9), a.rounds, a.steps,
                record and f"{record}/ip")


if __name__ == "__main__":
    main()
