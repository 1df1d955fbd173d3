"""The pieces of an inline synchronous call (:meth:`mcp_gym.client.runtime.Runtime.call`'s ``inline``): the
first part of the call's coroutine runs in the calling thread without the event loop; if it ends there, its result
is the call's (:class:`Done`); if it waits, a task goes on with it from where it waits (:class:`Rest`). And the
count of sessions alive on each loop (:func:`session_started`): a call runs inline only while there is at most one,
so no other session needs the loop meanwhile. And a synchronous call's Ctrl-C guard (:class:`CtrlC`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["CtrlC", "Done", "Rest", "sessions", "session_started"]

sessions: dict[asyncio.AbstractEventLoop, int] = {}
"""Sessions alive on each loop (:func:`session_started`)."""


def session_started() -> Callable[[], None]:
    """Count a session (a server connection's owner task) alive on the running loop; the function returned (once is
    enough) counts it ended."""
    loop = asyncio.get_running_loop()
    sessions[loop] = sessions.get(loop, 0) + 1
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            if sessions.get(loop, 0) > 1:
                sessions[loop] -= 1
            else:
                sessions.pop(loop, None)

    return end


class Done(Generic[T]):
    """An inline call's result: its coroutine ended in its first part."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class Rest(Coroutine[Any, Any, Any]):
    """What a task runs to go on with a coroutine whose first part ran inline and now waits: the task's first step
    gets what the coroutine yielded (the future it awaits, or ``None`` for a bare yield), as if the task had run
    that part; the rest passes through, and a cancellation before that first step is thrown in where the coroutine
    waits, as into a task's coroutine."""

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro, self._first = coro, [yielded]

    def send(self, value: Any) -> Any:  # noqa: D102 - a coroutine's
        if self._first:
            return self._first.pop()
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:  # noqa: D102 - a coroutine's
        self._first.clear()
        return self._coro.throw(typ if val is None else val)

    def close(self) -> None:  # noqa: D102 - a coroutine's
        self._coro.close()

    def __await__(self) -> Any:  # noqa: D105 - a coroutine's
        return self._coro.__await__()


class CtrlC:
    """The SIGINT handler of one synchronous call (``Runtime._drive_task``; an object, not a closure: no cells per
    call): the first Ctrl-C cancels the call's task (``current``; in an inline part, ``interrupted`` stops the
    synchronous read, ``cancel_asked``); another, or one after the task is done, raises ``KeyboardInterrupt``."""

    __slots__ = ("loop", "current", "interrupted")
    loop: asyncio.AbstractEventLoop
    current: asyncio.Task[Any] | None
    interrupted: bool

    def __call__(self, signum: int, frame: Any) -> None:
        current = self.current
        if self.interrupted or (current is not None and current.done()):
            raise KeyboardInterrupt
        self.interrupted = True
        if current is not None:
            current.cancel()
            self.loop.call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
