"""The run store of jobs: a run directory on this machine or on any ``pyarrow.fs`` filesystem.

:class:`RunStore` is where a job plans its episodes, finds what is already recorded, reads the recorded tables back
and (``launcher=ray``) publishes the shards of its workers. On this machine it is a :class:`RunDirectory` (same
manifest, same shards, write-ahead logs of killed writers recovered); elsewhere (``s3://bucket/runs/sql``,
``gs://...``, ``file:///mnt/shared/...``) it keeps the same layout through ``pyarrow.fs``, where only published shards
count: an episodes shard is the commit record of its part, so a steps shard without one is an unfinished upload.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mcp_gym.recording.reader import read_tables
from mcp_gym.recording.run import RunDirectory, new_manifest, parse_manifest, planned_manifest
from mcp_gym.recording.schema import EPISODES_DIR, EPISODES_SCHEMA, MANIFEST, STEPS_DIR, STEPS_SCHEMA
from mcp_gym.recording.shards import check_unique, read_shard

__all__ = ["RunStore"]

UPLOAD_PREFIX = ".upload-"
"""Name prefix of a shard being uploaded (renamed to its final name once complete, where renames are atomic)."""


def _filesystem(location: str | os.PathLike[str]) -> tuple[Any, str]:
    """``(pyarrow filesystem, path)`` of a local path or a URI (``s3://``, ``gs://``, ``file://``, ...)."""
    from pyarrow import fs

    text = str(location)
    if "://" in text:
        filesystem_and_path: tuple[Any, str] = fs.FileSystem.from_uri(text)
        return filesystem_and_path
    return fs.LocalFileSystem(), str(Path(text).resolve())


@dataclass
class RunStore:
    """A run directory at a local path or a ``pyarrow.fs`` URI: the manifest, the published shards, uploads, clean-up.

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
        self.location = os.fspath(self.location)
        if self.filesystem is not None:
            self.fs, self.root = self.filesystem, str(self.location)
        else:
            self.fs, self.root = _filesystem(self.location)

    @property
    def is_local(self) -> bool:
        """The location is this machine's filesystem (a :class:`RunDirectory`, write-ahead logs included)."""
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
        if self.is_local:  # never through a symlink out of the run, a pipe or a device (RunDirectory.manifest)
            try:
                return RunDirectory(self.root, create=False).manifest
            except FileNotFoundError:
                return {}
        try:
            with self.fs.open_input_stream(self._path(MANIFEST)) as f:
                text = f.read()
        except FileNotFoundError:
            return {}
        return parse_manifest(text, self._path(MANIFEST))

    def plan(self, keys: Sequence[str], *, metadata: dict[str, Any] | None = None, replace: bool = False) -> list[str]:
        """Record the planned episode keys, as :meth:`RunDirectory.plan` (same rules; the directory or manifest is
        created when missing). Jobs check the run's identity first (:func:`mcp_gym.jobs.identity.check_rerun`)."""
        keys = [str(k) for k in keys]
        if self.is_local:
            return RunDirectory(self.root).plan(keys, metadata=metadata, replace=replace)
        manifest = planned_manifest(self.manifest() or new_manifest(), keys, metadata, replace=replace,
                                    where=self.location)
        if manifest is not None:
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(self._path(MANIFEST)) as f:
                f.write(json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8"))
        return keys

    # -- progress -------------------------------------------------------------------------------------------------
    def done_keys(self) -> set[str]:
        """Keys of the recorded episodes: in published episodes shards (locally also in write-ahead logs, after
        publishing what killed writers left there)."""
        if self.is_local:
            run = RunDirectory(self.root)
            run.recover()
            return run.done_keys()
        done: set[str] = set()
        for name in self.shards(EPISODES_DIR):
            t = read_shard(self._path(EPISODES_DIR, name), EPISODES_DIR, ["episode_key"], filesystem=self.fs)
            done.update(k for k in t.column(0).to_pylist() if k)
        return done

    def read_tables(self) -> tuple[pa.Table, pa.Table]:
        """``(steps, episodes)`` Arrow tables of the recorded episodes (see :func:`~mcp_gym.recording.read_tables`;
        elsewhere than this machine: of the published parts), in the current schema."""
        if self.is_local:
            return read_tables(self.root)
        names = self.shards(EPISODES_DIR)
        ep_shards = [(self._path(EPISODES_DIR, n), read_shard(self._path(EPISODES_DIR, n), EPISODES_DIR,
                                                              filesystem=self.fs)) for n in names]
        # Only the steps of published parts: a steps shard whose episodes shard is missing is an unfinished upload.
        published = set(names)
        st_shards = [(self._path(STEPS_DIR, n), read_shard(self._path(STEPS_DIR, n), STEPS_DIR, filesystem=self.fs))
                     for n in self.shards(STEPS_DIR) if n in published]
        check_unique(ep_shards, EPISODES_DIR)  # a copied shard would count its episodes (and steps) twice
        check_unique(st_shards, STEPS_DIR)
        episodes, steps = [t for _, t in ep_shards], [t for _, t in st_shards]
        ep = pa.concat_tables(episodes) if episodes else EPISODES_SCHEMA.empty_table()
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

        Call it only while no worker of this run is publishing (the Ray driver does, before and after the job).
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
