"""Evaluation metrics computed from a recorded run (the ``episodes`` and ``steps`` tables of a run directory).

* success rate (unknown, ``None``, when no episode has a known success: no verifier and no ``done``), and pass@k
  per task with the unbiased estimator of Chen et al. (2021):
  ``1 - C(n - c, k) / C(n, k)`` for ``n`` samples of which ``c`` succeeded, averaged over tasks with ``n >= k``;
* pass^k (tau-bench): the chance that all ``k`` samples succeed, unbiased ``C(c, k) / C(n, k)``, averaged likewise;
* per-grader breakdowns of the graded episodes (:mod:`mcp_gym.graders`: pass rate and mean score of every grader in
  the grade trees, read from the final step's ``info["grade"]``), grading failures, and the LLM judge's agreement
  with the exact graders where both graded an episode (rate and Cohen's kappa);
* mean and standard deviation of the episode return, mean episode length;
* tool-error rate (failed tool calls, parse failures excluded, per step) and parse-error rate (model outputs whose
  tool call could not be read, per step that carries a parse status);
* latency percentiles of tool calls and of whole episodes; the time spent starting servers for the episodes (a server
  per episode: ``{workspace}``, ``reset_mode=restart``), in total and as a share of the episodes' time (their
  resets included), and the time from each episode's reset to its first step's answer;
* how episodes ended (``submit``, ``done``, ``max_steps``, ``deadline``, ...);
* per task tag (the tasks' ``tags``: category, difficulty, ...): tasks, episodes, success rate, pass@k and pass^k
  of the tasks carrying it (``by_tag``, present when some task has tags).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from mcp_gym.graders import Grade

__all__: list[str] = []  # internal to mcp_gym.jobs: used by its sibling modules only

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


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for one task: the chance that all ``k`` of ``k`` samples drawn from the ``n`` succeeded,
    ``C(c, k) / C(n, k)``. Requires ``1 <= k <= n`` and ``0 <= c <= n``."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if c < k:
        return 0.0
    return float(np.prod((c - np.arange(k)) / (n - np.arange(k))))


def episode_grades(steps: pa.Table) -> dict[str, dict[str, Any] | None]:
    """episode id -> the grade recorded in its final step's ``info`` (``None`` when grading failed), for the episodes
    whose final step carries one."""
    cols = steps.select(["episode_id", "terminated", "truncated", "info"]).to_pydict()
    out: dict[str, dict[str, Any] | None] = {}
    for eid, term, trunc, info in zip(cols["episode_id"], cols["terminated"], cols["truncated"], cols["info"],
                                      strict=True):
        if not (term or trunc) or not info or '"grade"' not in info:
            continue
        data = json.loads(info)
        if "grade" in data:
            out[str(eid)] = data["grade"]
    return out


def grading_failures(steps: pa.Table, ids: Iterable[str] | None = None) -> list[str]:
    """Why grading failed, one line per episode whose final step recorded no grade (``info["grade"]`` ``None``): the
    step's error message (``info["error"]``, which the recorder keeps in the ``error`` column), or a placeholder when
    none was recorded (only the episodes in ``ids``, unless ``None``), in the table's order."""
    keep = None if ids is None else set(ids)
    names = ["episode_id", "terminated", "truncated", "info"] + (["error"] if "error" in steps.column_names else [])
    cols = steps.select(names).to_pydict()
    errors = cols.get("error") or [None] * len(cols["info"])
    out: list[str] = []
    for eid, term, trunc, info, err in zip(cols["episode_id"], cols["terminated"], cols["truncated"], cols["info"],
                                           errors, strict=True):
        if not (term or trunc) or not info or '"grade"' not in info or (keep is not None and str(eid) not in keep):
            continue
        data = json.loads(info)
        if "grade" not in data or data["grade"] is not None:
            continue
        error = data.get("error")
        if not isinstance(error, dict) and err:
            try:
                error = json.loads(err)
            except ValueError:
                error = {"message": err}
        message = error.get("message") if isinstance(error, dict) else None
        out.append(" ".join(str(message).split()) if message else "no reason recorded")
    return out


def _leaves(grade: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = grade.get("parts") or ()
    return [leaf for p in parts for leaf in _leaves(p)] if parts else [grade]


def grader_breakdown(grades: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Per grader (by path in the grade tree, e.g. ``all/judge``): graded episodes, passes, pass rate, mean score."""
    acc: dict[str, list[tuple[bool, float]]] = defaultdict(list)
    for g in grades:
        if g is None:
            continue
        for path, sub in Grade.from_dict(g).flat().items():
            acc[path].append((sub.passed, sub.score))
    return {path: {"episodes": len(v), "passed": sum(p for p, _ in v), "pass_rate": sum(p for p, _ in v) / len(v),
                   "mean_score": float(np.mean([s for _, s in v]))} for path, v in sorted(acc.items())}


def judge_agreement(grades: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """How often the LLM judge's verdict equals an exact grader's (answer matcher, state check or Python verifier) on
    the same episode, over all (judge, exact grader) pairs; ``None`` when no episode has both."""
    pairs: list[tuple[bool, bool]] = []
    for g in grades:
        if g is None:
            continue
        leaves = _leaves(g)
        judges = [bool(leaf["passed"]) for leaf in leaves if leaf["kind"] == "judge"]
        exact = [bool(leaf["passed"]) for leaf in leaves if leaf["kind"] != "judge"]
        pairs += [(j, e) for j in judges for e in exact]
    if not pairs:
        return None
    n = len(pairs)
    agree = sum(j == e for j, e in pairs) / n
    pj, pe = sum(j for j, _ in pairs) / n, sum(e for _, e in pairs) / n
    chance = pj * pe + (1 - pj) * (1 - pe)
    kappa = (agree - chance) / (1 - chance) if chance < 1 else None
    return {"pairs": n, "agreement": agree, "kappa": kappa,
            "judge_pass_exact_fail": sum(j and not e for j, e in pairs),
            "judge_fail_exact_pass": sum(e and not j for j, e in pairs)}


def _episodes(table: pa.Table) -> list[dict[str, Any]]:
    cols = ["episode_id", "task_id", "total_reward", "success", "length", "termination", "started_at", "ended_at"]
    rows = table.select(cols).to_pylist()
    if "task" in table.column_names:
        for row, task in zip(rows, table.column("task").to_pylist(), strict=True):
            row["tags"] = _task_tags(task)
    return rows


def _task_tags(task: str | None) -> list[str]:
    """The ``tags`` of a recorded task record (the episodes table's ``task`` JSON)."""
    try:
        tags = json.loads(task).get("tags") if task else None
    except (ValueError, AttributeError):
        return []
    return [str(t) for t in tags] if isinstance(tags, list) else []


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
        for k in ks:
            row[f"pass^{k}"] = pass_hat_k(n, c, k) if k <= n and known else None
        row["mean_reward"] = float(np.mean([e["total_reward"] or 0.0 for e in eps]))
        row["mean_steps"] = float(np.mean([e["length"] or 0 for e in eps]))
        row["tags"] = sorted({t for e in eps for t in e.get("tags") or ()})
        rows.append(row)
    if not any(r["tags"] for r in rows):
        for r in rows:
            del r["tags"]
    return rows


def by_tag(tasks: Sequence[Mapping[str, Any]], ks: Iterable[int]) -> dict[str, dict[str, Any]]:
    """Per tag (of :func:`per_task` rows): tasks, episodes, success rate (over the episodes), and pass@k / pass^k
    averaged over the tag's tasks that have at least ``k`` samples (``None`` when success is unknown)."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for t in tasks:
        for tag in t.get("tags") or ():
            groups[tag].append(t)
    out: dict[str, dict[str, Any]] = {}
    for tag in sorted(groups):
        rows = groups[tag]
        n = sum(r["samples"] for r in rows)
        known = all(r["successes"] is not None for r in rows)
        entry: dict[str, Any] = {"tasks": len(rows), "episodes": n,
                                 "success_rate": sum(r["successes"] for r in rows) / n if known and n else None}
        for k in ks:
            for name in (f"pass@{k}", f"pass^{k}"):
                values = [r[name] for r in rows if r.get(name) is not None]
                entry[name] = float(np.mean(values)) if values and known else None
        out[tag] = entry
    return out


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
        **{f"pass^{k}": float(np.mean([t[f"pass^{k}"] for t in tasks])) if known else None
           for k in ks if 1 <= k <= min_samples},
        "reward_mean": float(rewards.mean()) if eps else None,
        "reward_std": float(rewards.std()) if eps else None,
        "steps_mean": float(lengths.mean()) if eps else None,
        "steps": n_steps,
        "tool_error_rate": tool_errors / n_steps if n_steps else None,
        "parse_error_rate": parse_errors / len(parsed) if parsed else None,
        "tool_call_ms": _percentiles(call_ms),
        "episode_s": _percentiles(episode_s),
        **_startup(episodes, sum(episode_s)),
        **_first_step(episodes, steps),
        "terminations": dict(Counter(str(e["termination"]) for e in eps).most_common()),
        **({"by_tag": by_tag(tasks, [k for k in ks if 1 <= k <= min_samples])}
           if any(t.get("tags") for t in tasks) else {}),
        **_grading(eps, steps),
    }


def _startup(episodes: pa.Table, episodes_total: float) -> dict[str, Any]:
    """``startup_s`` (total, mean per episode, percentiles) and ``startup_share`` from the ``startup_seconds`` the
    recorder put in each episode's metadata; empty when no episode started a server. The share is of the episodes'
    whole time: each episode's reset (``reset_seconds``, which holds its servers' start-up) and its steps; for a run
    recorded without ``reset_seconds``, of the steps' time plus the start-up."""
    if "metadata" not in episodes.column_names:
        return {}
    metas = episodes.column("metadata").to_pylist()
    seconds = [_meta_seconds(meta, "startup_seconds") or 0.0 for meta in metas]
    total = float(sum(seconds))
    if not total:
        return {}
    resets = [_meta_seconds(meta, "reset_seconds") for meta in metas]
    whole = (sum(r for r in resets if r is not None) if all(r is not None for r in resets) else total) \
        + episodes_total
    return {"startup_s": {"total": total, "mean": total / len(seconds), **_percentiles(seconds)},
            "startup_share": min(1.0, total / whole) if whole > 0 else None}


def _meta_seconds(meta: str | None, key: str) -> float | None:
    """A number of seconds an episode's recorded ``metadata`` JSON holds under ``key`` (``None`` if none)."""
    try:
        value = json.loads(meta).get(key) if meta else None
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_step(episodes: pa.Table, steps: pa.Table) -> dict[str, Any]:
    """``first_step_s`` (percentiles): per episode, the time from the start of its ``reset`` to its first step's
    answer (the reset's ``reset_seconds`` from the recorder's metadata, then the policy's first move and the call);
    empty when no episode recorded its reset time."""
    if "metadata" not in episodes.column_names or not len(steps):
        return {}
    rows = episodes.select(["episode_id", "started_at", "metadata"]).to_pylist()
    resets = {r["episode_id"]: (r["started_at"], s) for r in rows
              if r["started_at"] is not None and (s := _meta_seconds(r["metadata"], "reset_seconds")) is not None}
    if not resets:
        return {}
    first = steps.select(["episode_id", "step_index", "timestamp", "duration"]).to_pylist()
    values = [resets[s["episode_id"]][1] + (s["timestamp"] - resets[s["episode_id"]][0]).total_seconds()
              + (s["duration"] or 0.0)
              for s in first if s["step_index"] == 0 and s["episode_id"] in resets and s["timestamp"] is not None]
    return {"first_step_s": _percentiles(values)} if values else {}


def _grading(eps: list[dict[str, Any]], steps: pa.Table) -> dict[str, Any]:
    """The grading part of the summary (empty when no episode carries a grade)."""
    grades = episode_grades(steps)
    if not grades:
        return {}
    ids = {str(e["episode_id"]) for e in eps}
    mine = [g for eid, g in grades.items() if eid in ids]
    return {"graded": sum(g is not None for g in mine), "grading_errors": sum(g is None for g in mine),
            "graders": grader_breakdown(mine), "judge_agreement": judge_agreement(mine)}
