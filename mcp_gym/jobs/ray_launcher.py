"""``launcher=ray``: collection and evaluation on a Ray cluster (the ``mcp-gym[ray]`` extra).

``mcp-gym collect launcher=ray launcher.num_workers=4`` (and ``mcp-gym eval ...``) runs the job's planned episodes on
``num_workers`` Ray actors. Each actor hosts the same async vector env as a local job
(:class:`~mcp_gym.vector.VectorMCPEnv`, ``launcher.num_envs`` episodes at once, episodes recorded by
:class:`~mcp_gym.recording.RecordTrajectories`) and works through *work items*: chunks of planned episode keys. An
item's episodes are recorded into the actor's local staging directory; when the item is done its Parquet shards are
published to the shared location (a :class:`~mcp_gym.recording.RunStore`) -- the run directory itself, or
``launcher.storage``, any ``pyarrow.fs`` URI (``s3://bucket/runs/sql``, ``gs://...``, ``file:///mnt/shared/...``) --
steps shard first, episodes shard last.

Guarantees, the same as a local job:

* **Same run directory format.** ``manifest.json`` with the planned keys, ``steps/part-*.parquet`` and
  ``episodes/part-*.parquet``; :func:`mcp_gym.recording.load`, ``export-sft`` and a local ``collect`` read it.
* **Resumable.** Keys already in an episodes shard are skipped, so rerunning the command (with either launcher)
  runs only what is missing.
* **No duplicates, dead actors retried.** An item belongs to one actor at a time. When an actor dies (node lost,
  OOM-killed, ``ray.kill``) its item is given back to the queue minus the keys that reached the shared location, and
  a replacement actor is started (up to ``launcher.max_worker_restarts``). An episodes shard is the commit record:
  a steps shard without its episodes shard (an actor killed between the two uploads) is ignored by readers and
  deleted by the driver at the start and the end of the job.
* **Progress.** The driver polls each actor for finished episodes and shows one progress bar (episodes, steps/s,
  success so far, retries).

Ray pays off across machines or with slow, I/O-bound servers and policies (LLM endpoints); on one machine, a local
job's single event loop is usually as fast (``scripts/bench/ray_scaling.py`` measures both and Ray's start-up).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mcp_gym.jobs.config import load_job_tasks, plan_job, run_location, to_dict
from mcp_gym.jobs.results import CollectResult, JobFailed, JobInterrupted
from mcp_gym.recording.store import RunStore
from mcp_gym.vector import EpisodeResult, EpisodeSpec

__all__ = ["RayCollector"]

log = logging.getLogger(__name__)

# -- the actor ---------------------------------------------------------------------------------------------------------
class RayCollector:
    """What each Ray actor runs: work items of planned episodes on one long-lived async vector env.

    The actor keeps its envs (and their server connections or processes), its policy and its trajectory writer for
    its whole life; each :meth:`run` call runs one item, publishes the writer's shard in the local staging directory
    and uploads it to the shared location. Created by :func:`collect_ray` as an async Ray actor
    (``ray.remote(RayCollector)``); also usable without Ray.

    Args:
        cfg: The job config as a plain dict.
        shared: Where shards are published (a local path or a ``pyarrow.fs`` URI).
        staging: This actor's local staging run directory.
    """

    def __init__(self, cfg: dict[str, Any], shared: str, staging: str) -> None:
        from mcp_gym.jobs.config import env_factory

        self.cfg = OmegaConf.create(cfg)
        self.shared = RunStore(shared)
        self.staging = Path(staging)
        self.tasks = load_job_tasks(to_dict(self.cfg.env), self.cfg.get("split"))
        self.make_env = env_factory(to_dict(self.cfg.env), self.tasks)
        self.recording = bool(self.cfg.recorder.enabled)
        self.finished: list[EpisodeResult] = []  # of the current item, since the last progress() poll
        self.steps = 0
        self._vec: Any = None
        self._policy: Any = None
        self._writer: Any = None

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    async def progress(self) -> tuple[list[EpisodeResult], int]:
        """``(episodes finished since the last call, steps so far)`` -- for the driver's progress bar."""
        out, self.finished = self.finished, []
        return out, self.steps

    async def run(self, specs: Sequence[EpisodeSpec]) -> list[EpisodeResult]:
        """Run one work item, publish its shards; returns its episodes' results."""
        import asyncio

        from mcp_gym.client.runtime import default_runtime

        self.finished = []
        results = await default_runtime().acall(self._run, list(specs))
        if self.recording:
            await asyncio.to_thread(self.shared.upload, self.staging)
        return results

    async def close(self) -> None:
        """Close the envs, the policy and the writer (anything left is published)."""
        import asyncio

        from mcp_gym.client.runtime import default_runtime

        await default_runtime().acall(self._close)
        if self.recording:
            await asyncio.to_thread(self.shared.upload, self.staging)

    async def _start(self) -> None:
        """Build the policy, the writer and the vector env (on the runtime loop, so servers connect lazily there)."""
        from mcp_gym.jobs.config import build_policy
        from mcp_gym.vector import VectorMCPEnv

        launcher = self.cfg.launcher
        self._policy = build_policy(to_dict(self.cfg.policy))
        if self.recording:
            from mcp_gym.recording import RecordTrajectories, TrajectoryWriter

            options = {k: v for k, v in to_dict(self.cfg.recorder).items() if k != "enabled"}
            self._writer = TrajectoryWriter(self.staging, **options)

        def env_fn(slot: int) -> Any:
            env = self.make_env()
            return RecordTrajectories(env, self._writer, policy=self._policy.name) if self._writer else env

        from mcp_gym.jobs.config import needs_own_sessions

        share = None if needs_own_sessions(to_dict(self.cfg.env), self.tasks) else launcher.get("share_servers")
        self._vec = VectorMCPEnv(env_fn, max(1, int(launcher.num_envs)), share_servers=share,
                                 max_connecting=int(launcher.get("max_connecting") or 2))

    async def _run(self, specs: list[EpisodeSpec]) -> list[EpisodeResult]:
        if self._vec is None:
            await self._start()
        results: list[EpisodeResult] = []

        def on_result(r: EpisodeResult) -> None:
            results.append(r)
            self.finished.append(r)
            self.steps += r.length

        await self._vec.run(self._policy, specs, on_result=on_result,
                            episode_timeout=self.cfg.launcher.get("episode_timeout"))
        if self._writer is not None:
            self._writer.publish()  # this item's episodes as one shard in the staging directory
        return results

    async def _close(self) -> None:
        import anyio

        with anyio.CancelScope(shield=True):
            if self._vec is not None:
                await self._vec.aclose()
            if self._policy is not None:
                await self._policy.aclose()
            if self._writer is not None:
                self._writer.close()
        self._vec = None


# -- the driver --------------------------------------------------------------------------------------------------------
def _chunks(specs: Sequence[EpisodeSpec], size: int) -> list[list[EpisodeSpec]]:
    return [list(specs[i: i + size]) for i in range(0, len(specs), size)]


def _run_id(location: str) -> str:
    return f"{zlib.crc32(location.encode()) & 0xFFFFFFFF:08x}"


class _Bar:
    """The driver's progress bar over planned episodes (episodes, steps/s, success so far, retried episodes)."""

    def __init__(self, total: int, done: int, enabled: bool, label: str) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=done, desc=label, unit="ep", disable=not enabled, dynamic_ncols=True)
        self.t0 = time.perf_counter()
        self.finished = self.successes = self.known = self.retried = 0
        self.steps: dict[Any, int] = {}

    def add(self, results: Iterable[EpisodeResult]) -> int:
        """Show finished episodes; returns how many were recorded (failed ones are not)."""
        n = 0
        for r in results:
            if r.error is None:
                n += 1
                self.successes += bool(r.success)
                self.known += r.success is not None
        self.finished += n
        self.bar.update(n)
        return n

    def remove(self, n: int) -> None:
        """Take back episodes shown for a worker that died before publishing them."""
        self.finished -= n
        self.bar.update(-n)

    def refresh(self, worker: Any = None, steps: int | None = None) -> None:
        if worker is not None and steps is not None:
            self.steps[worker] = steps
        rate = sum(self.steps.values()) / max(time.perf_counter() - self.t0, 1e-9)
        success = f"{self.successes / max(self.finished, 1):.0%}" if self.known else "-"  # unknown: no grader
        post = {"steps_s": f"{rate:.1f}", "success": success}
        if self.retried:
            post["retried"] = str(self.retried)
        self.bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        self.bar.close()


def collect_ray(cfg: DictConfig, out: str | Path, *, runtime: Any = None) -> CollectResult:
    """Run the job's planned episodes on Ray actors (see the module docs); returns what :func:`collect` returns.

    ``cfg.launcher`` keys: ``address``, ``num_cpus``, ``num_workers``, ``cpus_per_worker``, ``num_envs``,
    ``share_servers``, ``max_connecting``, ``chunk_size``, ``max_worker_restarts``, ``storage``, ``staging_dir``,
    ``runtime_env``, ``episode_timeout``, ``max_errors``, ``progress``, ``poll_interval`` (see
    ``conf/launcher/ray.yaml``). Ray is started (or joined, with ``address``) unless this process already called
    ``ray.init``; the workers need mcp-gym importable on every node (installed, or through ``runtime_env``).
    Raises ``RuntimeError`` when more than ``max_errors`` episodes failed or every worker died.
    """
    try:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise ImportError('launcher=ray needs Ray: pip install "mcp-gym[ray]"') from e
    del runtime  # the actors have their own runtimes
    launcher = cfg.launcher
    out = Path(out)
    location = run_location(cfg, out)
    shared = RunStore(location)
    recording = bool(cfg.recorder.enabled)
    plan = plan_job(cfg, out, shared if recording else None, extra_metadata={"launcher": "ray", "storage": location},
                    sweep=True)
    specs, pending, result = plan.specs, plan.pending, plan.result
    if not pending:
        return result

    num_workers = max(1, int(launcher.get("num_workers") or 1))
    num_envs = max(1, int(launcher.get("num_envs") or 1))
    size = int(launcher.get("chunk_size") or 0) or max(num_envs, math.ceil(len(pending) / (num_workers * 4)))
    queue: deque[list[EpisodeSpec]] = deque(_chunks(pending, size))
    num_workers = min(num_workers, len(queue))
    restarts_left = int(launcher.get("max_worker_restarts") if launcher.get("max_worker_restarts") is not None
                        else num_workers)
    max_errors = int(launcher.get("max_errors") or 0)
    poll = float(launcher.get("poll_interval") or 0.5)

    started_ray = not ray.is_initialized()
    if started_ray:
        address = launcher.get("address")
        ray.init(address=address, num_cpus=None if address else launcher.get("num_cpus"), include_dashboard=False,
                 log_to_driver=False, configure_logging=False, runtime_env=to_dict(launcher.get("runtime_env")) or None)
    staging_root = Path(launcher.get("staging_dir") or tempfile.gettempdir()) / f"mcp-gym-ray-{_run_id(location)}"
    cfg_dict = OmegaConf.to_container(cfg, resolve=True)
    Actor = ray.remote(RayCollector)
    cpus = float(launcher.get("cpus_per_worker") if launcher.get("cpus_per_worker") is not None else 1)
    serial = 0

    def new_worker() -> Any:
        nonlocal serial
        serial += 1
        staging = staging_root / f"worker-{serial}"
        return Actor.options(name=f"mcp-gym-{_run_id(location)}-{serial}", namespace="mcp-gym", num_cpus=cpus,
                             max_restarts=0, max_concurrency=8).remote(cfg_dict, location, str(staging))

    workers = [new_worker() for _ in range(num_workers)]
    idle: deque[Any] = deque(workers)
    running: dict[Any, tuple[Any, list[EpisodeSpec]]] = {}  # ref of worker.run(item) -> (worker, item)
    shown: dict[Any, list[EpisodeResult]] = {}  # worker -> results of its current item already on the bar
    bar = _Bar(len(specs), result.already_done, bool(launcher.get("progress", True)),
               f"{cfg.command} {out.name} (ray x{num_workers})")
    t0 = time.perf_counter()
    deaths = 0

    def worker_died(worker: Any, item: list[EpisodeSpec], why: str) -> None:
        """Give the item's unpublished episodes back to the queue and start a replacement worker."""
        nonlocal restarts_left, deaths
        deaths += 1
        lost = shown.pop(worker, [])
        bar.remove(sum(r.error is None for r in lost))
        bar.successes -= sum(bool(r.success) for r in lost if r.error is None)
        bar.known -= sum(r.success is not None for r in lost if r.error is None)
        done = shared.done_keys() if recording else set()
        left = [s for s in item if s.key not in done]
        result.already_done += len(item) - len(left)  # published before the worker died
        bar.bar.update(len(item) - len(left))
        if left:
            queue.appendleft(left)
            bar.retried += len(left)
        log.warning("a Ray worker died (%s): %d episode(s) of its work item go back to the queue, %d were published",
                    why, len(left), len(item) - len(left))
        with _suppress():
            ray.kill(worker)
        if restarts_left > 0:
            restarts_left -= 1
            idle.append(new_worker())

    try:
        while queue or running:
            while queue and idle:
                worker = idle.popleft()
                item = queue.popleft()
                running[worker.run.remote(item)] = (worker, item)
                shown[worker] = []
            if not running:
                raise RuntimeError(f"every Ray worker died ({deaths} deaths, no restarts left); "
                                   f"{sum(len(i) for i in queue)} episodes were not run: rerun to resume")
            ready, _ = ray.wait(list(running), num_returns=1, timeout=poll)
            for ref in ready:
                worker, item = running.pop(ref)
                try:
                    results: list[EpisodeResult] = ray.get(ref)
                except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
                    worker_died(worker, item, type(e).__name__)
                    continue
                seen = {r.key for r in shown.pop(worker, [])}
                bar.add(r for r in results if r.key not in seen)
                for r in results:
                    result.add(r)
                    result.steps += r.length
                    if r.error is not None:
                        log.warning("episode %s failed (not recorded): %s", r.key, r.error)
                if len(result.errors) > max_errors:
                    raise JobFailed(f"stopped after {len(result.errors)} episodes failed to run; first error: "
                                       f"{result.errors[0].error}")
                idle.append(worker)
            polls = {w.progress.remote(): w for w, _ in running.values()}
            if polls:
                got, _ = ray.wait(list(polls), num_returns=len(polls), timeout=min(poll, 2.0))
                for ref in got:
                    w = polls[ref]
                    try:
                        finished, steps = ray.get(ref)
                    except (RayActorError, ActorDiedError, ActorUnavailableError):
                        continue  # its run() reference reports the death
                    if w in shown:
                        shown[w].extend(finished)
                        bar.add(finished)
                    bar.refresh(w, steps)
            bar.refresh()
    except KeyboardInterrupt:
        raise JobInterrupted("interrupted; published episodes are saved, rerun the same command to resume") from None
    finally:
        bar.close()
        result.seconds = time.perf_counter() - t0
        if not running:  # a clean finish: let idle workers close their envs and policies
            with _suppress():
                ray.get([w.close.remote() for w in idle], timeout=60)
        for w in {*workers, *idle, *(w for w, _ in running.values())}:
            with _suppress():
                ray.kill(w)
        if recording:
            shared.sweep()
        shutil.rmtree(staging_root, ignore_errors=True)
        if started_ray:
            ray.shutdown()
    return result


class _suppress:
    """``contextlib.suppress(Exception)`` (Ray raises assorted errors when killing dead actors); Ctrl-C and
    ``SystemExit`` pass through."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> bool:
        return exc_type is not None and issubclass(exc_type, Exception)
