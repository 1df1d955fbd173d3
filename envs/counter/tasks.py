"""Counter: move a counter to a target number (the small env behind the core tests and the quickstart).

Served by ``servers/counter.py`` (server name ``testing``). Reward 1 on reaching the target (the
server's ``done``), -0.01 per other move.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from mcp_gym.tasks import Task

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "generate_tasks", "task_by_id", "verify"]

SERVER = "testing"
MAX_STEPS = 10
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = ["counter://state"]


def generate_tasks(seed: int = 0, n: int = 120) -> list[Task]:
    """``n`` tasks with targets in -12..12 (never 0); every 5th task is in the test split."""
    rng = np.random.default_rng(seed)
    tasks = []
    for i in range(n):
        target = int(rng.choice([t for t in range(-12, 13) if t != 0]))
        calls: list[dict[str, Any]] = []
        left = target
        while left:
            step = max(-5, min(5, left))
            calls.append({"tool": "add", "arguments": {"amount": step}})
            left -= step
        calls.append({"tool": "submit", "arguments": {"answer": str(target)}})
        tasks.append(
            Task(
                id=f"counter-{i:04d}",
                prompt=f"Use the counter tools to make the counter reach exactly {target}, then submit the count.",
                split="test" if i % 5 == 4 else "train",
                solution=tuple(calls),
                answer=str(target),
                data={"target": target},
            )
        )
    return tasks


@functools.lru_cache(maxsize=1)
def _by_id() -> dict[str, Task]:
    return {t.id: t for t in generate_tasks(0)}


def task_by_id(task_id: str) -> Task:
    """The task with this id (from the default task set)."""
    return _by_id()[task_id]


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """1.0 if the counter is at the target at submission, else 0."""
    return 1.0 if state.get("count") == task.data["target"] else 0.0
