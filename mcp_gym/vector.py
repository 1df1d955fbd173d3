"""Many episodes at once on one event loop: an async vector env and the episode runner behind collect and eval.

:class:`VectorMCPEnv` holds ``num_envs`` environments (bare :class:`~mcp_gym.env.MCPEnv` or wrapped in
:class:`~mcp_gym.recording.RecordTrajectories`) on the :class:`~mcp_gym.client.runtime.Runtime` loop that owns the MCP
sessions, so every ``await env.areset/astep`` runs there without a thread hop. Two ways to drive them:

* batched, like a Gymnasium vector env: ``await vec.areset(seed=0)`` and ``await vec.astep(actions)`` step every
  env concurrently and return lists (no autoreset);
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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_gym.parsing import split_action
from mcp_gym.policies import Policy

__all__ = ["VectorMCPEnv", "EpisodeSpec", "EpisodeResult"]


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


class _SharedSession:
    """One env's view of a server connection shared with other envs.

    Everything is delegated to the shared :class:`~mcp_gym.client.connection.ServerConnection` except the change flags
    (``events``: each env has its own, fed by its own calls' result hints), starting (the first env starts the
    connection, the others wait for it) and closing (the vector env closes shared connections once, at the end).
    """

    def __init__(self, conn: Any, lock: anyio.Lock) -> None:
        self._conn = conn
        self._lock = lock
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


class VectorMCPEnv:
    """``num_envs`` MCP environments driven concurrently on the runtime's event loop.

    Create, use and close it on the runtime loop (``env._rt``), e.g. inside ``runtime.call(coroutine_fn)``::

        async def main():
            async with VectorMCPEnv(lambda i: make_env("SQL", "stdio"), 16, share_servers=2) as vec:
                await vec.run(OraclePolicy(), specs, on_result=print)

    Args:
        env_fn: ``slot -> env``: an :class:`~mcp_gym.env.MCPEnv`, possibly wrapped in
            :class:`~mcp_gym.recording.RecordTrajectories` (anything with ``areset``/``astep`` and ``unwrapped``).
            Called on the runtime loop, so MCPEnvs connect lazily, at most ``max_connecting`` at a time.
        num_envs: How many episodes run at once.
        share_servers: Sessions per server shared by the envs (``None``: every env has its own connections).
        max_connecting: Most envs connecting at once (server start-ups compete for CPU; a stdio server takes ~1-2 s).
    """

    def __init__(
        self,
        env_fn: Callable[[int], Any],
        num_envs: int,
        *,
        share_servers: int | None = None,
        max_connecting: int = 4,
    ) -> None:
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.num_envs = num_envs
        self.envs: list[Any] = [env_fn(i) for i in range(num_envs)]
        self._shared: list[Any] = []
        if share_servers:
            self._share(max(1, min(share_servers, num_envs)))
        self._connecting = anyio.Semaphore(max(1, max_connecting))
        self._started = [False] * num_envs
        self.steps = 0
        """Env steps taken so far (all envs)."""

    # -- set-up ---------------------------------------------------------------------------------------------------
    def _share(self, groups: int) -> None:
        """Make env ``i`` use the connections of env ``i % groups`` (through per-env :class:`_SharedSession`)."""
        leaders: list[dict[str, tuple[Any, anyio.Lock]]] = []
        for i, env in enumerate(self.envs):
            host = env.unwrapped.host
            if any(conn.status != "new" for conn in host.connections.values()):
                raise RuntimeError("share_servers needs envs that have not connected yet: create the VectorMCPEnv "
                                   "on the runtime loop (MCPEnvs made there connect on their first reset)")
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
        """Close every env (publishing recorded episodes), then the shared connections."""
        with anyio.CancelScope(shield=True):
            for env in self.envs:
                await env.unwrapped.aclose()
                env.close()  # the recorder releases its writer; the MCPEnv is already closed
            for conn in self._shared:
                await conn.close()

    # -- batched interface ----------------------------------------------------------------------------------------
    async def _reset_one(self, i: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, Any]:
        if self._started[i]:
            return await self.envs[i].areset(seed=seed, options=options)
        async with self._connecting:  # the first reset connects
            out = await self.envs[i].areset(seed=seed, options=options)
        self._started[i] = True
        return out

    async def _gather(self, fn: Callable[[int], Awaitable[Any]]) -> list[Any]:
        out: list[Any] = [None] * self.num_envs

        async def one(i: int) -> None:
            out[i] = await fn(i)

        async with anyio.create_task_group() as tg:
            for i in range(self.num_envs):
                tg.start_soon(one, i)
        return out

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Reset every env concurrently (env ``i`` with ``seed + i``); returns ``(observations, infos)``."""
        outs = await self._gather(lambda i: self._reset_one(i, None if seed is None else seed + i, options))
        return [o for o, _ in outs], [info for _, info in outs]

    async def astep(self, actions: Sequence[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        """Step every env concurrently with its action; returns lists ``(obs, rewards, terminated, truncated, infos)``.

        Actions may carry ``raw_text``/``parse_status`` (stripped here for envs that are not recorded)."""
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        outs = await self._gather(lambda i: self._step_one(i, actions[i]))
        return tuple(list(x) for x in zip(*outs, strict=True))  # type: ignore[return-value]

    async def _step_one(self, i: int, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        env = self.envs[i]
        if env is env.unwrapped:  # a bare MCPEnv: no recorder to strip the text-action keys
            action, _ = split_action(action)
        obs, reward, terminated, truncated, info = await env.astep(action)
        self.steps += 1
        return obs, float(reward), terminated, truncated, info

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

        Args:
            policy: Acts in every episode (one :class:`~mcp_gym.policies.Agent` per episode).
            episodes: The episodes to run (consumed lazily, in order).
            on_result: Called with each finished episode's :class:`EpisodeResult` (on the loop; keep it quick).
            episode_timeout: Seconds an episode may take, policy included; a late one is cut off and recorded as
                truncated with ``termination="deadline"``.

        Cancelling the call (e.g. on Ctrl-C) stops every running episode; those are not recorded, so a rerun of the
        same plan redoes exactly them.
        """
        plan: Iterator[EpisodeSpec] = iter(episodes)

        async def slot(i: int) -> None:
            for spec in plan:  # one shared iterator: each env pulls the next planned episode
                result = await self._episode(i, policy, spec, episode_timeout)
                if on_result is not None:
                    on_result(result)

        async with anyio.create_task_group() as tg:
            for i in range(self.num_envs):
                tg.start_soon(slot, i)

    async def _episode(self, i: int, policy: Policy, spec: EpisodeSpec, timeout: float | None) -> EpisodeResult:
        env = self.envs[i]
        base = env.unwrapped
        t0 = time.perf_counter()
        total, length, termination, success = 0.0, 0, None, None
        try:
            with anyio.move_on_after(timeout) as deadline:
                options = {"episode_key": spec.key, "policy": policy.name}
                if spec.task_id is not None:
                    options["task_id"] = spec.task_id
                obs, info = await self._reset_one(i, spec.seed, options)
                agent = policy.agent(base, obs, info, spec.seed)
                while True:
                    action = await agent.act(obs, info)
                    obs, reward, terminated, truncated, info = await self._step_one(i, action)
                    total += reward
                    length += 1
                    if terminated or truncated:
                        termination = (info.get("episode") or {}).get("termination")
                        success = info.get("success")
                        break
        except anyio.get_cancelled_exc_class():
            self._finish_recording(env, None)
            raise
        except Exception as e:  # noqa: BLE001 - one broken episode (policy or env error) must not stop the job
            self._finish_recording(env, None)
            return EpisodeResult(spec.key, spec.task_id, base.episode_id, total, None, length, "error",
                                 time.perf_counter() - t0, f"{type(e).__name__}: {e}")
        if deadline.cancelled_caught:
            termination = "deadline"
            success = False if getattr(base, "verifier", None) is not None else None
            self._finish_recording(env, termination, success, total)
        return EpisodeResult(spec.key, spec.task_id, base.episode_id, total, success, length, termination,
                             time.perf_counter() - t0)

    @staticmethod
    def _finish_recording(env: Any, termination: str | None, success: bool | None = None, total: float = 0.0) -> None:
        """Record the episode being recorded as cut off (``termination``), or drop it (``None``)."""
        episode = getattr(env, "episode", None)  # RecordTrajectories' EpisodeRecorder
        if episode is None or episode.done or getattr(episode, "episode_id", None) != env.unwrapped.episode_id:
            return
        if termination is None:
            episode.discard()
        else:
            episode.finish(total_reward=total, success=success, termination=termination)
