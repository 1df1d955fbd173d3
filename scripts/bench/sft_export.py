"""How fast is the SFT export, compared with merely reading the recorded Parquet files with pyarrow?

Synthesises ``--episodes`` Counter episodes in the recorded format: one real episode is recorded with
``RecordTrajectories`` (for the real tool catalogue, server info and observation format), the rest are written
directly with the recording writer (``TrajectoryWriter.start_episode`` / ``add_step`` / ``finish``): a random walk of
``add`` calls (an occasional ``get_count``) to the task's target, with Hermes-style raw model text, so every episode
is distinct and every export stage (reading, filters, dedupe, markup stripping, Arrow encoding, writing) does real
work. Then times, best of ``--repeat``:

- ``pyarrow read``: ``pq.read_table`` of the steps and episodes shards (all columns): the floor;
- ``sft.build``: read + filter + convert into an in-memory ``datasets.Dataset``;
- ``sft.export`` to Parquet and to JSONL (with the dataset card).

    python scripts/bench/sft_export.py --episodes 10000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import mcp_gym
from mcp_gym import sft
from mcp_gym.recording import RecordTrajectories, TrajectoryWriter, load


def synthesise(run: Path, episodes: int, seed: int = 0) -> int:
    """Write ``episodes`` Counter episodes into ``run``; returns the number of steps."""
    env = RecordTrajectories(mcp_gym.make_env("Counter"), run, policy="bench")
    task = env.unwrapped.tasks[0]
    env.reset(options={"task_id": task.id})
    for call in task.solution:
        if env.step(dict(call))[2]:
            break
    env.close()
    real = load(run).episodes[0]
    tools, servers = json.loads(real["tools"]), json.loads(real["servers"])

    rng = random.Random(seed)
    steps = 0
    with TrajectoryWriter(run) as writer:
        for i in range(episodes - 1):
            target = rng.choice([t for t in range(-60, 61) if t])
            prompt = f"Use the counter tools to make the counter reach exactly {target}, then submit the count."
            ep = writer.start_episode(env_id="mcp_gym/Counter-v0", task_id=f"counter-{i % 120:04d}",
                                      task_prompt=prompt, seed=i, policy="bench", tools=tools, servers=servers,
                                      initial_observation={"task": prompt, "result": "", "resources": {}})
            count, total = 0, 0.0
            while count != target:
                if rng.random() < 0.1:
                    tool, args = "get_count", {}
                    result: dict[str, Any] = {"count": count, "target": target}
                    reward = 0.0
                else:
                    step = min(rng.randint(1, 5), abs(target - count))
                    tool, args = "add", {"amount": step if target > count else -step}
                    count += args["amount"]
                    reward = 1.0 if count == target else -0.01
                    result = {"count": count, "target": target, "reward": reward, "done": count == target}
                text = json.dumps(result, indent=2)
                raw = f"<think>The counter is at {count}.</think>\n<tool_call>\n" + json.dumps(
                    {"name": tool, "arguments": args}) + "\n</tool_call>"
                total += reward
                ep.add_step(tool, args, server="testing", server_tool=tool,
                            content=[{"type": "text", "text": text}], structured_content=result, reward=reward,
                            terminated=count == target, duration=0.001, observation=text,
                            resources=json.dumps({"counter://state": f"count={count} target={target}"}),
                            raw_text=raw, parse_status="ok", info={"tools_changed": False, "logs": []})
                steps += 1
            ep.finish(total_reward=total, success=True, termination="done")
    return steps + int(real["length"])


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Fastest of ``repeat`` runs and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="sft-bench-"))
    run, out = work / "run", work / "out"
    shutil.rmtree(run, ignore_errors=True)

    t = time.perf_counter()
    steps = synthesise(run, args.episodes)
    print(f"synthesised {args.episodes:,} Counter episodes ({steps:,} steps) in {time.perf_counter() - t:.1f} s "
          f"({sum(p.stat().st_size for p in run.rglob('*.parquet')) / 1e6:.1f} MB of Parquet)")

    def read() -> int:
        shards = [p for table in ("steps", "episodes") for p in (run / table).glob("*.parquet")]
        return sum(pq.read_table(p).num_rows for p in shards)

    floor, _ = best(read, args.repeat)
    rows = [("pyarrow read (steps + episodes)", floor, args.episodes)]
    built_s, built = best(lambda: sft.build(run), args.repeat)
    rows.append(("sft.build (in memory)", built_s, len(built)))
    for fmt in ("parquet", "jsonl"):
        s, ds = best(lambda fmt=fmt: sft.export(run, out / fmt, format=fmt, overwrite=True), args.repeat)
        rows.append((f"sft.export format={fmt}", s, len(ds)))
    print(f"\n{'stage':34} {'seconds':>8} {'examples':>9} {'episodes/s':>11} {'x pyarrow read':>15}")
    for name, s, n in rows:
        print(f"{name:34} {s:8.3f} {n:9,} {args.episodes / s:11,.0f} {s / floor:15.1f}")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
