"""SkyRL adapter: an mcp-gym env as a SkyRL-Gym text environment, picked by a dataset row's ``env_class``.

SkyRL's generator makes one environment per trajectory with ``skyrl_gym.make(row["env_class"],
env_config=cfg.skyrl_gym.<env_class>, extras=row)``, calls ``init(prompt)`` for the first messages, then
``step(model_text)`` until ``done``, reading ``observations`` (messages it appends to the conversation), ``reward``
(per step), ``done`` and ``metadata``. :class:`MCPGymTextEnv` is that environment over any
:class:`~mcp_gym.env.MCPEnv`, a face over :class:`~mcp_gym.textenv.TextEnvBatch` with one episode: the same chat
view (system prompt, task with resources, tool messages, feedback on a reply without a call), the same parser, and,
with ``record_to``, the same recorder and Parquet run as every other mcp-gym agent::

    import mcp_gym.skyrl

    mcp_gym.skyrl.register("mcp_gym_counter", env="Counter", record_to="runs/skyrl-counter")
    rows = mcp_gym.skyrl.task_rows("Counter", "train", env_class="mcp_gym_counter")   # prompt, env_class, task_id
    # save rows as the trainer's Parquet dataset; run SkyRL's entrypoint in a process that imported this module

Importing the module registers the env class ``"mcp_gym"``, whose env comes from the trainer config
(``skyrl_gym.mcp_gym.env=Counter``) or the row (``env`` column); :func:`register` adds one id per configured env.

Per trajectory: ``init`` resets the env on the row's task (``task_id`` column; else the prompt's last user message
is matched against the env's task prompts, an unknown prompt becoming an ad-hoc task) and returns the chat view's
``[system, user]`` in place of the row's prompt; the metadata carries ``tools`` (OpenAI schemas, ``submit``
included): SkyRL's generator renders no tools itself, so give them to the chat template
(``generator.chat_template_kwargs.tools``) or to your dataset's system prompt. Each ``step`` parses the text (Hermes
``<tool_call>``, bare JSON, ...), runs its calls and returns their ``tool`` messages, the turn's reward (the env's
per-step rewards; the verifier's grade arrives on ``submit``) and ``done``. The episode ends when the env terminates
or truncates (its ``max_steps``), or after ``max_turns`` replies (SkyRL's ``generator.max_turns``, which the generator
passes in ``extras``); an episode cut by ``max_turns`` is recorded with termination ``max_turns`` and unknown success.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("mcp_gym.skyrl needs SkyRL-Gym: pip install 'mcp-gym[skyrl]'") from e

from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT
from mcp_gym.env import MCPEnv
from mcp_gym.recording import RecordTrajectories
from mcp_gym.textenv import FACE_OPTIONS, TextEnvBatch, face_settings, resolve_env_factory, warn_unlisted_tools

__all__ = ["MCPGymTextEnv", "register", "task_rows", "ENV_CLASS"]

ENV_CLASS = "mcp_gym"
"""The env class this module registers on import (its env named by the trainer config or the row)."""

OPTIONS: dict[str, Any] = {**FACE_OPTIONS, "policy": "skyrl"}
"""The settings of :class:`MCPGymTextEnv` and their defaults (see :func:`register`)."""


def _settings(source: Any, where: str) -> dict[str, Any]:
    return face_settings(source, where, OPTIONS)


class MCPGymTextEnv(BaseTextEnv):
    """One mcp-gym episode as a SkyRL-Gym ``BaseTextEnv`` (see the module docs).

    Args:
        env_config: The trainer's ``skyrl_gym.<env_class>`` config (mapping, ``DictConfig`` or dataclass): settings
            that override the registered ones.
        extras: The dataset row without ``prompt`` and ``env_class``: ``task_id`` (the task; else the prompt picks
            it), ``seed`` (the reset seed), ``env`` (a bundled env name, when no setting names one), and the
            generator's ``max_turns``.
        **settings: Registered settings (:data:`OPTIONS`): ``env``, ``env_kwargs``, ``record_to``, ``policy``,
            ``system_prompt``, ``no_tool_call``, ``max_calls_per_turn``, ``show_resources``.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, **settings: Any) -> None:
        super().__init__()
        options = {**OPTIONS, **_settings(settings, "MCPGymTextEnv settings"),
                   **_settings(env_config, "skyrl_gym env_config")}
        self.extras = dict(extras or {})
        env = options["env"] if options["env"] is not None else self.extras.get("env")
        if env is None:
            raise ValueError("MCPGymTextEnv: no env; register(..., env=NAME), set skyrl_gym.<env_class>.env=NAME in "
                             "the trainer config, or give the row an 'env' column")
        inner: MCPEnv = resolve_env_factory(env, options["env_kwargs"])()
        wrapped: Any = inner
        if options["record_to"] is not None:
            wrapped = RecordTrajectories(inner, options["record_to"], policy=options["policy"],
                                         metadata={"trainer": "skyrl"})
        self.batch = TextEnvBatch([wrapped], system_prompt=options["system_prompt"],
                                  no_tool_call=options["no_tool_call"],
                                  max_calls_per_turn=options["max_calls_per_turn"],
                                  show_resources=options["show_resources"])
        turns = self.extras.get("max_turns")
        self.max_turns = int(turns) if turns else 0  # 0: no turn limit besides the env's own max_steps
        self.last_info: dict[str, Any] = {}
        self.listed_tools: list[dict[str, Any]] = []
        """The tools of ``init``'s metadata: what a trajectory lists (SkyRL renders tools once)."""
        self._closed = False

    @property
    def env(self) -> MCPEnv:
        """The :class:`MCPEnv` of this trajectory."""
        return self.batch.envs[0].unwrapped

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset on the row's task; returns the chat view's first messages and ``{"tools", "task_id",
        "episode_id"}``."""
        task_id = self.extras.get("task_id")
        spec: Any = {"task_id": task_id} if task_id not in (None, "") else {"prompt": prompt}
        seed = self.extras.get("seed")
        (messages,) = self.batch.reset([spec], seed=None if seed is None else int(seed))
        self.turns = 0
        self.last_info = {}
        env = self.env
        self.listed_tools = self.batch.tools_of(0)
        return messages, {"tools": self.listed_tools, "task_id": env.task.id if env.task else None,
                          "episode_id": env.episode_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the calls of one model reply: their tool messages (or the feedback on a reply without a call), the
        turn's reward, ``done``, and :class:`~mcp_gym.textenv.StepOut`'s ``info`` as ``metadata``."""
        self.turns += 1
        (out,) = self.batch.step([action])
        done, info = out.done, out.info
        unlisted = warn_unlisted_tools("mcp_gym.skyrl", self.batch.envs[0], self.listed_tools, info)
        if unlisted:
            info = {**info, "tools_unlisted": unlisted}
        if not done and self.max_turns and self.turns >= self.max_turns:
            done = True
            info = {**info, "truncated": True, "termination": "max_turns"}
            end = getattr(self.batch.envs[0], "end_episode", None)  # a recorder: the episode is recorded as cut
            if end is not None:
                end("max_turns")
        self.last_info = info
        return BaseTextEnvStepOutput(observations=out.messages, reward=out.reward, done=done, metadata=info,
                                     postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """The episode's ``return``, ``turns``, ``steps`` and (when graded) ``success`` as 0/1, for SkyRL's logs."""
        metrics: dict[str, Any] = {"return": self.batch.returns[0], "turns": self.turns,
                                   "steps": self.last_info.get("step", 0)}
        if self.last_info.get("success") is not None:
            metrics["success"] = float(bool(self.last_info["success"]))
        return metrics

    def close(self) -> None:
        """Close the env (stops its stdio servers; a recorder releases its run)."""
        if not self._closed:
            self._closed = True
            self.batch.close()


def register(id: str = ENV_CLASS, env: str | Callable[[], MCPEnv] | None = None, *, replace: bool = False,
             **settings: Any) -> str:
    """Register an mcp-gym env with SkyRL-Gym: rows whose ``env_class`` is ``id`` get it.

    Args:
        id: The env class name the dataset rows give.
        env: A bundled env name, ``"package.module:function"`` or a zero-argument factory returning an
            :class:`MCPEnv` (``None``: named by the trainer config or the row).
        replace: Replace an env already registered under ``id`` (SkyRL-Gym refuses a second one otherwise).
        **settings: Other settings (:data:`OPTIONS`), e.g. ``env_kwargs={"max_steps": 10}``,
            ``record_to="runs/skyrl"``.

    Returns:
        ``id``.
    """
    kwargs = _settings({**settings, "env": env}, f"register({id!r})")
    if replace and id in skyrl_gym.registry:
        skyrl_gym.envs.registration.deregister(id)
    skyrl_gym.register(id=id, entry_point=MCPGymTextEnv, kwargs=kwargs)
    return id


def task_rows(env: str, split: str | None = "train", *, env_class: str = ENV_CLASS,
              system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, limit: int | None = None, seed: int = 0
              ) -> list[dict[str, Any]]:
    """SkyRL dataset rows for a bundled env's tasks: ``prompt`` (system message and task prompt), ``env_class`` and
    ``task_id`` (``init`` replaces the prompt with the chat view's, resources included)."""
    from mcp_gym.envs import load_env_tasks

    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [{"prompt": [*system, {"role": "user", "content": t.prompt}], "env_class": env_class, "task_id": t.id}
            for t in load_env_tasks(env, split, seed)[:limit]]


if ENV_CLASS not in skyrl_gym.registry:
    register(ENV_CLASS)
