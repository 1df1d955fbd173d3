"""From a job config (the Hydra tree in ``mcp_gym/conf/``) to the objects a job runs: tasks, envs, a policy, a plan."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mcp_gym.policies import Policy, make_policy
from mcp_gym.tasks import Task, load_tasks
from mcp_gym.vector import EpisodeSpec

__all__ = [
    "to_dict", "load_job_tasks", "env_factory", "run_location", "build_policy", "plan_episodes", "episode_seed",
    "run_metadata",
]


def to_dict(node: Any) -> dict[str, Any]:
    """A config node as a plain dict (interpolations resolved)."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    return dict(node or {})


def load_job_tasks(env_cfg: Mapping[str, Any], split: str | None) -> list[Task]:
    """The tasks of the configured env: a bundled env's task set, or a custom env's JSONL file (one split)."""
    if env_cfg.get("servers"):
        path = env_cfg.get("tasks")
        return load_tasks(path, split) if path else []
    from mcp_gym.envs import load_env_tasks

    return load_env_tasks(env_cfg["name"], split)


def env_factory(env_cfg: Mapping[str, Any], tasks: Sequence[Task]) -> Callable[[], Any]:
    """A zero-argument function making the configured :class:`~mcp_gym.env.MCPEnv` over ``tasks``."""
    kwargs: dict[str, Any] = {"call_timeout": env_cfg.get("call_timeout", 30.0)}
    if env_cfg.get("max_steps") is not None:
        kwargs["max_steps"] = int(env_cfg["max_steps"])
    connect_timeout = env_cfg.get("connect_timeout")
    if env_cfg.get("servers"):
        from mcp_gym.client.specs import normalise_servers
        from mcp_gym.env import MCPEnv

        servers = normalise_servers(dict(env_cfg["servers"]))
        if connect_timeout is not None:
            servers = {a: dataclasses.replace(s, connect_timeout=float(connect_timeout)) for a, s in servers.items()}
        return lambda: MCPEnv(servers, list(tasks), env_id=f"mcp_gym/{env_cfg.get('name', 'custom')}", **kwargs)
    from mcp_gym.envs import make_env

    name, transport, url = env_cfg["name"], env_cfg.get("transport", "stdio"), env_cfg.get("url")
    return lambda: make_env(name, transport=transport, url=url, tasks=list(tasks) or None,
                            connect_timeout=connect_timeout, **kwargs)


def run_location(cfg: Any, out: str | Path) -> str:
    """Where a job's shards are published: ``launcher.storage`` (a path or ``pyarrow.fs`` URI) if set, else ``out``."""
    launcher = cfg.get("launcher") or {}
    return str(launcher.get("storage") or out)


def build_policy(policy_cfg: Mapping[str, Any]) -> Policy:
    """The configured policy (``kind`` plus its options)."""
    options = {k: v for k, v in policy_cfg.items() if k != "kind"}
    return make_policy(policy_cfg["kind"], **options)


def episode_seed(seed: int, key: str) -> int:
    """The reset seed of an episode: a function of the job seed and the episode key only (not of the order)."""
    return zlib.crc32(f"{seed}:{key}".encode()) & 0x7FFFFFFF


def plan_episodes(
    tasks: Sequence[Task], *, samples: int = 1, episodes: int | None = None, seed: int = 0
) -> list[EpisodeSpec]:
    """The episodes of a job, with stable keys ``<task id>#<sample>`` (``episode-<n>`` without tasks).

    Every task ``samples`` times by default; ``episodes`` runs that many instead, cycling through the tasks.
    """
    if not tasks:
        keys = [(f"episode-{j}", None) for j in range(episodes if episodes is not None else samples)]
    else:
        n = episodes if episodes is not None else len(tasks) * samples
        keys = [(f"{tasks[j % len(tasks)].id}#{j // len(tasks)}", tasks[j % len(tasks)].id) for j in range(n)]
    return [EpisodeSpec(key, task_id, episode_seed(seed, key)) for key, task_id in keys]


def run_metadata(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """What a run directory's manifest records about the job (the api key left out)."""
    policy = {k: v for k, v in to_dict(cfg.policy).items() if k != "api_key"}
    return {"command": cfg.command, "env": to_dict(cfg.env), "policy": policy, "seed": cfg.seed,
            "split": cfg.get("split"), "samples": cfg.get("samples"), "out": str(out)}
