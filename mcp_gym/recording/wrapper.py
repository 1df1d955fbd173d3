"""RecordTrajectories: a Gymnasium wrapper that records every step of an MCPEnv into a run directory.

    env = mcp_gym.RecordTrajectories(gymnasium.make("mcp_gym/Counter-v0"), "runs/counter", policy="qwen3-8b")
    obs, info = env.reset(options={"episode_key": "counter-0003#0"})
    env.step({"tool": "add", "arguments": {"amount": 2}, "raw_text": "<tool_call>...", "parse_status": "ok"})

Actions may carry ``raw_text`` (the model output the action was parsed from), ``parse_status``, ``turn`` and
``assistant_content`` (:data:`~mcp_gym.parsing.ACTION_EXTRA_KEYS`); the wrapper records and strips them before the env
sees the action. Reset options may carry ``policy``, ``episode_key`` and ``metadata``
(a JSON-able dict), also stripped. An episode is recorded when it terminates or is truncated; one cut short by
``reset``/``close`` is dropped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym

from mcp_gym._workspace import mask_workspace
from mcp_gym.async_env import AsyncWrapper
from mcp_gym.parsing import split_action
from mcp_gym.protocol import SUBMIT_RECORD, SUMMARY_KEY, ToolCallError, catalogue_fingerprint
from mcp_gym.recording.schema import Catalogue, dumps, unencodable
from mcp_gym.recording.writer import EpisodeWriter, TrajectoryWriter, writer_for

__all__ = ["RecordTrajectories"]

"""Optional action keys the wrapper records and strips."""
RESET_OPTION_KEYS = ("policy", "episode_key", "metadata")
"""Reset option keys the wrapper consumes."""
# Step-info keys with their own column (the rest goes to the ``info`` JSON column).
_COLUMN_KEYS = frozenset(
    {"episode_id", "task_id", "step", "tool", "server", "server_tool", "is_error", "content", "structured_content",
     "error", "duration"}
)




def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError, OverflowError):
        return None


class RecordTrajectories(AsyncWrapper):
    """Record an MCP environment's episodes as Parquet trajectories (see :mod:`mcp_gym.recording`).

    Args:
        env: An :class:`~mcp_gym.env.MCPEnv`, possibly wrapped (e.g. by ``gymnasium.make``).
        path: The run directory, or a :class:`TrajectoryWriter` to share.
        policy: Name of the acting policy/model (per episode: ``reset(options={"policy": ...})``).
        metadata: JSON-able dict stored with every episode (merged with per-episode ``options["metadata"]``).
        **writer_options: Options of the process's shared :class:`TrajectoryWriter` for ``path`` (first use wins).

    Example (record the reference solution of a bundled task, then read the run back)::

    >>> import tempfile
    >>> from mcp_gym import RecordTrajectories, make_env, recording
    >>> tmp = tempfile.TemporaryDirectory()
    >>> env = RecordTrajectories(make_env("Counter"), f"{tmp.name}/run", policy="oracle")
    >>> obs, info = env.reset(seed=0)
    >>> for call in env.unwrapped.task.solution:
    ...     obs, reward, terminated, truncated, info = env.step(call)
    ...     if terminated:
    ...         break
    >>> env.close()
    >>> episodes = recording.load(f"{tmp.name}/run").episodes
    >>> episodes.num_rows, episodes[0]["policy"], episodes[0]["success"]
    (1, 'oracle', True)
    >>> tmp.cleanup()
    """

    accepts_text_actions = True
    """Actions may carry ``raw_text``/``parse_status`` (recorded, then stripped)."""

    def __init__(
        self,
        env: gym.Env[Any, Any],
        path: str | os.PathLike[str] | TrajectoryWriter,
        *,
        policy: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **writer_options: Any,
    ) -> None:
        super().__init__(env)
        self.writer, self._owns_writer = writer_for(path, **writer_options)
        self.policy = policy
        self.metadata = dict(metadata or {})
        self.episode: EpisodeWriter | None = None
        self._last_resources: Any = None
        self._last_resources_json: str | None = None
        self._catalogue: tuple[str | None, Catalogue] | None = None
        self._tasks: dict[str, tuple[Any, str]] = {}
        self._user_turn: Any = None  # a multi-turn task's user turn the next step is taken in (info["turn"])

    # -- sync face ------------------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and start recording an episode."""
        env_options, extra = self._split_options(options)
        obs, info = self.env.reset(seed=seed, options=env_options)
        self._start(obs, info, seed, extra)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env (without the action's extra keys) and record the step."""
        action, extras = self._split_action(action)
        self._hint_turn(extras)
        t0 = time.time()
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._record(action, obs, reward, terminated, truncated, info, t0, extras)
        return obs, reward, terminated, truncated, info

    def end_episode(self, termination: str) -> None:
        """Record the episode in progress as ended by the caller (e.g. ``"max_turns"``: a trainer's turn limit), with
        ``termination`` and unknown success, instead of dropping it at the next reset or close. No-op without steps."""
        ep = self.episode
        if ep is not None and not ep.done and ep.length:
            ep.finish(termination=termination, catalogue_changes=self._catalogue_changes())

    def close(self) -> None:
        """Drop an unfinished episode, release the writer (closing it with its last user) and close the env."""
        self._drop_unfinished()
        if self._owns_writer:
            self._owns_writer = False
            self.writer.release()
        super().close()

    # -- async face (see mcp_gym.async_env: Gymnasium wrappers below it run in a worker thread) --------------------
    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Async :meth:`reset`."""
        env_options, extra = self._split_options(options)
        obs, info = await super().areset(seed=seed, options=env_options)
        self._start(obs, info, seed, extra)
        return obs, info

    async def astep(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Async :meth:`step`."""
        action, extras = self._split_action(action)
        self._hint_turn(extras)
        t0 = time.time()
        obs, reward, terminated, truncated, info = await super().astep(action)
        self._record(action, obs, reward, terminated, truncated, info, t0, extras)
        return obs, reward, terminated, truncated, info

    async def aclose(self) -> None:
        """Async :meth:`close`: drop an unfinished episode, release the writer and close the env."""
        self._drop_unfinished()
        if self._owns_writer:
            self._owns_writer = False
            self.writer.release()
        await super().aclose()

    # -- implementation -------------------------------------------------------------------------------------------
    @staticmethod
    def _split_options(options: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        if not options:
            return (dict(options) if options is not None else None), {}
        extra = {k: options[k] for k in RESET_OPTION_KEYS if k in options}
        return {k: v for k, v in options.items() if k not in RESET_OPTION_KEYS}, extra

    @staticmethod
    def _split_action(action: Any) -> tuple[Any, Mapping[str, Any]]:
        try:
            return split_action(action)
        except Exception:  # noqa: BLE001 - a mapping that cannot be read: the env says what is wrong with it
            return action, {}

    def _drop_unfinished(self) -> None:
        if self.episode is not None and not self.episode.done:
            if self.episode.length:
                gym.logger.warn(f"RecordTrajectories: episode {self.episode.episode_id} ended before terminated or "
                                f"truncated after {self.episode.length} steps; it is not recorded")
            self.episode.discard()
        self.episode = None

    def _hint_turn(self, extras: Mapping[str, Any]) -> None:
        """Tell the env's turn budget (:mod:`mcp_gym._budget`) which model reply the next action came from."""
        budget = getattr(self.env.unwrapped, "budget", None)
        if budget is not None:
            budget.turn_hint = extras.get("turn")

    def _start(self, obs: Any, info: Mapping[str, Any], seed: int | None, extra: Mapping[str, Any]) -> None:
        self._drop_unfinished()
        base = self.env.unwrapped
        task = getattr(base, "task", None)
        workspace = getattr(base, "workspace", None)  # the task as set up names it: recorded as {workspace}
        tools = self._tools(info.get("catalogue_hash"))
        metadata = {**self.metadata, **dict(extra.get("metadata") or {})}
        if info.get("startup_seconds"):  # the time this episode's reset spent starting servers (MCPEnv)
            metadata["startup_seconds"] = info["startup_seconds"]
        if isinstance(info.get("reset_seconds"), (int, float)):  # the whole reset (MCPEnv): time to first step
            metadata["reset_seconds"] = info["reset_seconds"]
        self._last_resources = obs.get("resources") if isinstance(obs, Mapping) else None
        self._user_turn = info.get("turn")
        self._last_resources_json = dumps(self._last_resources) if self._last_resources else None
        self.episode = self.writer.start_episode(
            episode_id=info.get("episode_id"),
            key=extra.get("episode_key"),
            env_id=getattr(base, "env_id", None) or (base.spec.id if base.spec is not None else None),
            task_id=info.get("task_id") or getattr(task, "id", None),
            task_prompt=mask_workspace(getattr(task, "prompt", None), workspace),
            task=mask_workspace(self._task_json(task), workspace),
            seed=info.get("seed", seed),
            policy=extra.get("policy", self.policy),
            tools=tools,
            servers=info.get("servers"),
            initial_observation=obs,
            recorder="env",
            metadata=metadata,
        )

    def _task_json(self, task: Any) -> str | None:
        """The task record as JSON, serialised once per task object (``Task.to_record`` is slow)."""
        if not hasattr(task, "to_record"):
            return None
        cached = self._tasks.get(task.id)
        if cached is None or cached[0] is not task:
            if len(self._tasks) >= 100_000:
                self._tasks.clear()
            cached = self._tasks[task.id] = (task, dumps(task.to_record()))
        return cached[1]

    def _tools(self, env_hash: str | None) -> Catalogue | None:
        """The tool schemas the agent sees (the env's catalogue plus the built-in ``submit``), serialised once per
        distinct catalogue (``env_hash``: the env's ``info["catalogue_hash"]``)."""
        if env_hash is not None and self._catalogue is not None and self._catalogue[0] == env_hash:
            return self._catalogue[1]
        base = self.env.unwrapped
        list_tools = getattr(base, "tool_catalogue", None)
        if list_tools is None:
            return None
        tools = list_tools()
        if "submit" in getattr(base.action_space, "tool_names", ()) and not any(t["name"] == "submit" for t in tools):
            tools.append(SUBMIT_RECORD)
        catalogue = Catalogue.of(tools)
        self._catalogue = (env_hash, catalogue) if env_hash is not None else None
        return catalogue

    def _record(
        self, action: Any, obs: Any, reward: SupportsFloat, terminated: bool, truncated: bool, info: dict[str, Any],
        t0: float, extras: Mapping[str, Any],
    ) -> None:
        ep = self.episode
        if ep is None or ep.done:
            return
        try:
            self._add_step(ep, action, obs, reward, terminated, truncated, info, t0, extras)
        except Exception as exc:  # noqa: BLE001 - a step RecordTrajectories cannot take apart is still a step
            gym.logger.warn(f"RecordTrajectories: step {ep.length} of episode {ep.episode_id} could not be recorded "
                            f"as given ({type(exc).__name__}); it is recorded with an unencodable marker")
            reason = f"{type(exc).__name__} while recording the step"
            error = info.get("error") if isinstance(info, dict) else None
            if not isinstance(error, dict):
                error = ToolCallError("unrecordable", f"step {ep.length} could not be recorded: {reason}").as_dict()
            ep.add_step(None, unencodable(reason), is_error=True, error=error,
                        reward=_float_or_none(reward), terminated=terminated, truncated=truncated, timestamp=t0)
        if terminated or truncated:
            get = info.get if isinstance(info, Mapping) else {}.get
            summary = get(SUMMARY_KEY) or {}  # absent when a wrapper (e.g. TimeLimit) ended the episode
            if not isinstance(summary, Mapping):
                summary = {}
            self._record_budget(ep, summary)
            ep.finish(
                total_reward=_float_or_none(summary.get("return")),
                success=get("success"),
                termination=summary.get("termination") or ("terminated" if terminated else "truncated"),
                final_answer=get("final_answer"),
                catalogue_changes=self._catalogue_changes(),
            )

    def _record_budget(self, ep: EpisodeWriter, summary: Mapping[str, Any]) -> None:
        """Add the env's budgets and what the episode used of them to its ``metadata`` (``{"budget": {"max_steps",
        "max_turns", "max_tool_calls", "steps", "turns", "tool_calls"}}``)."""
        base = self.env.unwrapped
        budget = getattr(base, "budget", None)
        if budget is None:
            return
        used = {"max_steps": getattr(base, "max_steps", None), **budget.limits(), "steps": summary.get("length"),
                "turns": summary.get("turns"), "tool_calls": summary.get("tool_calls")}
        metadata = json.loads(ep.record.metadata) if ep.record.metadata else {}
        ep.record.metadata = dumps({**metadata, "budget": used})

    def _add_step(
        self, ep: EpisodeWriter, action: Any, obs: Any, reward: SupportsFloat, terminated: bool, truncated: bool,
        info: dict[str, Any], t0: float, extras: Mapping[str, Any],
    ) -> None:
        get = info.get
        if action.__class__ is dict:
            tool = get("tool") or action.get("tool")
            arguments = action.get("arguments")
        elif isinstance(action, Mapping):
            try:
                tool = get("tool") or action.get("tool")
                arguments = action.get("arguments")
            except Exception as exc:  # noqa: BLE001 - a mapping whose methods raise
                tool, arguments = get("tool"), unencodable(f"{type(exc).__name__} while reading the action")
        else:
            tool, arguments = get("tool"), action
        if obs.__class__ is dict or isinstance(obs, Mapping):
            observation = obs.get("result")
            resources = obs.get("resources")
            if resources is not self._last_resources and resources != self._last_resources:
                self._last_resources = resources
                self._last_resources_json = dumps(resources) if resources else None
        else:
            observation = None
        error = get("error")
        user_turn, self._user_turn = self._user_turn, get("turn", self._user_turn)  # a turn's submit: the turn ended
        ep.add_step(
            tool,
            mask_workspace(arguments, getattr(self.env.unwrapped, "workspace", None)),  # e.g. the oracle's real paths
            server=get("server"),
            server_tool=get("server_tool"),
            content=get("content", ()),
            structured_content=get("structured_content"),
            is_error=get("is_error", error is not None),
            error=error,
            reward=float(reward),
            terminated=terminated,
            truncated=truncated,
            duration=get("duration"),
            timestamp=t0,
            observation=observation,
            resources=self._last_resources_json,
            raw_text=extras.get("raw_text"),
            parse_status=extras.get("parse_status"),
            turn=extras.get("turn"),
            assistant_content=extras.get("assistant_content"),
            user_turn=user_turn,
            info={k: v for k, v in info.items() if k not in _COLUMN_KEYS},
        )

    def _catalogue_changes(self) -> list[dict[str, Any]] | None:
        changes = getattr(self.env.unwrapped, "catalogue_changes", None)
        if not changes:
            return None
        out = []
        for c in changes:
            tools = list(c["tools"])
            if not any(t["name"] == "submit" for t in tools):
                tools.append(SUBMIT_RECORD)
            out.append({"step_index": int(c["step"]) - 1, "hash": catalogue_fingerprint(tools), "tools": tools})
        return out
