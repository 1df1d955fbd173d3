"""OpenEnv adapter: any mcp-gym env served as an OpenEnv environment (``mcp-gym serve-openenv ENV``).

OpenEnv clients (``openenv.core``'s ``MCPToolClient`` and ``GenericEnvClient``, which the tests drive, and the
trainers' integrations built on them) talk to an environment server over a WebSocket (``/ws``): one environment per
connection, kept for the connection's life, with ``reset``, ``step(action)`` and ``state`` messages.
:func:`create_app` builds that server (OpenEnv's own ``create_app``) over :class:`MCPGymEnvironment`, one
:class:`~mcp_gym.env.MCPEnv` episode per session and many sessions at once; the actions are OpenEnv's MCP actions::

    {"type": "list_tools"}                                          -> tools (name, description, input_schema)
    {"type": "call_tool", "tool_name": "add", "arguments": {...}}   -> result text, error, reward, done

``reset`` takes ``task_id`` (or ``prompt``, matched against the env's task prompts; neither: a task drawn with
``seed``) and returns the chat view's opening (:mod:`mcp_gym.chat`): ``messages`` ([system, user with the observed
resources]), ``tool_schemas`` (OpenAI schemas, ``submit`` included), ``task_id``, ``episode_id``. A ``call_tool``
observation carries ``result`` (the chat view's tool message: the result text, then the resources that changed),
``reward`` (the env's step reward; the verifier's grade arrives on ``submit``), ``done``, ``error`` (OpenEnv's
``ToolError`` when the call was refused or failed in transport; a tool's own error is in ``result``), and
``step_error`` (mcp-gym's error: kind, message), ``success``, ``termination``, ``episode_return``, ``step`` and
``tool_schemas`` when the tool list changed (OpenEnv sends no ``metadata``; ``MCPToolClient`` reads the OpenEnv fields,
``GenericEnvClient`` all of them). An action's ``metadata`` may carry the model output it came from (``raw_text``,
``parse_status``, ``turn``, ``assistant_content``): with ``record_to`` they are recorded with the step, and every
episode lands in an mcp-gym run (viewer, SFT export) as if played through ``MCPEnv`` directly.

The sessions' envs run on the runtime hosted by the server's event loop (:meth:`Runtime.hosted
<mcp_gym.client.runtime.Runtime.hosted>`, taken by the app on its first request): OpenEnv awaits ``reset_async`` and
``step_async`` on that loop, so a step is awaited in place, with no thread hop (OpenEnv makes and closes each session's
env in a worker thread, whose calls are scheduled onto the loop).

OpenEnv's ``/mcp`` JSON-RPC pass-through (its "production mode") needs a FastMCP server object and is not offered: the
step API above is the episode (an agent that only needs the tools can talk MCP to the env's servers themselves).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.http_server import create_app as _openenv_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_types import (
        CallToolAction,
        CallToolObservation,
        ListToolsAction,
        ListToolsObservation,
        Tool,
        ToolError,
        ToolErrorType,
    )
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
    from openenv.core.mcp_client import MCPToolClient
    from pydantic import Field
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("mcp_gym.openenv needs OpenEnv: pip install 'mcp-gym[openenv]'") from e

from mcp_gym.async_env import aclose, areset, astep
from mcp_gym.chat import DEFAULT_SYSTEM_PROMPT, ChatView, env_tools
from mcp_gym.client.runtime import Runtime
from mcp_gym.env import MCPEnv
from mcp_gym.parsing import ACTION_EXTRA_KEYS, ToolCall
from mcp_gym.protocol import SUBMIT_DESCRIPTION, SUBMIT_SCHEMA
from mcp_gym.recording import RecordTrajectories
from mcp_gym.serverkit import RequestGuard
from mcp_gym.textenv import reset_options, resolve_env_factory

__all__ = ["MCPGymEnvironment", "MCPGymClient", "ResetObservation", "StepObservation", "create_app",
           "DEFAULT_IDLE_TIMEOUT"]

DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds a session may sit idle (no ``reset`` or ``step``) before the server closes it and frees its slot (OpenEnv's
idle-session reaper, which looks every ``max(timeout / 4, 5)`` seconds): without it, ``max_sessions`` idle sockets
would lock every new client out. Keep it above the longest ``reset`` or ``step`` (OpenEnv counts a request's activity
when it ends)."""

log = logging.getLogger(__name__)

_TOOL_ERRORS = {
    "unknown_tool": ToolErrorType.TOOL_NOT_FOUND,
    "malformed": ToolErrorType.INVALID_ARGS,
    "invalid_arguments": ToolErrorType.INVALID_ARGS,
    "too_large": ToolErrorType.INVALID_ARGS,
    "timeout": ToolErrorType.TIMEOUT,
    "server_dead": ToolErrorType.TRANSPORT_ERROR,
    "connection_lost": ToolErrorType.TRANSPORT_ERROR,
    "jsonrpc": ToolErrorType.TRANSPORT_ERROR,
    "invalid_result": ToolErrorType.TRANSPORT_ERROR,
}
"""mcp-gym error kind -> OpenEnv ``ToolErrorType`` (``tool_error``, the tool's own error, stays in ``result``; any
other kind is an ``execution_error``)."""


class ResetObservation(Observation):
    """What ``reset`` returns: the chat view's opening and the tools offered."""

    messages: list[dict[str, Any]] = Field(description="The chat view's [system, user] messages (resources included)")
    tool_schemas: list[dict[str, Any]] = Field(description="OpenAI function schemas of the tools, submit included")
    task_id: str | None = Field(default=None, description="The episode's task")
    episode_id: str | None = Field(default=None, description="mcp-gym's episode id (as recorded)")
    reset_errors: list[dict[str, Any]] = Field(default_factory=list, description="Servers that failed to reset")


class StepObservation(CallToolObservation):
    """What ``call_tool`` returns: OpenEnv's ``CallToolObservation`` (``result`` is the chat view's tool message)
    plus the step's outcome."""

    step_error: dict[str, Any] | None = Field(default=None, description="mcp-gym's error of the step (kind, message)")
    success: bool | None = Field(default=None, description="The grade's verdict when the episode ended graded")
    termination: str | None = Field(default=None, description="Why the episode ended (submit, done, max_steps, ...)")
    episode_return: float = Field(default=0.0, description="Sum of the episode's rewards so far")
    step: int = Field(default=0, description="Steps taken in the episode")
    tool_schemas: list[dict[str, Any]] | None = Field(default=None, description="The new tool list, when it changed")


class MCPGymEnvironment(Environment[Action, Observation, State]):
    """One OpenEnv session: an :class:`MCPEnv` episode driven by MCP tool actions (see the module docs).

    Args:
        make_env: Zero-argument factory of the session's :class:`MCPEnv`.
        record_to: Run directory the session's episodes are recorded into (``None``: not recorded).
        policy: The recorded policy name.
        system_prompt: The chat view's system message in the reset's ``messages`` (``None``: none).
        show_resources: Render observed resources into the user turn and changed ones into ``result``.
        serving: The app's serving loop (:func:`create_app` passes it): the env is made on the runtime it hosts.
        idle_timeout: The server's idle-session timeout (seconds), named when an idle session is closed.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session has its own MCPEnv (bundled servers keep per-episode state)

    def __init__(self, make_env: Callable[[], MCPEnv], *, record_to: str | None = None, policy: str = "openenv",
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, show_resources: bool = True,
                 serving: ServingLoop | None = None, idle_timeout: float | None = None) -> None:
        super().__init__()
        self.serving = serving
        self.idle_timeout = idle_timeout
        self.last_active = time.monotonic()
        self.closed = False
        rt = serving.runtime if serving is not None else None
        with rt.as_default() if rt is not None and not rt.closed else contextlib.nullcontext():
            inner = make_env()
        self.env: Any = inner if record_to is None else RecordTrajectories(
            inner, record_to, policy=policy, metadata={"trainer": "openenv"})
        self.system_prompt = system_prompt
        self.show_resources = show_resources
        self.view: ChatView | None = None
        self.episode_return = 0.0
        self.done = False
        self._recorded = record_to is not None
        self._listed_unreset: list[str] | None = None  # tools a list_tools before any reset listed (a drawn task's)

    @property
    def mcp_env(self) -> MCPEnv:
        """The session's :class:`MCPEnv`."""
        return self.env.unwrapped

    # -- reset ----------------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              prompt: str | None = None, **kwargs: Any) -> Observation:
        """Start an episode (sync: OpenEnv's stateless ``POST /reset``)."""
        return self.mcp_env.runtime.call(self.reset_async, seed, episode_id, task_id, prompt)

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
                          prompt: str | None = None, **kwargs: Any) -> Observation:
        """Start an episode on ``task_id`` (or the task whose prompt is ``prompt``, or one drawn with ``seed``)."""
        self._active()
        spec = {"task_id": task_id} if task_id else ({"prompt": prompt} if prompt else None)
        options = reset_options(self.mcp_env, spec) or {}
        if episode_id is not None and self._recorded:
            options["metadata"] = {"openenv_episode_id": episode_id}
        obs, info = await areset(self.env, seed=seed, options=options or None)
        env = self.mcp_env
        tools = env_tools(env)
        self.view = ChatView(obs["task"], obs["resources"], system_prompt=self.system_prompt,
                             show_resources=self.show_resources, notice=str(obs.get("result") or ""), tools=tools)
        self.episode_return = 0.0
        self.done = False
        listed, self._listed_unreset = self._listed_unreset, None
        names = [t["function"]["name"] for t in tools]
        if listed is not None and sorted(listed) != sorted(names):
            log.warning("mcp-gym serve-openenv: a session listed tools before its first reset (those of a drawn task); "
                        "task %r offers other tools (added: %s; gone: %s): a client that keeps that list (verifiers' "
                        "OpenEnv taskset) shows the model tools the episode does not have; the reset's tool_schemas "
                        "are this task's", env.task.id if env.task else None,
                        ", ".join(n for n in names if n not in listed) or "none",
                        ", ".join(n for n in listed if n not in names) or "none")
        return ResetObservation(done=False, reward=None, messages=[dict(m) for m in self.view.messages],
                                tool_schemas=tools, task_id=env.task.id if env.task else None,
                                episode_id=env.episode_id, reset_errors=list(info.get("reset_errors") or []))

    # -- step -----------------------------------------------------------------------------------------------------
    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """One action (sync: OpenEnv's stateless ``POST /step``)."""
        return self.mcp_env.runtime.call(self.step_async, action)

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """``list_tools`` -> the tools offered now; ``call_tool`` -> one env step (see the module docs)."""
        self._active()
        if isinstance(action, ListToolsAction):
            if self.view is None:  # OpenEnv lists tools before any reset: start an episode to list them
                await self.reset_async()
                tools = self._tools()
                self._listed_unreset = [t.name for t in tools]  # the next reset says if its task's tools differ
                return ListToolsObservation(tools=tools, done=self.done, reward=None)
            return ListToolsObservation(tools=self._tools(), done=self.done, reward=None)
        if not isinstance(action, CallToolAction):
            raise ValueError(f"mcp-gym serves MCP tool actions (list_tools, call_tool), got {type(action).__name__}")
        if self.view is None:
            raise RuntimeError("call reset before call_tool")
        step_action: dict[str, Any] = {"tool": action.tool_name, "arguments": dict(action.arguments)}
        if self._recorded:  # the model output the call came from, recorded with the step
            step_action.update({k: action.metadata[k] for k in ACTION_EXTRA_KEYS if k in action.metadata})
        obs, reward, terminated, truncated, info = await astep(self.env, step_action)
        self.episode_return += float(reward)
        self.done = bool(terminated or truncated)
        ids = self.view.reply(str(action.metadata.get("assistant_content") or ""),
                              [ToolCall(action.tool_name, dict(action.arguments))])
        changed = env_tools(self.mcp_env) if info.get("tools_changed") else None
        message = self.view.tool_result(ids[0], action.tool_name, obs["result"], obs["resources"], changed)
        error = info.get("error")
        kind = (error or {}).get("kind")
        tool_error = None if kind in (None, "tool_error") else ToolError(
            error_type=_TOOL_ERRORS.get(kind, ToolErrorType.EXECUTION_ERROR), message=str((error or {}).get("message")))
        return StepObservation(
            tool_name=action.tool_name, result=message["content"], error=tool_error, done=self.done,
            reward=float(reward), step_error=error, success=info.get("success"), termination=info.get("termination"),
            episode_return=self.episode_return, step=self.mcp_env.steps,
            tool_schemas=changed)

    def _tools(self) -> list[Tool]:
        env = self.mcp_env
        tools = [Tool(name=t["name"], description=t.get("description") or "", input_schema=t["input_schema"])
                 for t in env.tool_catalogue()]
        if "submit" in env.action_space.tool_names and not any(t.name == "submit" for t in tools):
            tools.append(Tool(name="submit", description=SUBMIT_DESCRIPTION, input_schema=SUBMIT_SCHEMA))
        return tools

    # -- the rest of OpenEnv's interface --------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """``episode_id``, ``step_count``, and ``task_id``, ``episode_return``, ``done``."""
        env = self.mcp_env
        return State(episode_id=env.episode_id, step_count=env.steps, task_id=env.task.id if env.task else None,
                     episode_return=self.episode_return, done=self.done)

    def get_metadata(self) -> EnvironmentMetadata:
        """The env's name and task count."""
        env = self.mcp_env
        return EnvironmentMetadata(name=env.env_id or "mcp-gym", description=(
            f"An mcp-gym environment ({len(env.tasks)} tasks) served with MCP tool actions (list_tools, call_tool)."))

    def close(self) -> None:
        """Close the session's env (stops its stdio servers; a recorder drops an unfinished episode). OpenEnv closes a
        stateless request's env (``POST /reset``, ``/step``) on the serving loop, which cannot wait here: the close
        runs as a task there (the app waits for it before it stops); a session's env is closed from OpenEnv's worker
        thread, and waited for."""
        if self.closed:
            return
        self.closed = True
        idle = time.monotonic() - self.last_active
        if self.idle_timeout is not None and idle > self.idle_timeout:
            log.warning("mcp-gym serve-openenv: closed a session idle for %.0f s (idle timeout %g s)", idle,
                        self.idle_timeout)
        rt = self.mcp_env.runtime
        if rt.in_loop():
            task = rt.loop.create_task(aclose(self.env), name="mcp-gym-openenv-close")
            if self.serving is not None:
                self.serving.closing.add(task)
                task.add_done_callback(self.serving.closing.discard)
        else:
            self.env.close()

    def _active(self) -> None:
        """A request of the session: refused once the session is closed (idle too long), else noted as activity."""
        if self.closed:
            raise RuntimeError("this OpenEnv session is closed (idle longer than the server's idle timeout, "
                               f"{self.idle_timeout:g} s); open a new session" if self.idle_timeout is not None
                               else "this OpenEnv session is closed; open a new session")
        self.last_active = time.monotonic()


def create_app(env: str | Callable[[], MCPEnv], *, env_kwargs: Mapping[str, Any] | None = None,
               max_sessions: int = 64, record_to: str | None = None, policy: str = "openenv",
               system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, show_resources: bool = True,
               host: str = "127.0.0.1", token: str | None = None,
               idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT) -> Any:
    """The OpenEnv server (a FastAPI app: ``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/health``, ...)
    of an mcp-gym env.

    Args:
        env: A bundled env name, ``"package.module:function"`` or a zero-argument factory returning an
            :class:`MCPEnv`; each session makes its own.
        env_kwargs: ``make_env`` / factory keyword arguments.
        max_sessions: Most WebSocket sessions at once (OpenEnv answers ``CAPACITY_REACHED`` past it).
        record_to: Record every session's episodes into this run directory.
        policy: The recorded policy name.
        system_prompt: The system message of the reset's ``messages``.
        show_resources: Render observed resources into the messages and results.
        host: The address the app is served on: on a loopback address a foreign ``Host`` header is answered 421
            and a foreign ``Origin`` 403, over HTTP and on the WebSocket upgrade, as ``mcp-gym serve --transport
            http`` answers (:class:`mcp_gym.serverkit.RequestGuard`).
        token: A bearer token every request must carry (``Authorization: Bearer TOKEN``, or a client URL
            ``http://user:TOKEN@host:port``); ``None``: none (fine on a loopback address).
        idle_timeout: Seconds before an idle session is closed and its slot freed (:data:`DEFAULT_IDLE_TIMEOUT`;
            ``None``: never).
    """
    factory = resolve_env_factory(env, env_kwargs)
    serving = ServingLoop()
    session = functools.partial(MCPGymEnvironment, factory, record_to=record_to, policy=policy,
                                system_prompt=system_prompt, show_resources=show_resources, serving=serving,
                                idle_timeout=idle_timeout)
    limits = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout)
    app = _openenv_app(session, CallToolAction, StepObservation, env_name=env if isinstance(env, str) else None,
                       concurrency_config=limits)
    app.add_middleware(_QuietDisconnect)
    app.add_middleware(_HostRuntime, serving=serving)
    app.add_middleware(RequestGuard, host=host, token=token)
    app.router.on_shutdown.append(serving.finish_closing)
    return app


class ServingLoop:
    """The runtime hosted on the event loop that serves an app (``None`` until its first request), on which the
    sessions' envs are made."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
        self.closing: set[asyncio.Task[None]] = set()
        """Closes of stateless requests' envs still running on the loop."""

    async def finish_closing(self) -> None:
        """Wait for the closes still running (the app's shutdown)."""
        if self.closing:
            await asyncio.wait(set(self.closing), timeout=30)


class _HostRuntime:
    """ASGI middleware: on each request, the serving loop's hosted runtime (made on the first) into ``serving``."""

    def __init__(self, app: Any, serving: ServingLoop) -> None:
        self.app, self.serving = app, serving

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        rt = self.serving.runtime
        if scope["type"] != "lifespan" and (rt is None or rt.closed or rt.loop is not asyncio.get_running_loop()):
            self.serving.runtime = await Runtime.hosted()
        await self.app(scope, receive, send)


class _QuietDisconnect:
    """ASGI middleware: OpenEnv's ``/ws`` handler closes a socket the client has already closed, which raises
    ``WebSocketDisconnect`` after the session is over (logged by uvicorn as an application error on every normal
    disconnect); that one exception is dropped, everything else passes."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        with contextlib.suppress(WebSocketDisconnect):
            await self.app(scope, receive, send)


class MCPGymClient(MCPToolClient):
    """OpenEnv's ``MCPToolClient`` (``list_tools``, ``call_tool``, ``step``) whose ``reset`` returns the episode's
    opening as a :class:`ResetObservation` (``messages`` with the task prompt, ``tool_schemas``, ``task_id``,
    ``episode_id``) and whose steps return a :class:`StepObservation` (``step_error``, ``success``,
    ``episode_return``, ...): ``MCPToolClient`` itself keeps only OpenEnv's fields, so its reset carries no prompt.
    Its ``list_tools`` cache is dropped at each reset and whenever a step says the tool list changed (a tool a
    conversation's next user turn adds, a server's ``tools/list_changed``), so it never lists stale tools."""

    tools_stale = False
    """Whether ``list_tools``'s cache is older than the last reset or tools change (the next listing asks again)."""

    async def list_tools(self, use_cache: bool = True) -> list[Any]:
        """OpenEnv's ``list_tools``, asking the server again after a reset or a step that changed the tools (through
        its public ``use_cache``: OpenEnv keeps the cache in a private attribute)."""
        tools: list[Any] = await super().list_tools(use_cache=use_cache and not self.tools_stale)
        self.tools_stale = False  # (a listing that raised leaves it set: the next one asks again)
        return tools

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Observation]:
        obs = payload.get("observation") or {}
        fields = {"done": payload.get("done", False), "reward": payload.get("reward")}
        if "messages" in obs and "tool_name" not in obs:
            observation: Observation = ResetObservation(**{**obs, **fields})
            self.tools_stale = True
        elif "tool_name" in obs:
            observation = StepObservation(**{**obs, **fields})
            if obs.get("tool_schemas") is not None:
                self.tools_stale = True
        else:
            return super()._parse_result(payload)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))
