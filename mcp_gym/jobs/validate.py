"""``mcp-gym tasks validate``: does every task's own reference solution pass its grader?

Each task with a ``solution`` runs once in a fresh episode set up as ``eval`` sets it up (the same env, the same
per-episode workspace, ``fixture`` and servers), and plays the solution of the *filled* task (``{workspace}``
replaced by the episode's real path, as the ``oracle`` policy sees it): its calls, then ``submit`` of its ``answer``
unless the episode already ended. A task whose grade fails, whose grading raises, or whose episode breaks is
reported with the first tool call that failed (tool, arguments, error) and the limit (``max_steps``, ...) that cut
the solution short, if one did; a solution with a failed call fails even when its answer grades right (the oracle
submits the answer whatever the calls returned). The command exits 1 if there is any. Tasks without a solution, and
tasks nothing grades, are listed as skipped.

With ``replay=true``, on an env with a server that keeps its state from one episode to the next (no ``{workspace}``
in its command line), every passed task's solution is then played once more, in task order, and each passed task is
checked again as a later episode sees the server: an answer that its own solution no longer returns (found at the
places of the results that held it in the first run, else anywhere in their text) is *stale*, and a check that
passes with no action (``submit`` of an empty answer) proves nothing there. Either fails the task. An answer no
result of the first run held (a sum the agent must work out) cannot be followed and is left as it is.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from mcp_gym.jobs.config import env_factory, load_job_tasks, to_dict
from mcp_gym.recording.atomic import write_text_atomic

__all__ = ["TaskCheck", "validate_tasks"]


@dataclass(frozen=True)
class TaskCheck:
    """The outcome for one task: ``passed``, ``failed``, ``error`` (grading or the episode broke) or ``skipped``."""

    task_id: str
    status: str
    reason: str
    score: float | None = None
    failed_call: dict[str, Any] | None = None
    """The first call of the solution that failed: ``{"step", "tool", "arguments", "error"}``."""
    limit: str | None = None
    """The limit that ended the episode before the solution was played to its end (``max_steps``, ...)."""


def validate_tasks(cfg: DictConfig, out: str | Path, *, show: bool = True) -> list[TaskCheck]:
    """Run each task's reference solution and grade it; writes ``out/validation.json`` and returns the checks."""
    tasks = load_job_tasks(to_dict(cfg.env), cfg.get("split"))
    if not tasks:
        raise ValueError("no tasks to validate: set env.tasks (and check split)")
    env = env_factory(to_dict(cfg.env), tasks)()
    checks: list[TaskCheck] = []
    seen: dict[str, list[Any]] = {}  # task id -> what its solution's calls returned in the first run
    try:
        for task in tqdm(tasks, desc="tasks validate", unit="task", disable=not show, dynamic_ncols=True):
            checks.append(check_task(env, task, seen.setdefault(task.id, [])))
        if cfg.get("replay"):
            checks = replay_checks(env, tasks, checks, seen, show=show)
    finally:
        env.close()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "validation.json", json.dumps([asdict(c) for c in checks], indent=1))  # no link followed
    if show:
        _print(checks, out)
    return checks


def check_task(env: Any, task: Any, results: list[Any] | None = None) -> TaskCheck:
    """Play ``task``'s reference solution in a fresh episode of ``env`` (which holds the task) and grade it: turn by
    turn (:meth:`~mcp_gym.tasks.Task.turn_plan`; a single-turn task is one turn), each turn's calls, then ``submit``
    of the turn's answer, until the episode ends. ``results`` (if given) receives what each solution call returned,
    as a JSON value (:func:`~mcp_gym.jobs.proposers.result_value`)."""
    multi = bool(task.turns)
    if not (any("solution" in t or "answer" in t for t in task.turns) if multi else task.solution):
        return TaskCheck(task.id, "skipped", "no reference solution")
    failed: dict[str, Any] | None = None
    limit: str | None = None
    try:
        obs, info = env.reset(seed=0, options={"task_id": task.id})
        if info.get("error"):
            return TaskCheck(task.id, "error", f"reset: {info['error']['message']}")
        plan = env.unwrapped.task.turn_plan()  # the task as the episode set it up: {workspace} is the real path
        calls = [(i, c) for i, (turn_calls, answer) in enumerate(plan)
                 for c in (*turn_calls, {"tool": "submit", "arguments": {"answer": _answer(answer)}})]
        # a single-turn solution cut after its last call is graded as it stands, as in eval: its submit is optional
        needed = len(calls) if multi else len(calls) - 1
        for n, (turn, call) in enumerate(calls, 1):
            obs, reward, terminated, truncated, info = env.step(dict(call))
            if results is not None and call.get("tool") != "submit":
                from mcp_gym.jobs.proposers import result_value

                results.append(result_value(info.get("structured_content"), str(obs.get("result", ""))))
            where = f" (turn {turn})" if multi else ""
            if failed is None and info.get("error") and n <= needed:
                failed = {"step": n, **({"turn": turn} if multi else {}), "tool": call.get("tool"),
                          "arguments": call.get("arguments"), "error": str(info["error"].get("message", ""))[:500]}
            if terminated or truncated:
                if (truncated or multi) and n < needed:
                    limit = f"{info.get('termination')} after {n} of {needed} solution calls{where}"
                break
    except Exception as e:  # noqa: BLE001 - one broken task must not hide the others
        return TaskCheck(task.id, "error", f"{type(e).__name__}: {e}", failed_call=failed, limit=limit)
    check = _verdict(task.id, info)
    status, reason = check.status, check.reason
    if limit is not None:  # a solution the limits cut short would be cut in eval too: never a pass
        status, reason = ("error" if status == "error" else "failed"), f"cut short by {limit}; {reason}"
    elif failed is not None and status == "passed":  # the answer is right, but the solution does not work as written
        status, reason = "failed", f"the grade passes ({reason}) but a call of the solution failed"
    if failed is not None:
        where = f" (turn {failed['turn']})" if multi else ""
        reason += f"; first failed call: step {failed['step']}{where} {failed['tool']}: {failed['error']}"
    return TaskCheck(task.id, status, reason, check.score, failed, limit)


def replay_checks(env: Any, tasks: list[Any], checks: list[TaskCheck], seen: dict[str, list[Any]], *,
                  show: bool = False) -> list[TaskCheck]:
    """``replay=true``: each passed task checked again after every passed solution ran once more (module docstring).
    ``seen`` holds what each task's solution returned in its first run. Nothing to do (``checks`` as they are) when
    every server starts fresh per episode."""
    from mcp_gym.jobs.proposers import as_text, extract, fields
    from mcp_gym.protocol import RESET_TOOL

    base = getattr(env, "unwrapped", env)
    keeps = [a for a in base.host.connections if a not in base.workspace_servers
             and not (base.reset_mode != "none" and base.host.has_tool(a, RESET_TOOL))]
    if not keeps:
        if show:
            print("tasks validate: replay=true: every server starts each episode afresh (a {workspace}, or its "
                  f"{RESET_TOOL} tool), so no task's solution can change another's: nothing to replay")
        return checks
    by_id = {t.id: t for t in tasks}
    passed = [c.task_id for c in checks if c.status == "passed"]
    for tid in tqdm(passed, desc="replay: solutions", unit="task", disable=not show, dynamic_ncols=True):
        check_task(env, by_id[tid])  # its changes are what counts, not its verdict
    out = {c.task_id: c for c in checks}
    for tid in tqdm(passed, desc="replay: checks", unit="task", disable=not show, dynamic_ncols=True):
        task = by_id[tid]
        if _passes_with_no_action(env, task):
            out[tid] = TaskCheck(tid, "failed", "after the other tasks' solutions ran, the check passes with no action "
                                                "(the server keeps state between episodes): it proves nothing there")
            continue
        answer = task.answer if isinstance(task.answer, str) and task.answer.strip() else None
        if answer is None or task.turns:
            continue
        first = seen.get(tid) or []
        places = [(i, p) for i, v in enumerate(first) for p, a in fields(v) if a == answer]
        if not places and not any(answer in as_text(v) for v in first):
            continue  # no result held the answer: nothing to follow
        again: list[Any] = []
        check = check_task(env, task, again)
        if places:
            moved = all(i >= len(again) or extract(again[i], p) != answer for i, p in places)
        else:
            moved = not any(answer in as_text(v) for v in again)
        if moved:
            where = ", ".join(f"call {i + 1} at {p}" for i, p in places[:3]) or "its solution's results"
            now = [extract(again[i], p) for i, p in places[:1] if i < len(again)]
            out[tid] = TaskCheck(tid, "failed", f"stale answer: after the other tasks' solutions ran, {where} no "
                                                f"longer returns {answer!r}" + (f" (now {now[0]!r})" if now else "") +
                                 "; the server keeps state between episodes (give it a {workspace})", check.score)
    if show:
        stale = sum(out[t].status != "passed" for t in passed)
        print(f"tasks validate: replay=true: {len(passed)} passed tasks checked again after their solutions ran once "
              f"more on the servers that keep state ({', '.join(keeps)}): {stale} no longer pass")
    return [out[c.task_id] for c in checks]


def _passes_with_no_action(env: Any, task: Any) -> bool:
    if task.turns:
        return False
    env.reset(seed=0, options={"task_id": task.id})
    _, _, _, _, info = env.step({"tool": "submit", "arguments": {"answer": ""}})
    grade = info.get("grade")
    return bool(grade and grade.get("passed"))


def _verdict(task_id: str, info: dict[str, Any]) -> TaskCheck:
    grade = info.get("grade")
    if grade is not None:
        return TaskCheck(task_id, "passed" if grade["passed"] else "failed", grade["reason"], grade["score"])
    error = info.get("error")
    if error and error.get("kind") == "verifier_error":
        return TaskCheck(task_id, "error", error["message"])
    if info.get("success") is not None:  # a bundled env's verifier
        return TaskCheck(task_id, "passed" if info["success"] else "failed", "verifier", info.get("verifier_reward"))
    return TaskCheck(task_id, "skipped", "nothing grades this task (no answer, no grader)")


def _answer(answer: Any) -> str:
    if answer is None or isinstance(answer, str):
        return answer or ""
    return json.dumps(answer, ensure_ascii=False)


def _print(checks: list[TaskCheck], out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from mcp_gym._terminal import plain

    bad = [c for c in checks if c.status in ("failed", "error")]
    skipped = [c for c in checks if c.status == "skipped"]
    console = Console()
    if bad or skipped:
        table = Table(title="Tasks whose reference solution does not pass", title_justify="left")
        for col in ("task", "status", "reason"):
            table.add_column(col, overflow="fold")
        for c in bad + skipped:
            table.add_row(plain(c.task_id), c.status, plain(c.reason))  # task files' ids, servers' error text
        console.print(table)
    passed = sum(c.status == "passed" for c in checks)
    console.print(f"{passed} of {len(checks)} tasks pass with their reference solution; {len(bad)} fail, "
                  f"{len(skipped)} skipped ({out / 'validation.json'})")
