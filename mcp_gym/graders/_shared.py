"""Resources that graders share between the envs of a process (the BFCL checker process:
:mod:`mcp_gym.envs.bfcl.forked`), owned by the envs that used them: each is stopped when the last of those envs
closes.

A grader asks for one with :func:`use` while it grades; the env grading then holds it (:func:`grading`, set by
:func:`~mcp_gym.graders.episode.grade_episode` around each grade and seen in a sync grader's worker thread too, whose
context is a copy), and its close gives it up (:func:`release`). A resource is a key and a function that stops it:
this layer knows nothing of what it is, so a grader of a higher layer (``mcp_gym.envs``) registers its own. One
used outside an env's grade (a script calling the grader itself) is held by no env and lives until whatever else
stops it (for the BFCL checker: the job's end, or the interpreter's exit)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any

__all__ = ["grading", "grading_env", "use", "release"]

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("mcp_gym_grading_env", default=None)
_lock = threading.Lock()  # held while a resource stops, so a grade asking for it meanwhile gets a new one
_held: dict[Hashable, tuple[Callable[[], None], weakref.WeakSet[Any]]] = {}


@contextlib.contextmanager
def grading(owner: Any) -> Iterator[None]:
    """While this runs, a resource a grader :func:`use`\\ s is held by ``owner`` (the env grading)."""
    token = _current.set(owner)
    try:
        yield
    finally:
        _current.reset(token)


def grading_env() -> Any:
    """The env grading now (``None`` outside an env's grade): a grader of a higher layer may read what the user's
    config gave it (the BFCL grader: its servers' command lines, :mod:`mcp_gym.envs.bfcl.grade`)."""
    return _current.get()


def use(key: Hashable, stop: Callable[[], None]) -> bool:
    """The env grading now (if any) holds the shared resource ``key``; ``stop()`` stops it once no env holds it any
    more (the latest ``stop`` given for ``key`` is the one called). Whether an env holds it. Call it before taking
    the resource, so that an env closing meanwhile does not stop it under this grade."""
    owner = _current.get()
    if owner is None:
        return False
    with _lock:
        found = _held.get(key)
        _held[key] = (stop, found[1] if found is not None else weakref.WeakSet())
        _held[key][1].add(owner)
    return True


def release(owner: Any) -> None:
    """``owner`` (an env) closes: every resource it held that no other env holds is stopped, here (each stop is
    bounded by the resource's own; idempotent)."""
    with _lock:
        for key, (stop, users) in list(_held.items()):
            if owner not in users:
                continue
            users.discard(owner)
            if not users:
                del _held[key]
                stop()


def holders(key: Hashable) -> int:
    """How many open envs hold ``key`` (for tests)."""
    with _lock:
        found = _held.get(key)
        return 0 if found is None else len(found[1])
