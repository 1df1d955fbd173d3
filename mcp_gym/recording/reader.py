"""Reading a run directory: finished shards plus episodes still held only in write-ahead logs.

    rec = mcp_gym.recording.load("runs/counter")
    rec.episodes.filter(lambda e: e["success"])          # datasets.Dataset
    json.loads(rec.steps[0]["arguments"])

The shards alone are plain Parquet with one schema, so ``datasets.load_dataset("parquet",
data_files="runs/counter/steps/*.parquet")`` reads them too (it sees only published shards; :func:`load` also sees
finished episodes of a live or killed writer that are only in its WAL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from mcp_gym.recording.run import RunDirectory
from mcp_gym.recording.schema import EPISODES_DIR, EPISODES_SCHEMA, STEPS_DIR, STEPS_SCHEMA, EpisodeRecord, StepRecord
from mcp_gym.recording.shards import check_unique, list_shards, read_shard, rows_to_batch
from mcp_gym.recording.wal import read_frames

if TYPE_CHECKING:
    import datasets

__all__ = ["Recording", "load", "read_tables"]


@dataclass
class Recording:
    """A loaded run: ``steps`` (one row per tool call) and ``episodes`` (one row per episode) as datasets."""

    path: Path
    steps: datasets.Dataset
    episodes: datasets.Dataset

    def episode_steps(self, episode_id: str) -> list[dict[str, Any]]:
        """The step rows of one episode, in order."""
        rows = [r for r in self.steps.filter(lambda e: e == episode_id, input_columns="episode_id")]
        return sorted(rows, key=lambda r: r["step_index"])


def read_tables(path: str | os.PathLike[str], *, include_wal: bool = True) -> tuple[pa.Table, pa.Table]:
    """``(steps, episodes)`` Arrow tables of a run directory (see :func:`load`)."""
    root = RunDirectory(path, create=False).path
    ep_shards = [(str(p), read_shard(p, EPISODES_DIR)) for p in list_shards(root, EPISODES_DIR)]
    st_shards = [(str(p), read_shard(p, STEPS_DIR)) for p in list_shards(root, STEPS_DIR)]
    check_unique(ep_shards, EPISODES_DIR)  # a copied shard would count its episodes (and steps) twice
    check_unique(st_shards, STEPS_DIR)
    ep_tables = [t for _, t in ep_shards]
    st_tables = [t for _, t in st_shards]
    episodes = pa.concat_tables(ep_tables) if ep_tables else EPISODES_SCHEMA.empty_table()
    steps = pa.concat_tables(st_tables) if st_tables else STEPS_SCHEMA.empty_table()
    ids = episodes.column("episode_id")
    # A part whose steps shard was published but whose episodes shard was not (writer killed in between) is in the
    # WAL: drop its steps here and take the episode from the WAL below.
    if steps.num_rows:
        steps = steps.filter(pc.is_in(steps.column("episode_id"), value_set=ids))
    if include_wal:
        seen = set(ids.to_pylist())
        seen_keys = {k for k in episodes.column("episode_key").to_pylist() if k}
        wal_eps: list[tuple[Any, ...]] = []
        wal_steps: list[tuple[Any, ...]] = []
        for _, segments in sorted(RunDirectory(root, create=False).wal_segments().items()):
            for _, seg in segments:
                for row, rows in read_frames(seg, root=root):
                    ep = EpisodeRecord.from_row(row)
                    if ep.episode_id in seen or (ep.episode_key and ep.episode_key in seen_keys):
                        continue
                    seen.add(ep.episode_id)
                    if ep.episode_key:
                        seen_keys.add(ep.episode_key)
                    wal_eps.append(ep.row())
                    wal_steps.extend(StepRecord.pad(r) for r in rows)
        if wal_eps:
            episodes = pa.concat_tables([episodes, pa.Table.from_batches([rows_to_batch(wal_eps, EPISODES_SCHEMA)])])
            steps = pa.concat_tables([steps, pa.Table.from_batches([rows_to_batch(wal_steps, STEPS_SCHEMA)])])
    return steps.combine_chunks(), episodes.combine_chunks()


def load(path: str | os.PathLike[str], *, include_wal: bool = True) -> Recording:
    """Load a run directory as :class:`Recording` (``.steps`` and ``.episodes`` are ``datasets.Dataset``).

    Includes finished episodes still held only in write-ahead logs (a killed run reads as is), unless
    ``include_wal=False``. Shards of another major schema version raise ``ValueError``; older minor versions read with
    the newer columns as nulls.
    """
    import datasets

    steps, episodes = read_tables(path, include_wal=include_wal)
    return Recording(Path(path), datasets.Dataset(steps), datasets.Dataset(episodes))
