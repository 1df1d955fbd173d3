"""Ray launcher scaling: steps/s with 1 and 2 Ray workers on this machine, against the local launcher, plus Ray's
start-up cost.

The same collection job (default: 400 Counter episodes, random policy, in-process servers, 8 episodes at once per
worker, recorded to Parquet) runs with ``launcher=local`` and with ``launcher=ray`` at 1 and 2 workers, each into a
fresh run directory. Reported per configuration: wall time of the job, steps, steps/s over the wall time, and steps/s
after the actors' start-up (wall time minus the measured time an actor takes to become ready). Ray's own cost is
measured separately: ``ray.init`` of a local cluster, and the first call to a new :class:`RayCollector` actor (a
Python worker process importing mcp-gym).

    python scripts/bench/ray_scaling.py                                  # local Ray with all CPUs
    python scripts/bench/ray_scaling.py --episodes 1000 --env maze --workers 1 2 4
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from hydra import compose, initialize_config_module

from mcp_gym.jobs import collect
from mcp_gym.jobs.ray_launcher import RayCollector


def job(out: Path, args: argparse.Namespace, launcher: str, workers: int = 1) -> Any:
    """The composed config of the benchmark job."""
    overrides = [
        "job=collect", f"env={args.env}", "env.transport=inprocess", f"policy={args.policy}",
        f"episodes={args.episodes}", f"launcher={launcher}", f"launcher.num_envs={args.num_envs}",
        "launcher.progress=false", f"out={out}",
    ]
    if launcher == "ray":
        overrides += [f"launcher.num_workers={workers}", f"launcher.cpus_per_worker={args.cpus_per_worker}"]
    with initialize_config_module(config_module="mcp_gym.conf", version_base="1.3"):
        return compose("config", overrides=overrides)


def actor_startup(cfg: Any, staging: Path) -> float:
    """Seconds until a new collector actor answers its first call (process start + imports + env set-up)."""
    from omegaconf import OmegaConf

    start = time.perf_counter()
    actor = ray.remote(RayCollector).options(num_cpus=0).remote(
        OmegaConf.to_container(cfg, resolve=True), str(staging / "shared"), str(staging / "stage"))
    ray.get(actor.pid.remote())
    elapsed = time.perf_counter() - start
    ray.kill(actor)
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="counter", help="bundled env config name (conf/env)")
    p.add_argument("--policy", default="random")
    p.add_argument("--episodes", type=int, default=400)
    p.add_argument("--num-envs", type=int, default=8, help="episodes at once per worker")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcp-gym-ray-bench-"))
    rows: list[tuple[str, float, int, float, float]] = []
    try:
        # The local launcher: one process, one event loop.
        cfg = job(tmp / "local", args, "local")
        r = collect(cfg, tmp / "local")
        rows.append(("local (1 process)", r.seconds, r.steps, r.steps / r.seconds, r.steps / r.seconds))

        start = time.perf_counter()
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        init_s = time.perf_counter() - start
        cluster_cpus = int(ray.cluster_resources().get("CPU", 0))
        first_actor = actor_startup(job(tmp / "probe", args, "ray"), tmp / "probe")
        second_actor = actor_startup(job(tmp / "probe", args, "ray"), tmp / "probe2")

        for n in args.workers:
            out = tmp / f"ray-{n}"
            cfg = job(out, args, "ray", n)
            start = time.perf_counter()
            r = collect(cfg, out)
            wall = time.perf_counter() - start
            rows.append((f"ray, {n} worker{'s' if n > 1 else ''}", wall, r.steps, r.steps / wall,
                         r.steps / max(wall - second_actor, 1e-9)))
        ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.episodes} {args.env} episodes, policy {args.policy}, {args.num_envs} at once per worker, "
          f"in-process servers, recorded; {os.cpu_count()} CPUs here, Ray cluster {cluster_cpus} CPUs")
    print(f"{'configuration':<22} {'wall s':>8} {'steps':>7} {'steps/s':>9} {'steps/s excl. actor start':>26}")
    for name, wall, steps, rate, steady in rows:
        print(f"{name:<22} {wall:>8.2f} {steps:>7d} {rate:>9.1f} {steady:>26.1f}")
    print(f"\nRay start-up: ray.init {init_s:.2f} s; a new collector actor ready in {first_actor:.2f} s (first), "
          f"{second_actor:.2f} s (second)")


if __name__ == "__main__":
    main()
