"""``launcher=ray`` on a local 2-CPU Ray cluster: sharded collection, an actor SIGKILLed mid-run, resume, URIs."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

import pyarrow.parquet as pq  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402

from mcp_gym.jobs.evaluate import score_run  # noqa: E402
from mcp_gym.jobs.ray_launcher import collect_ray  # noqa: E402
from mcp_gym.recording import RunDirectory, RunStore, TrajectoryWriter, load, read_tables  # noqa: E402

EPISODES = 48


def job(out: Path, *overrides: str) -> Any:
    """The composed config of ``mcp-gym collect launcher=ray ...`` (Counter in-process, random policy)."""
    with initialize_config_module(config_module="mcp_gym.conf", version_base="1.3"):
        return compose("config", overrides=[
            "job=collect", "env=counter", "env.transport=inprocess", "policy=random", f"episodes={EPISODES}",
            "launcher=ray", "launcher.num_workers=3", "launcher.cpus_per_worker=0.5", "launcher.num_envs=2",
            "launcher.chunk_size=4", "launcher.progress=false", "launcher.poll_interval=0.2", f"out={out}",
            *overrides])


@pytest.fixture(scope="module")
def cluster() -> Any:
    """A local Ray with 2 CPUs for the whole module (collect_ray reuses it and leaves it running)."""
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - started:.1f} s")
    yield ray
    ray.shutdown()


def check_run(run: Path, planned: int) -> None:
    """Complete, no duplicate episodes, and every episode's steps present (the same format as a local job)."""
    rd = RunDirectory(run)
    assert rd.is_complete() and len(rd.planned or []) == planned
    steps, episodes = read_tables(run, include_wal=False)
    keys = episodes.column("episode_key").to_pylist()
    assert len(keys) == len(set(keys)) == planned and set(keys) == set(rd.planned or [])
    lengths = dict(zip(episodes.column("episode_id").to_pylist(), episodes.column("length").to_pylist(), strict=True))
    counts: dict[str, int] = {}
    for eid in steps.column("episode_id").to_pylist():
        counts[eid] = counts.get(eid, 0) + 1
    assert counts == lengths
    assert len(load(run).episodes) == planned  # datasets reads it too
    names = {p.name for p in (run / "steps").iterdir()}
    assert names == {p.name for p in (run / "episodes").iterdir()}  # no orphan or unfinished uploads left
    assert not any(n.startswith(".") for n in names)


@pytest.mark.slow
def test_actor_killed_mid_run(cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = tmp_path / "run"
    # The actors stage in this test's own folder: a ray job of a test running meanwhile in the other xdist worker
    # stages its shards in the system temp directory, where "no staging left" would see them.
    staging = tmp_path / "staging"
    cfg = job(run, f"launcher.staging_dir={staging}")
    outcome: dict[str, Any] = {}

    def driver() -> None:
        try:
            outcome["result"] = collect_ray(cfg, run)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            outcome["error"] = e

    caplog.set_level(logging.WARNING, logger="mcp_gym.jobs.ray_launcher")
    t0 = time.perf_counter()
    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    # Wait for the first published work item, then SIGKILL one actor's process.
    deadline = time.monotonic() + 600  # a bound on hangs: Ray starts slowly on a loaded machine
    while not any((run / "episodes").glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert thread.is_alive(), outcome
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "mcp-gym")
    victim = ray.get_actor(names[0], namespace="mcp-gym")
    pid = ray.get(victim.pid.remote())
    os.kill(pid, signal.SIGKILL)
    killed_at = time.perf_counter() - t0
    thread.join(120)
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    r = outcome["result"]
    print(f"collect_ray: {r.planned} episodes, {r.steps} steps in {r.seconds:.1f} s, actor killed at "
          f"{killed_at:.1f} s")
    assert r.planned == EPISODES and not r.errors
    assert r.already_done + r.finished == EPISODES  # published by the killed actor + the rest
    assert any("Ray worker died" in rec.message for rec in caplog.records)
    check_run(run, EPISODES)
    assert staging.is_dir() and not any(staging.glob("mcp-gym-ray-*/worker-*/episodes/part-*"))  # staging removed

    # Resume: drop one published work item and rerun, this time naming the run as a pyarrow.fs URI in
    # launcher.storage (Hydra's output directory elsewhere): only the lost episodes run again, no duplicates.
    part = sorted((run / "episodes").glob("part-*.parquet"))[0]
    lost = pq.read_table(part).num_rows
    part.unlink()
    (run / "steps" / part.name).unlink()
    hydra_out = tmp_path / "hydra-out"
    resume = job(hydra_out, f"launcher.storage=file://{run}")
    r2 = collect_ray(resume, hydra_out)
    assert r2.already_done == EPISODES - lost and r2.finished == lost and r2.steps > 0
    assert not (hydra_out / "episodes").exists()  # the shards went to the storage location
    check_run(run, EPISODES)
    r3 = collect_ray(cfg, run)  # nothing left to do: no actor is started
    assert r3.already_done == EPISODES and r3.finished == 0


def test_run_store_on_an_object_store_like_filesystem(tmp_path: Path) -> None:
    """The non-local code path (no rename, manifest through pyarrow.fs), on a SubTreeFileSystem over local disk."""
    from pyarrow import fs

    import mcp_gym
    from mcp_gym.recording import RecordTrajectories

    remote = fs.SubTreeFileSystem(str(tmp_path), fs.LocalFileSystem())
    shared = RunStore("bucket/run", filesystem=remote)
    assert not shared.is_local
    shared.plan(["counter-0000#0", "counter-0001#0"], metadata={"job": "test"})
    shared.plan(["counter-0000#0", "counter-0001#0"], metadata={"job": "test"})  # same plan: fine
    with pytest.raises(ValueError):
        shared.plan(["other#0"], metadata={})
    staging = tmp_path / "staging"
    writer = TrajectoryWriter(staging)
    env = RecordTrajectories(mcp_gym.make_env("Counter"), writer, policy="oracle")
    for key in ("counter-0000#0", "counter-0001#0"):
        task_id = key.split("#")[0]
        env.reset(options={"task_id": task_id, "episode_key": key})
        for call in env.unwrapped.task.solution:
            env.step(call)
    env.close()
    writer.close()
    parts = shared.upload(staging)
    assert len(parts) == 1 and not any((staging / "episodes").glob("part-*"))
    assert shared.done_keys() == {"counter-0000#0", "counter-0001#0"}
    run = tmp_path / "bucket" / "run"
    assert RunDirectory(run).is_complete()
    check_run(run, 2)
    # An orphan steps shard (uploader killed between its two files) and an unfinished upload are swept.
    (run / "steps" / "part-dead-00000.parquet").write_bytes(b"x")
    (run / "episodes" / ".upload-part-dead-00001.parquet").write_bytes(b"x")
    steps, episodes = shared.read_tables()  # through pyarrow.fs; the orphan and the unfinished upload are skipped
    assert sorted(episodes.column("episode_key").to_pylist()) == ["counter-0000#0", "counter-0001#0"]
    assert steps.num_rows == sum(episodes.column("length").to_pylist()) > 0
    summary, _, _ = score_run((steps, episodes), shared.manifest()["planned"], [1])  # what eval scores with storage
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0
    assert shared.sweep() == 2
    check_run(run, 2)


@pytest.mark.slow  # the Ray cluster start; the fast lane keeps test_run_store_on_an_object_store_like_filesystem
def test_rerun_identity_on_ray(cluster: Any, tmp_path: Path) -> None:
    """launcher=ray keeps run identity like a local job: another policy refuses, more episodes run only the new ones,
    and a local rerun of the same config resumes the Ray run."""
    from mcp_gym.jobs import collect
    from mcp_gym.jobs.identity import RunConfigMismatch

    run = tmp_path / "run"
    r1 = collect_ray(job(run, "episodes=4"), run)
    assert r1.finished == 4
    with pytest.raises(RunConfigMismatch, match=r"policy\.kind: 'random' -> 'oracle'"):
        collect_ray(job(run, "episodes=4", "policy=oracle"), run)
    first = set(RunDirectory(run).done_keys())
    r2 = collect_ray(job(run, "episodes=6"), run)
    assert (r2.already_done, r2.finished) == (4, 2)
    check_run(run, 6)
    assert first < RunDirectory(run).done_keys()
    with initialize_config_module(config_module="mcp_gym.conf", version_base="1.3"):
        local = compose("config", overrides=["job=collect", "env=counter", "env.transport=inprocess", "policy=random",
                                             "episodes=6", "launcher.progress=false", f"out={run}"])
    r3 = collect(local, run)  # the same config on the local launcher resumes the Ray run
    assert (r3.already_done, r3.finished) == (6, 0)
