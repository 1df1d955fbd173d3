"""A resumable collector, run as a subprocess by tests/test_recording.py (which SIGKILLs it mid-run).

    python tests/_collector.py RUN_DIR --tasks 12 --samples 4 [--sleep 0.01] [--shard-bytes 1]

Plans ``tasks x samples`` episode keys, records the pending ones on the in-process Counter env with a scripted policy
(the task's reference solution, one wrong move first on odd samples), prints ``done <key>`` after each finished
episode and ``complete`` at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mcp_gym  # noqa: E402
from mcp_gym.recording import RecordTrajectories, RunDirectory  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--shard-bytes", type=int, default=1)
    ap.add_argument("--row-group-rows", type=int, default=8)
    args = ap.parse_args()

    env = RecordTrajectories(
        mcp_gym.make_env("Counter"), args.run_dir, policy="scripted", shard_bytes=args.shard_bytes,
        row_group_rows=args.row_group_rows,
    )
    tasks = {t.id: t for t in env.unwrapped.tasks[: args.tasks]}
    run = RunDirectory(args.run_dir)
    keys = run.plan(f"{tid}#{k}" for tid in tasks for k in range(args.samples))
    for key in run.pending(keys):
        task_id, sample = key.split("#")
        actions = list(tasks[task_id].solution)
        if int(sample) % 2:
            actions.insert(0, {"tool": "get_count", "arguments": {}})
        env.reset(seed=int(sample), options={"task_id": task_id, "episode_key": key})
        for action in actions:
            _, _, terminated, truncated, _ = env.step({**action, "raw_text": f"call {action}", "parse_status": "ok"})
            if terminated or truncated:
                break
        print(f"done {key}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    env.close()
    print("complete", flush=True)


if __name__ == "__main__":
    main()
