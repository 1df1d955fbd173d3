"""MCPEnv: any set of MCP servers as a Gymnasium environment.

The action space is the servers' ``tools/list`` (:class:`~mcp_gym.spaces.ToolCallSpace`, updated on
``notifications/tools/list_changed``); an action is ``{"tool": name, "arguments": {...}}`` or the built-in final answer
``{"tool": "submit", "arguments": {"answer": "..."}}``. Observations are ``{"task", "result", "resources"}`` texts.
Rewards follow the convention of :mod:`mcp_gym.rewards`, and a task verifier grades ``submit``.

One implementation, two faces: ``areset``/``astep`` are coroutines; ``reset``/``step`` are their synchronous face (they
run the :class:`~mcp_gym.client.runtime.Runtime` loop that owns the sessions in the caller's thread, or hop onto its
loop thread once it has one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, SupportsFloat, cast

import anyio
import gymnasium as gym

from mcp_gym import _workspace as _ws
from mcp_gym._budget import Budget
from mcp_gym._compat.stdlib import own_task
from mcp_gym._stateful import note_state_change
from mcp_gym._workspace import fill_task, mentions_workspace, prepare_episode_servers
from mcp_gym.client._tools import ToolFilter
from mcp_gym.client.connection import ServerConnection
from mcp_gym.client.host import (
    CallOutcome,
    MCPHost,
    ToolEntry,
    content_json,
    render_content,
)
from mcp_gym.client.runtime import Runtime, default_runtime
from mcp_gym.client.specs import ServerSpec, normalise_servers, redact_text
from mcp_gym.episode import Episode, FromEpisode, ObservedResources, StepInfo, StepResult
from mcp_gym.errors import MCPGymError
from mcp_gym.graders import Grade, Grading
from mcp_gym.graders._shared import release as release_shared
from mcp_gym.graders.episode import grade_step_end, grade_submit, is_graded
from mcp_gym.graders.session import state_snapshot as read_state
from mcp_gym.options import Connection, EnvSettings, Limits, ResetMode, Scoring, resolve_settings, split_settings
from mcp_gym.protocol import RESET_TOOL, SUBMIT_SCHEMA, ToolCallError, openai_tools, result_problem
from mcp_gym.rewards import ConventionReward, RewardFn, StepContext, read_reward
from mcp_gym.spaces import TextMapping, ToolCallSpace, Utf8Text
from mcp_gym.tasks import Task, as_task

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MCPEnv", "MCPGymError", "InvalidAction", "ToolCallFailed"]

_SUCCESS_TOLERANCE = 1e-9  # float slack comparing a return with success_threshold (10 x 0.1 = 0.9999999999999999)
_NO_TASK = Task(id="no-task", prompt="")  # the task of an env without tasks (its servers reset to their default)


class InvalidAction(MCPGymError):
    """The action is malformed, names an unknown tool or has invalid arguments (strict mode)."""


class ToolCallFailed(MCPGymError):
    """The call reached no result: JSON-RPC error, timeout, dead server (strict mode)."""


class MCPEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """A Gymnasium environment over one or several MCP servers.

    Args:
        servers: alias -> :class:`Stdio` / :class:`Http` / :class:`InProcess` (a single spec is named ``"server"``).
        tasks: Tasks (:class:`~mcp_gym.tasks.Task`, record dicts or prompt strings); ``reset`` draws one with the
            seeded RNG unless ``options={"task_id": ...}`` names it.
        limits: Budgets, timeouts and sizes (:class:`~mcp_gym.options.Limits`: ``max_steps`` 20, ``call_timeout``
            30 s, ...).
        scoring: Verifier, graders and rewards (:class:`~mcp_gym.options.Scoring`; default: exact match for tasks
            with an ``answer``, the servers' reward convention).
        connection: How the servers are treated (:class:`~mcp_gym.options.Connection`: roots, sampling,
            elicitation, tool prefixes, which tools the agent sees, reset mode, spare servers).
        observe_resources: Resource URIs to observe (templates such as ``notes://{title}`` are filled from the task's
            ``data``), ``"all"`` for every listed resource, or ``None``. The task's own ``resources`` are added.
        strict: Raise :class:`InvalidAction` / :class:`ToolCallFailed` instead of returning an error observation.
        env_id: Name recorded with trajectories.
        runtime: The event-loop runtime owning the sessions (default: the process-wide one).
        render_mode: ``"ansi"`` (:meth:`render` returns the last observation's text) or ``None``.
        **settings: Each field of the three groups as a keyword of its own (``max_steps=10``, ``verifier=...``:
            :class:`~mcp_gym.options.EnvSettings`); a setting given both ways is a ``TypeError`` naming it.

    Example (an in-process server; :class:`Stdio` and :class:`Http` specs work the same)::

    >>> from mcp_gym import InProcess, MCPEnv
    >>> from mcp_gym.servers.counter import make_server
    >>> env = MCPEnv({"counter": InProcess(make_server())}, ["Move the counter to 3."])
    >>> obs, info = env.reset(seed=0)
    >>> env.action_space.tool_names                       # the server's tools, plus the built-in submit
    ['add', 'get_count', 'submit']
    >>> obs, reward, terminated, truncated, info = env.step({"tool": "add", "arguments": {"amount": 9}})
    >>> info["error"]["kind"], info["error"]["argument"]  # refused before any call: add takes -5..5
    ('invalid_arguments', 'amount')
    >>> obs, reward, terminated, truncated, info = env.step({"tool": "add", "arguments": {"amount": 3}})
    >>> reward, terminated                                # the server's reward convention: target reached
    (1.0, True)
    >>> env.close()
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        servers: Mapping[str, ServerSpec] | ServerSpec,
        tasks: Sequence[Task | Mapping[str, Any] | str] | None = None,
        *,
        limits: Limits | None = None,
        scoring: Scoring | None = None,
        connection: Connection | None = None,
        observe_resources: Sequence[str] | Literal["all"] | None = None,
        strict: bool = False,
        env_id: str | None = None,
        runtime: Runtime | None = None,
        render_mode: str | None = None,
        **settings: Unpack[EnvSettings],
    ) -> None:
        init_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__", "settings")} | settings
        given, unknown = split_settings({**settings, "limits": limits, "scoring": scoring, "connection": connection})
        if unknown:
            raise TypeError(f"MCPEnv() got an unexpected keyword argument {next(iter(unknown))!r}")
        o = resolve_settings(given)  # every grouped setting: given, else its default
        self.tasks: list[Task] = [as_task(t, i) for i, t in enumerate(tasks or [])]
        self.max_steps = o["max_steps"]
        self._limits = Budget(o["max_turns"], o["max_tool_calls"], o["max_steps"])  # checks them; episodes: a fresh one
        self.observe_resources = observe_resources
        self.call_timeout = o["call_timeout"]
        self.reset_timeout = o["reset_timeout"]
        self._inflight: Counter[str] = Counter()  # servers a reset is waiting on (failed if the reset times out)
        self.strict = strict
        self.verifier = o["verifier"]
        grader = o["grader"]
        self.grading: Grading | None = grader if isinstance(grader, Grading) else (
            Grading(grader, o["judge"]) if grader is not None or self.verifier is None else None)
        self.reward_fn: RewardFn = o["reward_fn"] or ConventionReward(o["error_penalty"])
        self.error_penalty = o["error_penalty"]
        from mcp_gym.options import compile_error_text

        self.error_text = compile_error_text(o["error_text"])
        """``Scoring.error_text`` compiled: a result whose text it matches is a tool error (``None``: off)."""
        self.reset_mode: ResetMode = o["reset_mode"]
        self.max_observation_chars = o["max_observation_chars"]
        self.success_threshold = o["success_threshold"]
        self.env_id = env_id
        self.render_mode = render_mode
        self.server_templates: Mapping[str, ServerSpec] = normalise_servers(servers)
        """The servers' specs as given (``{workspace}`` unfilled), by alias."""
        self.workspace_servers = frozenset(a for a, sp in self.server_templates.items() if mentions_workspace(sp))
        """The aliases of the servers whose command line or environment names ``{workspace}`` (start at reset)."""
        tap: Callable[[ServerConnection], Any] | None = None
        if any(spec.record is not None for spec in self.server_templates.values()):
            from mcp_gym.cassette.recorder import record_tap as tap
            from mcp_gym.cassette.recorder import refuse_workspace_recording

            refuse_workspace_recording(self.server_templates, self.workspace_servers)  # its cassette cannot replay
        self.host = MCPHost(
            self.server_templates,
            tap=tap,
            sampling=o["sampling"],
            elicitation=o["elicitation"],
            roots=o["roots"],
            prefix_tools=o["prefix_tools"],
            block_destructive=o["block_destructive"],
            tool_filter=ToolFilter(o["include_tools"], o["exclude_tools"]),
        )
        self.spares = _ws.SpareServers(o["spare_servers"] if self.workspace_servers and tap is None else 0)  # 0: off
        self.action_space: ToolCallSpace = ToolCallSpace({}, max_argument_bytes=o["max_argument_bytes"])
        self._space_of: dict[str, ToolEntry] | None = None  # the host catalogue the action space was built from
        self.observation_space = gym.spaces.Dict({"task": Utf8Text(), "result": Utf8Text(), "resources": TextMapping()})
        self._turn_obs = any(t.turns for t in self.tasks)  # conversations: every observation says its user turn
        if self._turn_obs:
            self.observation_space["turn"] = gym.spaces.Discrete(max(len(t.turns) for t in self.tasks) or 1)
        if self.spec is None:  # real servers answer with timings and ids: declare it (check_env honours this)
            self.spec = gym.envs.registration.EnvSpec(
                id=env_id or "mcp_gym/MCPEnv-v0", entry_point="mcp_gym.env:MCPEnv", nondeterministic=True,
                kwargs=init_kwargs,
            )
        self._rt = runtime or default_runtime()
        self._started = False
        self._closed = False
        self._closing: asyncio.Future[None] | None = None  # the close, once started (on the runtime's loop)
        self._episode: Episode | None = None
        self.observed = ObservedResources(self.host, self._waiting_on)
        """The resources the episode observes and their latest texts."""
        if not self._rt.in_loop():
            self._rt.call(self.aconnect)

    # -- sync face ------------------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: pick the task, restore server state, return the first observation and info.

        ``options``: ``task_id`` (one of the env's tasks) or ``task`` (a task or record) picks the task (default: drawn
        with the seeded RNG); ``next_task_id`` or ``next_task`` tells the spare-server pool which task the next reset
        will most likely run (``next_task=None``: none follows), so that task's servers start while this episode runs
        (default: a task like this one; a wrong forecast only costs a server start)."""
        super().reset(seed=seed)
        return self._rt.call(self._areset, seed, options)

    def step(  # type: ignore[override]  # Env.step's info is dict[str, Any]: StepInfo is that dict, typed
        self, action: Any
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, StepInfo]:
        """Call one tool (or ``submit``) and return ``(obs, reward, terminated, truncated, info)``.

        ``info`` is a :class:`~mcp_gym.episode.StepInfo` (a plain dict):

        - every step: ``episode_id``, ``task_id``, ``step`` (1-based), ``error`` (``kind``, ``tool``, ``server``,
          ``argument``, ``code``, ``message``; or ``None``), ``tools_changed``, ``logs`` (servers' log messages);
        - a tool or ``submit`` step: ``tool``, ``server``, ``server_tool`` (its name on the server), ``is_error``,
          ``content`` (all content blocks as JSON, images included), ``structured_content``, ``duration`` (s),
          ``progress`` (notifications), ``termination`` (``done``, ``submit``, ``max_steps``, ``max_turns``,
          ``max_tool_calls``, ``servers_dead``; ``None`` while the episode goes on);
        - ``servers`` (per-server status) when the catalogue changed or every server died;
        - at the end: ``success`` (``True``/``False``, ``None`` when unknown), ``summary`` (``return``, ``length``,
          ``termination``, ``turns``, ``tool_calls``) and, graded, ``grade``; a ``submit`` adds ``final_answer`` and
          ``verifier_reward``;
        - a multi-turn task (``task.turns``): ``turn`` (0-based, the user turn now) and ``turns`` (their count) on
          every step; a ``submit`` that ends a turn before the last starts the next one (the observation's ``task``
          and ``result`` are the next user message) and adds ``turn_answer``.
        """
        ep = self._episode  # no workspace to mask: the step itself (_astep's coroutine less); inline, see Runtime.call
        return self._rt.call(self._play if ep is None or ep.workspace is None else self._astep, action, inline=True)

    @property
    def unwrapped(self) -> MCPEnv:
        """This env itself (the base of any wrappers around it)."""
        return self

    def close(self) -> None:
        """Close every server connection (stops stdio servers); on the runtime's own event loop, which it cannot
        block (async code on a hosted runtime), the close starts as a task there (``await aclose()`` waits for it)."""
        if self._closed or self._rt.closed:  # a closed runtime ended the sessions
            self._ended()
        elif self._rt.in_loop():
            self._rt.loop.create_task(self._close_once())
        else:
            self._rt.call(self._close_once)

    # -- async face -----------------------------------------------------------------------------------------------
    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Async :meth:`reset` for asyncio training loops."""
        super().reset(seed=seed)
        return await self._rt.acall(self._areset, seed, options)

    async def astep(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, StepInfo]:
        """Async :meth:`step`."""
        return await self._rt.acall(self._astep, action)

    async def aclose(self) -> None:
        """Async :meth:`close` (waits for a close already started)."""
        if not self._closed:
            await self._rt.acall(self._close_once)

    async def _close_once(self) -> None:
        self._closing = self._closing or asyncio.ensure_future(self.spares.aclose(then=self.host.close))
        await asyncio.shield(self._closing)
        self._ended()

    def _ended(self) -> None:
        self._closed = True
        release_shared(self)  # what its graders used (a BFCL checker process) and no open env uses is stopped
        self.spares.forget()  # after aclose, nothing left; after the runtime ended, the spares' workspaces
        if self._episode is not None:
            self._episode.drop_workspace()

    # -- public helpers -------------------------------------------------------------------------------------------
    @property
    def runtime(self) -> Runtime:
        """The event-loop runtime that owns this env's sessions (run coroutines that use the env on it)."""
        return self._rt

    @property
    def episode(self) -> Episode | None:
        """The current :class:`~mcp_gym.episode.Episode` (``None`` before the first reset, and while a reset prepares
        the next one: a reset that fails leaves none, so ``step`` asks for a reset)."""
        return self._episode

    # the current episode's state, read-only (``reset`` makes a new episode; before the first, the defaults)
    task = FromEpisode[Task | None]("task", None, "The current episode's task (``None`` before the first reset).")
    episode_id = FromEpisode[str | None]("id", None, "The current episode's id (``None`` before the first reset).")
    steps = FromEpisode[int]("steps", 0, "Steps taken in the current episode.")
    episode_return = FromEpisode[float]("episode_return", 0.0, "The current episode's return (the sum of its rewards).")
    done = FromEpisode[bool]("done", False, "The current episode is over (a ``reset`` is needed).")
    transcript = FromEpisode[list[dict[str, Any]]]("transcript", list, "The current episode's calls so far: ``{tool, "
                                                   "arguments, result}`` (result text cut to 2,000 characters).")
    grade = FromEpisode[Grade | None]("grade", None, "The current episode's grade (``None`` until graded).")
    workspace = FromEpisode[Path | None]("workspace", None, "The current episode's workspace (a fresh directory "
                                           "when a server command line names ``{workspace}``).")
    catalogue_changes = FromEpisode[list[dict[str, Any]]]("catalogue_changes", list, "``{step, tools, hash}`` for "
                                                          "each change of the tool catalogue in the current episode.")

    @property
    def budget(self) -> Budget:
        """The turn and tool-call budgets, and what the current episode used of them."""
        return self._episode.budget if self._episode is not None else self._limits

    @property
    def tools(self) -> list[ToolEntry]:
        """The tools currently offered to the agent (without ``submit``)."""
        return list(self.host.catalogue.values())

    def openai_tools(self) -> list[dict[str, Any]]:
        """The current tools, plus ``submit``, as OpenAI function schemas (for chat-completions ``tools=``; the
        policies send the same, :func:`mcp_gym.protocol.openai_tools`)."""
        return openai_tools(self.tool_catalogue())

    def tool_catalogue(self) -> list[dict[str, Any]]:
        """JSON-able schemas of the current tools (for recording)."""
        return _ws.mask_workspace([e.to_record() for e in self.tools], self.workspace)

    def render(self) -> str | None:
        """``ansi``: the last observation as text."""
        if self.render_mode != "ansi":
            return None
        return self._episode.last_text if self._episode is not None else ""

    # -- implementation -------------------------------------------------------------------------------------------
    async def aconnect(self) -> None:
        """Connect the servers once (construction off the loop and the first ``areset`` do it)."""
        if not self._started:
            self._started = True
            try:
                if self.workspace_servers:  # servers naming {workspace} start at reset, in the episode's workspace
                    async with anyio.create_task_group() as tg:
                        for alias, conn in self.host.connections.items():
                            if alias not in self.workspace_servers:
                                tg.start_soon(conn.start, self._rt.task_group)
                    await self.host.refresh_tools()
                else:
                    await self.host.start(self._rt.task_group)
                self._sync_space()
            except BaseException:
                with anyio.CancelScope(shield=True):  # no server process outlives a failed construction
                    await self.host.close()
                self._closed = True
                raise

    def _sync_space(self) -> bool:
        if self._space_of is self.host.catalogue:  # the host rebuilds (replaces) its catalogue on every change
            return False
        self._space_of = self.host.catalogue
        tools = {name: e.input_schema for name, e in self.host.catalogue.items()}
        tools.setdefault("submit", SUBMIT_SCHEMA)  # a server's own submit is the one offered and called
        return self.action_space.update(tools)

    def _pick_task(self, options: Mapping[str, Any] | None) -> Task:
        opts = dict(options or {})
        if "task" in opts:
            return as_task(opts["task"])
        if "task_id" in opts:
            for t in self.tasks:
                if t.id == opts["task_id"]:
                    return t
            raise ValueError(f"unknown task_id {opts['task_id']!r} ({len(self.tasks)} tasks)")
        if not self.tasks:
            return _NO_TASK
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    async def _areset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        since, task = anyio.current_time(), self._pick_task(options)
        self.spares.expect(_ws.next_task(options, self.tasks))  # options next_task_id / next_task: the pool's forecast
        task_seed = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        previous, self._episode = self._episode, None  # until this reset succeeds there is no episode to step
        if previous is not None:
            self.spares.old.leave(previous)  # removed once no server of that episode runs in it
        ep = Episode(task, task_seed, Budget(self._limits.max_turns, self._limits.max_tool_calls))
        self.host.episode_id = ep.id
        self.host.drain_logs()
        self.host.episode_task, self.host.episode_seed = task.id, task_seed  # sent in _meta (cassette replay)
        try:
            await self.aconnect()  # connecting in the first reset lists tools for this episode (not twice)
            reset_errors = await self._prepare_episode(ep)
        except BaseException:
            self.spares.old.leave(ep)  # a failed reset's workspace goes once its servers are gone (or at close)
            raise
        self._sync_space()
        self._episode = ep
        obs = self._obs(self.host.report_unavailable(reset_errors))  # {task, result, resources} (and turn 0)
        ep.last_text = ep.task.prompt
        info = {
            "episode_id": ep.id,
            "task_id": ep.task.id,
            "seed": task_seed,
            "servers": self.host.server_info(),
            "tools": list(self.action_space.tool_names),
            "catalogue_hash": self.host.catalogue_hash(),
            "tools_changed": False,
            "error": reset_errors[0] if reset_errors else None,
            "reset_errors": reset_errors,
            "logs": self.host.drain_logs(),
            "startup_seconds": self.host.startup_seconds(since),  # servers (re)started for this episode
            "reset_seconds": anyio.current_time() - since,  # the whole reset: set-up, servers, listing
        }
        if ep.task.turns:
            info["turn"], info["turns"] = 0, ep.turn_count
        return _ws.mask_workspace((obs, info), ep.workspace)  # the agent and the recording see {workspace}

    async def _prepare_episode(self, ep: Episode) -> list[dict[str, Any]]:
        """The servers' work of a reset, within ``reset_timeout``: per-episode set-up (workspace, task env), server
        resets, listings, observed resources. Returns the reset errors."""
        reset_errors: list[dict[str, Any]] = []
        done: set[str] = set()
        self._inflight.clear()
        self.observed.texts = {}
        limit = math.inf if self.reset_timeout is None else self.reset_timeout
        with anyio.move_on_after(limit) as scope:
            with self._waiting_on(*self.server_templates):
                fresh = await prepare_episode_servers(self, ep)
            if ep.workspace is not None:  # the agent, the reference solution and the graders see the real path
                ep.task = fill_task(ep.task, ep.workspace)
            await self._reset_servers(ep, reset_errors, done, skip=fresh)
            with self._waiting_on(*self.host.connections):
                await self.host.refresh_for_episode(timeout=self.call_timeout)
            self._sync_space()
            await self.observed.setup(ep.task, self.observe_resources, self.call_timeout, self.max_observation_chars)
            with self._waiting_on(*self.host.connections):
                # the burst of list_changed some servers send on connect is not step 1's
                await self.host.poll_changes(timeout=self.call_timeout)
        if scope.cancelled_caught:
            self._reset_timed_out(reset_errors, done)
        return reset_errors

    @contextlib.contextmanager
    def _waiting_on(self, *aliases: str) -> Iterator[None]:
        """Mark servers as awaited by the reset (a reset timeout fails the servers it was waiting on)."""
        self._inflight.update(aliases)
        try:
            yield
        finally:
            self._inflight.subtract(aliases)

    def _reset_timed_out(self, errors: list[dict[str, Any]], done: set[str]) -> None:
        """``reset_timeout`` passed: fail the servers the reset was waiting on or had not reset yet (their state is
        unknown); they lose their tools for this episode and restart at the next reset."""
        stuck = {a for a, n in self._inflight.items() if n > 0} | (set(self.host.connections) - done)
        self._inflight.clear()
        for alias in self.host.connections:
            if alias not in stuck:
                continue
            conn = self.host.connections[alias]
            if conn.status not in ("ready", "connecting"):
                continue  # already failed or dead, with its own reason
            reason = f"reset timed out after {self.reset_timeout:g} s"
            conn.fail(reason)
            message = f"server '{alias}': {reason} (it is failed and restarts at the next reset)"
            errors.append(ToolCallError("timeout", message, server=alias).as_dict())
            self.host.all_tools.pop(alias, None)
        self.host.rebuild()
        self.observed.timed_out()

    async def _reset_servers(self, ep: Episode, errors: list[dict[str, Any]], done: set[str],
                             skip: set[str] | frozenset[str] = frozenset()) -> None:
        """Reset every server for ``ep`` (``skip``: the ones just started for its workspace or task env, which are
        not restarted again but still get the episode's reset tool call)."""
        for alias, conn in list(self.host.connections.items()):
            if alias in skip and conn.status != "ready":
                errors.append(ToolCallError("server_dead", f"server '{alias}' failed to start for this episode: "
                                            f"{conn.error}", server=alias).as_dict())
                done.add(alias)
                continue
            with self._waiting_on(alias):
                await self._reset_server(alias, conn, ep, errors, fresh=alias in skip)
            done.add(alias)

    async def _reset_server(self, alias: str, conn: ServerConnection, ep: Episode,
                            errors: list[dict[str, Any]], *, fresh: bool = False) -> None:
        """Restore one server for ``ep`` per ``reset_mode``. A process started for this episode (``fresh``, a restart,
        a revived server) still gets the reset tool when it has one: an episode server (:class:`EpisodeServer`) knows
        an episode, its task and its seed only from that call (it answered every call "never reset here" without)."""
        mode = self.reset_mode
        if not fresh and mode != "none":
            if conn.status != "ready":
                await self.host.revive(alias, self._rt.task_group)  # a dead server comes back next episode
            elif mode == "restart":
                await self.host.restart(alias, self._rt.task_group)
        if mode == "none" or self.host.connections[alias].status != "ready":
            return
        if mode != "tool" and not self.host.has_tool(alias, RESET_TOOL):
            return
        args = {"task_id": None if ep.task is _NO_TASK else ep.task.id, "seed": ep.seed}  # no task: the default
        out = await self.host.call_server(alias, RESET_TOOL, args, timeout=self.call_timeout)
        if out.error or (out.result is not None and out.result.is_error):
            err = out.error or ToolCallError("tool_error", render_content(out.result.content if out.result else []),
                                             tool=RESET_TOOL, server=alias).as_dict()
            errors.append(err)

    # -- step -----------------------------------------------------------------------------------------------------
    async def _astep(self, action: Any) -> StepResult:
        """A step: ``{workspace}`` in arguments is the real path; the real path in what comes back, ``{workspace}``."""
        if self._episode is None or self._episode.workspace is None:
            return await self._play(action)
        return _ws.mask_workspace(await self._play(_ws.expand_workspace(action, self.workspace)), self.workspace)

    async def _play(self, action: Any) -> StepResult:
        ep = self._episode
        if ep is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if ep.done:
            err = ToolCallError("episode_over", "the episode is over: call reset()").as_dict()
            if self.strict:
                raise InvalidAction(err)
            return self._obs("Error: " + err["message"]), 0.0, True, False, self._info(error=err)
        ep.steps += 1
        problem = self.action_space.validation_error(action)  # never raises, whatever the action holds
        name = dict.get(action, "tool") if isinstance(action, dict) else None  # dict.get: not a subclass's get
        if (over := ep.budget.begin_step()) is not None:  # a reply past max_turns: not executed
            return await self._finish_step(None, name, {}, over)
        if name.__class__ is str and name == "submit" and "submit" not in self.host.catalogue:
            return await self._submit(action)
        if problem is not None:
            entry = self.host.resolve(problem.tool) if problem.tool else None
            hidden = problem.kind == "unknown_tool" and self.host.tool_filter.message(  # named with its setting
                str(problem.tool), ", ".join(sorted(self.host.catalogue)) or "none")
            err = ToolCallError(problem.kind, hidden or problem.message, tool=problem.tool,
                                server=entry.server if entry else None, argument=problem.argument).as_dict()
            if self.strict:
                raise InvalidAction(err)
            return await self._finish_step(None, name, {}, err)
        arguments = dict(action.get("arguments") or {})
        assert isinstance(name, str)  # validation_error() passed: the action names a tool
        out = await self.host.call(name, arguments, timeout=self.call_timeout)
        note_state_change(self, out)  # a server whose state outlives the episode: a one-time warning
        if out.error is not None and self.strict:
            raise ToolCallFailed(out.error)
        return await self._finish_step(out, name, arguments, out.error)

    async def _finish_step(
        self, out: CallOutcome | None, name: Any, arguments: dict[str, Any], error: dict[str, Any] | None,
        next_turn: str | None = None,
    ) -> StepResult:
        ep = self._episode
        assert ep is not None
        result = out.result if out is not None else None
        is_error = bool(result.is_error) if result is not None else error is not None
        if out is not None and result is not None:
            text = render_content(result.content, self.max_observation_chars)
            matched = self.error_text is not None and not is_error and self.error_text.search(text) is not None
            if matched:  # a failure the server reports as an ordinary result (Scoring.error_text): a tool error
                is_error = True
            if is_error:
                text = redact_text(text)  # an error text quoting a URL (with its token) is not sent to the model
            structured = result.structured_content
            signal = read_reward(structured, result.meta, text if structured is None else None)
            if (structured is not None and not is_error and (signal.reward is not None or signal.done)
                    and (problem := result_problem(result)) is not None):
                # a reward or done read from a structure the model was not shown (its JSON text says otherwise)
                is_error, signal = True, read_reward(None)
                error = ToolCallError("invalid_result", f"tool '{out.tool}' on server '{out.server}' {problem}",
                                      tool=out.tool, server=out.server).as_dict()
            if is_error and error is None:
                error = ToolCallError("tool_error", f"tool '{out.tool}' on server '{out.server}' returned an error"
                                      + (" (its text matches error_text): " if matched else ": ") + text[:500],
                                      tool=out.tool, server=out.server).as_dict()
        else:
            text = "Error: " + (error or {}).get("message", "unknown error") if next_turn is None else next_turn
            structured = None
            signal = read_reward(None)
        reward_fn = self.reward_fn
        if reward_fn.__class__ is ConventionReward:  # the default: what it reads, without a StepContext
            reward = reward_fn.of(signal, is_error, error)
        else:
            await own_task()  # the user's code: in the call's task (an inline step's first part has none)
            reward = float(reward_fn(StepContext(name if isinstance(name, str) else None, arguments, is_error, error,
                                                 structured, text, signal, ep.steps, ep.task)))
        terminated = signal.done
        host = self.host
        settled = host.settled()  # (the usual step: the three asks of the host below in one call)
        tools_changed = False if settled else host.poll_changes_now()
        if tools_changed is None:
            await own_task()  # notification handlers, a re-listing: in the call's task (so below too)
            tools_changed = await host.poll_changes(timeout=self.call_timeout)
        if tools_changed:
            self._sync_space()
            ep.catalogue_changes.append({"step": ep.steps, "tools": self.tool_catalogue(),
                                           "hash": host.catalogue_hash()})
        if not settled and host.updates_pending():  # else refresh() has nothing to do
            await own_task()
            await self.observed.refresh(self.call_timeout, self.max_observation_chars)
        cut = ep.budget.cut(ep.steps, self.max_steps, out is not None)  # counts the call
        truncated = False
        termination = "done" if terminated else None
        if not settled and not host.any_ready():
            truncated, termination = True, "servers_dead"
        elif not terminated and cut is not None:
            truncated, termination = True, cut
        ep.episode_return += reward
        if terminated or truncated:
            ep.end()
        if next_turn is None:  # (Episode.next_turn recorded the submit that ended the turn)
            ep.record_call(name if isinstance(name, str) else None, arguments, text)
        obs = self._obs(text)
        info: StepInfo = {  # what _info() makes, in its key order
            "episode_id": ep.id, "task_id": ep.task.id, "step": ep.steps, "error": error,
            "tools_changed": tools_changed, "logs": host.drain_logs(),
            "tool": out.tool if out else (name if isinstance(name, str) else None),
            "server": out.server if out else (error or {}).get("server"),
            "server_tool": out.server_tool if out else None, "is_error": is_error,
            "content": content_json(result.content) if result is not None else [], "structured_content": structured,
            "duration": out.duration if out else 0.0, "progress": out.progress if out else [],
            "termination": termination}
        if ep.task.turns or ep.done:
            self._info_end(info, ep, termination)
        if tools_changed or termination == "servers_dead":
            info["servers"] = self.host.server_info()
        if truncated:  # cut off before an answer: a failure where something would have graded it, else unknown
            info["success"] = False if self.graded else None
        if terminated and not self.graded:  # the reward convention: the server's `done` and the return
            info["success"] = ep.episode_return >= self.success_threshold - _SUCCESS_TOLERANCE
        if terminated or ep.done:  # else grade_step_end() has nothing to do
            await own_task()
            await grade_step_end(self, info, terminated)
        return obs, reward, terminated, truncated, info

    @property
    def graded(self) -> bool:
        """Whether the current episode gets a success verdict (a verifier or a grader applies)."""
        return is_graded(self)

    async def _submit(self, action: dict[str, Any]) -> StepResult:
        await own_task()  # graders, verifiers, turn hooks: in the call's task
        try:
            bad = self.action_space.submit_error(action)
            problem = None if bad is None else ToolCallError(bad.kind, bad.message, tool="submit",
                                                             argument=bad.argument).as_dict()
        except Exception as exc:  # noqa: BLE001 - e.g. a dict subclass whose methods raise
            problem = ToolCallError("malformed", f"the action could not be inspected: {type(exc).__name__} while "
                                    "reading it", tool="submit").as_dict()
        if problem is not None:
            if self.strict:
                raise InvalidAction(problem)
            return await self._finish_step(None, "submit", {}, problem)
        args = dict.get(action, "arguments")
        answer = dict.get(args, "answer") if isinstance(args, dict) else None
        if not isinstance(answer, str):
            answer = json.dumps(answer, ensure_ascii=False) if answer is not None else None
        ep = self._episode
        assert ep is not None
        if not ep.last_turn:  # a conversation: this submit ends a user turn; the servers' turn hook starts the next
            error = await ep.next_turn(answer, self.host, self.call_timeout)
            result = await self._finish_step(None, "submit", {"answer": answer}, error, ep.turn_prompt())
            result[4]["turn_answer"] = answer
            return result
        reward, error, graded = await grade_submit(self, answer)
        ep.episode_return += reward
        ep.end()
        success = reward >= self.success_threshold if self.verifier is not None else None
        if graded:
            success = graded.pop("success")
        text = f"Submitted: {answer}" if answer is not None else "Submitted."
        obs = self._obs(text)
        info = self._info(error=error, tool="submit", server=None, server_tool=None, is_error=error is not None,
                          content=[], structured_content=None, duration=0.0, progress=[], termination="submit",
                          final_answer=answer, success=success, verifier_reward=reward, **graded)
        return obs, reward, True, False, info

    async def state_snapshot(self) -> dict[str, Any]:
        """The servers' ``mcp_gym_state`` now: the one server's, else ``{alias: snapshot}``."""
        return await read_state(self.host, self.call_timeout)

    def _obs(self, text: str) -> dict[str, Any]:
        ep = self._episode
        assert ep is not None
        ep.last_text = text
        obs: dict[str, Any] = {"task": ep.turn_prompt(), "result": text, "resources": dict(self.observed.texts)}
        if self._turn_obs or ep.task.turns:
            obs["turn"] = ep.turn
        return obs

    def _info(self, **kw: Any) -> StepInfo:
        ep = self._episode  # (read once: the FromEpisode properties each look it up)
        task = ep.task if ep is not None else None
        info = cast(StepInfo, {
            "episode_id": ep.id if ep is not None else None, "task_id": task.id if task else None,
            "step": ep.steps if ep is not None else 0, "error": None, "tools_changed": False,
            "logs": self.host.drain_logs(), **kw})
        if ep is not None:
            self._info_end(info, ep, kw.get("termination"))
        return info

    def _info_end(self, info: StepInfo, ep: Episode, termination: str | None) -> None:
        """``info``'s last keys: ``turn`` and ``turns`` (a multi-turn task), ``summary`` (the episode is over)."""
        if ep.task.turns:
            info["turn"], info["turns"] = ep.turn, ep.turn_count
        if ep.done:  # mcp-gym's own key: Gymnasium's RecordEpisodeStatistics owns info["episode"]
            info["summary"] = {"return": ep.episode_return, "length": ep.steps, "termination": termination,
                               **ep.budget.used()}
