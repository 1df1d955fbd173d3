"""``mcp-gym eval``: k samples per task of a split, recorded, then scored (see :mod:`mcp_gym.jobs.metrics`).

The episodes are collected exactly like ``mcp-gym collect`` (concurrent, resumable); the metrics are then computed
from the recording alone, so rerunning a finished evaluation only rewrites its report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import DictConfig

from mcp_gym._terminal import printable
from mcp_gym.jobs.collect import CollectResult, collect
from mcp_gym.jobs.config import run_location, run_metadata
from mcp_gym.jobs.identity import hold_run
from mcp_gym.jobs.metrics import grading_failures, per_task, summarize
from mcp_gym.jobs.report import print_summary, write_report
from mcp_gym.jobs.results import JobFailed
from mcp_gym.recording import RunStore, read_tables

__all__ = ["evaluate", "EvalResult"]


@dataclass
class EvalResult:
    """An evaluation: its summary metrics, per-task rows, where the report is, and the collection behind it."""

    summary: dict[str, Any]
    tasks: list[dict[str, Any]]
    report: Path
    collection: CollectResult


def score_run(
    out: Path | tuple[pa.Table, pa.Table], keys: list[str] | None, ks: list[int]
) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    """``(summary, per-task rows, episodes table)`` of the recorded episodes of a run directory, or of its
    ``(steps, episodes)`` tables (only the episodes with ``keys``, unless ``None``)."""
    steps, episodes = out if isinstance(out, tuple) else read_tables(out)
    if keys is not None:
        episodes = episodes.filter(pc.is_in(episodes.column("episode_key"), value_set=pa.array(keys, pa.string())))
        steps = steps.filter(pc.is_in(steps.column("episode_id"), value_set=episodes.column("episode_id")))
    return summarize(episodes, steps, ks), per_task(episodes, ks), episodes


def evaluate(cfg: DictConfig, out: str | Path, *, show: bool = True) -> EvalResult:
    """Collect the job's episodes into ``out`` (resuming), score them and write the report; print the table."""
    if not cfg.recorder.enabled:
        raise ValueError("eval computes its metrics from the recording: use recorder=parquet")
    out = Path(out)
    with hold_run(run_location(cfg, out)):  # the report is of this job's episodes only: no other job writes meanwhile
        return _evaluate(cfg, out, show)


def _evaluate(cfg: DictConfig, out: Path, show: bool) -> EvalResult:
    collection = collect(cfg, out)
    ks = [int(k) for k in cfg.get("pass_k") or [1] if int(k) <= int(cfg.samples)]
    run = RunStore(run_location(cfg, out))  # `out`, or the launcher's storage (any pyarrow.fs location)
    keys = run.manifest().get("planned")
    summary, tasks, episodes = score_run(run.read_tables(), keys, ks)
    missing = len(keys or []) - summary["episodes"]
    if missing:
        summary["missing_episodes"] = missing
    report = write_report(out, summary, tasks, episodes, run_metadata(cfg, out), plots=bool(cfg.get("plots", True)))
    if show:
        print_summary({str(cfg.policy.kind): summary}, title=f"Evaluation of {out}")
        print(f"report: {report}" + (f"  ({missing} planned episodes missing: rerun to complete)" if missing else ""))
    _check_grading(run.read_tables()[0], episodes, summary, report)
    return EvalResult(summary, tasks, report, collection)


def _check_grading(steps: pa.Table, episodes: pa.Table, summary: dict[str, Any], report: Path) -> None:
    """Say why grading failed: every episode ungraded raises :class:`JobFailed` (the first error's line and how many
    share it); some ungraded prints that on stderr."""
    failures = grading_failures(steps, [str(e) for e in episodes.column("episode_id").to_pylist()])
    if not failures:
        return
    import re
    import sys

    def why(line: str) -> str:
        return re.sub(r"task '[^']*'", "task", line)  # the same error on other tasks

    first = failures[0]
    alike = sum(why(f) == why(first) for f in failures)
    total = len(failures) + int(summary.get("graded") or 0)
    text = (f"{len(failures)} of {total} episodes failed to grade (their success is unknown); the first error, "
            f"shared by {alike}: {first}")
    if not summary.get("graded"):
        raise JobFailed(f"no episode was graded: {text} (report: {report})")
    print(printable(f"warning: {text}"), file=sys.stderr)  # a grader's error: task and server text
