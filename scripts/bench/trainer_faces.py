"""What does a trainer face add per step on top of ``MCPEnv.step``? Measured side by side in one run.

Each face gets its own env over the same server (the Counter server's ``echo`` tool, over stdio and in-process) and
plays what its trainer sends: ``MCPEnv.step({"tool": "echo", ...})`` is the base; the SkyRL face
(``mcp_gym.skyrl.MCPGymTextEnv.step``) and ``TextEnvBatch.step`` (n=1) get the model's text with the same call in a
Hermes ``<tool_call>`` block, so they also parse it and build the chat view's tool message; the OpenEnv face's session
(``mcp_gym.openenv.MCPGymEnvironment.step``, what its server runs per WebSocket ``step``, without the network) gets
OpenEnv's ``CallToolAction``. Rounds interleave the sides
(the order rotates) so machine noise hits all alike; reported: median wall time per step, this process's CPU per step
(the client's own cost; over stdio the server's CPU is another process), each side's own time (its step minus the
time inside ``MCPEnv._astep``, the env's step proper: the face's parsing, chat view and layers, plus the sync face) and
the ratios to ``MCPEnv.step``: of wall and CPU time per round, and "by own time", (env step + the side's own time) /
(env step + ``MCPEnv.step``'s own time), which the noise of the env step itself (the server, the machine) does not
move. With ``--record`` every side records into a run directory (RecordTrajectories; the face with ``record_to``).

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


class Inner:
    """Wall time spent inside ``MCPEnv._astep`` (the env's step proper) of the envs a factory makes."""

    def __init__(self, make: Callable[[], MCPEnv]) -> None:
        self.make_plain = make
        self.seconds = 0.0

    def make(self) -> MCPEnv:
        env = self.make_plain()
        step = env._astep

        async def timed(action: Any) -> Any:
            t = time.perf_counter()
            try:
                return await step(action)
            finally:
                self.seconds += time.perf_counter() - t

        env._astep = timed  # type: ignore[method-assign]
        return env


def faces(make: Callable[[], MCPEnv], record: str | None
          ) -> dict[str, tuple[Callable[[], Any], Callable[[], None], Inner]]:
    """name -> (one step, close, inner timer) for the base env and every face here, each over its own env."""
    out: dict[str, tuple[Callable[[], Any], Callable[[], None], Inner]] = {}
    timers = {name: Inner(make) for name in ("base", "textenv", "skyrl", "openenv")}
    base: Any = timers["base"].make() if record is None else RecordTrajectories(timers["base"].make(),
                                                                               f"{record}/mcpenv")
    base.reset(seed=0)
    out["MCPEnv.step"] = (lambda: base.step(ACTION), base.close, timers["base"])
    inner = timers["textenv"].make()
    wrapped: Any = inner if record is None else RecordTrajectories(inner, f"{record}/textenv")
    batch = TextEnvBatch([wrapped])
    batch.reset(seed=0)
    out["TextEnvBatch.step (n=1)"] = (lambda: batch.step([TEXT]), batch.close, timers["textenv"])
    try:
        from mcp_gym.skyrl import MCPGymTextEnv
    except ImportError:
        print("  (SkyRL face skipped: pip install 'mcp-gym[skyrl]')")
    else:
        sky = MCPGymTextEnv(None, {}, env=timers["skyrl"].make, record_to=None if record is None else f"{record}/skyrl")
        sky.init([])
        out["SkyRL MCPGymTextEnv.step"] = (lambda: sky.step(TEXT), sky.close, timers["skyrl"])
    try:
        from openenv.core.env_server.mcp_types import CallToolAction

        from mcp_gym.openenv import MCPGymEnvironment
    except ImportError:
        print("  (OpenEnv face skipped: pip install 'mcp-gym[openenv]')")
    else:
        session = MCPGymEnvironment(timers["openenv"].make,
                                    record_to=None if record is None else f"{record}/openenv")
        session.reset(seed=0)
        call = CallToolAction(tool_name=ACTION["tool"], arguments=ACTION["arguments"])
        out["OpenEnv session.step"] = (lambda: session.step(call), session.close, timers["openenv"])
    return out


def compare(label: str, make: Callable[[], MCPEnv], rounds: int, steps: int, record: str | None) -> None:
    sides = faces(make, record)
    for step, _, _ in sides.values():  # warm up
        for _ in range(20):
            step()
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    own: dict[str, list[float]] = {name: [] for name in sides}  # per step: the side's time outside MCPEnv._astep
    names = list(sides)
    for k in range(rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            step, _, inner = sides[name]
            inner.seconds = 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(steps):
                step()
            total = time.perf_counter() - t0
            cpu[name].append((time.process_time() - c0) / steps)
            wall[name].append(total / steps)
            own[name].append((total - inner.seconds) / steps)
    base = names[0]
    env_step = statistics.median(w - o for name in names for w, o in zip(wall[name], own[name], strict=True))
    print(f"{label}{' (recorded)' if record else ''}: MCPEnv._astep itself {env_step * 1e6:.0f} µs/step (median)")
    for name in names:
        w, c, o = (statistics.median(x[name]) * 1e6 for x in (wall, cpu, own))
        line = f"  {name:<26} {w:6.0f} µs/step, CPU {c:6.0f}, own time {o:5.0f}"
        if name != base:
            wr = statistics.median(a / b for a, b in zip(wall[name], wall[base], strict=True))
            cr = statistics.median(a / b for a, b in zip(cpu[name], cpu[base], strict=True))
            split = (env_step + statistics.median(own[name])) / (env_step + statistics.median(own[base]))
            line += f"  ratio: wall {wr:.3f}, CPU {cr:.3f}, by own time {split:.3f}"
        print(line)
    for _, close, _ in sides.values():
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
