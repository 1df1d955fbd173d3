"""Tasks: what an episode asks of the agent, and how it is graded.

A :class:`Task` is plain data (JSON-able) so task sets can be stored as JSONL and loaded with ``datasets``. Grading
lives in a :data:`Verifier`: ``(task, final_answer, state) -> reward``, where ``state`` is the episode snapshot the
server returns from its hidden ``mcp_gym_state`` tool (``{}`` when the server has none).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Task", "Verifier", "load_tasks", "save_tasks", "as_task"]


@dataclass(frozen=True)
class Task:
    """One task of an environment.

    Attributes:
        id: Unique id within its task set (e.g. ``"notes-0042"``).
        prompt: What the agent is asked to do (the observation's ``task`` text).
        split: ``"train"`` or ``"test"`` (fixed at generation time).
        solution: Reference solution: a list of ``{"tool": name, "arguments": {...}}`` calls, the last usually
            ``submit``. The task's verifier accepts it.
        answer: Expected final answer, when the task has one.
        data: Free-form task parameters the server or verifier needs (JSON-able).
        resources: Resource URIs (or URI templates filled from ``data``) the env should observe for this task.
    """

    id: str
    prompt: str
    split: str = "train"
    solution: tuple[Mapping[str, Any], ...] = ()
    answer: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    resources: tuple[str, ...] = ()

    def to_record(self) -> dict[str, Any]:
        """A flat JSON-able record with nested fields as JSON strings (stable Arrow schema for ``datasets``)."""
        d = asdict(self)
        d["solution"] = json.dumps([dict(c) for c in self.solution], ensure_ascii=False, sort_keys=True)
        d["data"] = json.dumps(dict(self.data), ensure_ascii=False, sort_keys=True)
        d["resources"] = list(self.resources)
        return d

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Task:
        """Inverse of :meth:`to_record` (also accepts already-decoded nested fields)."""
        sol = rec.get("solution") or ()
        data = rec.get("data") or {}
        if isinstance(sol, str):
            sol = json.loads(sol)
        if isinstance(data, str):
            data = json.loads(data)
        return cls(
            id=str(rec["id"]),
            prompt=str(rec.get("prompt", "")),
            split=str(rec.get("split") or "train"),
            solution=tuple(dict(c) for c in sol),
            answer=rec.get("answer"),
            data=dict(data),
            resources=tuple(rec.get("resources") or ()),
        )


Verifier = Callable[[Task, "str | None", Mapping[str, Any]], float]
"""``(task, final_answer, state) -> reward``; ``state`` is the server's ``mcp_gym_state`` snapshot."""


def as_task(t: Task | Mapping[str, Any] | str, index: int = 0) -> Task:
    """Coerce a Task, a record dict (``{"id", "prompt", ...}``) or a bare prompt string into a :class:`Task`."""
    if isinstance(t, Task):
        return t
    if isinstance(t, str):
        return Task(id=f"task-{index}", prompt=t)
    rec = dict(t)
    rec.setdefault("id", f"task-{index}")
    return Task.from_record(rec)


def save_tasks(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write tasks as JSONL (one :meth:`Task.to_record` per line); loadable with ``datasets.load_dataset("json")``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t.to_record(), ensure_ascii=False, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def load_tasks(path: str | Path, split: str | None = None) -> list[Task]:
    """Read a JSONL task file written by :func:`save_tasks`, optionally one split."""
    out: list[Task] = []
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                t = Task.from_record(json.loads(line))
                if split is None or t.split == split:
                    out.append(t)
    return out


def select(tasks: Sequence[Task], split: str | None = None, ids: Iterable[str] | None = None) -> list[Task]:
    """Filter a task list by split and/or ids (keeping order)."""
    wanted = set(ids) if ids is not None else None
    return [t for t in tasks if (split is None or t.split == split) and (wanted is None or t.id in wanted)]
