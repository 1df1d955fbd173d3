"""The event loop that owns every MCP session, and the sync face over it.

The MCP SDK is anyio-based and each ``Client`` must be entered and exited by the same task (the task-affinity pitfall).
mcp-gym therefore runs all sessions on one :class:`Runtime`: a daemon thread running an asyncio event loop, with a
task group where each connection's owner task lives. Sync code hops in with :meth:`Runtime.call` (one thread hop per
call, ~75 µs here; ``scripts/bench/step_overhead.py`` measures it); async code already running on the runtime's loop
awaits directly, and code on any other event loop hops in with :meth:`Runtime.acall`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

T = TypeVar("T")

__all__ = ["Runtime", "default_runtime"]


class Runtime:
    """A background asyncio event loop with a long-lived anyio task group for session owner tasks."""

    def __init__(self, name: str = "mcp-gym-runtime") -> None:
        self.loop = asyncio.new_event_loop()
        self._tg: TaskGroup | None = None
        self._stop: asyncio.Event | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name=name, daemon=True)
        self._thread.start()
        started.wait()
        self.closed = False

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            self._stop = asyncio.Event()
            async with anyio.create_task_group() as tg:
                self._tg = tg
                started.set()
                await self._stop.wait()
                tg.cancel_scope.cancel()

        try:
            self.loop.run_until_complete(serve())
        finally:
            started.set()

    def __deepcopy__(self, memo: dict[int, Any]) -> Runtime:
        return self

    def in_loop(self) -> bool:
        """True when called from the runtime's own thread (async code may then await directly)."""
        return threading.current_thread() is self._thread

    @property
    def task_group(self) -> TaskGroup:
        """The task group owner tasks are started in (use only from the runtime's loop)."""
        if self._tg is None:
            raise RuntimeError("mcp-gym runtime is not running")
        return self._tg

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the runtime from any thread."""
        if self.closed:
            coro.close()
            raise RuntimeError("mcp-gym runtime is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None) -> T:
        """Run ``await fn(*args)`` on the runtime from synchronous code and return its result."""
        if self.in_loop():
            raise RuntimeError("mcp-gym: a sync method was called on the runtime's own event loop; await the a* method")
        return self.submit(_call(fn, args)).result(timeout)

    async def acall(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)`` on the runtime from async code on any event loop."""
        if self.in_loop():
            return await fn(*args)
        fut = self.submit(_call(fn, args))
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (e.g. trio): wait in a worker thread
            return await anyio.to_thread.run_sync(fut.result)
        return await asyncio.wrap_future(fut)

    def close(self) -> None:
        """Stop the loop; cancels every owner task still running."""
        if self.closed:
            return
        self.closed = True
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


async def _call(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    return await fn(*args)


_default: Runtime | None = None
_lock = threading.Lock()


def default_runtime() -> Runtime:
    """The process-wide runtime, started on first use (a daemon thread; it dies with the process)."""
    global _default
    with _lock:
        if _default is None or _default.closed:
            _default = Runtime()
        return _default
