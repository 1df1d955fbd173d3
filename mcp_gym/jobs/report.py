"""Evaluation report: ``results.json``, per-task results as Parquet, PNG plots, and a summary table in the terminal.

Files written into the run directory's ``report/`` folder::

    report/results.json        # summary metrics, per-task rows, the job config
    report/per_task.parquet    # one row per task (samples, successes, pass@k, pass^k, mean reward and steps)
    report/success_by_task.png # per-task success rate
    report/reward_hist.png     # distribution of episode returns
    report/steps_hist.png      # distribution of episode lengths
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from mcp_gym._terminal import plain
from mcp_gym.recording.atomic import new_file, write_text_atomic

__all__ = ["REPORT_DIR"]

REPORT_DIR = "report"


def write_report(
    out: Path, summary: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]], episodes: pa.Table,
    config: Mapping[str, Any], *, plots: bool = True,
) -> Path:
    """Write the report files of an evaluation into ``out/report`` and return that folder."""
    folder = out / REPORT_DIR
    if folder.is_symlink():  # a run handed over by someone else: its report/ may lead anywhere; ours is a folder
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    # each file through a fresh O_EXCL sibling: nothing planted in the run at these names is written through
    write_text_atomic(folder / "results.json", json.dumps(
        {"summary": summary, "per_task": list(tasks), "config": config}, indent=1, default=str))
    with new_file(folder / "per_task.parquet") as tmp:
        pq.write_table(pa.Table.from_pylist(list(tasks)), tmp)
    if plots:
        _plots(folder, tasks, episodes, plot_label(config))
    return folder


def plot_label(config: Mapping[str, Any]) -> str:
    """``"<env> · <policy>"`` of a job config (as :func:`mcp_gym.jobs.config.run_metadata` writes it), for titles."""
    env = config.get("env") or {}
    policy = config.get("policy") or {}
    env_name = env.get("name") if isinstance(env, Mapping) else None
    kind = policy.get("kind") if isinstance(policy, Mapping) else None
    model = policy.get("model") if isinstance(policy, Mapping) else None
    policy_name = f"{kind}:{model}" if kind and model else kind
    return " · ".join(str(x) for x in (env_name or "?", policy_name or "?"))


def load_plotting() -> None:
    """Import matplotlib for the report's figures (the non-interactive Agg backend, pyplot, the tick locators); a job
    that writes plots calls it ahead, on a thread, while it waits for its first servers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401 - imported for the figures
    import matplotlib.ticker  # noqa: F401


def figures(tasks: Sequence[Mapping[str, Any]], episodes: pa.Table, label: str = "") -> dict[str, Any]:
    """The report's matplotlib figures by file stem; titles end with ``label`` (env · policy); count axes and the
    steps axis have integer ticks. Close them with ``matplotlib.pyplot.close``."""
    load_plotting()
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    suffix = f" ({label})" if label else ""
    out: dict[str, Any] = {}
    ids = [t["task_id"] for t in tasks]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.18 * len(ids) + 2), 3.5))
    ax.bar(range(len(ids)), [np.nan if t["success_rate"] is None else t["success_rate"] for t in tasks],
           color="tab:green")
    ax.set_xticks(range(len(ids)), ids, rotation=90, fontsize=6)
    ax.set(ylim=(0, 1.05), ylabel="success rate", title=f"Success rate per task{suffix}")
    fig.tight_layout()
    out["success_by_task"] = fig
    for column, name, xlabel, integer in (("total_reward", "reward_hist", "episode return", False),
                                          ("length", "steps_hist", "steps per episode", True)):
        values = [v for v in episodes.column(column).to_pylist() if v is not None]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        if integer and values:  # one bar per step count, centred on it
            bins: Any = [b - 0.5 for b in range(int(min(values)), int(max(values)) + 2)]
        else:
            bins = min(30, max(5, len(set(values))))
        ax.hist(values, bins=bins, color="tab:blue")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # episode counts
        if integer:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel=xlabel, ylabel="episodes", title=f"Distribution of the {xlabel}{suffix}")
        fig.tight_layout()
        out[name] = fig
    return out


def _plots(folder: Path, tasks: Sequence[Mapping[str, Any]], episodes: pa.Table, label: str = "") -> None:
    import matplotlib.pyplot as plt

    for name, fig in figures(tasks, episodes, label).items():
        with new_file(folder / f"{name}.png") as tmp:
            fig.savefig(tmp, format="png", dpi=120, metadata={"Title": fig.axes[0].get_title()})
        plt.close(fig)


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{value:.1%}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summary_table(summaries: Mapping[str, Mapping[str, Any]], title: str = "Evaluation") -> Table:
    """A rich table with one column per run (e.g. per policy) and one row per metric."""
    table = _PlainTable(title=plain(title), title_justify="left")  # task tags and grader paths come from task files
    table.add_column("metric", style="bold")
    for name in summaries:
        table.add_column(plain(name), justify="right")
    ks = sorted({m for s in summaries.values() for m in s if m.startswith("pass@")}, key=lambda m: int(m[5:]))
    rows: list[tuple[str, str, bool]] = [("episodes", "episodes", False), ("tasks", "tasks", False),
                                         ("success rate", "success_rate", True)]
    if any(s.get("success_unknown") for s in summaries.values()):  # episodes no verifier or `done` graded
        rows.append(("success unknown", "success_unknown", False))
    rows += [(k, k, True) for k in ks]
    hats = [f"pass^{k[5:]}" for k in ks]
    rows += [(h, h, True) for h in hats if any(h in s for s in summaries.values())]
    rows += [("reward (mean)", "reward_mean", False), ("reward (std)", "reward_std", False),
             ("steps (mean)", "steps_mean", False), ("tool-error rate", "tool_error_rate", True),
             ("parse-error rate", "parse_error_rate", True)]
    for label, key, pct in rows:
        table.add_row(label, *(_fmt(s.get(key), pct) for s in summaries.values()))
    for label, key in (("tool call ms", "tool_call_ms"), ("episode s", "episode_s")):
        for p in ("p50", "p90", "p99"):
            table.add_row(f"{label} {p}", *(_fmt((s.get(key) or {}).get(p)) for s in summaries.values()))
    if any("startup_s" in s for s in summaries.values()):  # servers started per episode: how much time that took
        table.add_row("server start-up s (mean)", *(_fmt((s.get("startup_s") or {}).get("mean"))
                                                    for s in summaries.values()))
        table.add_row("server start-up share", *(_fmt(s.get("startup_share"), True) for s in summaries.values()))
    if any("first_step_s" in s for s in summaries.values()):  # reset start to the first step's answer
        for p in ("p50", "p90"):
            table.add_row(f"time to first step s {p}", *(_fmt((s.get("first_step_s") or {}).get(p))
                                                          for s in summaries.values()))
    table.add_row("endings", *(", ".join(f"{k} {v}" for k, v in (s.get("terminations") or {}).items())
                               for s in summaries.values()))
    for tag in sorted({t for s in summaries.values() for t in s.get("by_tag") or {}}):
        table.add_row(f"tag {tag}", *(_tag_cell((s.get("by_tag") or {}).get(tag)) for s in summaries.values()))
    if any("graded" in s for s in summaries.values()):
        table.add_row("graded episodes", *(_fmt(s.get("graded")) for s in summaries.values()))
        table.add_row("grading errors", *(_fmt(s.get("grading_errors")) for s in summaries.values()))
        for path in sorted({p for s in summaries.values() for p in s.get("graders") or {}}):
            table.add_row(f"grader {path}", *(_grader_cell((s.get("graders") or {}).get(path))
                                              for s in summaries.values()))
        table.add_row("judge agreement", *(_agreement_cell(s.get("judge_agreement")) for s in summaries.values()))
    return table


class _PlainTable(Table):
    """A rich table whose cells are plain text: never markup, control characters escaped (:mod:`mcp_gym._terminal`)."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(plain(r) if isinstance(r, str) else r for r in renderables), **kwargs)


def _grader_cell(g: Mapping[str, Any] | None) -> str:
    if not g:
        return "-"
    return f"{g['pass_rate']:.1%} pass, score {g['mean_score']:.3g} (n={g['episodes']})"


def _tag_cell(g: Mapping[str, Any] | None) -> str:
    """``success 75.0%, pass@4 100.0%, pass^4 50.0% (3 tasks)`` of one tag."""
    if not g:
        return "-"
    ks = [k for k in g if k.startswith(("pass@", "pass^"))]
    parts = [f"success {_fmt(g.get('success_rate'), True)}", *(f"{k} {_fmt(g[k], True)}" for k in ks)]
    return ", ".join(parts) + f" ({g['tasks']} task{'s' if g['tasks'] != 1 else ''})"


def _agreement_cell(a: Mapping[str, Any] | None) -> str:
    if not a:
        return "-"
    kappa = "-" if a.get("kappa") is None else f"{a['kappa']:.2f}"
    return f"{a['agreement']:.1%} (kappa {kappa}, n={a['pairs']})"


def print_summary(summaries: Mapping[str, Mapping[str, Any]], title: str = "Evaluation") -> None:
    """Print :func:`summary_table` to the terminal."""
    Console().print(summary_table(summaries, title))
