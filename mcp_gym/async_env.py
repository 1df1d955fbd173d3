"""The async face of envs and wrappers: ``areset``, ``astep`` and ``aclose``, forwarded through wrapper chains.

The protocol (:class:`AsyncEnv`): an env with an async face has the coroutines ``areset(*, seed=None, options=None)
-> (obs, info)``, ``astep(action) -> (obs, reward, terminated, truncated, info)`` and ``aclose()``, with the same
meaning as Gymnasium's ``reset``/``step``/``close``. :class:`~mcp_gym.env.MCPEnv` implements it (one async
implementation; the sync methods are a face over it).

Wrappers keep the async face in two ways:

* mcp-gym's wrappers derive from :class:`AsyncWrapper`, whose ``areset``/``astep``/``aclose`` forward to the wrapped
  env; a subclass overrides them like Gymnasium's ``reset``/``step`` (see
  :class:`~mcp_gym.recording.RecordTrajectories`).
* Gymnasium's own wrappers (``TimeLimit``, ``OrderEnforcing``, ``RecordEpisodeStatistics``, ...) have no async face;
  the functions :func:`areset`, :func:`astep` and :func:`aclose` drive any env or wrapper chain: a layer with an async
  face is awaited, a layer without one runs its sync method in a worker thread (the MCPEnv inside hops back onto its
  runtime loop), so its logic (a step limit, episode statistics) applies unchanged::

      env = gymnasium.wrappers.RecordEpisodeStatistics(gymnasium.make("mcp_gym/Counter-v0"))
      obs, info = await mcp_gym.areset(env, seed=0)
      obs, reward, terminated, truncated, info = await mcp_gym.astep(env, action)   # info["episode"] at the end
"""

from __future__ import annotations

from typing import Any, Protocol, SupportsFloat, TypeGuard, runtime_checkable

import anyio
import gymnasium as gym

__all__ = ["AsyncEnv", "AsyncWrapper", "has_async_face", "areset", "astep", "aclose"]

StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]


@runtime_checkable
class AsyncEnv(Protocol):
    """An env with an async face (``MCPEnv``, :class:`AsyncWrapper` subclasses)."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Async ``reset``."""

    async def astep(self, action: Any) -> StepResult:
        """Async ``step``."""

    async def aclose(self) -> None:
        """Async ``close``."""


def has_async_face(env: Any) -> TypeGuard[AsyncEnv]:
    """``env`` itself (not a layer below it) implements ``areset``, ``astep`` and ``aclose``."""
    return all(callable(getattr(type(env), name, None)) for name in ("areset", "astep", "aclose"))


async def areset(
    env: gym.Env[Any, Any], *, seed: int | None = None, options: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """``await env.areset(...)`` if ``env`` has an async face, else ``env.reset(...)`` in a worker thread."""
    if has_async_face(env):
        return await env.areset(seed=seed, options=options)
    return await anyio.to_thread.run_sync(lambda: env.reset(seed=seed, options=options))


async def astep(env: gym.Env[Any, Any], action: Any) -> StepResult:
    """``await env.astep(action)`` if ``env`` has an async face, else ``env.step(action)`` in a worker thread."""
    if has_async_face(env):
        return await env.astep(action)
    return await anyio.to_thread.run_sync(env.step, action)


async def aclose(env: gym.Env[Any, Any]) -> None:
    """Close ``env`` from async code: its async face if it has one; else close the innermost env asynchronously
    (its sessions), then ``env.close()`` for the wrappers' own clean-up."""
    if has_async_face(env):
        await env.aclose()
        return
    inner = env.unwrapped
    if inner is not env and has_async_face(inner):
        await inner.aclose()
        env.close()  # wrappers' clean-up; the inner env is already closed
        return
    await anyio.to_thread.run_sync(env.close)


class AsyncWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """A Gymnasium wrapper that keeps the async face: ``areset``/``astep``/``aclose`` forward to the wrapped env
    (through :func:`areset`/:func:`astep`/:func:`aclose`, so the wrapped env may itself be a Gymnasium wrapper).

    Subclasses override ``areset``/``astep`` together with ``reset``/``step``, calling ``await super().astep(action)``
    where a sync override calls ``super().step(action)``.
    """

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Async ``reset`` of the wrapped env."""
        return await areset(self.env, seed=seed, options=options)

    async def astep(self, action: Any) -> StepResult:
        """Async ``step`` of the wrapped env."""
        return await astep(self.env, action)

    async def aclose(self) -> None:
        """Async ``close`` of the wrapped env."""
        await aclose(self.env)
