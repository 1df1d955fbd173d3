"""Per-episode server set-up: a fresh workspace directory (a task's ``fixture`` copied in) and the server specs of one
episode (``{workspace}`` substituted, the task's environment variables added)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from mcp_gym.client.host import MCPHost
from mcp_gym.client.specs import Stdio
from mcp_gym.tasks import Task

__all__ = ["PLACEHOLDER", "mentions_workspace", "make_workspace", "episode_spec", "fill_task", "drop_workspace",
           "prepare_episode_servers"]

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
                               cwd=fill(os.fspath(spec.cwd)) if spec.cwd else None)


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


class _EpisodeServers(Protocol):
    """What per-episode set-up needs of an env (:class:`~mcp_gym.env.MCPEnv` has it)."""

    task: Task | None
    workspace: Path | None
    host: MCPHost
    _templates: dict[str, Any]
    _templated: set[str]
    _rt: Any


def drop_workspace(env: _EpisodeServers) -> None:
    """Remove the env's current episode workspace, if any."""
    if env.workspace is not None:
        shutil.rmtree(env.workspace, ignore_errors=True)
        env.workspace = None


async def prepare_episode_servers(env: _EpisodeServers) -> set[str]:
    """Per-task server set-up: a fresh workspace (the task's ``fixture`` copied in) when a server command line names
    ``{workspace}``, the task's ``env`` variables; servers whose spec changes restart. Returns them."""
    assert env.task is not None
    task = env.task
    drop_workspace(env)
    if task.fixture and not env._templated:
        raise ValueError(f"task '{task.id}' has a fixture but no server command line names {{workspace}}")
    if env._templated:
        env.workspace = make_workspace(task)
    restarted: set[str] = set()
    for alias, template in env._templates.items():
        spec = episode_spec(template, env.workspace, task.env)
        conn = env.host.connections[alias]
        if spec == conn.spec and alias not in env._templated:
            continue
        if getattr(conn, "_conn", None) is not None:  # a session shared by concurrent episodes (VectorMCPEnv)
            raise ValueError(f"server '{alias}': per-episode set-up (workspace, task env) needs a session of its "
                             "own per episode; do not share sessions (share_servers=None)")
        conn.spec = spec
        await env.host.restart(alias, env._rt.task_group)
        restarted.add(alias)
    return restarted
