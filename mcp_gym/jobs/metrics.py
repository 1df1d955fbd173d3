"""Evaluation metrics computed from a recorded run (the ``episodes`` and ``steps`` tables of a run directory).

* success rate (unknown, ``None``, when no episode has a known success: no verifier and no ``done``), and pass@k
  per task with the unbiased estimator of Chen et al. (2021):
  ``1 - C(n - c, k) / C(n, k)`` for ``n`` samples of which ``c`` succeeded, averaged over tasks with ``n >= k``;
* mean and standard deviation of the episode return, mean episode length;
* tool-error rate (failed tool calls, parse failures excluded, per step) and parse-error rate (model outputs whose
  tool call could not be read, per step that carries a parse status);
* latency percentiles of tool calls and of whole episodes;
* how episodes ended (``submit``, ``done``, ``max_steps``, ``deadline``, ...).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["pass_at_k", "summarize", "per_task"]

PERCENTILES = (50, 90, 99)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: the chance that at least one of ``k`` of the ``n`` samples succeeded.

    ``1 - C(n-c, k) / C(n, k)``, computed as a stable product. Requires ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _episodes(table: pa.Table) -> list[dict[str, Any]]:
    cols = ["episode_id", "task_id", "total_reward", "success", "length", "termination", "started_at", "ended_at"]
    return table.select(cols).to_pylist()


def _success_known(eps: Sequence[dict[str, Any]]) -> bool:
    """Some episode has a known success (a verifier graded it, or the server ended it with ``done``).

    When none has, success rates are unknown (``None``, shown as ``-``), not 0; otherwise an episode of unknown
    success (e.g. cut off by ``max_steps`` before the verifier could grade it) counts as a failure."""
    return any(e["success"] is not None for e in eps)


def per_task(episodes: pa.Table, ks: Iterable[int] = (1,)) -> list[dict[str, Any]]:
    """One row per task: samples, successes, success rate, pass@k (``None`` where ``k`` > samples, or when no episode
    of the run has a known success), mean reward and length, sorted by task id."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    all_eps = _episodes(episodes)
    known = _success_known(all_eps)
    for ep in all_eps:
        by_task[str(ep["task_id"])].append(ep)
    rows = []
    for task_id in sorted(by_task):
        eps = by_task[task_id]
        n, c = len(eps), sum(bool(e["success"]) for e in eps)
        row: dict[str, Any] = {"task_id": task_id, "samples": n, "successes": c if known else None,
                               "success_rate": c / n if known else None}
        for k in ks:
            row[f"pass@{k}"] = pass_at_k(n, c, k) if k <= n and known else None
        row["mean_reward"] = float(np.mean([e["total_reward"] or 0.0 for e in eps]))
        row["mean_steps"] = float(np.mean([e["length"] or 0 for e in eps]))
        rows.append(row)
    return rows


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not len(values):
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True)}


def summarize(episodes: pa.Table, steps: pa.Table, ks: Iterable[int] = (1,)) -> dict[str, Any]:
    """The headline metrics of a run (see the module docs); ``pass@k`` only for ``k`` up to the fewest samples."""
    ks = sorted(set(ks))
    tasks = per_task(episodes, ks)
    eps = _episodes(episodes)
    rewards = np.array([e["total_reward"] or 0.0 for e in eps], dtype=float)
    lengths = np.array([e["length"] or 0 for e in eps], dtype=float)
    min_samples = min((t["samples"] for t in tasks), default=0)
    known = _success_known(eps)
    st = steps.select(["tool", "is_error", "parse_status", "duration"]).to_pydict()
    parsed = [s for s in st["parse_status"] if s is not None]
    parse_errors = sum(s != "ok" for s in parsed)
    tool_errors = sum(bool(err) and (ps is None or ps == "ok")
                      for err, ps in zip(st["is_error"], st["parse_status"], strict=True))
    call_ms = [d * 1000 for t, d in zip(st["tool"], st["duration"], strict=True) if d is not None and t != "submit"]
    episode_s = [(e["ended_at"] - e["started_at"]).total_seconds() for e in eps
                 if e["ended_at"] is not None and e["started_at"] is not None]
    n_steps = len(st["tool"])
    return {
        "episodes": len(eps),
        "tasks": len(tasks),
        "success_rate": float(np.mean([bool(e["success"]) for e in eps])) if known else None,
        "success_unknown": sum(e["success"] is None for e in eps),
        **{f"pass@{k}": float(np.mean([t[f"pass@{k}"] for t in tasks])) if known else None
           for k in ks if 1 <= k <= min_samples},
        "reward_mean": float(rewards.mean()) if eps else None,
        "reward_std": float(rewards.std()) if eps else None,
        "steps_mean": float(lengths.mean()) if eps else None,
        "steps": n_steps,
        "tool_error_rate": tool_errors / n_steps if n_steps else None,
        "parse_error_rate": parse_errors / len(parsed) if parsed else None,
        "tool_call_ms": _percentiles(call_ms),
        "episode_s": _percentiles(episode_s),
        "terminations": dict(Counter(str(e["termination"]) for e in eps).most_common()),
    }
