"""Per-episode server set-up: a fresh workspace directory (a task's ``fixture`` copied in) and the server specs of one
episode (``{workspace}`` substituted, the task's environment variables added).

What the agent sees and what is recorded names the workspace ``{workspace}``, never its random temporary path
(:func:`mask_workspace` on observations, infos and recorded arguments; :func:`expand_workspace` on the agent's
actions), so episodes of one task that behave alike are alike as text: at inference, in recordings, in SFT examples
and for deduplication."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mcp_gym.client.host import MCPHost
from mcp_gym.client.specs import Stdio
from mcp_gym.episode import Episode, EpisodeState
from mcp_gym.tasks import Task

__all__ = ["PLACEHOLDER", "mentions_workspace", "make_workspace", "episode_spec", "task_env", "TaskEnvIgnored",
           "fill_task",
           "prepare_episode_servers", "mask_workspace", "expand_workspace"]

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


class TaskEnvIgnored(UserWarning):
    """A task's ``env`` names a variable the user's own server config sets: the user's value is kept."""


_ignored: set[tuple[str, str, str]] = set()
"""``(task, server, key)`` already warned about (once per process)."""


def task_env(task: Task, alias: str, spec: Any) -> dict[str, str]:
    """The task's ``env`` for server ``alias`` without the variables its spec (the user's own config) already sets:
    the user's value wins, and each ignored key is warned about once (naming task, server and key)."""
    own = getattr(spec, "env", None) or {}
    if not task.env or not isinstance(spec, Stdio):
        return dict(task.env)
    kept: dict[str, str] = {}
    for key, value in task.env.items():
        if key not in own:
            kept[key] = value
            continue
        if (task.id, alias, key) not in _ignored:
            _ignored.add((task.id, alias, key))
            warnings.warn(f"mcp-gym: task '{task.id}' sets env key {key!r} of server '{alias}', which the server's "
                          "own config sets: the config's value is kept, the task's ignored", TaskEnvIgnored,
                          stacklevel=2)
    return kept


def fill_task(task: Task, workspace: Path) -> Task:
    """``task`` with ``{workspace}`` replaced in its prompt, reference solution, answer, data and turns."""

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(PLACEHOLDER, str(workspace))
        if isinstance(v, Mapping):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(fill(x) for x in v)
        return v

    return dataclasses.replace(task, prompt=fill(task.prompt), solution=fill(task.solution), answer=fill(task.answer),
                               data=fill(dict(task.data)), turns=fill(task.turns))


def _replace_strings(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """``value`` with every ``old -> new`` of ``pairs`` replaced in its strings (keys too), through dicts, lists and
    tuples (new containers; anything else is returned as it is)."""
    if isinstance(value, str):
        for old, new in pairs:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {_replace_strings(k, pairs): _replace_strings(v, pairs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_strings(v, pairs) for v in value) if type(value) in (list, tuple) else value
    return value


_T = TypeVar("_T")


def mask_workspace(value: _T, workspace: Path | None) -> _T:
    """``value`` with the episode's workspace path (as created, and resolved if that differs: ``/var`` vs
    ``/private/var``) written ``{workspace}`` in every string; ``value`` itself without a workspace."""
    if workspace is None:
        return value
    paths = sorted({str(workspace), str(Path(workspace).resolve())}, key=len, reverse=True)
    masked: _T = _replace_strings(value, [(p, PLACEHOLDER) for p in paths])  # same shape, new containers
    return masked


def expand_workspace(action: Any, workspace: Path | None) -> Any:
    """An action ``{"tool", "arguments"}`` with ``{workspace}`` in its argument strings replaced by the episode's real
    workspace path (what the server needs); anything that is not a plain dict action is returned as it is."""
    if workspace is None or action.__class__ is not dict or dict.get(action, "arguments").__class__ is not dict:
        return action
    return {**action, "arguments": _replace_strings(action["arguments"], [(PLACEHOLDER, str(workspace))])}


class _EpisodeServers(EpisodeState, Protocol):
    """What per-episode set-up needs of an env (:class:`~mcp_gym.env.MCPEnv` has it)."""

    host: MCPHost

    @property
    def runtime(self) -> Any: ...


async def prepare_episode_servers(env: _EpisodeServers, episode: Episode) -> set[str]:
    """Per-task server set-up of the env's next ``episode``: a fresh workspace (the task's ``fixture`` copied in) when
    a server command line names ``{workspace}`` (``episode.workspace``), the task's ``env`` variables (never over one
    the server's own config sets: :func:`task_env`); servers whose
    spec changes restart. Returns them."""
    task = episode.task
    if task.fixture and not env.workspace_servers:
        raise ValueError(f"task '{task.id}' has a fixture but no server command line names {{workspace}}")
    if env.workspace_servers:
        episode.workspace = make_workspace(task)
    restarted: set[str] = set()
    for alias, template in env.server_templates.items():
        spec = episode_spec(template, episode.workspace, task_env(task, alias, template))
        conn = env.host.connections[alias]
        if spec == conn.spec and alias not in env.workspace_servers:
            continue
        if getattr(conn, "shared", False):  # a session shared by concurrent episodes (VectorMCPEnv)
            raise ValueError(f"server '{alias}': per-episode set-up (workspace, task env) needs a session of its "
                             "own per episode; do not share sessions (share_servers=None)")
        conn.spec = spec
        await env.host.restart(alias, env.runtime.task_group)
        restarted.add(alias)
    return restarted
