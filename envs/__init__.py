"""Bundled environments: one folder per env, ``envs/<env>/`` with ``tasks.py``; the MCP server each one runs is
``servers/<env>.py`` (:mod:`mcp_gym.servers`).

Each ``tasks.py`` defines ``SERVER`` (the name of the server serving it), ``generate_tasks(seed)``, ``task_by_id``,
``verify(task, answer, state)``, ``MAX_STEPS``, ``SUCCESS_THRESHOLD`` and ``OBSERVE_RESOURCES``; optionally
``STEP_REWARDS = False`` to ignore the servers' per-step convention rewards (the verifier's score at ``submit`` is then
the only positive reward; failed calls still cost ``error_penalty``). Importing
``mcp_gym`` registers them all as ``mcp_gym/<Name>-v0``::

    env = gymnasium.make("mcp_gym/Counter-v0")                      # in-process server
    env = gymnasium.make("mcp_gym/SQL-v0", transport="stdio")       # a server subprocess
    env = gymnasium.make("mcp_gym/Notes-v0", url="http://127.0.0.1:8000/mcp")
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["BUNDLED_ENVS", "make_env", "load_env_tasks", "export_tasks", "server_spec", "env_servers", "env_module"]

BUNDLED_ENVS: dict[str, str] = {
    "Counter": "counter",
    "Notes": "notes",
    "Files": "files",
    "SQL": "sql",
    "Code": "code",
    "Maze": "maze",
    "Lookup": "lookup",
}
"""Registered name -> env folder in this package."""
EPISODE_LIMITS: dict[str, int] = {"Counter": 10, "Notes": 30, "Files": 30, "SQL": 20, "Code": 16, "Maze": 60,
                                 "Lookup": 6}
"""Registered name -> its ``tasks.py``'s ``MAX_STEPS`` (the registered ``max_episode_steps``; kept here so that
importing ``mcp_gym`` does not import every env module; a test checks they agree)."""


@dataclass
class PenaltyOnlyReward:
    """Step reward of envs with ``STEP_REWARDS = False``: 0 for every tool step, ``-error_penalty`` for a failed one.

    The servers' convention rewards are ignored (their ``done`` still ends the episode), so they cannot be farmed by
    repeating a rewarding call; the verifier grades ``submit`` as usual."""

    error_penalty: float = 0.0

    def __call__(self, ctx: Any) -> float:
        """The reward of one tool step (``ctx`` is a :class:`mcp_gym.rewards.StepContext`)."""
        return -self.error_penalty if ctx.is_error or ctx.error is not None else 0.0


def env_module(name: str) -> ModuleType:
    """The tasks module of a bundled env (``mcp_gym.envs.<env>.tasks``), by registered name (``"Notes"``) or folder
    name (``"notes"``)."""
    mod = BUNDLED_ENVS.get(name, name.lower())
    if mod not in BUNDLED_ENVS.values():
        from mcp_gym.envs.packages import installed_env, installed_envs

        if (found := installed_env(name)) is not None:  # an installed env package (entry point group mcp_gym.envs)
            return found.tasks_module()
        names = [*BUNDLED_ENVS, *installed_envs()]
        raise ValueError(f"unknown env {name!r}; choose one of {', '.join(names)} (or install an env package)")
    return importlib.import_module(f"{__name__}.{mod}.tasks")


def server_spec(name: str, transport: str = "inprocess", url: str | None = None) -> Any:
    """The server spec of a bundled env: in-process (default), a ``stdio`` subprocess, or an HTTP ``url``."""
    from mcp_gym.client.specs import Http, InProcess, Stdio
    from mcp_gym.envs.serve import load_server, server_module

    server = env_module(name).SERVER
    from mcp_gym.envs.packages import installed_env

    installed = installed_env(name) if BUNDLED_ENVS.get(name, name.lower()) not in BUNDLED_ENVS.values() else None
    if url is not None or transport == "http":
        if url is None:
            raise ValueError("transport='http' needs url= (start one with `mcp-gym serve NAME --transport http`)")
        return Http(url)
    if installed is not None:
        if transport == "stdio":
            return Stdio.python_module(installed.server_module())
        if transport == "inprocess":
            return InProcess(installed.load_server())
    if transport == "stdio":  # the Code server's isolation setting reaches its subprocess
        passed = {k: os.environ[k] for k in ("MCP_GYM_CODE_SANDBOX",) if k in os.environ}
        return Stdio.python_module(server_module(server), env=passed)
    if transport == "inprocess":
        return InProcess(load_server(server))
    raise ValueError(f"unknown transport {transport!r}: use 'inprocess', 'stdio' or 'http'")


def env_servers(
    name: str,
    transport: str = "inprocess",
    url: str | None = None,
    *,
    record: str | Path | None = None,
    replay: str | Path | None = None,
    connect_timeout: float | None = None,
) -> dict[str, Any]:
    """``{alias: spec}`` of a bundled or installed env's server, as :func:`make_env` connects it: :func:`server_spec`
    (or a cassette's replay), recording to ``record``, every spec's ``connect_timeout`` set when given."""
    from mcp_gym.cassette.recorder import with_record
    from mcp_gym.cassette.spec import replay_spec
    from mcp_gym.client.specs import normalise_servers

    alias = env_module(name).SERVER
    spec = replay_spec(replay, alias) if replay else server_spec(name, transport, url)
    if record:
        spec = with_record(spec, record)
    return normalise_servers({alias: spec}, connect_timeout=connect_timeout)


def load_env_tasks(name: str, split: str | None = None, seed: int = 0) -> list[Any]:
    """The task set of a bundled or installed env (optionally one split)."""
    tasks = env_module(name).generate_tasks(seed)
    return [t for t in tasks if split is None or t.split == split]


def export_tasks(name: str, directory: str | Path) -> Path:
    """Write a bundled env's task set as JSONL (``datasets.load_dataset("json", data_files=...)`` reads it)."""
    from mcp_gym.tasks import save_tasks

    return save_tasks(load_env_tasks(name), Path(directory) / f"{env_module(name).__name__.split('.')[-2]}.jsonl")


def make_env(
    name: str,
    transport: str = "inprocess",
    url: str | None = None,
    split: str | None = None,
    record: str | Path | None = None,
    replay: str | Path | None = None,
    connect_timeout: float | None = None,
    servers: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Build the :class:`~mcp_gym.env.MCPEnv` of a bundled or installed env (the ``gymnasium.make`` entry point).

    ``record=DIR`` writes a cassette of every exchange with the server into ``DIR``; ``replay=PATH`` answers from a
    recorded cassette (a ``.jsonl`` file or a run's cassette directory) instead of the real server;
    ``connect_timeout`` (seconds, default 30) bounds starting and initialising the server, e.g. raise it when many
    stdio servers start at once on a loaded machine; ``servers`` replaces the env's server specs altogether (what
    :func:`mcp_gym.jobs.server_specs` makes of a job config; default: :func:`env_servers`). Other keywords go to
    :class:`~mcp_gym.env.MCPEnv`: a setting left unset there (a keyword not given, a ``limits=Limits(...)`` field left
    ``None``) is this env's own."""
    from mcp_gym.env import MCPEnv
    from mcp_gym.options import split_settings

    mod = env_module(name)
    given, rest = split_settings(kwargs, "make_env()")  # the settings set by keywords or limits=/scoring=/...
    kw: dict[str, Any] = {
        "max_steps": mod.MAX_STEPS,
        "observe_resources": list(mod.OBSERVE_RESOURCES) or None,
        "verifier": mod.verify,
        "success_threshold": mod.SUCCESS_THRESHOLD,
        "env_id": f"mcp_gym/{name}-v0",
    }
    if not getattr(mod, "STEP_REWARDS", True):
        kw["reward_fn"] = PenaltyOnlyReward(float(given.get("error_penalty", 0.0)))
    kw.update(given)  # what the caller set wins (an explicit reward_fn= too)
    kw.update(rest)
    tasks = kw.pop("tasks", None) or load_env_tasks(name, split)
    if servers is None:
        servers = env_servers(name, transport, url, record=record, replay=replay, connect_timeout=connect_timeout)
    return MCPEnv(servers, tasks, **kw)


def register_all() -> None:
    """Register every bundled env with Gymnasium as ``mcp_gym/<Name>-v0`` (idempotent).

    Registered with ``max_episode_steps`` = the env's ``MAX_STEPS``, so ``gymnasium.make`` wraps Gymnasium's
    ``TimeLimit`` at the same step as the env's own limit (and ``env.spec.max_episode_steps`` tells it). To change the
    limit under ``gymnasium.make`` pass both: ``gymnasium.make(id, max_steps=N, max_episode_steps=N)``.
    """
    import gymnasium as gym

    for name in BUNDLED_ENVS:
        env_id = f"mcp_gym/{name}-v0"
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="mcp_gym.envs:make_env",
            vector_entry_point="mcp_gym.vector:make_vector",  # gymnasium.make_vec: a VectorMCPEnv
            kwargs={"name": name},
            max_episode_steps=EPISODE_LIMITS[name],  # gymnasium.make adds TimeLimit, at the env's own max_steps
            nondeterministic=True,
            disable_env_checker=False,
        )
    from mcp_gym.envs.packages import installed_envs

    for name in installed_envs():  # installed env packages: entry points read, not imported
        env_id = f"mcp_gym/{name}-v0"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="mcp_gym.envs:make_env",
                         vector_entry_point="mcp_gym.vector:make_vector", kwargs={"name": name},
                         nondeterministic=True, disable_env_checker=False)
