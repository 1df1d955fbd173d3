"""From a job config (the Hydra tree in ``conf/``) to the objects a job runs: tasks, envs, a policy, a plan.

Public: the way from an env config (the ``env:`` node, e.g. a custom benchmark's config file) to an env, the one the
jobs take: :func:`env_config` composes it as the ``mcp-gym`` command does, :func:`server_specs` turns it into server
specs (the one place a config's servers become specs) and :func:`env_factory` into the zero-argument env factory the
trainer faces take.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from mcp_gym.jobs.results import CollectResult
from mcp_gym.jobs.schema import to_dict as to_dict  # here for the sibling modules: export-sft imports it alone
from mcp_gym.policies import Policy, make_policy
from mcp_gym.protocol import REDACTED, redact_text, redact_url
from mcp_gym.recording.store import RunStore
from mcp_gym.tasks import Task, load_task_source
from mcp_gym.vector import EpisodeSpec

if TYPE_CHECKING:
    from mcp_gym.client.specs import ServerSpec
    from mcp_gym.env import MCPEnv

__all__ = ["env_config", "server_specs", "env_factory"]  # the rest: internal to mcp_gym.jobs (its sibling modules)

log = logging.getLogger(__name__)


def load_job_tasks(env_cfg: Mapping[str, Any], split: str | None) -> list[Task]:
    """The tasks a job plays: the env's :func:`job_task_set` (one split), then the job's slice of it
    (:func:`select_tasks`: ``env.task_ids``, ``env.max_tasks``). Every job that plays tasks loads them here."""
    return select_tasks(job_task_set(env_cfg, split), env_cfg.get("task_ids"), env_cfg.get("max_tasks"), split=split)


def job_task_set(env_cfg: Mapping[str, Any], split: str | None) -> list[Task]:
    """The whole task set of the configured env (one split), before the job's slice: a bundled env's task set, or a
    custom env's task source, whose ``env`` keys that load code are refused unless ``env.task_env_allow`` lists
    them."""
    if env_cfg.get("servers"):
        path = env_cfg.get("tasks")
        allow = env_cfg.get("task_env_allow") or ()
        return load_task_source(path, split, env_cfg.get("task_columns"), allow_env=allow,
                                trust_code=bool(env_cfg.get("trust_task_code"))) if path else []
    from mcp_gym.envs import load_env_tasks

    return load_env_tasks(env_cfg["name"], split)


def select_tasks(tasks: Sequence[Task], task_ids: Sequence[Any] | None = None, max_tasks: Any = None, *,
                 split: str | None = None) -> list[Task]:
    """The job's slice of its tasks, in the task set's order: those named by ``task_ids`` (``None``: all), then the
    first ``max_tasks`` of them (``None``: all).

    Raises:
        ConfigError: (one line) ``task_ids`` empty or naming a task the set (of that ``split``) does not have,
            ``max_tasks`` not a positive integer.
    """
    from mcp_gym.jobs.schema import ConfigError

    if max_tasks is not None and (isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1):
        raise ConfigError(f"env.max_tasks must be a positive integer or null, not {max_tasks!r}")
    chosen = list(tasks)
    if task_ids is not None:
        if isinstance(task_ids, (str, bytes)) or not isinstance(task_ids, Sequence):
            raise ConfigError(f"env.task_ids must be a list of task ids or null, not {task_ids!r}")
        wanted = {str(t) for t in task_ids}
        if not wanted:
            raise ConfigError("env.task_ids is empty: name at least one task (null: all tasks)")
        known = {t.id for t in chosen}
        if unknown := [t for t in dict.fromkeys(str(t) for t in task_ids) if t not in known]:
            where = f" of split {split!r}" if split is not None else ""
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            shown = ", ".join(repr(t) for t in unknown[:5]) + more
            raise ConfigError(f"env.task_ids: unknown task id(s) {shown} (not among the {len(chosen)} tasks{where})")
        chosen = [t for t in chosen if t.id in wanted]
    return chosen if max_tasks is None else chosen[:max_tasks]


def env_config(name: str, config_dir: str | Path | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The ``env:`` node of a job config, composed and checked as ``mcp-gym`` does for ``env=NAME`` (a bundled env,
    ``custom``, or a file ``<config_dir>/env/NAME.yaml``, the command's ``--config-dir``), with the command's
    ``overrides`` (``["env.max_steps=20"]``), as a plain dict.

    Raises:
        ConfigError: a key of the wrong type or an unknown one (:mod:`mcp_gym.jobs.schema`).
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from mcp_gym.jobs.schema import check_job_config

    extra = [f"hydra.searchpath=[file://{Path(config_dir).expanduser().resolve()}]"] if config_dir else []
    outer = GlobalHydra.instance().hydra  # inside a Hydra app (a trainer's entry point): set aside, then restored
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("mcp_gym.conf", version_base="1.3"):
            cfg = compose("config", overrides=[f"env={name}", *extra, *overrides])
    finally:
        GlobalHydra.instance().clear()
        if outer is not None:
            GlobalHydra.instance().initialize(outer)
    check_job_config(cfg)
    return to_dict(cfg.env)


def server_specs(env: Mapping[str, Any]) -> dict[str, ServerSpec]:
    """``{alias: spec}`` of an env config (the ``env:`` node of a job config, a mapping or ``DictConfig``): a custom
    env's ``servers`` (per alias a command line, an ``http(s)://`` or ``sse+http(s)://`` URL, or a mapping
    ``{url:, headers:}`` / ``{command:, args:, env:}``), else the bundled or installed env ``name``'s server over
    ``transport`` (``url`` for HTTP); ``connect_timeout`` set on every spec when given. ``{workspace}`` stays in
    the specs: the env fills it per episode. ``resolve_npx: false`` runs a custom env's ``npx`` servers through npx
    at every start (``Stdio.resolve_npx``).

    Every job builds its env from these specs (:func:`env_factory`); :class:`~mcp_gym.env.MCPEnv` takes them as they
    are."""
    from mcp_gym.client.specs import Stdio, normalise_servers

    env = to_dict(env)
    if env.get("servers"):
        specs = normalise_servers(env["servers"], connect_timeout=env.get("connect_timeout"))
        if env.get("resolve_npx") is False:  # npx at every start (client._npx): on every stdio server of the env
            specs = {a: dataclasses.replace(s, resolve_npx=False) if isinstance(s, Stdio) else s
                     for a, s in specs.items()}
        from mcp_gym._reroot import mentions_workspace
        from mcp_gym.cassette.recorder import refuse_workspace_recording
        from mcp_gym.jobs.schema import ConfigError

        try:  # record= on a {workspace} server: refused before the job starts anything, in one line
            refuse_workspace_recording(specs, [a for a, s in specs.items() if mentions_workspace(s)])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return specs
    from mcp_gym.envs import env_servers

    return env_servers(env["name"], env.get("transport", "stdio"), env.get("url"),
                       connect_timeout=env.get("connect_timeout"))


def env_factory(env: Mapping[str, Any], tasks: Sequence[Task] | None = None, *,
                split: str | None = None) -> Callable[[], MCPEnv]:
    """A zero-argument function making the :class:`~mcp_gym.env.MCPEnv` of an env config (the ``env:`` node of a job
    config: :func:`env_config`), over its :func:`server_specs`, its budgets and timeouts, and, for a custom env, its
    grader, the tools it shows (``include_tools``/``exclude_tools``), reset mode and spare servers. ``tasks``: the
    env's tasks (default: its task set or task file, the ``split`` if given, cut to its ``task_ids``/``max_tasks``
    slice: :func:`load_job_tasks`). The trainer faces take it as their
    ``env``."""
    env = to_dict(env)
    tasks = list(load_job_tasks(env, split) if tasks is None else tasks)
    kwargs: dict[str, Any] = {"call_timeout": env.get("call_timeout", 30.0)}
    for budget in ("max_steps", "max_turns", "max_tool_calls"):
        if env.get(budget) is not None:
            kwargs[budget] = int(env[budget])
    if env.get("error_text"):  # results whose text matches are tool errors (Scoring.error_text); unset: off
        kwargs["error_text"] = env["error_text"]
    if env.get("servers"):
        from mcp_gym.env import MCPEnv

        specs, grading = server_specs(env), custom_grading(env)  # shared by the envs: a bad entry fails here
        kwargs["reset_mode"] = env.get("reset_mode") or "auto"
        if env.get("include_tools") is not None:
            kwargs["include_tools"] = list(env["include_tools"])
        if env.get("exclude_tools"):
            kwargs["exclude_tools"] = list(env["exclude_tools"])
        if env.get("spare_servers") is not None:
            kwargs["spare_servers"] = int(env["spare_servers"])
        from mcp_gym._workspace import SpareBudget

        shared = SpareBudget(kwargs.get("spare_servers", 1))  # the factory's envs share it: N + spare_servers servers

        def make() -> MCPEnv:
            made = MCPEnv(specs, list(tasks), env_id=f"mcp_gym/{env.get('name', 'custom')}", grader=grading, **kwargs)
            made.spares.budget = shared
            return made

        return make
    from mcp_gym.envs import make_env

    name = env["name"]  # each env its own specs: an in-process server object per env, as gymnasium.make gives
    return lambda: make_env(name, servers=server_specs(env), tasks=list(tasks) or None, **kwargs)


def custom_grading(env_cfg: Mapping[str, Any]) -> Any:
    """The :class:`~mcp_gym.graders.Grading` of a custom env: ``env.grader`` (default: exact match on answers), the
    judge settings ``env.judge``, ``env.grader_timeout``, the task file's folder and ``env.trust_task_code``."""
    from mcp_gym.graders import Grading
    from mcp_gym.graders.base import DEFAULT_GRADER_TIMEOUT

    timeout = env_cfg.get("grader_timeout", DEFAULT_GRADER_TIMEOUT)
    return Grading(env_cfg.get("grader"), env_cfg.get("judge"), timeout=float(timeout) if timeout else None,
                   task_dir=task_folder(env_cfg.get("tasks")), trust_task_code=bool(env_cfg.get("trust_task_code")))


def task_folder(source: Any) -> Path | None:
    """The folder of a task source: a file's folder, a directory itself, ``None`` for a dataset loaded by name."""
    if not source:
        return None
    path = Path(str(source)).expanduser()
    return path.parent if path.is_file() else path if path.is_dir() else None


def needs_own_sessions(env_cfg: Mapping[str, Any], tasks: Sequence[Task]) -> bool:
    """Whether a custom env's episodes each need sessions of their own: a per-episode workspace or environment, or a
    grader that reads the world after the episode (third-party servers keep one state per session)."""
    if not env_cfg.get("servers"):
        return False
    from mcp_gym._workspace import mentions_workspace

    if any(mentions_workspace(spec) for spec in server_specs(env_cfg).values()):
        return True
    if any(t.fixture or t.env for t in tasks):
        return True
    grading = custom_grading(env_cfg)
    seen: set[int] = set()
    for t in tasks:
        g = grading.for_task(t)
        if g is not None and id(g) not in seen:
            seen.add(id(g))
            if g.reads_state:
                return True
    return False


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
    keys: list[tuple[str, str | None]]
    if not tasks:
        keys = [(f"episode-{j}", None) for j in range(episodes if episodes is not None else samples)]
    else:
        n = episodes if episodes is not None else len(tasks) * samples
        keys = [(f"{tasks[j % len(tasks)].id}#{j // len(tasks)}", tasks[j % len(tasks)].id) for j in range(n)]
    return [EpisodeSpec(key, task_id, episode_seed(seed, key)) for key, task_id in keys]


@dataclasses.dataclass
class JobPlan:
    """A collection's plan: the job's tasks, its planned episodes, those still to run, and the result so far."""

    tasks: list[Task]
    specs: list[EpisodeSpec]
    pending: list[EpisodeSpec]
    result: CollectResult


def plan_job(cfg: DictConfig, out: Path, store: RunStore | None, *, extra_metadata: Mapping[str, Any] | None = None,
             sweep: bool = False) -> JobPlan:
    """Plan a collection (local or Ray): load the job's tasks and plan its episodes; with a ``store`` (recording),
    write the plan to its manifest (refusing another config's directory, :func:`~mcp_gym.jobs.identity.plan_run`),
    remove unfinished uploads of an earlier job (``sweep``) and leave out the episodes it already holds."""
    from mcp_gym.jobs.identity import plan_run

    env = to_dict(cfg.env)
    task_set = job_task_set(env, cfg.get("split"))  # the identity pins the whole set; the plan plays the slice
    tasks = select_tasks(task_set, env.get("task_ids"), env.get("max_tasks"), split=cfg.get("split"))
    if str((cfg.get("policy") or {}).get("kind")) == "oracle":
        _check_references(tasks)
    specs = plan_episodes(tasks, samples=int(cfg.get("samples") or 1), episodes=cfg.get("episodes"), seed=cfg.seed)
    pending = specs
    if store is not None:
        plan_run(store, [s.key for s in specs], run_metadata(cfg, out, task_set) | dict(extra_metadata or {}))
        if sweep and (removed := store.sweep()):
            log.info("%s: removed %d unfinished upload(s) of an earlier job", store.location, removed)
        done = store.done_keys()
        pending = [s for s in specs if s.key not in done]
    if not pending:
        log.info("%s: all %d planned episodes are recorded", store.location if store else out, len(specs))
    return JobPlan(tasks, specs, pending, CollectResult(out, len(specs), len(specs) - len(pending)))


def _check_references(tasks: Sequence[Task]) -> None:
    """``policy=oracle`` plays each task's reference (its calls, then ``submit`` of its answer): a task with neither
    submits nothing and is graded on its starting state, which a run would report as the oracle failing (MCPMark's
    imported tasks carry no solution). Refuse when no task has one; warn, naming one, when only some lack it."""
    from mcp_gym.jobs.identity import JobRefused

    bare = [t.id for t in tasks if not any(calls or answer not in (None, "") for calls, answer in t.turn_plan())]
    if not bare:
        return
    if len(bare) == len(tasks):
        raise JobRefused(f"policy=oracle plays each task's reference solution, but none of the {len(tasks)} tasks has "
                         "one (no solution calls, no answer): every episode would submit nothing and be graded on its "
                         "starting state; policy=noop is that baseline")
    log.warning("policy=oracle: %d of %d tasks have no reference solution or answer (first: %r); their episodes "
                "submit nothing and are graded on their starting state", len(bare), len(tasks), bare[0])


def _redacted_env(env: dict[str, Any]) -> dict[str, Any]:
    """The env config with server secrets masked (header and environment values, URLs' user info and query values)."""
    if isinstance(env.get("servers"), Mapping):
        env["servers"] = {alias: redact_server_entry(v) for alias, v in env["servers"].items()}
    if isinstance(env.get("url"), str):
        env["url"] = redact_url(env["url"])
    return env


def job_identity(cfg: DictConfig, task_set: Sequence[Task] | None = None) -> dict[str, Any]:
    """The job's run identity (see :mod:`mcp_gym.jobs.identity`): what shapes its episodes, resolved (``task_set``:
    the env's whole :func:`job_task_set`, before ``env.task_ids``/``env.max_tasks`` slice it; loaded if not given).
    Server secrets are masked: a new token is the same run."""
    from mcp_gym.jobs.identity import run_identity

    env = to_dict(cfg.env)
    if task_set is None:
        task_set = job_task_set(env, cfg.get("split"))
    return run_identity(_redacted_env(env), to_dict(cfg.policy), seed=cfg.seed, split=cfg.get("split"),
                        samples=cfg.get("samples"), episodes=cfg.get("episodes"), tasks=task_set)


def run_metadata(cfg: DictConfig, out: Path, task_set: Sequence[Task] | None = None) -> dict[str, Any]:
    """What a run directory's manifest records about the job (the api key left out, server secrets masked), its run
    identity included (``task_set``: the env's whole task set, loaded if not given)."""
    policy = {k: v for k, v in to_dict(cfg.policy).items() if k != "api_key"}
    env = to_dict(cfg.env)
    grading = custom_grading(env).describe() if env.get("servers") else None  # judge model and prompts as used
    env = _redacted_env(env)
    if isinstance(env.get("judge"), dict):
        env["judge"] = {k: v for k, v in env["judge"].items() if k != "api_key"}
    meta = {"command": cfg.command, "env": env, "policy": policy, "seed": cfg.seed,
            "split": cfg.get("split"), "samples": cfg.get("samples"), "episodes": cfg.get("episodes"),
            "out": str(out), "identity": job_identity(cfg, task_set)}
    if grading is not None:
        meta["grading"] = grading
    return _redact_urls(meta)


def _redact_urls(value: Any) -> Any:
    """``value`` with every URL in its strings redacted (a policy's or judge's ``base_url`` may carry a key)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redact_urls(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_urls(v) for v in value]
    return value


def redact_server_entry(entry: Any) -> Any:
    """A custom env's server config entry with its secrets masked: header and environment values, URLs' user info and
    query values (also inside a command line)."""
    if isinstance(entry, str):
        return redact_text(entry)
    if not isinstance(entry, Mapping):
        return entry
    out = dict(entry)
    for key in ("headers", "env"):
        if isinstance(out.get(key), Mapping):
            out[key] = {k: REDACTED for k in out[key]}
    if isinstance(out.get("url"), str):
        out["url"] = redact_url(out["url"])
    if isinstance(out.get("command"), str):
        out["command"] = redact_text(out["command"])
    if isinstance(out.get("args"), list):
        out["args"] = [redact_text(a) if isinstance(a, str) else a for a in out["args"]]
    return out
