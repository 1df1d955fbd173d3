"""``mcp-gym tasks validate``: does every task's own reference solution pass its grader?

Each task with a ``solution`` runs once in a fresh episode: its calls, then ``submit`` of its ``answer`` unless the
episode already ended (what the ``oracle`` policy does). A task whose grade fails, whose grading raises, or whose
episode breaks is reported; the command exits 1 if there is any. Tasks without a solution, and tasks nothing grades,
are listed as skipped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from mcp_gym.jobs.config import env_factory, load_job_tasks, to_dict

__all__ = ["TaskCheck", "validate_tasks"]


@dataclass(frozen=True)
class TaskCheck:
    """The outcome for one task: ``passed``, ``failed``, ``error`` (grading or the episode broke) or ``skipped``."""

    task_id: str
    status: str
    reason: str
    score: float | None = None


def validate_tasks(cfg: DictConfig, out: str | Path, *, show: bool = True) -> list[TaskCheck]:
    """Run each task's reference solution and grade it; writes ``out/validation.json`` and returns the checks."""
    tasks = load_job_tasks(to_dict(cfg.env), cfg.get("split"))
    if not tasks:
        raise ValueError("no tasks to validate: set env.tasks (and check split)")
    env = env_factory(to_dict(cfg.env), tasks)()
    checks: list[TaskCheck] = []
    try:
        for task in tqdm(tasks, desc="tasks validate", unit="task", disable=not show, dynamic_ncols=True):
            checks.append(_check(env, task))
    finally:
        env.close()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps([asdict(c) for c in checks], indent=1), encoding="utf-8")
    if show:
        _print(checks, out)
    return checks


def _check(env: Any, task: Any) -> TaskCheck:
    if not task.solution:
        return TaskCheck(task.id, "skipped", "no reference solution")
    try:
        obs, info = env.reset(seed=0, options={"task_id": task.id})
        if info.get("error"):
            return TaskCheck(task.id, "error", f"reset: {info['error']['message']}")
        ended = False
        for call in task.solution:
            obs, reward, terminated, truncated, info = env.step(dict(call))
            if terminated or truncated:
                ended = True
                break
        if not ended:
            obs, reward, terminated, truncated, info = env.step(
                {"tool": "submit", "arguments": {"answer": _answer(task.answer)}})
    except Exception as e:  # noqa: BLE001 - one broken task must not hide the others
        return TaskCheck(task.id, "error", f"{type(e).__name__}: {e}")
    grade = info.get("grade")
    if grade is not None:
        return TaskCheck(task.id, "passed" if grade["passed"] else "failed", grade["reason"], grade["score"])
    error = info.get("error")
    if error and error.get("kind") == "verifier_error":
        return TaskCheck(task.id, "error", error["message"])
    if info.get("success") is not None:  # a bundled env's verifier
        return TaskCheck(task.id, "passed" if info["success"] else "failed", "verifier", info.get("verifier_reward"))
    return TaskCheck(task.id, "skipped", "nothing grades this task (no answer, no grader)")


def _answer(answer: Any) -> str:
    if answer is None or isinstance(answer, str):
        return answer or ""
    return json.dumps(answer, ensure_ascii=False)


def _print(checks: list[TaskCheck], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    bad = [c for c in checks if c.status in ("failed", "error")]
    skipped = [c for c in checks if c.status == "skipped"]
    console = Console()
    if bad or skipped:
        table = Table(title="Tasks whose reference solution does not pass", title_justify="left")
        for col in ("task", "status", "reason"):
            table.add_column(col, overflow="fold")
        for c in bad + skipped:
            table.add_row(c.task_id, c.status, c.reason)
        console.print(table)
    passed = sum(c.status == "passed" for c in checks)
    console.print(f"{passed} of {len(checks)} tasks pass with their reference solution; {len(bad)} fail, "
                  f"{len(skipped)} skipped ({out / 'validation.json'})")
