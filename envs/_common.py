"""Helpers shared by the bundled environments (servers and their task modules).

Kept free of heavy imports at module level so the task modules in ``mcp_gym.envs`` stay cheap to import.
"""

from __future__ import annotations

import functools
import random
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mcp_gym.tasks import Task

TEST_EVERY = 5
"""Every ``TEST_EVERY``-th task (index ``i % TEST_EVERY == TEST_EVERY - 1``) is in the ``"test"`` split."""


def split_of(index: int) -> str:
    """The fixed split of the task at position ``index`` of a generated task list (20% ``"test"``)."""
    return "test" if index % TEST_EVERY == TEST_EVERY - 1 else "train"


def task_rng(env: str, seed: int, index: int) -> random.Random:
    """A private, reproducible random generator for one task (string seeds hash stably across runs)."""
    return random.Random(f"mcp-gym/{env}/{seed}/{index}")


def cycle_tasks(env: str, seed: int, n: int, kinds: Sequence[str],
                makers: Mapping[str, Callable[[random.Random, str, str], Task]]) -> list[Task]:
    """``n`` tasks cycling through ``kinds``: task ``i`` is ``makers[kind](rng, task_id, split)`` with ``kind`` =
    ``kinds[i % len(kinds)]``, its own :func:`task_rng`, the id ``<env>-<kind>-<i:04d>`` and the split
    :func:`split_of` ``(i)``."""
    tasks = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        tasks.append(makers[kind](task_rng(env, seed, i), f"{env}-{kind}-{i:04d}", split_of(i)))
    return tasks


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """One step of a reference solution: ``{"tool": tool, "arguments": {...}}``."""
    return {"tool": tool, "arguments": arguments}


def submit(answer: str) -> dict[str, Any]:
    """The final step of every reference solution (``submit`` is the env's built-in final-answer action)."""
    return call("submit", answer=answer)


def submitted_answer(task: Task) -> str | None:
    """The answer the reference solution of ``task`` submits (``None`` if it has no ``submit`` step)."""
    for step in reversed(task.solution):
        if step.get("tool") == "submit":
            return step.get("arguments", {}).get("answer")
    return None


def task_lookup(generate: Callable[[int], Iterable[Task]]) -> Callable[[str], Task]:
    """Build a cached ``task_by_id`` over ``generate(0)`` (the canonical task set of an environment)."""

    @functools.lru_cache(maxsize=1)
    def index() -> Mapping[str, Task]:
        return {t.id: t for t in generate(0)}

    def task_by_id(task_id: str) -> Task:
        """The task with id ``task_id`` from the canonical task set (``generate_tasks(0)``); KeyError if unknown."""
        try:
            return index()[task_id]
        except KeyError:
            raise KeyError(f"unknown task id {task_id!r}") from None

    return task_by_id


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit`` in the main thread, so ``atexit`` clean-up runs (e.g. removing temporary
    workspaces). Only for server processes: call it from ``__main__``, never on import. uvicorn restores and re-raises
    the previous handler after its graceful shutdown, so this also covers the HTTP transport."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:

        def _exit(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _exit)
