"""Per-episode server set-up: a fresh workspace directory (a task's ``fixture`` copied in) and the server specs of one
episode (``{workspace}`` substituted, the task's environment variables added)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp_gym.client.specs import Stdio
from mcp_gym.tasks import Task

__all__ = ["PLACEHOLDER", "mentions_workspace", "make_workspace", "episode_spec", "fill_task"]

PLACEHOLDER = "{workspace}"


def mentions_workspace(spec: Any) -> bool:
    """Whether a stdio server's arguments, environment or working directory name ``{workspace}``."""
    if isinstance(spec, Stdio):
        return any(PLACEHOLDER in str(x) for x in (*spec.args, *(spec.env or {}).values(), spec.cwd or ""))
    return False


def make_workspace(task: Task) -> Path:
    """A new temporary directory with the task's ``fixture`` copied in (the caller removes it)."""
    workspace = Path(tempfile.mkdtemp(prefix="mcp-gym-ws-"))
    if task.fixture:
        fixture = Path(task.fixture)
        if not fixture.is_dir():
            shutil.rmtree(workspace, ignore_errors=True)
            raise ValueError(f"task '{task.id}': fixture {fixture} is not a directory")
        shutil.copytree(fixture, workspace, symlinks=True, dirs_exist_ok=True)
    return workspace


def episode_spec(spec: Any, workspace: Path | None, env: Mapping[str, str]) -> Any:
    """``spec`` for one episode: ``{workspace}`` substituted in a stdio server's arguments, environment and working
    directory, and the task's environment variables added (other transports are returned as they are)."""
    if not isinstance(spec, Stdio) or (workspace is None and not env):
        return spec

    def fill(x: str) -> str:
        return x.replace(PLACEHOLDER, str(workspace)) if workspace is not None else x

    merged = {k: fill(v) for k, v in {**(spec.env or {}), **dict(env)}.items()} if (spec.env or env) else None
    return dataclasses.replace(spec, args=[fill(a) for a in spec.args], env=merged,
                               cwd=fill(spec.cwd) if spec.cwd else None)


def fill_task(task: Task, workspace: Path) -> Task:
    """``task`` with ``{workspace}`` replaced in its prompt, reference solution, answer and data."""

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(PLACEHOLDER, str(workspace))
        if isinstance(v, Mapping):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(fill(x) for x in v)
        return v

    return dataclasses.replace(task, prompt=fill(task.prompt), solution=fill(task.solution), answer=fill(task.answer),
                               data=fill(dict(task.data)))
