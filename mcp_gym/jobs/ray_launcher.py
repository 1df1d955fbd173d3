"""``launcher=ray``: collection and evaluation on a Ray cluster (the ``mcp-gym[ray]`` extra).

``mcp-gym collect launcher=ray launcher.num_workers=4`` (and ``mcp-gym eval ...``) runs the job's planned episodes on
``num_workers`` Ray actors. Each actor hosts the same async vector env as a local job
(:class:`~mcp_gym.vector.VectorMCPEnv`, ``launcher.num_envs`` episodes at once, episodes recorded by
:class:`~mcp_gym.recording.RecordTrajectories`) and works through *work items*: chunks of planned episode keys. An
item's episodes are recorded into the actor's local staging directory; when the item is done its Parquet shards are
published to the shared location -- the run directory itself, or ``launcher.storage``, any ``pyarrow.fs`` URI
(``s3://bucket/runs/sql``, ``gs://...``, ``file:///mnt/shared/...``) -- steps shard first, episodes shard last.

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

import json
import logging
import math
import os
import shutil
import tempfile
import time
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mcp_gym.jobs.config import load_job_tasks, plan_episodes, run_location, run_metadata, to_dict
from mcp_gym.jobs.results import CollectResult, JobInterrupted
from mcp_gym.vector import EpisodeResult, EpisodeSpec

__all__ = ["collect_ray", "SharedRun", "RayCollector"]

log = logging.getLogger(__name__)

EPISODES_DIR = "episodes"
STEPS_DIR = "steps"
MANIFEST = "manifest.json"
UPLOAD_PREFIX = ".upload-"


# -- the shared location -----------------------------------------------------------------------------------------------
def _filesystem(location: str | os.PathLike[str]) -> tuple[Any, str]:
    """``(pyarrow filesystem, path)`` of a local path or a URI (``s3://``, ``gs://``, ``file://``, ...)."""
    from pyarrow import fs

    text = str(location)
    if "://" in text:
        return fs.FileSystem.from_uri(text)
    return fs.LocalFileSystem(), str(Path(text).resolve())


@dataclass
class SharedRun:
    """A run directory on any ``pyarrow.fs`` filesystem: the manifest, the published shards, uploads, clean-up.

    The layout is the one :mod:`mcp_gym.recording` writes, so a local :class:`SharedRun` is a regular run directory.

    Args:
        location: A local path or a ``pyarrow.fs`` URI (``s3://bucket/prefix``, ``gs://...``, ``file:///...``).
        filesystem: A ``pyarrow.fs.FileSystem`` to use instead of the one the URI names (``location`` is then a
            path in it).
    """

    location: str
    filesystem: Any = field(default=None, repr=False)
    fs: Any = field(init=False, repr=False)
    root: str = field(init=False)

    def __post_init__(self) -> None:
        if self.filesystem is not None:
            self.fs, self.root = self.filesystem, str(self.location)
        else:
            self.fs, self.root = _filesystem(self.location)

    @property
    def is_local(self) -> bool:
        """The shared location is this machine's filesystem (then :class:`~mcp_gym.recording.RunDirectory` works)."""
        from pyarrow import fs

        return isinstance(self.fs, fs.LocalFileSystem)

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _files(self, table: str) -> list[str]:
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(self._path(table), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == fs.FileType.File)

    def shards(self, table: str) -> list[str]:
        """Names of the published shards of ``steps`` or ``episodes``."""
        return [n for n in self._files(table) if n.endswith(".parquet") and not n.startswith((".", "_"))]

    # -- manifest -------------------------------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        """The manifest (``{}`` if there is none yet)."""
        try:
            with self.fs.open_input_stream(self._path(MANIFEST)) as f:
                return json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            return {}

    def plan(self, keys: Sequence[str], metadata: dict[str, Any]) -> None:
        """Record the planned keys (raises ``ValueError`` if the run was planned with other keys)."""
        if self.is_local:
            from mcp_gym.recording import RunDirectory

            RunDirectory(self.root).plan(keys, metadata=metadata)
            return
        manifest = self.manifest()
        if manifest.get("planned") is not None:
            if manifest["planned"] != list(keys):
                raise ValueError(f"{self.location} was planned with other episode keys; use a new location")
            return
        import datetime as dt

        from mcp_gym._version import __version__
        from mcp_gym.recording import SCHEMA_VERSION

        manifest = {"format": "mcp-gym-trajectories", "schema_version": SCHEMA_VERSION, "library_version": __version__,
                    "created_at": dt.datetime.now(dt.timezone.utc).isoformat(), "planned": list(keys),
                    "metadata": metadata}
        self.fs.create_dir(self.root, recursive=True)
        with self.fs.open_output_stream(self._path(MANIFEST)) as f:
            f.write(json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8"))

    # -- progress -------------------------------------------------------------------------------------------------
    def done_keys(self) -> set[str]:
        """Keys of the episodes in published episodes shards (plus, locally, a killed local job's WAL)."""
        if self.is_local:
            from mcp_gym.recording import RunDirectory

            run = RunDirectory(self.root)
            run.recover()  # publish what a killed local writer left in its write-ahead log
            return run.done_keys()
        import pyarrow.parquet as pq

        done: set[str] = set()
        for name in self.shards(EPISODES_DIR):
            t = pq.read_table(self._path(EPISODES_DIR, name), columns=["episode_key"], filesystem=self.fs)
            done.update(k for k in t.column(0).to_pylist() if k)
        return done

    def read_tables(self) -> tuple[Any, Any]:
        """``(steps, episodes)`` Arrow tables of the published episodes (locally also those in a killed writer's
        write-ahead log), in the current schema."""
        import pyarrow as pa

        from mcp_gym.recording import EPISODES_SCHEMA, STEPS_SCHEMA, read_tables
        from mcp_gym.recording.shards import read_shard

        if self.is_local:
            return read_tables(self.root)
        episodes = [read_shard(self._path(EPISODES_DIR, n), EPISODES_DIR, filesystem=self.fs)
                    for n in self.shards(EPISODES_DIR)]
        ep = pa.concat_tables(episodes) if episodes else EPISODES_SCHEMA.empty_table()
        # Only the steps of published parts: a steps shard whose episodes shard is missing is an unfinished upload.
        names = set(self.shards(EPISODES_DIR))
        steps = [read_shard(self._path(STEPS_DIR, n), STEPS_DIR, filesystem=self.fs)
                 for n in self.shards(STEPS_DIR) if n in names]
        st = pa.concat_tables(steps) if steps else STEPS_SCHEMA.empty_table()
        return st.combine_chunks(), ep.combine_chunks()

    # -- publishing -----------------------------------------------------------------------------------------------
    def upload(self, staging: Path) -> list[str]:
        """Publish the finished shards of a local staging run directory, then delete them locally.

        Each part goes up as its steps shard, then its episodes shard (the commit record); every file is written
        under a hidden name and renamed where renames are atomic (local and HDFS-like filesystems), or written in
        one object PUT (object stores). Returns the names of the published parts.
        """
        from pyarrow import fs

        parts = sorted(p.name for p in (staging / EPISODES_DIR).glob("part-*.parquet"))
        atomic_rename = self.is_local or isinstance(self.fs, fs.HadoopFileSystem)
        for table in (STEPS_DIR, EPISODES_DIR):
            self.fs.create_dir(self._path(table), recursive=True)
        for name in parts:
            for table in (STEPS_DIR, EPISODES_DIR):
                src = staging / table / name
                if not src.exists():
                    continue
                final = self._path(table, name)
                target = self._path(table, UPLOAD_PREFIX + name) if atomic_rename else final
                with open(src, "rb") as fin, self.fs.open_output_stream(target) as fout:
                    shutil.copyfileobj(fin, fout, 8 << 20)
                if atomic_rename:
                    if self.is_local:
                        _fsync_file(target)
                    self.fs.move(target, final)
        for name in parts:
            for table in (STEPS_DIR, EPISODES_DIR):
                (staging / table / name).unlink(missing_ok=True)
        return parts

    def sweep(self) -> int:
        """Delete unfinished uploads and steps shards without their episodes shard; returns how many files.

        Call it only while no actor of this run is publishing (the driver does, before and after the job).
        """
        removed = 0
        episodes = set(self.shards(EPISODES_DIR))
        for table in (STEPS_DIR, EPISODES_DIR):
            for name in self._files(table):
                orphan = table == STEPS_DIR and name.endswith(".parquet") and not name.startswith(".") \
                    and name not in episodes
                if name.startswith(UPLOAD_PREFIX) or orphan:
                    self.fs.delete_file(self._path(table, name))
                    removed += 1
        return removed


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self.shared = SharedRun(shared)
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

        self._vec = VectorMCPEnv(env_fn, max(1, int(launcher.num_envs)), share_servers=launcher.get("share_servers"),
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
        self.finished = self.successes = self.retried = 0
        self.steps: dict[Any, int] = {}

    def add(self, results: Iterable[EpisodeResult]) -> int:
        """Show finished episodes; returns how many were recorded (failed ones are not)."""
        n = 0
        for r in results:
            if r.error is None:
                n += 1
                self.successes += bool(r.success)
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
        post = {"steps_s": f"{rate:.1f}", "success": f"{self.successes / max(self.finished, 1):.0%}"}
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
    shared = SharedRun(location)
    tasks = load_job_tasks(to_dict(cfg.env), cfg.get("split"))
    specs = plan_episodes(tasks, samples=int(cfg.get("samples") or 1), episodes=cfg.get("episodes"), seed=cfg.seed)
    recording = bool(cfg.recorder.enabled)
    pending = specs
    if recording:
        shared.plan([s.key for s in specs], run_metadata(cfg, out) | {"launcher": "ray", "storage": location})
        if removed := shared.sweep():
            log.info("%s: removed %d unfinished upload(s) of an earlier job", location, removed)
        done = shared.done_keys()
        pending = [s for s in specs if s.key not in done]
    result = CollectResult(out, len(specs), len(specs) - len(pending))
    if not pending:
        log.info("%s: all %d planned episodes are recorded", location, len(specs))
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
                    raise RuntimeError(f"stopped after {len(result.errors)} episodes failed to run; first error: "
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
