"""verl adapter: an mcp-gym episode per trajectory, as a verl agent loop (``agent_name: mcp_gym``).

verl's rollout worker (``AgentLoopWorker``) runs each dataset row through the agent loop its ``agent_name`` column
names, with the model served behind ``server_manager.generate(prompt_ids) -> token ids``; the loop returns the
trajectory's token ids, a response mask (1 on the model's tokens, 0 on the environment's) and, optionally, its score.
:class:`MCPGymAgentLoop` is that loop over any :class:`~mcp_gym.env.MCPEnv`, a face over
:class:`~mcp_gym.textenv.TextEnvBatch` with one episode: the same chat view (system prompt, task with resources, tool
messages, feedback on a reply without a call), the same parser, and, with ``record_to``, the same recorder and
Parquet run as every other mcp-gym agent. Per trajectory it:

* makes its own env (verl builds one loop per trajectory, so the MCP sessions and the episode's state live here, not
  in verl's tools, which are re-created on every call) on the runtime hosted by the worker's event loop
  (:meth:`Runtime.hosted <mcp_gym.client.runtime.Runtime.hosted>`, one per loop: the sessions' owner tasks run on
  verl's loop next to the trajectories, so a turn's env step is awaited right there, with no thread hop; a factory
  that passes its own ``runtime=`` keeps it) and resets it on the row's task (``extra_info.task_id``; else
  the prompt's last user message is matched against the env's task prompts, an unknown prompt becoming an ad-hoc
  task), replacing the row's prompt with the chat view's ``[system, user]``;
* renders them with the tokenizer's chat template and the env's tools (``tools/list`` with their schemas, plus
  ``submit``), then alternates: the model's tokens (mask 1), decoded and parsed (Hermes ``<tool_call>``, bare JSON,
  ...) into calls the env runs, and the tool messages answering them rendered by verl's Continuous Token builder
  (mask 0), until the env ends the episode (``submit``, its ``max_steps``), or verl's limits cut it: after
  ``rollout.multi_turn.max_assistant_turns`` replies (termination ``max_turns``) or when the response reaches
  ``rollout.response_length`` tokens (``max_length``), recorded as cut there, success unknown;
* scores the trajectory with the env's reward: ``reward_score`` is the episode return (the verifier's grade arrives
  on ``submit``), so verl's reward function is not called; ``extra_fields`` carry ``turn_scores`` (each reply's
  reward), ``success``, ``termination``, ``task_id`` and ``episode_id``.

Importing the module registers the agent loop ``"mcp_gym"``, whose env the row names (``extra_info.env``). For a
training run, name the loop and its env in verl's agent loop config (``actor_rollout_ref.rollout.agent
.agent_loop_config_path``), which every rollout worker loads::

    - name: mcp_gym_counter
      _target_: mcp_gym.verl.MCPGymAgentLoop
      env: Counter                  # a bundled env name or "package.module:function"
      record_to: runs/verl-counter  # optional: every trajectory recorded

and make the dataset with :func:`task_rows` (``prompt``, ``agent_name``, ``extra_info.task_id``).
"""

from __future__ import annotations

import uuid
from typing import Any

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
    from verl.utils.profiler import simple_timer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("mcp_gym.verl needs verl: pip install 'mcp-gym[verl]'") from e

from mcp_gym._compat.verl import agent_loop_registry
from mcp_gym.async_env import aclose
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT
from mcp_gym.client.runtime import Runtime
from mcp_gym.recording import RecordTrajectories
from mcp_gym.textenv import FACE_OPTIONS, TextEnvBatch, face_settings, resolve_env_factory, warn_unlisted_tools

__all__ = ["MCPGymAgentLoop", "AGENT_NAME", "OPTIONS", "agent_loop_entry", "register", "task_rows"]

AGENT_NAME = "mcp_gym"
"""The agent loop name this module registers on import (its env named by the row's ``extra_info.env``)."""

OPTIONS: dict[str, Any] = {**FACE_OPTIONS, "policy": "verl"}
"""The settings of :class:`MCPGymAgentLoop` (keys of its agent loop config entry) and their defaults; ``env``
``None``: the row's ``extra_info.env``."""


def _plain(value: Any) -> Any:
    """An omegaconf container (what verl's hydra instantiation passes) as plain Python."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


class MCPGymAgentLoop(AgentLoopBase):
    """One mcp-gym episode per trajectory, as a verl ``AgentLoopBase`` (see the module docs).

    verl constructs it per trajectory (``hydra.utils.instantiate`` of the agent loop's config entry) with its trainer
    config, ``server_manager``, tokenizer and so on; the entry's other keys are the settings (:data:`OPTIONS`):
    ``env``, ``env_kwargs``, ``record_to``, ``policy``, ``system_prompt``, ``no_tool_call``, ``max_calls_per_turn``,
    ``show_resources``.
    """

    def __init__(self, *args: Any, name: str | None = None, tools: Any = None, **kwargs: Any) -> None:
        settings = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS or k not in _VERL_KWARGS}
        super().__init__(*args, **kwargs)
        self.agent_name = name or AGENT_NAME
        self.options = {**OPTIONS, **face_settings(settings, f"verl agent loop {self.agent_name!r}", OPTIONS)}

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play one episode with the served model; ``kwargs`` are the row's fields (``raw_prompt``,
        ``extra_info``: ``task_id``, ``seed``, ``env``)."""
        extra = dict(_plain(kwargs.get("extra_info")) or {})
        env_name = self.options["env"] if self.options["env"] is not None else extra.get("env")
        if env_name is None:
            raise ValueError(f"verl agent loop {self.agent_name!r}: no env; set env: NAME in its agent loop config "
                             "entry, or give the row extra_info.env")
        factory = resolve_env_factory(env_name, self.options["env_kwargs"])
        with (await Runtime.hosted()).as_default():  # sessions on verl's loop: no thread hop per step
            inner = factory()
        env: Any = inner if self.options["record_to"] is None else RecordTrajectories(
            inner, self.options["record_to"], policy=self.options["policy"], metadata={"trainer": "verl"})
        batch = TextEnvBatch([env], system_prompt=self.options["system_prompt"],
                             no_tool_call=self.options["no_tool_call"],
                             max_calls_per_turn=self.options["max_calls_per_turn"],
                             show_resources=self.options["show_resources"])
        try:
            return await self._play(batch, sampling_params, list(_plain(kwargs.get("raw_prompt")) or []), extra)
        finally:
            await aclose(env)

    async def _play(self, batch: TextEnvBatch, sampling_params: dict[str, Any], prompt: list[dict[str, Any]],
                    extra: dict[str, Any]) -> AgentLoopOutput:
        task_id, seed = extra.get("task_id"), extra.get("seed")
        spec: Any = {"task_id": task_id} if task_id not in (None, "") else {"prompt": prompt}
        (messages,) = await batch.areset([spec], seed=None if seed is None else int(seed))
        tools = batch.tools_of(0)
        ids = await self.ct_build_initial_tokens(messages, tools=tools)
        prompt_len = len(ids)
        mask: list[int] = []
        logprobs: list[float] = []
        metrics: dict[str, Any] = {}
        turn_scores: list[float] = []
        request_id = uuid.uuid4().hex
        max_turns = self.rollout_config.multi_turn.max_assistant_turns
        limit = self.rollout_config.response_length
        done, out, cut, user_turns = False, None, "max_turns", 0
        unlisted: list[str] = []
        while True:
            with simple_timer("generate_sequences", metrics):
                gen = await self.server_manager.generate(request_id=request_id, prompt_ids=ids,
                                                         sampling_params=sampling_params)
            merged, mask, merged_logprobs = await self.ct_merge_assistant_token(
                ids, gen.token_ids, mask, logprobs if (logprobs or gen.log_probs) else None,
                assistant_logprobs=gen.log_probs or None)
            ids, logprobs = merged.token_ids, merged_logprobs or []
            text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            with simple_timer("tool_calls", metrics):
                (out,) = await batch.astep([text])
            turn_scores.append(out.reward)
            unlisted += [n for n in warn_unlisted_tools(f"verl agent loop {self.agent_name!r}", batch.envs[0], tools,
                                                         out.info) if n not in unlisted]
            done = out.done
            if done or (max_turns and len(turn_scores) >= max_turns):
                break
            if len(mask) >= limit:
                cut = "max_length"
                break
            history = batch.histories[0]
            previous = history[:len(history) - len(out.messages)]
            merged, context_mask, context_logprobs = await self.ct_merge_context_msg(
                previous, history, ids, mask, logprobs or None, tools=tools)
            if len(context_mask) >= limit:
                cut = "max_length"
                break
            ids, mask, logprobs = merged.token_ids, context_mask, context_logprobs or []
            user_turns += 1
        if not done:  # cut by verl's limits: recorded as such, success unknown
            end = getattr(batch.envs[0], "end_episode", None)
            if end is not None:
                end(cut)
        info = out.info if out is not None else {}
        response = ids[prompt_len:]
        return AgentLoopOutput(
            prompt_ids=ids[:prompt_len], response_ids=response[:limit], response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs else None, reward_score=float(batch.returns[0]),
            num_turns=len(turn_scores) + user_turns + 1, metrics=metrics,
            extra_fields={"turn_scores": turn_scores, "success": info.get("success"),
                          "termination": info.get("termination") if done else cut,
                          "task_id": info.get("task_id"), "episode_id": info.get("episode_id"),
                          "tools_unlisted": unlisted})


_VERL_KWARGS = {"trainer_config", "server_manager", "tokenizer", "processor", "dataset_cls", "data_config",
                "hf_model_type"}
"""The keyword arguments verl's worker gives every agent loop (all other keys of a config entry are settings)."""


def agent_loop_entry(name: str, env: str | None = None, **settings: Any) -> dict[str, Any]:
    """The agent loop config entry (``name``, ``_target_`` and settings) of an mcp-gym env: one item of the YAML
    list at ``actor_rollout_ref.rollout.agent.agent_loop_config_path``.

    Args:
        name: The agent loop name the dataset rows' ``agent_name`` gives.
        env: A bundled env name or ``"package.module:function"`` (``None``: the row's ``extra_info.env``). The entry
            is data every rollout worker loads, so a factory is named by its import path.
        **settings: Other settings (:data:`OPTIONS`), e.g. ``env_kwargs={"max_steps": 10}``,
            ``record_to="runs/verl"``.
    """
    if env is not None and not isinstance(env, str):
        raise TypeError(f"agent loop {name!r}: env must be a bundled env name or 'package.module:function' (verl's "
                        f"workers instantiate the loop from its config entry), got {type(env).__name__}")
    values = face_settings({**settings, "env": env}, f"agent loop {name!r}", OPTIONS)
    return {"name": name, "_target_": f"{MCPGymAgentLoop.__module__}.{MCPGymAgentLoop.__qualname__}",
            **{k: v for k, v in values.items() if v is not None}}


def register(name: str = AGENT_NAME, env: str | None = None, **settings: Any) -> str:
    """Register an mcp-gym env as the agent loop ``name`` in this process's verl registry (what the rollout workers
    use when they run here; a distributed run loads the entry from ``agent_loop_config_path`` instead, see
    :func:`agent_loop_entry`). Returns ``name``."""
    agent_loop_registry()[name] = agent_loop_entry(name, env, **settings)
    return name


def task_rows(env: str, split: str | None = "train", *, agent_name: str = AGENT_NAME,
              system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, limit: int | None = None, seed: int = 0
              ) -> list[dict[str, Any]]:
    """verl dataset rows for a bundled env's tasks: ``prompt`` (system message and task prompt), ``agent_name``,
    ``data_source`` and ``extra_info`` (``task_id``, ``env``; the loop replaces the prompt with the chat view's,
    resources included)."""
    from mcp_gym.envs import load_env_tasks

    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [{"prompt": [*system, {"role": "user", "content": t.prompt}], "agent_name": agent_name,
             "data_source": f"mcp_gym/{env}", "extra_info": {"task_id": t.id, "env": env}}
            for t in load_env_tasks(env, split, seed)[:limit]]


if AGENT_NAME not in agent_loop_registry():
    register(AGENT_NAME)
