"""A run directory: manifest, planned episode keys, resume, and recovery of killed writers.

A collection that may be killed and rerun plans its episodes by stable keys, skips what is already recorded and
records the rest::

    run = RunDirectory("runs/counter-sft")
    keys = run.plan(f"{task.id}#{k}" for task in tasks for k in range(4))   # same keys on every rerun
    env = RecordTrajectories(make_env(), run.path)                           # recovers a killed writer's WAL
    for key in run.pending(keys):
        obs, info = env.reset(options={"task_id": key.split("#")[0], "episode_key": key})
        ...

Each writer holds an exclusive ``flock`` on ``.wal/<writer>.lock`` while it lives; the lock is released by the kernel
when the process dies, even on ``kill -9``. :meth:`RunDirectory.recover` takes over the WAL segments of writers whose
lock is free: it rewrites each segment's episodes as that part's shards (atomically replacing any shard the dead
writer had already published for it), skipping episodes whose key or id is already recorded, then deletes the
segment. Recovery is idempotent: a recovery that is itself killed is redone by the next one. (Liveness relies on
POSIX ``flock``; where ``fcntl`` is missing every other writer counts as dead, so run one writer per directory there.)

Above the writers, :class:`RunLock` (the directory's ``.job.lock``) keeps one job per directory: a job holds it
exclusively, writers share it, and whoever comes second refuses with :class:`RunBusy`, naming the job.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_gym.errors import MCPGymError
from mcp_gym.recording._contained import check_run_file, read_run_file
from mcp_gym.recording.atomic import write_text_atomic
from mcp_gym.recording.schema import (
    EPISODES_DIR,
    MANIFEST,
    SCHEMA_VERSION,
    STEPS_DIR,
    WAL_DIR,
    EpisodeRecord,
    StepRecord,
)
from mcp_gym.recording.shards import PartWriter, fsync_dir, list_shards, part_name, read_shard
from mcp_gym.recording.wal import Frame, read_frames

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # Windows has no fcntl: no locking

__all__ = ["RunDirectory", "RunLock", "RunBusy"]

FORMAT = "mcp-gym-trajectories"
_RECOVERY_CHUNK = 4096  # step rows per row group when rewriting a WAL segment
CARD = "README.md"
"""The run's dataset card: its ``configs:`` let ``datasets.load_dataset(run_dir, "steps")`` (or ``"episodes"``) read
the published shards (in-progress files start with ``.`` and are skipped by ``datasets``)."""
_CARD_TEXT = """---
configs:
- config_name: {STEPS_DIR}
  description: {steps_state}
  data_files:
  - split: train
    path: {STEPS_DIR}/*.parquet
- config_name: {EPISODES_DIR}
  description: {episodes_state}
  data_files:
  - split: train
    path: {EPISODES_DIR}/*.parquet
tags:
- mcp-gym
- trajectories
---

# mcp-gym trajectories

Recorded by mcp-gym (see `manifest.json`): one row per tool call in `{STEPS_DIR}/`, one per
episode in `{EPISODES_DIR}/`. Free-form values (arguments, results, info) are JSON strings.

```python
import datasets
steps = datasets.load_dataset("path/to/this/run", "{STEPS_DIR}", split="train")
episodes = datasets.load_dataset("path/to/this/run", "{EPISODES_DIR}", split="train")
```

Each config's `description` names the published shards (rewritten at every publish): `datasets` keys its cache by the
card, so a run that grew is read afresh. `mcp_gym.recording.load(path)` also reads episodes still only in a
write-ahead log (an interrupted writer).
"""


MANIFEST_LIMIT = 256 << 20
"""Bytes a run's ``manifest.json`` may have (its plan lists every episode key: a million keys take about 50 MB)."""
_MANIFEST_DEPTH = 64
"""Nesting a manifest may have (its metadata holds a job's config: a few levels)."""


def parse_manifest(text: str | bytes, where: object) -> dict[str, Any]:
    """A run's ``manifest.json`` read as untrusted data: a JSON object with ``planned`` a list of strings (or null)
    and ``metadata`` an object (or null), nested at most 64 deep; else ``ValueError`` in one line naming ``where``."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:120]
        raise ValueError(f"{where}: not a readable {MANIFEST} ({reason})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {MANIFEST} holds a JSON {type(data).__name__}, not an object")
    planned = data.get("planned")
    if planned is not None and not (isinstance(planned, list) and all(isinstance(k, str) for k in planned)):
        raise ValueError(f"{where}: {MANIFEST} 'planned' is not a list of episode keys")
    if data.get("metadata") is not None and not isinstance(data["metadata"], dict):
        raise ValueError(f"{where}: {MANIFEST} 'metadata' is not an object")
    level: list[Any] = [data]
    depth = 1
    while level:  # iteratively: a deep one must not blow the stack of whoever walks it next
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
        depth += bool(level)
        if depth > _MANIFEST_DEPTH:
            raise ValueError(f"{where}: {MANIFEST} is nested more than {_MANIFEST_DEPTH} levels deep")
    return data


def new_manifest() -> dict[str, Any]:
    """The manifest of a new run: format, schema and library versions, creation time, no plan yet."""
    from mcp_gym._version import __version__

    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "library_version": __version__,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(), "planned": None, "metadata": {}}


def planned_manifest(manifest: dict[str, Any], keys: list[str], metadata: dict[str, Any] | None, *, replace: bool,
                     where: object) -> dict[str, Any] | None:
    """``manifest`` with the plan ``keys`` (and ``metadata``), or ``None`` when it already holds that plan; the
    rules of :meth:`RunDirectory.plan` (raises ``ValueError`` on duplicate keys, or on another plan unless
    ``replace``), shared by every run store."""
    if len(set(keys)) != len(keys):
        raise ValueError("planned episode keys must be unique")
    if manifest.get("planned") is not None and not replace:
        if manifest["planned"] != keys:
            raise ValueError(f"{where} was planned with other episode keys; use a new directory or "
                             "plan(..., replace=True)")
        return None
    manifest = {**manifest, "planned": keys}
    if metadata is not None:
        manifest["metadata"] = metadata
    return manifest


class WriterLock:
    """An exclusive ``flock`` on a writer's lock file; held for the writer's life, freed by the kernel on death."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, blocking: bool) -> bool:
        """Take the lock; ``False`` if another live process holds it (``blocking=False``)."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
                except OSError as e:
                    os.close(fd)
                    if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        return False
                    raise
            try:  # the file may have been unlinked by a recoverer between open and flock: lock the current one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return True
            os.close(fd)

    def release(self, *, unlink: bool) -> None:
        """Release the lock, deleting the lock file first if ``unlink``."""
        if self._fd is None:
            return
        if unlink:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


JOB_LOCK = ".job.lock"
"""The run directory's job lock (:class:`RunLock`): ``flock``-ed exclusively by the one job (``collect``/``eval``)
that writes the run, shared by every :class:`~mcp_gym.recording.TrajectoryWriter` writing it."""
_HOLDER_BYTES = 4096  # of a lock file read for its holder (it is untrusted data: a crafted one may be anything)


class RunBusy(MCPGymError, RuntimeError):
    """Another process holds the run directory's job lock (:class:`RunLock`); the message names it in one line."""


@dataclass
class _Held:
    """This process's hold on one run's job lock: one descriptor, how many exclusive (job) and shared (writer) uses."""

    fd: int
    jobs: int = 0
    writers: int = 0


_HELD: dict[str, _Held] = {}  # resolved lock path -> this process's hold (a job may take it again, its writers share)
_HELD_MUTEX = threading.Lock()
_NO_HOLDER = ""


def _holder_text(fd: int) -> str:
    """What a lock file says about its holder, as one safe line (the file is data anyone could have written)."""
    try:
        raw = os.pread(fd, _HOLDER_BYTES, 0)
        info = json.loads(raw.decode("utf-8"))
        if not isinstance(info, dict):
            raise ValueError
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return _NO_HOLDER
    parts = []
    for key in ("pid", "host", "started_at", "command"):
        value = info.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            text = "".join(c if c.isprintable() else "?" for c in str(value)[:160])
            parts.append(f"{key} {text}")
    return ", ".join(parts) or _NO_HOLDER


def _flock(fd: int, mode: int) -> bool:
    """A non-blocking ``flock``; ``False`` if another open file holds a conflicting lock."""
    if fcntl is None:  # pragma: no cover - Windows: no lock
        return True
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


class RunLock:
    """The job lock of a run directory: a ``flock`` on :data:`JOB_LOCK`, freed by the kernel when its process dies
    (even on ``kill -9``).

    A job (``collect``/``eval``) takes it exclusively for its whole run; every :class:`TrajectoryWriter` takes it
    shared (``shared=True``) for its life. So a job refuses a directory that another job or another process's writer
    is using, and a writer refuses a directory a job of another process holds, each raising :class:`RunBusy` in one
    line naming the job (pid, host, start time, command, as the job wrote them into the file; a writer names none).
    In one process the job's own writers share its lock, and a job may take it again (``eval`` around its
    ``collect``). The lock file is untrusted: it is opened without following symlinks, anything that is not a regular
    file is replaced, and only its first 4 kB are read, as JSON that may be anything. Use as a context manager.
    """

    def __init__(self, run: str | os.PathLike[str], *, shared: bool = False) -> None:
        self.path = Path(run) / JOB_LOCK
        self.shared = shared
        self._key = str(Path(run).resolve() / JOB_LOCK)
        self._held = False

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        for _ in range(8):
            try:
                fd = os.open(self.path, flags, 0o644)
            except OSError as e:  # a symlink (ELOOP), a directory (EISDIR), a socket (ENXIO): not ours to trust
                if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
                    raise
                self._replace()
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)  # a FIFO or a device: replace it by a regular file
            self._replace()
        raise RunBusy(f"{self.path}: cannot make a lock file here (something keeps replacing it)")

    def _replace(self) -> None:
        if self.path.is_dir() and not self.path.is_symlink():
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            self.path.unlink(missing_ok=True)

    def _busy(self, fd: int) -> RunBusy:
        holder = _holder_text(fd)
        if holder == _NO_HOLDER:
            holder = f"{JOB_LOCK} names no job: a TrajectoryWriter recording into it, or a job whose name is unreadable"
        return RunBusy(f"{self.path.parent} is in use by another process ({holder}); wait for it to finish, or "
                       "write to another directory (out=...)")

    def _lock_new(self, mode: int) -> int:
        """Open the lock file and lock it with ``mode`` (the file, not one a recoverer replaced meanwhile)."""
        while True:
            fd = self._open()
            if not _flock(fd, mode):
                error = self._busy(fd)
                os.close(fd)
                raise error
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def acquire(self) -> RunLock:
        """Take the lock (raises :class:`RunBusy` if another process's job, or for a job another process's writer,
        holds it)."""
        with _HELD_MUTEX:
            return self._acquire()

    def _acquire(self) -> RunLock:
        held = _HELD.get(self._key)
        if held is not None and (self.shared or held.jobs):
            held.writers += self.shared
            held.jobs += not self.shared
            self._held = True
            return self
        if self.shared:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._lock_new(fcntl.LOCK_SH if fcntl is not None else 0)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no job holds it now: a name in it is a killed job's
            _HELD[self._key] = _Held(fd, writers=1)
            self._held = True
            return self
        if held is not None:  # this process's writers share it: convert to exclusive, or refuse
            if not _flock(held.fd, fcntl.LOCK_EX if fcntl is not None else 0):
                _flock(held.fd, fcntl.LOCK_SH if fcntl is not None else 0)  # a failed conversion may drop the lock
                raise self._busy(held.fd)
            fd = held.fd
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._lock_new(fcntl.LOCK_EX if fcntl is not None else 0)
            held = _HELD[self._key] = _Held(fd)
        held.jobs = 1
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:1000],
                "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:  # a full disk: the lock holds all the same, only the holder goes unnamed
            pass
        self._held = True
        return self

    def release(self) -> None:
        """Release this use of the lock; the last use of the process frees it (a job's name is cleared first)."""
        with _HELD_MUTEX:
            if self._held:
                self._held = False
                self._release()

    def _release(self) -> None:
        held = _HELD.get(self._key)
        if held is None:
            return
        if self.shared:
            held.writers -= 1
        else:
            held.jobs -= 1
            if not held.jobs:
                with contextlib.suppress(OSError):
                    os.ftruncate(held.fd, 0)  # names nobody once the job is over
                if held.writers and fcntl is not None:
                    _flock(held.fd, fcntl.LOCK_SH)  # the process's writers go on sharing it
        if held.jobs <= 0 and held.writers <= 0:
            del _HELD[self._key]
            if fcntl is not None and _flock(held.fd, fcntl.LOCK_EX):  # nobody else holds it: leave no file behind
                with contextlib.suppress(OSError):  # (a process that opened it meanwhile sees it gone and retries)
                    if os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(held.fd).st_ino:
                        self.path.unlink()
            os.close(held.fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunDirectory:
    """A directory of recorded trajectories (see :mod:`mcp_gym.recording.schema` for the layout).

    Args:
        path: The directory (created with its manifest unless ``create=False``).
        create: Create a missing directory; with ``False`` a missing one raises ``FileNotFoundError``.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        if not create:
            if not self.path.is_dir():
                raise FileNotFoundError(f"no run directory at {self.path}")
            return
        for sub in (STEPS_DIR, EPISODES_DIR, WAL_DIR):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        if not (self.path / MANIFEST).exists():
            self._write_manifest(new_manifest())
        if not (self.path / CARD).exists():  # also added to runs recorded before cards existed
            self.write_card()

    # -- manifest -------------------------------------------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest (``{}`` if the directory has none)."""
        try:  # a run is untrusted: a manifest linked out of it, a pipe or a device is refused, unread
            text = read_run_file(self.path, self.path / MANIFEST, limit=MANIFEST_LIMIT)
        except FileNotFoundError:
            return {}
        return parse_manifest(text, self.path / MANIFEST)

    def _write_manifest(self, data: dict[str, Any]) -> None:
        self._write_atomic(MANIFEST, json.dumps(data, ensure_ascii=False, indent=1))

    def write_card(self) -> None:
        """(Re)write the dataset card :data:`CARD`; its configs' descriptions name the published shards, because
        ``datasets`` caches a load by the card's configs (patterns), not by the files they match: without this a run
        that grew would load stale. Listing and writing hold a lock, so the last card written lists every shard."""
        lock = os.open(self.path, os.O_RDONLY)  # the directory itself: no lock file is left behind
        try:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)

            def state(table: str) -> str:
                names = [p.name for p in list_shards(self.path, table)]
                digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
                return f'"{len(names)} published shard(s), digest {digest}"'

            self._write_atomic(CARD, _CARD_TEXT.format(STEPS_DIR=STEPS_DIR, EPISODES_DIR=EPISODES_DIR,
                                                       steps_state=state(STEPS_DIR),
                                                       episodes_state=state(EPISODES_DIR)))
        finally:
            os.close(lock)

    def _write_atomic(self, name: str, text: str) -> None:
        write_text_atomic(self.path / name, text, fsync=True)  # never through a symlink planted in the run
        fsync_dir(self.path)

    @property
    def planned(self) -> list[str] | None:
        """The planned episode keys (``None`` if :meth:`plan` was never called)."""
        return self.manifest.get("planned")

    def plan(self, keys: Iterable[str], *, metadata: dict[str, Any] | None = None, replace: bool = False) -> list[str]:
        """Record the keys of the episodes this run must contain; a rerun must plan the same keys.

        Returns the keys. Raises ``ValueError`` on duplicate keys, or when the run was planned with other keys
        (unless ``replace``).
        """
        keys = [str(k) for k in keys]
        manifest = planned_manifest(self.manifest, keys, metadata, replace=replace, where=self.path)
        if manifest is not None:
            self._write_manifest(manifest)
        return keys

    # -- progress -------------------------------------------------------------------------------------------------
    def _wal_frames(self) -> Iterator[Frame]:
        for _, segments in sorted(self.wal_segments().items()):
            for _, path in segments:
                yield from read_frames(path, root=self.path)

    def done_keys(self) -> set[str]:
        """Keys of the recorded episodes: in finished shards and in write-ahead logs (of live or killed writers)."""
        done: set[str] = set()
        for shard in list_shards(self.path, EPISODES_DIR):
            done.update(k for k in read_shard(shard, EPISODES_DIR, ["episode_key"]).column(0).to_pylist() if k)
        done.update(key for ep, _ in self._wal_frames() if (key := EpisodeRecord.from_row(ep).episode_key))
        return done

    def pending(self, planned: Iterable[str] | None = None) -> list[str]:
        """Planned keys (default: the manifest's) not yet recorded, in plan order."""
        keys = list(planned) if planned is not None else self.planned
        if keys is None:
            raise ValueError(f"{self.path} has no planned keys: call plan(keys) or pass them")
        done = self.done_keys()
        return [k for k in keys if k not in done]

    def is_complete(self) -> bool:
        """Every planned key is recorded."""
        return not self.pending()

    # -- writers and recovery -------------------------------------------------------------------------------------
    def lock_path(self, writer_id: str) -> Path:
        """Lock file of a writer."""
        return self.path / WAL_DIR / f"{writer_id}.lock"

    def wal_path(self, writer_id: str, seq: int) -> Path:
        """WAL segment of a writer's ``seq``-th part."""
        return self.path / WAL_DIR / f"{writer_id}-{seq:05d}.wal"

    def wal_segments(self) -> dict[str, list[tuple[int, Path]]]:
        """writer id -> its WAL segments ``(seq, path)``, in order."""
        out: dict[str, list[tuple[int, Path]]] = {}
        wal_dir = self.path / WAL_DIR
        if not wal_dir.is_dir():
            return out
        for p in wal_dir.iterdir():
            if p.suffix == ".wal":
                wid, _, seq = p.stem.rpartition("-")
                if wid and seq.isdigit():
                    check_run_file(self.path, p)  # never a segment linked out of the run, a pipe or a device
                    out.setdefault(wid, []).append((int(seq), p))
        return {w: sorted(s) for w, s in out.items()}

    def _writer_ids(self) -> set[str]:
        """Writers that left a WAL segment, a lock file or a temp shard."""
        ids = set(self.wal_segments())
        ids.update(p.stem for p in (self.path / WAL_DIR).glob("*.lock"))
        for table in (STEPS_DIR, EPISODES_DIR):
            for p in (self.path / table).glob(".part-*.parquet.tmp"):
                ids.add(p.name[len(".part-") : -len(".parquet.tmp")].rpartition("-")[0])
        return ids

    def recover(self, *, compression: str = "zstd", compression_level: int | None = None, fsync: bool = True,
                exclude: Iterable[str] = ()) -> int:
        """Publish the episodes of dead writers' WAL segments as shards; returns the number of episodes recovered.

        Writers that still hold their lock (alive) and ``exclude`` are left alone. Episodes whose key (or id) is
        already in a finished shard are dropped, so recovery never duplicates an episode.
        """
        recovered = 0
        skip = set(exclude)
        for wid in sorted(self._writer_ids() - skip):
            lock = WriterLock(self.lock_path(wid))
            if not lock.acquire(blocking=False):
                continue  # alive
            try:
                recovered += self._recover_writer(wid, compression, compression_level, fsync)
            finally:
                lock.release(unlink=True)
        if recovered:
            self.write_card()
        return recovered

    def _recover_writer(self, wid: str, compression: str, level: int | None, fsync: bool) -> int:
        for table in (STEPS_DIR, EPISODES_DIR):
            for p in (self.path / table).glob(f".part-{wid}-*.parquet.tmp"):
                p.unlink(missing_ok=True)
        segments = self.wal_segments().get(wid, [])
        if not segments:
            return 0
        committed: dict[str, tuple[list[str], list[str]]] = {}
        for shard in list_shards(self.path, EPISODES_DIR):
            t = read_shard(shard, EPISODES_DIR, ["episode_id", "episode_key"])
            committed[shard.name] = (t.column(0).to_pylist(), t.column(1).to_pylist())
        count = 0
        for seq, wal in segments:
            name = part_name(wid, seq)
            seen_ids = {i for n, (ids, _) in committed.items() if n != name for i in ids}
            seen_keys = {k for n, (_, keys) in committed.items() if n != name for k in keys if k}
            part = PartWriter(self.path, wid, seq, compression=compression, compression_level=level, fsync=fsync)
            steps: list[tuple[Any, ...]] = []
            episodes: list[tuple[Any, ...]] = []
            ids: list[str] = []
            keys: list[str] = []
            for row, rows in read_frames(wal, root=self.path):
                episode = EpisodeRecord.from_row(row)
                eid, key = episode.episode_id, episode.episode_key
                if eid in seen_ids or (key and key in seen_keys):
                    continue
                seen_ids.add(eid)
                ids.append(eid)
                if key:
                    seen_keys.add(key)
                    keys.append(key)
                episodes.append(episode.row())  # rows of an older minor version: nulls for the newer columns
                steps.extend(StepRecord.pad(r) for r in rows)
                if len(steps) >= _RECOVERY_CHUNK:
                    part.write(steps, episodes)
                    steps, episodes = [], []
            part.write(steps, episodes)
            if part.empty:  # nothing new: drop whatever the dead writer had published for this part
                for table in (STEPS_DIR, EPISODES_DIR):
                    (self.path / table / name).unlink(missing_ok=True)
            else:
                part.commit()
            committed[name] = (ids, keys)  # later segments dedupe against this one too
            count += len(ids)
            wal.unlink(missing_ok=True)
        return count
