"""Many episodes at once on one event loop: a Gymnasium vector env of MCP envs and the episode runner behind jobs.

:class:`VectorMCPEnv` holds ``num_envs`` environments (bare :class:`~mcp_gym.env.MCPEnv`, wrapped in
:class:`~mcp_gym.recording.RecordTrajectories` or in Gymnasium wrappers) on the
:class:`~mcp_gym.client.runtime.Runtime` loop that owns the MCP sessions, so every ``await env.areset/astep`` runs
there without a thread hop. Two ways to drive them:

* batched, as a ``gymnasium.vector.VectorEnv``: ``reset(seed=0)`` and ``step(actions)`` (or, on the runtime loop,
  ``await vec.areset(...)``/``await vec.astep(...)``) step every env concurrently and return Gymnasium's batches,
  with autoreset (``metadata["autoreset_mode"]``);
* free-running, for collection and evaluation: :meth:`VectorMCPEnv.run` gives each env the next planned episode as
  soon as its last one ends, so a slow episode never holds up the others, and a per-episode deadline truncates one
  that is stuck (``termination="deadline"``).

Server processes: by default each env has its own connections (a stdio server process per env). With
``share_servers=M`` the envs share ``M`` sessions per server, env ``i`` using session ``i % M``: episode-aware
servers (:class:`mcp_gym.serverkit.EpisodeServer`, every bundled server) keep a separate state per episode, keyed by
the episode id mcp-gym sends with every request, so one process serves many concurrent episodes. On a shared session
an env sees the changes its own calls report (the servers' ``mcp-gym/changes`` result hints) but not session-wide
notifications, which cannot be told apart by episode; share only episode-aware servers.

Memory stays bounded: the runner keeps no trajectories (the recorder streams them to disk) and hands each
:class:`EpisodeResult` to a callback.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from mcp_gym.async_env import aclose, areset, astep
from mcp_gym.client.runtime import Runtime, default_runtime
from mcp_gym.parsing import split_action
from mcp_gym.policies import Policy
from mcp_gym.protocol import SUMMARY_KEY, redact_text

__all__ = ["VectorMCPEnv", "EpisodeSpec", "EpisodeResult", "make_vector"]


@dataclass(frozen=True)
class EpisodeSpec:
    """A planned episode: its stable ``key`` (resume skips recorded keys), the task and the reset seed."""

    key: str
    task_id: str | None
    seed: int


@dataclass(frozen=True)
class EpisodeResult:
    """How a planned episode went (a short summary; the trajectory itself goes to the recorder)."""

    key: str
    task_id: str | None
    episode_id: str | None
    total_reward: float
    success: bool | None
    length: int
    termination: str | None
    seconds: float
    error: str | None = None
    """Why the episode failed to run (an exception in the policy or env); it is then not recorded."""
    unavailable: str | None = None
    """Why a server was unavailable at the episode's reset (the first ``server_dead`` reset error), if one was: the
    episode ran, and was recorded, without that server's tools."""


class _SharedSession:
    """One env's view of a server connection shared with other envs.

    Everything is delegated to the shared :class:`~mcp_gym.client.connection.ServerConnection` except the change flags
    (``events``: each env has its own, fed by its own calls' result hints), starting (the first env starts the
    connection, the others wait for it) and closing (the vector env closes shared connections once, at the end).
    """

    def __init__(self, conn: Any, lock: anyio.Lock) -> None:
        self._conn = conn
        self._lock = lock
        self.shared = True
        """A session shared by concurrent episodes (per-episode server set-up needs one of its own)."""
        self.events = type(conn.events)()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def start(self, task_group: Any) -> None:
        async with self._lock:
            if self._conn.status == "new":
                await self._conn.start(task_group)

    async def subscribe(self, uris: Sequence[str], *, timeout: float | None = None) -> None:
        """Notifications on a shared session cannot be attributed to an episode: rely on result hints."""

    async def close(self) -> None:
        """Shared connections are closed by their :class:`VectorMCPEnv`."""


class VectorMCPEnv(VectorEnv[dict[str, Any], tuple[Any, ...], np.ndarray]):
    """``num_envs`` MCP environments stepped concurrently on the runtime's event loop: a Gymnasium vector env.

    The batched interface is Gymnasium's (``gymnasium.vector.VectorEnv``): ``reset(seed=, options=)`` and
    ``step(actions)`` return batched observations (a dict of per-env tuples, as ``gymnasium.vector.utils.batch_space``
    batches text spaces), float64 rewards, bool ``terminated``/``truncated`` arrays and infos (``info[key]`` an array
    over envs with its ``info["_" + key]`` mask); ``actions`` is a sequence of per-env tool calls. Episodes that end
    are reset automatically as ``metadata["autoreset_mode"]`` says (Gymnasium's default ``NEXT_STEP``). One async
    implementation (``areset``/``astep``/``aclose``, awaited on the runtime loop) with a thin sync face::

        vec = VectorMCPEnv(lambda i: gymnasium.make("mcp_gym/Counter-v0"), 4)
        obs, infos = vec.reset(seed=0)
        obs, rewards, terminated, truncated, infos = vec.step([{"tool": "add", "arguments": {"amount": 1}}] * 4)
        vec.close()

    Jobs drive it free-running instead, on the runtime loop (``runtime.call(coroutine_fn)``)::

        async def main():
            async with VectorMCPEnv(lambda i: make_env("SQL", "stdio"), 16, share_servers=2) as vec:
                await vec.run(OraclePolicy(), specs, on_result=print)

    Args:
        env_fn: ``slot -> env``: an :class:`~mcp_gym.env.MCPEnv`, possibly wrapped in
            :class:`~mcp_gym.recording.RecordTrajectories` or Gymnasium wrappers (driven through
            :mod:`mcp_gym.async_env`; a recorder must be the outermost layer). Always called on the runtime loop,
            where MCPEnvs connect lazily: made from sync code, the vector env then connects them all, at most
            ``max_connecting`` at a time, so its action spaces are known; made on the loop (jobs), each connects at
            its first reset.
        num_envs: How many envs (episodes at once).
        share_servers: Sessions per server shared by the envs (``None``: every env has its own connections).
        max_connecting: Most envs connecting at once (server start-ups compete for CPU; a stdio server takes ~1-2 s).
        autoreset_mode: What :meth:`step` does after an env's episode ended (``gymnasium.vector.AutoresetMode``):
            ``NEXT_STEP`` resets it at its next step (ignoring that action), ``SAME_STEP`` resets it in the step that
            ended it (the last observation and info in ``infos["final_obs"]``/``["final_info"]``), ``DISABLED``
            leaves it to ``reset(options={"reset_mask": mask})``. :meth:`run` manages its own episodes.
        runtime: The runtime whose loop owns the envs' sessions (default: the process-wide one); every env must use it.
    """

    def __init__(
        self,
        env_fn: Callable[[int], Any],
        num_envs: int,
        *,
        share_servers: int | None = None,
        max_connecting: int = 4,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        runtime: Runtime | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.num_envs = num_envs
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self._rt = runtime or default_runtime()
        on_loop = self._rt.in_loop()
        if on_loop:
            self.envs: list[Any] = [env_fn(i) for i in range(num_envs)]
        else:  # made on the loop, MCPEnvs connect below, concurrently (not in env_fn, one by one)
            self.envs = self._rt.call(self._make_envs, env_fn)
        for i, env in enumerate(self.envs):
            if getattr(env.unwrapped, "runtime", self._rt) is not self._rt:
                self._close_envs_now()
                raise ValueError(f"VectorMCPEnv: env {i} runs on another runtime than the vector env's; "
                                 "make every env with the same runtime= (or pass it as runtime=)")
        self._shared: list[Any] = []
        if share_servers:
            self._share(max(1, min(share_servers, num_envs)))
        self._connecting = anyio.Semaphore(max(1, max_connecting))
        self._started = [False] * num_envs
        if not on_loop:  # the sync face knows every env's tools (its action space) from the start, as Gymnasium's
            try:
                self._rt.call(self._connect_all)
            except BaseException:
                self._rt.call(self.aclose)
                raise
        self.steps = 0
        """Env steps taken so far (all envs)."""
        self.metadata = {**getattr(self.envs[0], "metadata", {}), "autoreset_mode": self.autoreset_mode}
        self.render_mode = getattr(self.envs[0], "render_mode", None)
        self.spec = getattr(self.envs[0], "spec", None)
        self.single_observation_space = self.envs[0].observation_space
        for i, env in enumerate(self.envs):
            if env.observation_space != self.single_observation_space:
                self._close_envs_now()
                raise ValueError(f"VectorMCPEnv: env {i}'s observation space {env.observation_space} differs from "
                                 f"env 0's {self.single_observation_space}")
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self._done = np.zeros(num_envs, dtype=np.bool_)  # episodes that ended (autoreset pending)
        self._obs: list[Any] = [None] * num_envs  # each env's last observation

    async def _make_envs(self, env_fn: Callable[[int], Any]) -> list[Any]:
        return [env_fn(i) for i in range(self.num_envs)]

    async def _connect_all(self) -> None:
        """Connect every env's servers, ``max_connecting`` envs at a time (MCPEnvs made on the loop connect lazily)."""

        async def one(i: int) -> None:
            start = getattr(self.envs[i].unwrapped, "aconnect", None)
            if start is not None:
                async with self._connecting:
                    await start()

        await self._gather(one, range(self.num_envs))

    def _close_envs_now(self) -> None:
        """Close the envs made so far (a constructor that refuses leaves no server process behind)."""
        if not self._rt.in_loop():
            self._rt.call(self._close_envs)

    async def _close_envs(self) -> None:
        for env in self.envs:
            await aclose(env)

    # -- spaces ---------------------------------------------------------------------------------------------------
    @property
    def single_action_space(self) -> Any:  # type: ignore[override]  # gymnasium: an attribute; here live
        """Env 0's action space (a :class:`~mcp_gym.spaces.ToolCallSpace`; it follows that env's tool catalogue)."""
        return self.envs[0].action_space

    @property
    def action_space(self) -> gym.spaces.Tuple[Any]:  # type: ignore[override]  # an attribute in gymnasium
        """The batched action space: a ``Tuple`` of every env's own (live) :class:`~mcp_gym.spaces.ToolCallSpace`."""
        return gym.spaces.Tuple([env.action_space for env in self.envs])

    # -- set-up ---------------------------------------------------------------------------------------------------
    def _share(self, groups: int) -> None:
        """Make env ``i`` use the connections of env ``i % groups`` (through per-env :class:`_SharedSession`)."""
        leaders: list[dict[str, tuple[Any, anyio.Lock]]] = []
        for i, env in enumerate(self.envs):
            host = env.unwrapped.host
            if any(conn.status != "new" for conn in host.connections.values()):
                self._close_envs_now()
                raise RuntimeError("share_servers needs envs that have not connected yet: make them in env_fn "
                                   "(VectorMCPEnv calls it on the runtime loop, where MCPEnvs connect on first reset)")
            if i < groups:
                leaders.append({alias: (conn, anyio.Lock()) for alias, conn in host.connections.items()})
                self._shared.extend(conn for conn, _ in leaders[-1].values())
            group = leaders[i % groups]
            host.connections = {alias: _SharedSession(*group[alias]) for alias in host.connections}

    async def __aenter__(self) -> VectorMCPEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every env (publishing recorded episodes), then the shared connections; the servers of all envs stop
        side by side (each waits for its process to exit), and every close runs even if another raises (the first
        error is raised after all)."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            errors: list[BaseException] = []

            async def close(aclose: Callable[[], Awaitable[None]]) -> None:
                try:
                    await aclose()
                except Exception as e:  # noqa: BLE001 - raised below, once every close ran
                    errors.append(e)

            async with anyio.create_task_group() as tg:
                for env in self.envs:
                    tg.start_soon(close, env.unwrapped.aclose)
            for env in self.envs:
                try:
                    env.close()  # the recorder releases its writer; the MCPEnv is already closed
                except Exception as e:  # noqa: BLE001 - raised below
                    errors.append(e)
            async with anyio.create_task_group() as tg:
                for conn in self._shared:
                    tg.start_soon(close, conn.close)
            if errors:
                raise errors[0]

    def close_extras(self, **kwargs: Any) -> None:
        """Sync face of :meth:`aclose` (``close()`` calls it; from async code on the runtime loop, await ``aclose``)."""
        if self._rt.in_loop():
            raise RuntimeError("VectorMCPEnv.close() was called on the runtime's own event loop; await aclose()")
        if not self._rt.closed:
            self._rt.call(self.aclose)

    # -- batched interface: sync face -----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every env concurrently; see :meth:`areset`."""
        return self._rt.call(lambda: self.areset(seed=seed, options=options))

    def step(
        self, actions: Sequence[Any]
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env concurrently; see :meth:`astep`."""
        return self._rt.call(self.astep, actions)

    def render(self) -> tuple[Any, ...]:
        """Every env's ``render()`` (``render_mode="ansi"``: the last observation as text)."""
        return tuple(env.render() for env in self.envs)

    # -- batched interface: the implementation --------------------------------------------------------------------
    async def areset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the envs concurrently; returns the batched ``(observations, infos)``.

        Args:
            seed: ``None``, an int (env ``i`` gets ``seed + i``) or one seed per env.
            options: Passed to every env's reset (e.g. ``{"task_id": ...}``); ``options["reset_mask"]``, a bool array
                over the envs, resets only those (the others' entries in the result are their last observations and
                no info).
        """
        seeds = self._seeds(seed)
        options = dict(options) if options is not None else None
        mask = np.ones(self.num_envs, dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options.pop("reset_mask"))
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,) or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) with at "
                                 f"least one True, got {mask!r}")
            if not all(self._started):
                raise ValueError("options['reset_mask'] needs every env reset once first: call reset() without it")
        todo = [i for i in range(self.num_envs) if mask[i]]
        outs = await self._gather(lambda i: self._reset_one(i, seeds[i], options), todo)
        infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for i, (obs, info) in zip(todo, outs, strict=True):
            self._obs[i], infos[i] = obs, info
            self._done[i] = False
        return self._batch_obs(), _batch_infos(infos)

    async def astep(
        self, actions: Sequence[Any]
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the envs concurrently, env ``i`` with ``actions[i]``; returns the batched
        ``(observations, rewards, terminated, truncated, infos)``.

        An env whose episode ended is reset as ``metadata["autoreset_mode"]`` says. Actions may carry
        ``raw_text``/``parse_status`` (stripped here for envs that are not recorded)."""
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions (one per env), got {len(actions)}")
        if self.autoreset_mode is AutoresetMode.DISABLED and self._done.any():
            ended = np.flatnonzero(self._done).tolist()
            raise RuntimeError(f"VectorMCPEnv (autoreset DISABLED): the episodes of envs {ended} ended; reset them "
                               "first with reset(options={'reset_mask': terminated | truncated})")
        for i in range(self.num_envs):
            if not self._started[i]:
                raise RuntimeError("VectorMCPEnv.step before reset: call reset() first")
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        truncated = np.zeros(n, dtype=np.bool_)
        infos: list[dict[str, Any]] = [{}] * n

        async def one(i: int) -> None:
            if self.autoreset_mode is AutoresetMode.NEXT_STEP and self._done[i]:
                self._obs[i], infos[i] = await self._reset_one(i, None, None)  # this step's action is ignored
                return
            self._obs[i], rewards[i], terminated[i], truncated[i], infos[i] = await self._step_one(i, actions[i])
            if self.autoreset_mode is AutoresetMode.SAME_STEP and (terminated[i] or truncated[i]):
                final = {"final_obs": self._obs[i], "final_info": infos[i]}
                self._obs[i], info = await self._reset_one(i, None, None)
                infos[i] = {**info, **final}

        await self._gather(one, range(n))
        # episodes that ended and wait for their reset (SAME_STEP has already reset them)
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        self._done = np.zeros(n, dtype=np.bool_) if same_step else terminated | truncated
        return self._batch_obs(), rewards, terminated, truncated, _batch_infos(infos)

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected one seed per env ({self.num_envs}), got {len(seeds)}")
        return seeds

    def _batch_obs(self) -> dict[str, Any]:
        # a Dict observation space: gymnasium's space-generic helpers make and fill a dict
        out = cast(dict[str, Any], create_empty_array(self.single_observation_space, self.num_envs))
        return cast(dict[str, Any], concatenate(self.single_observation_space, self._obs, out))

    # -- one env ---------------------------------------------------------------------------------------------------
    async def _reset_one(self, i: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, Any]:
        if self._started[i]:
            return await areset(self.envs[i], seed=seed, options=options)
        async with self._connecting:  # the first reset connects
            out = await areset(self.envs[i], seed=seed, options=options)
        self._started[i] = True
        return out

    async def _step_one(self, i: int, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        env = self.envs[i]
        if not getattr(env, "accepts_text_actions", False):  # no recorder on top to strip the text-action keys
            action, _ = split_action(action)
        obs, reward, terminated, truncated, info = await astep(env, action)
        self.steps += 1
        return obs, float(reward), bool(terminated), bool(truncated), info

    async def _gather(self, fn: Callable[[int], Awaitable[Any]], slots: Iterable[int]) -> list[Any]:
        """``[await fn(i) for i in slots]``, run concurrently. An env that raises (``strict=True``, a wrapper) does
        not cancel the others' calls mid-way: all finish, then the first error is raised, naming its env."""
        slots = list(slots)
        out: list[Any] = [None] * len(slots)
        errors: list[tuple[int, Exception]] = []

        async def one(k: int) -> None:
            try:
                out[k] = await fn(slots[k])
            except Exception as e:  # noqa: BLE001 - re-raised below, once every env's call is over
                errors.append((slots[k], e))

        async with anyio.create_task_group() as tg:
            for k in range(len(slots)):
                tg.start_soon(one, k)
        if errors:
            i, error = min(errors, key=lambda x: x[0])
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(f"(in env {i} of the VectorMCPEnv)")
            raise error
        return out

    # -- free-running episodes ------------------------------------------------------------------------------------
    async def run(
        self,
        policy: Policy,
        episodes: Iterable[EpisodeSpec],
        *,
        on_result: Callable[[EpisodeResult], Any] | None = None,
        episode_timeout: float | None = None,
    ) -> None:
        """Run the planned episodes, ``num_envs`` at a time, each env taking the next one when it finishes.

        Each env knows the episode it runs next: when it starts an episode it also takes the following one from the
        plan, keeps it for itself, and tells its env (reset option ``next_task_id``; ``next_task=None`` when the plan
        is done), so the spare-server pool starts that episode's servers while this one runs. An env that finds the
        plan done runs an episode another env kept but has not started, so none waits while another idles. Every
        planned episode runs once, with its own seed; only the order in which they start differs from the plan's.

        Args:
            policy: Acts in every episode (one :class:`~mcp_gym.policies.Agent` per episode).
            episodes: The episodes to run (consumed lazily, in order, at most one ahead per env).
            on_result: Called with each finished episode's :class:`EpisodeResult` (on the loop; keep it quick).
            episode_timeout: Seconds an episode may take, policy included; a late one is cut off and recorded as
                truncated with ``termination="deadline"``.

        Cancelling the call (e.g. on Ctrl-C) stops every running episode; those are not recorded, so a rerun of the
        same plan redoes exactly them.
        """
        plan: Iterator[EpisodeSpec] = iter(episodes)
        kept: list[EpisodeSpec | None] = [None] * self.num_envs  # each env's next episode, taken from the plan

        def pull(i: int) -> EpisodeSpec | None:  # (no await: the envs' tasks take turns on one loop)
            spec, kept[i] = kept[i], None
            if spec is None:
                spec = next(plan, None)  # one shared iterator: each env pulls the next planned episode
            if spec is None:  # the plan is done: run one another env kept but has not started
                j = next((j for j, s in enumerate(kept) if s is not None), None)
                if j is not None:
                    spec, kept[j] = kept[j], None
            return spec

        async def slot(i: int) -> None:
            while (spec := pull(i)) is not None:
                kept[i] = next(plan, None)
                result = await self._episode(i, policy, spec, episode_timeout, kept[i])
                if on_result is not None:
                    on_result(result)

        async with anyio.create_task_group() as tg:
            for i in range(self.num_envs):
                tg.start_soon(slot, i)

    async def _episode(self, i: int, policy: Policy, spec: EpisodeSpec, timeout: float | None,
                       upcoming: EpisodeSpec | None = None) -> EpisodeResult:
        env = self.envs[i]
        base = env.unwrapped
        t0 = time.perf_counter()
        total, length, termination, success, unavailable = 0.0, 0, None, None, None
        try:
            with anyio.move_on_after(timeout) as deadline:
                options: dict[str, Any] = {"episode_key": spec.key, "policy": policy.name, **_forecast(base, upcoming)}
                if spec.task_id is not None:
                    options["task_id"] = spec.task_id
                obs, info = await self._reset_one(i, spec.seed, options)
                unavailable = next((e.get("message") for e in info.get("reset_errors") or ()
                                    if e.get("kind") == "server_dead"), None)
                agent = policy.agent(base, obs, info, spec.seed)
                while True:
                    action = await agent.act(obs, info)
                    obs, reward, terminated, truncated, info = await self._step_one(i, action)
                    total += reward
                    length += 1
                    if terminated or truncated:
                        termination = (info.get(SUMMARY_KEY) or {}).get("termination")
                        success = info.get("success")
                        break
        except anyio.get_cancelled_exc_class():
            self._finish_recording(env, None)
            raise
        except Exception as e:  # noqa: BLE001 - one broken episode (policy or env error) must not stop the job
            self._finish_recording(env, None)
            return EpisodeResult(spec.key, spec.task_id, base.episode_id, total, None, length, "error",
                                 time.perf_counter() - t0, redact_text(f"{type(e).__name__}: {e}"))  # a URL's key
        if deadline.cancelled_caught:
            termination = "deadline"
            graded = getattr(base, "graded", getattr(base, "verifier", None) is not None)
            success = False if graded else None
            self._finish_recording(env, termination, success, total)
        return EpisodeResult(spec.key, spec.task_id, base.episode_id, total, success, length, termination,
                             time.perf_counter() - t0, unavailable=unavailable)

    @staticmethod
    def _finish_recording(env: Any, termination: str | None, success: bool | None = None, total: float = 0.0) -> None:
        """Record the episode being recorded as cut off (``termination``), or drop it (``None``)."""
        episode = getattr(env, "episode", None)  # RecordTrajectories' EpisodeWriter
        if episode is None or episode.done or getattr(episode, "episode_id", None) != env.unwrapped.episode_id:
            return
        if termination is None:
            episode.discard()
        else:
            episode.finish(total_reward=total, success=success, termination=termination)


def _forecast(base: Any, upcoming: EpisodeSpec | None) -> dict[str, Any]:
    """The reset options telling an env with a spare-server pool its next episode's task: ``next_task_id`` (a task
    it has), ``next_task=None`` (none follows), or none (no pool, or a task the env draws itself or does not know:
    that episode's own reset reports it)."""
    if not getattr(getattr(base, "spares", None), "size", 0):
        return {}
    if upcoming is None:
        return {"next_task": None}
    if upcoming.task_id is None or not any(t.id == upcoming.task_id for t in getattr(base, "tasks", ())):
        return {}
    return {"next_task_id": upcoming.task_id}


def make_vector(
    num_envs: int,
    *,
    name: str,
    share_servers: int | None = None,
    max_connecting: int = 4,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    runtime: Runtime | None = None,
    **env_kwargs: Any,
) -> VectorMCPEnv:
    """The ``vector_entry_point`` of the bundled envs: ``gymnasium.make_vec("mcp_gym/<name>-v0", num_envs, **kw)``
    returns a :class:`VectorMCPEnv` of ``gymnasium.make("mcp_gym/<name>-v0", **env_kwargs)`` envs (the vector
    env's own options, ``share_servers`` to ``runtime``, are taken out of ``kw``)."""
    env_id = f"mcp_gym/{name}-v0"
    return VectorMCPEnv(lambda i: gym.make(env_id, **env_kwargs), num_envs, share_servers=share_servers,
                        max_connecting=max_connecting, autoreset_mode=autoreset_mode, runtime=runtime)


def _batch_infos(infos: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Per-env infos as one Gymnasium vector info: ``info[key]`` an array over envs and ``info["_" + key]`` the mask
    of envs that have it (``None``: an env that was not reset).

    Values of one scalar type across envs (bool, int, float) make a typed array, as Gymnasium's vector envs do; any
    other value (a dict such as ``error``, which is ``None`` or a dict; strings; lists; mixed types such as a
    ``success`` of ``True``/``None``) stays each env's own object in an object array, never recursed into or cast, so
    ``info["error"][i]`` is env ``i``'s error whatever the others hold.
    """
    n = len(infos)
    out: dict[str, Any] = {}
    keys = dict.fromkeys(k for info in infos if info is not None for k in info)
    for key in keys:
        mask = np.array([info is not None and key in info for info in infos], dtype=np.bool_)
        values = [info[key] for info in infos if info is not None and key in info]
        kinds = {type(v) for v in values}
        if kinds <= {bool, np.bool_}:
            array = np.zeros(n, dtype=np.bool_)
        elif kinds <= {int, np.int64} and not kinds & {bool}:
            array = np.zeros(n, dtype=np.int64)
        elif kinds <= {int, float, np.float64, np.int64} and not kinds & {bool}:
            array = np.zeros(n, dtype=np.float64)
        else:
            array = np.full(n, None, dtype=object)
        for i, info in enumerate(infos):
            if info is not None and key in info:
                array[i] = info[key]
        out[key], out[f"_{key}"] = array, mask
    return out
