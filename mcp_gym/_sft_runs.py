"""The recorded runs an SFT export (:mod:`mcp_gym.sft`) reads: the run directories that paths, globs and folders of
runs name, and one run's episodes and steps as rows (the columns the export uses)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa

from mcp_gym.recording.reader import Recording, read_tables
from mcp_gym.recording.schema import EPISODES_DIR, MANIFEST, STEPS_DIR

__all__ = ["RunSource"]

RunSource: TypeAlias = "str | os.PathLike[str] | Recording"
"""A run directory, a glob of them, a directory holding runs, or a loaded recording."""


def _is_run(path: Path) -> bool:
    return path.is_dir() and any((path / p).exists() for p in (MANIFEST, STEPS_DIR, EPISODES_DIR))


def _run_paths(runs: RunSource | Iterable[RunSource]) -> list[Path | Recording]:
    """Run directories (or loaded recordings) named by ``runs``: paths, globs, or directories of runs."""
    items = [runs] if isinstance(runs, (str, os.PathLike, Recording)) else list(runs)
    out: list[Path | Recording] = []
    for item in items:
        if isinstance(item, Recording):
            out.append(item)
            continue
        text = os.fspath(item)
        matches = sorted(Path(p) for p in glob.glob(text)) if glob.has_magic(text) else [Path(text)]
        found = False
        for p in matches:
            if _is_run(p):
                out.append(p)
                found = True
            elif p.is_dir():
                children = sorted(c for c in p.iterdir() if _is_run(c))
                out.extend(children)
                found |= bool(children)
        if not found:
            raise FileNotFoundError(f"no recorded run at {text!r} (a run directory holds manifest.json, steps/ and "
                                    "episodes/)")
    unique: dict[str, Path | Recording] = {}
    for r in out:
        unique.setdefault(str(r.path.resolve() if isinstance(r, Recording) else r.resolve()), r)
    return list(unique.values())


_STEP_COLUMNS = ("episode_id", "step_index", "tool", "arguments", "observation", "content", "is_error", "error",
                 "raw_text", "parse_status", "resources", "turn", "assistant_content", "user_turn")
_EPISODE_COLUMNS = ("episode_id", "env_id", "task_id", "task_prompt", "seed", "policy", "total_reward", "success",
                    "termination", "final_answer", "tools", "catalogue_changes", "initial_observation")


def _columns(table: pa.Table, names: Sequence[str]) -> list[dict[str, Any]]:
    cols = [table.column(n).to_pylist() for n in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]


def _read(run: Path | Recording) -> tuple[str, list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """``(source, episodes, steps by episode id in order)`` of one run."""
    if isinstance(run, Recording):
        source = str(run.path)
        steps_t, episodes_t = run.steps.data.table, run.episodes.data.table
    else:
        source = str(run)
        steps_t, episodes_t = read_tables(run)
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for row in _columns(steps_t, _STEP_COLUMNS):
        by_episode.setdefault(row["episode_id"], []).append(row)
    for rows in by_episode.values():
        rows.sort(key=lambda r: r["step_index"])
    return source, _columns(episodes_t, _EPISODE_COLUMNS), by_episode
