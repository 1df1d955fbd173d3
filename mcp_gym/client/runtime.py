"""The event loop that owns every MCP session, and the sync face over it.

The MCP SDK is anyio-based and each ``Client`` must be entered and exited by the same task (the task-affinity pitfall).
mcp-gym therefore runs all sessions on one :class:`Runtime`: an asyncio event loop with a long-lived task group where
each connection's owner task lives. The loop runs in one of three modes:

* **driven** (the start): nobody runs the loop between calls. A sync call (``env.step``) runs it in the caller's own
  thread until the call is done (as ``run_until_complete`` does: its done callback makes the call's task the root task
  anyio stops its worker threads with; when nothing else waits on the task, the task stops the loop itself as it
  ends, one loop iteration fewer), so a step pays no thread hop. While no other thread's call waits for the loop
  and no hold is taken (:func:`sync_call_alone`), the call's own stdio fast-lane request waits for its answer in
  this thread (a few milliseconds at most, then the loop waits), so a step takes one loop iteration, not three. A
  stdio ``env.step`` goes further (``call(..., inline=True)``): while, besides, at most one session is alive on the
  runtime, its coroutine runs in this thread without the event loop at all (the running loop set, no task); when
  the synchronous read takes its answer the step ends there, otherwise (a notification first, a dead server, a
  timeout, a Ctrl-C, code that needs a task: :func:`~mcp_gym._compat.stdlib.own_task`) a task goes on with it from
  where it waits, on the loop, as any call's.
  Owner tasks sleep between calls; what servers send meanwhile (notifications, a crash) is handled at the next call.
  A Ctrl-C during a call cancels that call (the sessions stay up) and raises ``KeyboardInterrupt``. Calls from other
  threads while one thread drives are run by the same loop, concurrently; the waiting thread takes over when the
  driver is done.
* **threaded**: a daemon thread runs the loop for good and sync calls hop onto it (~100-350 µs per call on a 2-core
  VM; ``scripts/bench/step_overhead.py`` measures both modes). The runtime switches, once and for all, as soon as
  something needs the loop to run on its own: async code on another event loop (``await env.astep(...)`` under
  ``asyncio.run``, a Ray actor), a sync call from a thread that runs another loop (Jupyter), or
  :meth:`Runtime.submit`. Live sessions carry over. Work that must go on between sync calls for a while (a spare
  server starting for the next episode) takes a :meth:`Runtime.keep_running` hold instead: a driven runtime then runs
  its loop on a thread only until the last hold is released, and is driven again after (``mode`` is ``"threaded"``
  meanwhile).
* **hosted** (async first): ``await Runtime.hosted()`` puts the runtime on the caller's already-running event loop
  (one per loop, shared by every caller on it), so async code on that loop awaits ``env.areset/astep`` with no thread
  hop at all (``acall`` just awaits) and no loop thread is started: the owner tasks live in a task group on that loop.
  This is what an async trainer wants (verl's agent loops run as tasks on their worker's loop; ``mcp_gym.verl`` hosts
  its envs' runtime there). Sync calls from that loop's own thread would block the loop they need, so they are refused
  with an error (await the ``a*`` method); calls from other threads are scheduled on the loop thread-safely while it
  runs. ``await runtime.aclose()`` ends the sessions; when the hosting loop ends (``asyncio.run`` returns) the runtime
  closes with it. :meth:`Runtime.as_default` makes envs built by code that does not pass ``runtime=`` (a factory) use
  it::

      rt = await Runtime.hosted()
      with rt.as_default():
          env = make_env("Counter")        # same as make_env("Counter", runtime=rt)
      await env.areset(seed=0)             # runs right here, on this loop
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from mcp_gym._compat.stdlib import (
    only_until_complete,  # whether the loop's stop is a task's only done callback
    running_loop,  # the running loop or None, without an exception per call
    set_running_loop,  # the running loop set around an inline step's first part (None: no inline steps)
    signals,  # signal's functions without its enum conversions (~10 µs a call)
    until_complete_cb,  # asyncio's run_until_complete stop callback (anyio finds its root task by it)
)
from mcp_gym.client._inline import CtrlC, Done, Rest, session_started, sessions

T = TypeVar("T")

__all__ = ["Runtime", "default_runtime", "sync_call_alone", "cancel_asked", "session_started"]

_POLL = 0.002
"""Seconds between checks of a thread waiting for its call while another thread drives the loop."""
_HOST_POLL = 0.5
"""Seconds between checks, by a thread waiting for a call on a hosted runtime, that the hosting loop still runs."""
_SIGINT = int(signal.SIGINT)
_main_ident = [threading.main_thread().ident]
"""The main thread's id (the only one that can set a signal handler), as of the last fork."""
if hasattr(os, "register_at_fork"):  # (after threading's own handler: the thread that forked is the main one)
    os.register_at_fork(after_in_child=lambda: _main_ident.__setitem__(0, threading.main_thread().ident))


def _foreign_loop_running() -> bool:
    """True when this thread already runs an event loop (then it cannot run the runtime's)."""
    return running_loop() is not None


class Runtime:
    """An asyncio event loop with a long-lived anyio task group for session owner tasks (see the module docs).

    Args:
        name: Name of the loop thread, once there is one.
        threaded: Start in threaded mode (a loop thread from the start) instead of driven mode.
    """

    def __init__(self, name: str = "mcp-gym-runtime", *, threaded: bool = False) -> None:
        self._setup(name, asyncio.new_event_loop(), hosted=False)
        if threaded or _foreign_loop_running():
            with self._state:
                self._spawn()
            self._ready.wait()
        else:
            claimed = self._claim()
            assert claimed
            try:
                self._run(asyncio.ensure_future(self._started(), loop=self.loop))
            finally:
                self._release()

    def _setup(self, name: str, loop: asyncio.AbstractEventLoop, *, hosted: bool) -> None:
        self.name = name
        self.loop = loop
        self._hosted = hosted  # on its caller's event loop (Runtime.hosted)
        self.closed = False
        self._tg: TaskGroup | None = None
        self._stop: asyncio.Event | None = None
        self._state = threading.Lock()  # guards _driver, _thread, _want_thread, _for_holds, _holds, closed
        self._driver: int | None = None  # id of the thread running the loop in driven mode
        self._thread: threading.Thread | None = None
        self._want_thread = False
        self._for_holds = False  # the loop thread runs only while holds are taken (keep_running), then ends
        self._holds = 0  # keep_running() holds not yet released
        self._guests = 0  # sync calls of other threads scheduled on the loop while one thread drives it
        self._no_holds: asyncio.Future[None] | None = None  # set (on the loop) when the last hold is released
        self._ctrl_c: CtrlC | None = None  # the Ctrl-C guard of the call that drives the loop now (cancel_asked)
        self._ready = threading.Event()
        self._serve_task = self.loop.create_task(self._serve(), name=name if hosted else None)

    @classmethod
    async def hosted(cls, name: str = "mcp-gym-runtime") -> Runtime:
        """The runtime hosted on the running event loop (made on first use, then shared by every caller on that
        loop until it is closed or the loop ends): sessions owned by tasks on this loop, ``acall`` with no thread hop
        (see the module docs). ``name`` names the serving task of a new one."""
        loop = asyncio.get_running_loop()
        rt = _by_loop.get(loop)
        if rt is None or rt.closed:
            for other, old in list(_by_loop.items()):  # (a copy: other threads' loops add theirs meanwhile)
                if old.closed or other.is_closed():  # a loop closed without ending its tasks
                    _by_loop.pop(other, None)
            rt = cls.__new__(cls)
            rt._setup(name, loop, hosted=True)
            _by_loop[loop] = rt
        await rt._started()
        if rt._tg is None:
            raise RuntimeError("mcp-gym: the hosted runtime ended while starting")
        return rt

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Runtime]:
        """Within the block (in this thread or task), :func:`default_runtime` returns this runtime, so envs built by
        code that does not pass ``runtime=`` (an env factory, ``make_env``) use it."""
        token = _scoped.set(self)
        try:
            yield self
        finally:
            _scoped.reset(token)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._ready.set()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None  # new sessions fail at once ("not running") instead of waiting on a task group that ended
            self._ready.set()
            if self._hosted:  # the host loop ends (its tasks are cancelled) or aclose: the runtime is over
                with self._state:
                    self.closed = True
                if _by_loop.get(self.loop) is self:
                    _by_loop.pop(self.loop, None)

    async def _started(self) -> None:
        while not self._ready.is_set():
            await asyncio.sleep(0)

    def __deepcopy__(self, memo: dict[int, Any]) -> Runtime:
        return self

    # -- modes ----------------------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"driven"``, ``"threaded"`` or ``"hosted"`` (see the module docs)."""
        return "hosted" if self._hosted else "threaded" if self._thread is not None else "driven"

    @property
    def threaded(self) -> bool:
        """True once a loop thread runs the loop (see the module docs)."""
        return self._thread is not None

    def in_loop(self) -> bool:
        """True when called from code the runtime's loop is running (async code may then await directly)."""
        if self._hosted:
            try:
                return asyncio.get_running_loop() is self.loop
            except RuntimeError:
                return False
        thread = self._thread
        if thread is not None:
            return threading.current_thread() is thread
        return self._driver == threading.get_ident()

    def _claim(self) -> bool:
        """Become the thread that drives the loop, if it is idle in driven mode."""
        with self._state:
            if self._hosted or self._thread is not None or self._driver is not None or self.closed:
                return False
            self._driver = threading.get_ident()
            return True

    def _release(self) -> None:
        """Stop driving; start the loop thread if someone asked for it meanwhile (or while holds are taken)."""
        with self._state:
            self._driver = None
            if (self._want_thread or self._holds) and self._thread is None and not self.closed:
                self._spawn(for_holds=not self._want_thread)

    def _spawn(self, for_holds: bool = False) -> None:
        """Start the loop thread (the caller holds ``_state``; the loop is not running). ``for_holds``: it runs the
        loop until no :meth:`keep_running` hold is left, then ends (the runtime is driven again) unless something
        asked for threaded mode meanwhile."""

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            while for_holds:
                self.loop.run_until_complete(self._until_no_holds())
                with self._state:  # holds are taken on the loop (no one runs it now) or by a call hopping here
                    if self._holds and not self.closed and not self._serve_task.done():
                        continue  # a call hopped onto this thread as it stopped: run it
                    self._for_holds = False
                    if not self._want_thread or self.closed or self._serve_task.done():
                        self._thread = None  # later calls drive the loop themselves
                        return
                    break
            self.loop.run_until_complete(self._serve_task)

        self._for_holds = for_holds
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    async def _until_no_holds(self) -> None:
        while self._holds and not self._serve_task.done():
            self._no_holds = self.loop.create_future()
            await asyncio.wait([self._no_holds, self._serve_task], return_when=asyncio.FIRST_COMPLETED)
        self._no_holds = None

    def keep_running(self) -> Callable[[], None]:
        """Keep the loop running between sync calls until the returned function is called (on the loop; once is
        enough, more are no-ops): work that must progress while the user's code runs (a spare server starting). A
        driven runtime runs its loop on a thread of its own from the end of the current sync call until the last
        hold is released, then is driven again (no thread hop per call); threaded and hosted runtimes run their loop
        anyway. Call from the runtime's loop."""
        with self._state:  # a driven runtime starts the thread when the sync call that drives the loop ends
            self._holds += 1
        return self._releaser()

    def _releaser(self) -> Callable[[], None]:
        """The release of a hold just counted (call it on the loop)."""
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            with self._state:
                self._holds -= 1
                last = not self._holds
            if last and self._no_holds is not None and not self._no_holds.done():
                self._no_holds.set_result(None)

        return release

    def _start_thread(self) -> None:
        """Switch to threaded mode (idempotent; if a thread drives the loop now, it switches when its call ends)."""
        with self._state:
            if self._thread is not None and self._for_holds:
                self._want_thread = True  # the thread that runs for holds stays on for good
                return
            if self._hosted or self._thread is not None or self.closed:  # a hosted runtime's loop runs on its own
                return
            if self._driver is None:
                self._spawn()
            else:
                self._want_thread = True

    def _run(self, fut: Awaitable[T]) -> T:
        """Run the loop in this thread until ``fut`` is done (the caller has claimed the loop)."""
        return self.loop.run_until_complete(fut)

    def _run_call(self, task: asyncio.Task[T]) -> T:
        """``run_until_complete(task)`` for a task of :func:`_call_and_stop` (the caller has claimed the loop): the
        same done callback (anyio finds its root task by it), and the task stops the loop as it ends when nothing
        else waits on it."""
        if until_complete_cb is None:
            return self._run(task)
        task.add_done_callback(until_complete_cb)
        try:
            self.loop.run_forever()
        except BaseException:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the error raised here is what the caller sees
            raise
        finally:
            task.remove_done_callback(until_complete_cb)
        if not task.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return task.result()

    @property
    def task_group(self) -> TaskGroup:
        """The task group owner tasks are started in (use only from the runtime's loop)."""
        if self._tg is None:
            raise RuntimeError("mcp-gym runtime is not running")
        return self._tg

    # -- calls ----------------------------------------------------------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine from any thread (switches to threaded mode: the loop must run on its own)."""
        if self.closed:
            coro.close()
            raise RuntimeError("mcp-gym runtime is closed")
        if self._hosted:
            try:
                loop = self._host_loop()
            except RuntimeError:
                coro.close()
                raise
            return asyncio.run_coroutine_threadsafe(coro, loop)
        self._start_thread()
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, timeout: float | None = None,
             inline: bool = False) -> T:
        """Run ``await fn(*args)`` on the runtime from synchronous code and return its result.

        ``timeout``: seconds before ``TimeoutError`` (the call is then cancelled). ``inline``: in driven mode, while
        nothing else needs the loop (no other thread's call, no hold, at most one session on the runtime), the
        coroutine's first part runs in this thread without the event loop (:meth:`_drive_inline`).
        """
        if (self._driver == threading.get_ident() if self._thread is None and not self._hosted else self.in_loop()):
            raise RuntimeError("mcp-gym: a sync method was called on the runtime's own event loop" + (
                " (a hosted runtime: it runs on the caller's loop)" if self._hosted else "") + "; await the a* method "
                "(areset, astep, aclose)")
        if self.closed:
            raise RuntimeError("mcp-gym runtime is closed")
        if self._hosted:
            loop = self._host_loop()
            return self._wait_hosted(asyncio.run_coroutine_threadsafe(_call(fn, args), loop), timeout)
        if self._thread is None:
            if running_loop() is not None:  # e.g. a sync env.step in Jupyter (_foreign_loop_running, inline)
                self._start_thread()
            elif self._claim():
                try:
                    if inline and timeout is None and set_running_loop is not None and not self._guests and \
                            not self._holds and sessions.get(self.loop, 0) <= 1:
                        return self._drive_task(None, fn, args)
                    return self._drive(fn, args, timeout)
                finally:
                    self._release()
        with self._state:  # hopping onto a thread that runs for holds: it runs until this call is done too
            hop = self._thread is not None and self._for_holds and not self.closed
            if hop:
                self._holds += 1
            self._guests += 1
        try:
            fut = asyncio.run_coroutine_threadsafe(_call(fn, args), self.loop)
            if hop:
                release = self._releaser()
                fut.add_done_callback(lambda _: self._release_soon(release))
            return self._wait(fut, timeout)
        finally:
            with self._state:
                self._guests -= 1

    def _release_soon(self, release: Callable[[], None]) -> None:
        """Run ``release`` on the loop (from any thread; nothing to release once the loop is closed)."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(release)

    def _drive(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], timeout: float | None) -> T:
        loop = self.loop
        if until_complete_cb is None:
            coro = _call(fn, args)
            task = loop.create_task(coro if timeout is None else asyncio.wait_for(coro, timeout))
        else:
            task = loop.create_task(_call_and_stop(fn, args, timeout, loop))
        _sync_calls[task] = self
        try:
            return self._drive_task(task)
        finally:
            del _sync_calls[task]

    def _drive_inline(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> Done[T] | asyncio.Task[T]:
        """The first part of an inline call: ``fn(*args)`` sent its first ``None`` in this thread, with the running
        loop set and no task (nothing else needs the loop, see :meth:`call`), in a copy of this thread's context (as
        a task's). Returns its result if it ends there (a stdio step whose answer the synchronous read took: no
        loop at all), else the task that goes on with it from where it waits (:class:`~mcp_gym.client._inline.Rest`),
        to run as any call's task. Code that needs the running task awaits :func:`~mcp_gym._compat.stdlib.own_task`
        first."""
        loop, ctx = self.loop, contextvars.copy_context()
        coro: Coroutine[Any, Any, T] = fn(*args)  # type: ignore[assignment]  # (an async function's coroutine)
        assert set_running_loop is not None
        set_running_loop(loop)
        _inline[loop] = self
        try:
            yielded = ctx.run(coro.send, None)
        except StopIteration as done:
            first: Done[T] = Done.__new__(Done)  # (Done(value) without its __init__ call)
            first.value = done.value
            return first
        finally:
            del _inline[loop]
            set_running_loop(None)
        return ctx.run(loop.create_task, Rest(coro, yielded))

    def _drive_task(self, task: asyncio.Task[T] | None, fn: Callable[..., Awaitable[T]] | None = None,
                    args: tuple[Any, ...] = ()) -> T:
        """Run the call's task, or (``task`` ``None``) an inline call's first part (:meth:`_drive_inline` of ``fn``
        and ``args``) and then its task if it needs one, under the Ctrl-C guard."""
        if threading.get_ident() != _main_ident[0] or \
                signals.getsignal(_SIGINT) is not signal.default_int_handler:
            if task is not None:
                return self._run_call(task)
            first = self._drive_inline(fn, args)  # type: ignore[arg-type]  # (fn: an inline call's)
            return first.value if type(first) is Done else self._then(first)
        # Ctrl-C cancels this call instead of raising inside whichever task runs (it could own a session).
        guard = CtrlC()  # (an object, not a closure: no cells per call)
        guard.loop, guard.current, guard.interrupted = self.loop, task, False
        previous = signals.signal(_SIGINT, guard)
        self._ctrl_c = guard
        try:
            if task is None:  # inline: its first part, then its task if it needs one (cancelled on a Ctrl-C)
                first = self._drive_inline(fn, args)  # type: ignore[arg-type]  # (fn: an inline call's)
                if type(first) is Done:  # (the usual end: no _then call, no isinstance)
                    result = first.value
                else:
                    assert not isinstance(first, Done)  # (for mypy: the task that goes on with it)
                    guard.current = first
                    if guard.interrupted:
                        first.cancel()
                    result = self._then(first)
            else:
                result = self._run_call(task)
            if guard.interrupted:  # the call ended anyway (it was past its last await, or shielded): the Ctrl-C stands
                raise KeyboardInterrupt
            return result
        except (asyncio.CancelledError, Exception) as e:  # the Ctrl-C stands, whatever the cancelled call raised
            if guard.interrupted:
                raise KeyboardInterrupt from (None if isinstance(e, asyncio.CancelledError) else e)
            raise
        finally:
            self._ctrl_c = None
            signals.signal(_SIGINT, previous)

    def _then(self, first: Done[T] | asyncio.Task[T]) -> T:
        """An inline call's result, or its task run to the end as a sync call's task."""
        if isinstance(first, Done):
            return first.value
        _sync_calls[first] = self
        try:
            return self._run_call(first)
        finally:
            del _sync_calls[first]

    def _wait(self, fut: concurrent.futures.Future[T], timeout: float | None) -> T:
        """Wait for a call scheduled on the loop, driving the loop whenever no other thread does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                fut.cancel()
                raise TimeoutError(f"no result within {timeout:g} s")
            if self._thread is None and self._claim():
                try:
                    waiter = asyncio.wrap_future(fut, loop=self.loop)
                    # The outcome is read from `fut` below; only KeyboardInterrupt & co. leave here.
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        self._run(waiter if left is None else asyncio.wait_for(waiter, left))
                finally:
                    self._release()
            else:  # (a thread that runs for holds may end before it runs the call: then this one drives it)
                concurrent.futures.wait([fut], timeout=left if self._thread is not None and not self._for_holds else
                                        _POLL if left is None else min(left, _POLL))
        return fut.result()

    def _host_loop(self) -> asyncio.AbstractEventLoop:
        """The hosting loop, if it runs (else a call scheduled on it would wait for good)."""
        if not self.loop.is_running():
            raise RuntimeError(f"mcp-gym: the event loop hosting runtime {self.name!r} is not running (a hosted "
                               "runtime is used from that loop's own async code, or from other threads while it runs)")
        return self.loop

    def _wait_hosted(self, fut: concurrent.futures.Future[T], timeout: float | None) -> T:
        """Wait in another thread for a call scheduled on the hosting loop, bounded by its running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                fut.cancel()
                raise TimeoutError(f"no result within {timeout:g} s")
            with contextlib.suppress(concurrent.futures.TimeoutError):
                return fut.result(timeout=_HOST_POLL if left is None else min(left, _HOST_POLL))
            if not self.loop.is_running() and not fut.done():
                fut.cancel()
                raise RuntimeError(f"mcp-gym: the event loop hosting runtime {self.name!r} stopped during a call")

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

    # -- closing --------------------------------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Stop the loop; cancels every owner task still running (closing their sessions). A hosted runtime is closed
        from another thread (on its own loop: ``await aclose()``); its loop is the caller's and stays."""
        if self.in_loop():
            raise RuntimeError("mcp-gym: Runtime.close() called from its own event loop; await Runtime.aclose()")
        if self._hosted:
            with self._state:
                if self.closed:
                    return
                self.closed = True
            if self.loop.is_closed():
                return
            if self.loop.is_running():
                with contextlib.suppress(Exception):  # bounded: _end cancels owner tasks that do not finish
                    asyncio.run_coroutine_threadsafe(self._end(timeout), self.loop).result(timeout * 2 + 1.0)
            elif self._stop is not None:  # the sessions end when the loop runs again (or with it)
                self.loop.call_soon_threadsafe(self._stop.set)
            return
        with self._state:
            if self.closed:
                return
            self.closed = True
            thread, driving = self._thread, self._driver is not None
            if thread is None and not driving:
                self._driver = threading.get_ident()
        if thread is not None or driving:  # the loop runs elsewhere: ask it to stop serving
            if self._stop is not None:
                self.loop.call_soon_threadsafe(self._stop.set)
            if thread is not None:
                thread.join(timeout=timeout)
            return
        try:
            if self._stop is not None:
                self._stop.set()
            with contextlib.suppress(BaseException):  # wait_for cancels the task group if it takes too long
                self._run(asyncio.ensure_future(asyncio.wait_for(self._serve_task, timeout), loop=self.loop))
            with contextlib.suppress(BaseException):
                self._run(asyncio.ensure_future(self.loop.shutdown_asyncgens(), loop=self.loop))
            self.loop.close()
        finally:
            with self._state:
                self._driver = None

    async def aclose(self, timeout: float = 10.0) -> None:
        """Async :meth:`close`: on a hosted runtime's loop, end its sessions there (each owner task closes its own);
        elsewhere, close in a worker thread."""
        if not self.in_loop():
            await anyio.to_thread.run_sync(self.close, timeout)
            return
        if not self._hosted:
            raise RuntimeError("mcp-gym: Runtime.aclose() called on its own loop thread; close it from elsewhere")
        with self._state:
            if self.closed:
                return
            self.closed = True
        await self._end(timeout)

    async def _end(self, timeout: float) -> None:
        """Stop serving on the hosting loop and wait (bounded) for the owner tasks to finish."""
        if self._stop is not None:
            self._stop.set()
        done, _ = await asyncio.wait([self._serve_task], timeout=timeout)
        if not done:  # an owner task does not finish: cancel the lot
            self._serve_task.cancel()
            await asyncio.wait([self._serve_task], timeout=timeout)


_sync_calls: dict[asyncio.Future[Any], Runtime] = {}
"""The task of each synchronous call that drives its runtime's loop now (driven mode), and that runtime."""
_inline: dict[asyncio.AbstractEventLoop, Runtime] = {}
"""The runtime whose synchronous call runs its first part inline (no task, :meth:`Runtime._drive_inline`) now."""


def sync_call_alone(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """True in the task of a synchronous call that drives its runtime's loop in this thread (driven mode), or in its
    inline first part, while no other thread's call waits for that loop and no :meth:`Runtime.keep_running` hold is
    taken: nothing then needs the loop but what this call waits for, so the call may wait for its own I/O in this
    thread for a short, bounded while (the stdio transport reads a server's answer so,
    :meth:`mcp_gym.client._stdio._Link.read_now`). ``loop``: the running loop, when the caller knows it
    (``asyncio.current_task()`` without it asks for the running loop, a ``getpid`` system call on Python < 3.12)."""
    rt = _inline.get(loop) if loop is not None else None  # (an inline part runs no task: no current_task() call)
    if rt is None:
        task = asyncio.current_task(loop)
        rt = _sync_calls.get(task) if task is not None else None
    return rt is not None and not rt._guests and not rt._holds


def cancel_asked(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether the call running on ``loop`` now (its task, or a synchronous call's inline first part) was asked to
    stop (a Ctrl-C; on Python 3.10 a task's cancellation is not seen here)."""
    rt = _inline.get(loop) if loop is not None else None  # (an inline part runs no task: no current_task() call)
    if rt is not None:
        return rt._ctrl_c is not None and rt._ctrl_c.interrupted
    task = asyncio.current_task(loop)
    if task is None:
        return False
    cancelling = getattr(task, "cancelling", None)  # (Python 3.11+)
    return cancelling is not None and bool(cancelling())


async def _call(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    return await fn(*args)


async def _call_and_stop(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], timeout: float | None,
                         loop: asyncio.AbstractEventLoop) -> T:
    """``await fn(*args)`` (bounded by ``timeout``) as the task :meth:`Runtime._run_call` runs: as it ends, when the
    only done callback of its task is the loop's stop (not anyio's worker-thread stop, nor anything else), the
    callback is taken off and the loop stopped here, instead of in one more iteration. (``current_task(loop)``: the
    running loop named, no ``getpid`` system call on Python < 3.12.)"""
    task = asyncio.current_task(loop)
    try:
        if timeout is None:
            return await fn(*args)
        return await asyncio.wait_for(_call(fn, args), timeout)
    finally:
        # (the current task checked: not a close by the garbage collector)
        if task is not None and asyncio.current_task(loop) is task and only_until_complete(task):
            task.remove_done_callback(until_complete_cb)  # type: ignore[arg-type]  # not None: only_until_complete
            loop.stop()


_default: Runtime | None = None
_lock = threading.Lock()
_by_loop: dict[asyncio.AbstractEventLoop, Runtime] = {}
"""The hosted runtime of each event loop (removed when it closes or its loop ends)."""
_scoped: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar("mcp_gym_runtime", default=None)
"""The runtime :meth:`Runtime.as_default` puts in place of the process-wide one."""


def default_runtime() -> Runtime:
    """The process-wide runtime, started on first use (within :meth:`Runtime.as_default`: that runtime)."""
    global _default
    scoped = _scoped.get()
    if scoped is not None and not scoped.closed:
        return scoped
    with _lock:
        if _default is None or _default.closed:
            _default = Runtime()
        return _default


def _forget_default_in_child() -> None:
    """A forked child must not use its parent's runtime (its loop, sessions and thread belong to the parent)."""
    global _default, _lock
    _default = None
    _lock = threading.Lock()
    _by_loop.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_in_child)


@atexit.register
def _close_default() -> None:
    """In driven mode no thread keeps the loop: end the sessions at exit (stdio servers exit) instead of leaving
    pending tasks to the garbage collector; the same for a driven runtime whose loop runs on a thread for holds (a
    spare server starting). A threaded runtime's daemon thread just stops with the interpreter."""
    rt = _default
    if rt is not None and not rt.closed and (not rt.threaded or rt._for_holds):
        with contextlib.suppress(BaseException):
            rt.close(timeout=3.0)
