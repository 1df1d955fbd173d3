"""Collection on Ray: record episodes with several Ray actors, then read the run back (one readable file).

The same job as ``mcp-gym collect launcher=ray ...``, from Python: compose the job config with Hydra's compose API
(``conf/``), pick ``launcher=ray``, and call :func:`mcp_gym.jobs.collect`, which
hands the job to :mod:`mcp_gym.jobs.ray_launcher`. Each actor runs ``--envs-per-worker`` episodes at once and
publishes Parquet shards per work item to the run directory (or ``--storage``, e.g. ``s3://bucket/runs/sql``).
Rerunning the same command resumes: recorded episodes are skipped. Kill a worker while it runs (``ray list actors``,
then ``kill -9 <pid>``) and its unpublished episodes are retried on another one.

    python scripts/examples/ray_collect.py                                   # local Ray, 2 workers, 64 SQL episodes
    python scripts/examples/ray_collect.py --address auto --workers 16 --episodes 10000 --storage s3://bucket/sql
    ray start --head && python scripts/examples/ray_collect.py --address auto
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module

from mcp_gym.jobs import collect
from mcp_gym.recording import load


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags (all have defaults, so the script runs as is)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="sql", help="bundled env config (conf/env): counter, sql, notes, maze, ...")
    p.add_argument("--policy", default="oracle", help="random, oracle or openai (then set --override policy.*)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="Ray actors")
    p.add_argument("--envs-per-worker", type=int, default=8, help="episodes at once per actor")
    p.add_argument("--cpus-per-worker", type=float, default=0.5)
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--storage", default=None, help="pyarrow.fs URI for the shards (default: the run directory)")
    p.add_argument("--out", default="runs/examples/ray-collect", help="run directory")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="more Hydra overrides")
    return p.parse_args(argv)


def job_config(args: argparse.Namespace) -> Any:
    """``mcp-gym collect env=... policy=... launcher=ray ...`` as a composed config."""
    overrides = [
        "job=collect", f"env={args.env}", f"policy={args.policy}", f"episodes={args.episodes}", f"out={args.out}",
        "launcher=ray", f"launcher.num_workers={args.workers}", f"launcher.num_envs={args.envs_per_worker}",
        f"launcher.cpus_per_worker={args.cpus_per_worker}",
    ]
    if args.address:
        overrides.append(f"launcher.address={args.address}")
    if args.storage:
        overrides.append(f"launcher.storage={args.storage}")
    with initialize_config_module(config_module="mcp_gym.conf", version_base="1.3"):
        return compose("config", overrides=overrides + list(args.override))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Collect, then summarise the recording; returns the numbers."""
    args = parse_args(argv)
    cfg = job_config(args)
    out = Path(args.out)
    start = time.perf_counter()
    result = collect(cfg, out)  # launcher.kind == "ray": runs on Ray actors
    wall = time.perf_counter() - start
    print(f"{result.planned} planned, {result.already_done} already recorded, {result.finished} recorded now "
          f"({result.steps} steps in {wall:.1f} s incl. Ray start-up)" +
          (f", {len(result.errors)} failed: rerun to retry" if result.errors else ""))

    if args.storage:  # a remote store: read it with pyarrow/datasets directly, e.g. load_dataset("parquet", ...)
        return {"result": result}
    rec = load(out)  # the same run directory format as a local job
    episodes = rec.episodes
    endings = Counter(episodes["termination"])
    success = sum(bool(s) for s in episodes["success"]) / max(len(episodes), 1)
    print(f"run directory {out}: {len(episodes)} episodes, {len(rec.steps)} steps, success {success:.0%}, "
          f"endings {dict(endings)}")
    first = episodes[0]
    print(f"e.g. episode {first['episode_key']}: {first['length']} steps, reward {first['total_reward']:.2f}")
    return {"result": result, "episodes": len(episodes), "success": success}


if __name__ == "__main__":
    main()
