"""Batched text-step API: chat messages in, tool messages + rewards out (verl / SkyRL / NeMo-RL style).

RL trainers that drive their own generation (verl's agent loop, SkyRL-gym, NeMo-RL) do not exchange Gymnasium
spaces with an environment: they send the model's *text* and expect the tool results back as OpenAI-style messages,
plus a reward and a done flag per episode. :class:`TextEnvBatch` is that interface over ``n`` :class:`MCPEnv`
episodes::

    from mcp_gym.textenv import TextEnvBatch

    batch = TextEnvBatch("Counter", n=4)           # a bundled env name, or a zero-argument env factory
    batch.reset()                                   # n x [system, user] messages, also kept in batch.histories
    while not batch.all_done:
        texts = [my_llm(h, tools=batch.tools) if not done else "" for h, done in zip(batch.histories, batch.dones)]
        outs = batch.step(texts)                    # per episode: .messages (tool messages), .reward, .done, .info
    print(batch.returns)
    batch.close()

``batch.histories[i]`` is episode ``i``'s conversation in the chat view of :mod:`mcp_gym.chat` -- the same system
prompt, user turn, tool messages and feedback the chat policies send and the SFT export trains on (assistant messages
with ``tool_calls`` whose ``arguments`` are objects, ids ``call_<turn>_<i>``) -- ready for a chat template; trainers
that keep their own token-level history use ``outs[i].messages`` instead.

Each ``step`` parses every text into tool calls with :func:`mcp_gym.parsing.parse_tool_calls` (OpenAI
``tool_calls``, Hermes ``<tool_call>{json}</tool_call>``, bare JSON), runs each episode's calls in order and all the
episodes concurrently on the :class:`~mcp_gym.client.runtime.Runtime` loop that owns the MCP sessions, and returns one
:class:`StepOut` per episode. Text with no parseable tool call never raises: the episode gets the chat view's
feedback as a ``user`` message (and the step counts toward ``max_steps``, so a model that never calls a tool is
truncated), or, with ``no_tool_call="submit"``, the text is submitted as the final answer (a rule of its own: the
policies and the SFT export end an episode only with the ``submit`` tool).

An assistant *message* (a dict with ``content`` and OpenAI ``tool_calls``, as an inference server returns it) is
accepted in place of a text.

Conversations (tasks with several user turns): a ``submit`` that ends a user turn becomes the assistant's reply of that
turn in the history (:meth:`ChatView.end_turn <mcp_gym.chat.ChatView.end_turn>`; calls after it in the same reply are
not run) and the step's ``messages`` end with the next ``user`` message; ``info`` has ``turn`` and ``turns``.

When a call changes the tools an episode offers (Maze's ``unlock``, a ``tools/list_changed``), the message answering
it ends with :func:`mcp_gym.chat.tools_note` (the chat view's rule, as in the chat policies' requests) and the step's
``info`` has ``tools_changed`` and ``tools``.

Episodes that are done are skipped (empty messages, reward 0, ``done=True``).

Recording: give ``TextEnvBatch`` envs wrapped in :class:`~mcp_gym.recording.RecordTrajectories`; each step is recorded
with the reply it came from, so the run's episodes, viewer pages and SFT export show this batch's conversations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from mcp_gym.async_env import areset, astep
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, ChatView, assistant_content, call_id, env_tools
from mcp_gym.env import MCPEnv
from mcp_gym.parsing import ParseResult, parse_message, parse_tool_calls
from mcp_gym.protocol import ToolCallError
from mcp_gym.tasks import Task, _TaskDataCheck, as_task

__all__ = ["TextEnvBatch", "StepOut", "parse_model_output", "FACE_OPTIONS", "face_settings"]

NoToolCall = Literal["error", "submit"]


@dataclass
class StepOut:
    """What one episode returns from :meth:`TextEnvBatch.step`.

    Attributes:
        messages: The messages answering the reply: tool messages for its calls, in call order
            (``{"role": "tool", "tool_call_id", "name", "content"}``), or the ``user`` feedback message of a reply
            without a usable call. Empty when the episode was already done, or when a plain-text answer was
            submitted.
        reward: Sum of the environment rewards of this turn's calls.
        done: The episode is over (terminated or truncated); later steps skip it.
        info: ``episode_id``, ``task_id``, ``step``, ``episode_return``, ``tool_calls`` (the parsed calls in OpenAI
            form), ``parse_status`` / ``parse_error`` (see :mod:`mcp_gym.parsing`), ``raw_text``, ``errors`` (env
            error dicts), ``terminated``, ``truncated``, ``termination``, ``skipped`` (the episode was already over),
            ``success`` (when graded), ``tools_changed`` and, if so, ``tools`` (the new OpenAI tool list).
    """

    messages: list[dict[str, Any]]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def resolve_env_factory(env: str | Callable[[], MCPEnv], env_kwargs: Mapping[str, Any] | None = None) -> Callable[
    [], MCPEnv
]:
    """A zero-argument factory from a bundled env name (``"Counter"``), an import path ``"package.module:function"``
    of a function returning an :class:`MCPEnv` (what a trainer's YAML config can name; ``env_kwargs`` are its keyword
    arguments) or a factory (returned as is)."""
    if isinstance(env, str) and ":" in env:
        module, _, attr = env.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"env {env!r}: cannot import {attr!r} from {module!r} ({e})") from None
        if not callable(fn):
            raise TypeError(f"env {env!r} is not callable (a function returning an MCPEnv)")
        kwargs = dict(env_kwargs or {})

        def make() -> MCPEnv:
            made = fn(**kwargs)
            if not isinstance(getattr(made, "unwrapped", None), MCPEnv):
                raise TypeError(f"env {env!r} returned {type(made).__name__}, not an MCPEnv (a function returning "
                                "an MCPEnv, called with env_kwargs)")
            return cast("MCPEnv", made)

        return make
    if isinstance(env, str):
        from mcp_gym.envs import make_env

        name, kwargs = env, dict(env_kwargs or {})
        return lambda: make_env(name, **kwargs)
    if env_kwargs:
        raise ValueError("env_kwargs only applies to a bundled env name; bind them in your factory instead")
    if not callable(env):
        raise TypeError(f"expected a bundled env name or a zero-argument env factory, got {type(env).__name__}")
    return env


FACE_OPTIONS: dict[str, Any] = {
    "env": None,  # bundled env name, "package.module:function" or a zero-argument factory
    "env_kwargs": None,  # make_env / factory keyword arguments
    "record_to": None,  # run directory: episodes recorded with RecordTrajectories
    "policy": None,  # the recorded policy name (each face names its trainer)
    "system_prompt": DEFAULT_SYSTEM_PROMPT,
    "no_tool_call": "error",
    "max_calls_per_turn": 8,
    "show_resources": True,
}
"""The settings of the trainer faces over :class:`TextEnvBatch` (``mcp_gym.skyrl``, ``mcp_gym.verl``), defaults."""


def face_settings(source: Any, where: str, known: Mapping[str, Any] = FACE_OPTIONS) -> dict[str, Any]:
    """A plain dict of a face's settings from a mapping, an omegaconf ``DictConfig`` or a dataclass (values that are
    omegaconf containers made plain too, as a trainer's config passes them); a key not in ``known`` is refused with
    ``where`` and the known keys."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if source is None:
        return {}
    if dataclasses.is_dataclass(source) and not isinstance(source, type):
        source = dataclasses.asdict(source)
    elif isinstance(source, DictConfig):
        source = OmegaConf.to_container(source, resolve=True)
    elif not isinstance(source, Mapping):
        raise TypeError(f"{where}: expected a mapping of settings, got {type(source).__name__}")
    out = {k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig | ListConfig) else v
           for k, v in dict(source).items()}
    unknown = sorted(set(out) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")
    return out


def warn_unlisted_tools(where: str, env: Any, listed: Sequence[Mapping[str, Any]],
                        info: Mapping[str, Any]) -> list[str]:
    """The tools a step added that are not in ``listed`` (the tools a face rendered once, at the start of the
    trajectory), with a one-line ``UserWarning`` naming them: a face that cannot list tools mid-trajectory (verl,
    SkyRL) shows them to the model only in the tools note of the message answering the step
    (:func:`mcp_gym.chat.tools_note`, which ``mcp-gym eval``'s chat view shows too), where eval's chat policies also
    list them in the tools of the next request. Empty (and no warning) when the step's tools did not change or every
    tool was listed."""
    if not info.get("tools_changed"):
        return []
    names = {t["function"]["name"] for t in listed}
    added = [t["function"]["name"] for t in info.get("tools") or () if t["function"]["name"] not in names]
    if added:
        env_id = getattr(getattr(env, "unwrapped", env), "env_id", None) or type(env).__name__
        warnings.warn(f"{where}: env {env_id!r} added tool(s) {', '.join(added)} mid-trajectory; the trajectory's "
                      "tools were rendered once, at its start, so the model is told of them only by the tools note "
                      "ending the next message (as in mcp-gym eval's conversation), not in the rendered tool list "
                      "(mcp-gym eval lists them there from the next request on; see docs/training)", UserWarning,
                      stacklevel=2)
    return added


def _message_text(prompt: Any) -> str:
    """The text of a prompt: a string, or the content of the last user message of a conversation."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Mapping):
        content = prompt.get("content", "")
    else:
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role", "user") == "user"]
        if not users:
            return ""
        content = users[-1].get("content", "")
    if isinstance(content, list):  # multimodal parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content or "")


def reset_options(env: MCPEnv, spec: Any) -> dict[str, Any] | None:
    """``reset`` options for one episode from a task spec.

    ``spec`` may be ``None`` (draw a task with the env's RNG), a :class:`Task`, a task id of the env, a prompt string,
    or a dataset row: ``{"task_id": ...}``, a task record ``{"id", "prompt", ...}``, or ``{"prompt": str | messages}``
    (a prompt equal to one of the env's task prompts selects that task; any other prompt becomes an ad-hoc task; an
    empty prompt draws a task). A task record that is not one of the env's tasks is untrusted data, as a task file
    is: its ``fixture``, ``env`` and ``grader`` are checked the same way (:class:`~mcp_gym.tasks.TaskDataError`).
    """
    if spec is None:
        return None
    if isinstance(spec, Task):
        return {"task": spec}
    env = env.unwrapped  # a wrapper (RecordTrajectories, ...) around the MCPEnv
    ids = {t.id for t in env.tasks}
    if isinstance(spec, str):
        if spec in ids:
            return {"task_id": spec}
        spec = {"prompt": spec}
    if not isinstance(spec, Mapping):
        raise TypeError(f"a task spec must be None, a Task, a str or a mapping, got {type(spec).__name__}")
    task_id = spec.get("task_id")
    if task_id is not None and task_id != "":
        return {"task_id": str(task_id)}
    if "id" in spec and "prompt" in spec and isinstance(spec["prompt"], str):
        if spec["id"] in ids:
            return {"task_id": spec["id"]}
        # A dataset row is untrusted data, as a task file is: its fixture, env and grader are checked as a task
        # file's are (no folder: no fixture; no env key that loads code or redirects traffic; no grader code outside
        # mcp-gym, no judge endpoint or key, no state grader outside the workspace)
        _TaskDataCheck(f"a dataset row ({type(spec).__name__})", None, ())(as_task(dict(spec)))
        return {"task": dict(spec)}
    text = _message_text(spec.get("prompt")).strip()
    if not text:
        return None
    for t in env.tasks:
        if t.prompt.strip() == text:
            return {"task_id": t.id}
    # a digest, not hash(): str hashes differ between processes (PYTHONHASHSEED), and one prompt must get one id in
    # every worker that records or groups its episodes
    digest = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    return {"task": {"id": f"adhoc-{digest % 10**10:010d}", "prompt": text}}


def parse_model_output(output: str | Mapping[str, Any]) -> tuple[str, list[dict[str, Any]], str, str | None]:
    """``(content, tool_calls, parse_status, parse_error)`` of one model output (text or an assistant message).

    Uses :func:`mcp_gym.parsing.parse_tool_calls` / :func:`~mcp_gym.parsing.parse_message`; the calls come back in
    OpenAI form with ``arguments`` as a dict (the chat view's message format), ids ``call_<turn>_<i>`` of ``turn``
    0 (:func:`mcp_gym.chat.call_id`). Never raises.
    """
    res = _parse(output)
    calls = [{"id": call_id(0, k), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for k, c in enumerate(res.calls)]
    return res.content, calls, res.status, res.error


def _parse(output: Any) -> ParseResult:
    return parse_message(output) if isinstance(output, Mapping) else parse_tool_calls(output)


class TextEnvBatch:
    """``n`` MCP episodes behind a batched, text-in / messages-out ``reset`` and ``step``.

    Args:
        env: A bundled env name (``"Counter"``, ``"SQL"``, ...), a zero-argument factory returning an
            :class:`MCPEnv`, or a list of ready envs (then ``n`` defaults to its length), possibly wrapped: under a
            :class:`~mcp_gym.recording.RecordTrajectories` every step is recorded with the reply's raw text, parse
            status, turn and own text, as the chat policies record theirs (the run converts back to this chat view).
        n: Number of concurrent episodes (one env each; bundled in-process servers are shared, with per-episode
            state, so this is cheap).
        system_prompt: First message of every conversation (``None``: no system message). Tools are not written
            into it: pass :attr:`tools` to your chat template / inference server.
        no_tool_call: What a reply without a parseable tool call does: ``"error"`` (the chat view's feedback as a
            ``user`` message; the step counts toward ``max_steps``) or ``"submit"`` (the text is the final answer;
            the episode ends -- unlike the policies and the SFT export, which end episodes with the ``submit`` tool).
        max_calls_per_turn: Tool calls executed per reply; extra calls get an error message.
        show_resources: Append the env's observed resources to the first user message, and the resources that
            changed to each tool message.
        env_kwargs: Keyword arguments of ``make_env`` (bundled env names only).
    """

    def __init__(
        self,
        env: str | Callable[[], MCPEnv] | Sequence[MCPEnv],
        n: int | None = None,
        *,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        no_tool_call: NoToolCall = "error",
        max_calls_per_turn: int = 8,
        show_resources: bool = True,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if no_tool_call not in ("error", "submit"):
            raise ValueError(f"no_tool_call must be 'error' or 'submit', got {no_tool_call!r}")
        if isinstance(env, Sequence) and not isinstance(env, str):
            self.envs: list[MCPEnv] = list(env)
            if n is not None and n != len(self.envs):
                raise ValueError(f"n={n} but {len(self.envs)} envs were given")
        else:
            if n is None or n < 1:
                raise ValueError("n (the number of episodes) must be >= 1")
            factory = resolve_env_factory(env, env_kwargs)
            self.envs = [factory() for _ in range(n)]
        if not self.envs:
            raise ValueError("TextEnvBatch needs at least one env")
        self.n = len(self.envs)
        self.system_prompt = system_prompt
        self.no_tool_call: NoToolCall = no_tool_call
        self.max_calls_per_turn = max_calls_per_turn
        self.show_resources = show_resources
        self._rt = self.envs[0].unwrapped._rt
        self.dones = [True] * self.n
        self.returns = [0.0] * self.n
        self.histories: list[list[dict[str, Any]]] = [[] for _ in range(self.n)]
        """Each episode's full conversation so far (initial messages, assistant replies, tool messages)."""
        self._views: list[ChatView | None] = [None] * self.n

    # -- public API -----------------------------------------------------------------------------------------------
    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI tool schemas of episode 0 (``submit`` included); see :meth:`tools_of` for one episode."""
        return self.tools_of(0)

    def tools_of(self, i: int) -> list[dict[str, Any]]:
        """The OpenAI tool schemas episode ``i`` currently offers (tools may change mid-episode)."""
        return env_tools(self.envs[i])

    @property
    def all_done(self) -> bool:
        """Every episode is over."""
        return all(self.dones)

    def reset(self, tasks: Sequence[Any] | None = None, seed: int | None = None) -> list[list[dict[str, Any]]]:
        """Start ``n`` episodes; returns each one's initial messages (``[system?, user]``).

        Args:
            tasks: One spec per episode (see :func:`reset_options`: ``None``, a task id, a prompt, a
                :class:`Task` or a dataset row), or ``None`` to draw every task with the envs' RNGs.
            seed: Episode ``i`` is reset with ``seed + i``.
        """
        return self._rt.call(self._areset_all, tasks, seed)

    def step(self, outputs: Sequence[str | Mapping[str, Any]]) -> list[StepOut]:
        """Apply one model output (text or assistant message) per episode; returns one :class:`StepOut` each."""
        return self._rt.call(self._astep_all, outputs)

    async def areset(self, tasks: Sequence[Any] | None = None, seed: int | None = None) -> list[list[dict[str, Any]]]:
        """Async :meth:`reset` (from any asyncio loop)."""
        return await self._rt.acall(self._areset_all, tasks, seed)

    async def astep(self, outputs: Sequence[str | Mapping[str, Any]]) -> list[StepOut]:
        """Async :meth:`step` (from any asyncio loop)."""
        return await self._rt.acall(self._astep_all, outputs)

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()

    def __enter__(self) -> TextEnvBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- implementation -------------------------------------------------------------------------------------------
    async def _areset_all(self, tasks: Sequence[Any] | None, seed: int | None) -> list[list[dict[str, Any]]]:
        if tasks is not None and len(tasks) != self.n:
            raise ValueError(f"got {len(tasks)} task specs for {self.n} episodes")
        specs = list(tasks) if tasks is not None else [None] * self.n
        return list(await asyncio.gather(*(
            self._areset_one(i, spec, None if seed is None else seed + i) for i, spec in enumerate(specs)
        )))

    async def _areset_one(self, i: int, spec: Any, seed: int | None) -> list[dict[str, Any]]:
        env = self.envs[i]
        obs, info = await areset(env, seed=seed, options=reset_options(env, spec))
        self.dones[i] = False
        self.returns[i] = 0.0
        view = ChatView(obs["task"], obs["resources"], system_prompt=self.system_prompt,
                        show_resources=self.show_resources, notice=str(obs.get("result") or ""),
                        tools=self.tools_of(i))
        self._views[i] = view
        self.histories[i] = view.messages
        return [dict(m) for m in view.messages]

    async def _astep_all(self, outputs: Sequence[str | Mapping[str, Any]]) -> list[StepOut]:
        if len(outputs) != self.n:
            raise ValueError(f"got {len(outputs)} outputs for {self.n} episodes")
        if self.n == 1:  # one episode (a trainer face's env): no task to spawn, one loop turn less per step
            return [await self._astep_one(0, outputs[0])]
        return list(await asyncio.gather(*(self._astep_one(i, out) for i, out in enumerate(outputs))))

    def _base_info(self, i: int) -> dict[str, Any]:
        env = self.envs[i].unwrapped
        return {"episode_id": env.episode_id, "task_id": env.task.id if env.task else None, "step": env.steps,
                "episode_return": self.returns[i]}

    async def _astep_one(self, i: int, output: str | Mapping[str, Any]) -> StepOut:
        if self.dones[i]:
            info: dict[str, Any] = {"tool_calls": [], "parse_status": None, "parse_error": None, "raw_text": None,
                                    "errors": [], "terminated": False, "truncated": False, "termination": None,
                                    "tools_changed": False}
            return StepOut([], 0.0, True, {**info, **self._base_info(i), "skipped": True})
        view = self._views[i]
        assert view is not None
        parsed = _parse(output)
        content = assistant_content(parsed)
        # what a recorder on top of the env stores with each step (the chat policies send the same keys)
        record = {"raw_text": parsed.raw_text, "parse_status": parsed.status, "turn": view.turn,
                  "assistant_content": content} if getattr(self.envs[i], "accepts_text_actions", False) else {}
        ids = view.reply(content, parsed.calls)
        calls = [{"id": id, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                 for c, id in zip(parsed.calls, ids, strict=True)]
        info = {
            "tool_calls": calls, "parse_status": parsed.status, "parse_error": parsed.error,
            "raw_text": output if isinstance(output, str) else None, "errors": [],
            "terminated": False, "truncated": False, "termination": None, "tools_changed": False, "skipped": False,
        }
        messages: list[dict[str, Any]] = []
        reward = 0.0
        if not calls:
            if self.no_tool_call == "submit":
                r, obs = await self._apply(i, {"tool": "submit", "arguments": {"answer": parsed.content}, **record},
                                           info)
                reward += r
                if info.pop("turn_ended", False):  # a conversation's user turn ended: the next user message
                    messages.extend(view.end_turn(obs["task"], obs["resources"], tools=self._told(i, info)))
            else:
                error = ToolCallError("parse_error", parsed.error or "no tool call found", code=parsed.status).as_dict()
                r, obs = await self._apply(i, {"tool": "", "arguments": {}, **record}, info, error)  # as the policies
                reward += r
                messages.append(view.no_call(parsed.status, obs["resources"], self._told(i, info)))
        for k, (call, id) in enumerate(zip(parsed.calls, ids, strict=True)):
            if self.dones[i] or k >= self.max_calls_per_turn:
                text = ("Error: the episode is over; this call was not executed." if self.dones[i] else
                        f"Error: at most {self.max_calls_per_turn} tool calls are executed per reply; call it again.")
                message = {"role": "tool", "tool_call_id": id, "name": call.name, "content": text}
                view.messages.append(message)
            else:
                r, obs = await self._apply(i, {**call.to_action(), **record}, info)
                reward += r
                if info.pop("turn_ended", False):  # the submit became the turn's reply; later calls are not run
                    messages.extend(view.end_turn(obs["task"], obs["resources"], id=id, answer=info["turn_answer"],
                                                  tools=self._told(i, info)))
                    break
                message = view.tool_result(id, call.name, obs["result"], obs["resources"], self._told(i, info))
            messages.append(message)
        info.pop("changed_now", None)
        info.update(self._base_info(i))
        if info["tools_changed"]:
            info["tools"] = self.tools_of(i)
        return StepOut([dict(m) for m in messages], reward, self.dones[i], info)

    def _told(self, i: int, info: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The tools episode ``i`` offers now if the action just applied changed them (the chat view then ends the
        message answering it with :func:`~mcp_gym.chat.tools_note`, as the chat policies' view does), else ``None``."""
        return self.tools_of(i) if info.pop("changed_now", False) else None

    async def _apply(
        self, i: int, action: dict[str, Any], info: dict[str, Any], error: dict[str, Any] | None = None
    ) -> tuple[float, dict[str, Any]]:
        """Step episode ``i`` with one action; returns ``(reward, observation)`` and updates ``info``.

        ``error`` replaces the env's error description in ``info["errors"]`` (used for unparseable replies).
        """
        env = self.envs[i]
        obs, reward, terminated, truncated, step_info = await astep(env, action)
        reward = float(reward)
        self.returns[i] += reward
        if error is not None or step_info.get("error"):
            info["errors"].append(error or step_info["error"])
        info["changed_now"] = bool(step_info.get("tools_changed"))  # read (and dropped) by _told
        info["tools_changed"] = info["tools_changed"] or info["changed_now"]
        for key in ("success", "final_answer", "turn", "turns", "turn_answer"):
            if key in step_info:
                info[key] = step_info[key]
        if "turn_answer" in step_info:  # a submit ended a user turn of a conversation
            info["turn_ended"] = True
        if terminated or truncated:
            self.dones[i] = True
            info.update(terminated=bool(terminated), truncated=bool(truncated),
                        termination=step_info.get("termination"))
        return reward, obs
