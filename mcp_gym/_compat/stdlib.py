"""The standard library's private names mcp-gym uses (CPython 3.10-3.14), each with why; see :mod:`mcp_gym._compat`.

* ``json.encoder.c_make_encoder``, ``c_encode_basestring`` and ``c_encode_basestring_ascii``: the C encoder built once
  (``JSONEncoder.encode`` builds one per call), for the values orjson refuses (:func:`c_json_encoders`);
* ``_signal``: ``signal``'s functions without its enum conversions (~10 µs per synchronous env call, :data:`signals`);
* ``re._parser`` (``sre_parse`` before Python 3.11): the parse tree of a regular expression, to sample strings that
  match a schema's ``pattern`` (:data:`sre_parse`);
* ``asyncio._get_running_loop``: the running loop or ``None``, without the exception ``get_running_loop`` raises
  when there is none (each synchronous env call asks, :func:`running_loop`);
* ``asyncio._set_running_loop``: the running loop set (and reset) around the first part of a synchronous step that
  the runtime runs in the calling thread without the event loop (:data:`set_running_loop`, :func:`own_task`);
* ``asyncio.base_events._run_until_complete_cb`` and a task's ``_callbacks``: the done callback by which anyio
  recognises the task a loop runs until complete (its root task, which stops its worker threads when done), and
  whether anything else waits on a task; a synchronous env call's task stops the loop itself when nothing does,
  one loop iteration fewer (:data:`until_complete_cb`).
"""

from __future__ import annotations

import asyncio
import json.encoder
import signal
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mcp_gym._compat import moved

__all__ = ["c_json_encoders", "signals", "sre_parse", "running_loop", "set_running_loop", "own_task",
           "until_complete_cb", "only_until_complete", "missing"]

if sys.version_info >= (3, 11):
    import re._parser as sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_parse
"""The regular-expression parser (``sre_parse.parse(pattern)`` gives the parse tree)."""

if TYPE_CHECKING:  # the same functions as signal's (typeshed has no _signal)
    import signal as signals
else:
    try:
        import _signal as signals
    except ImportError:  # every CPython has it; see missing()
        moved("Python", "_signal", "each synchronous env call spends ~10 µs more in the signal module")
        signals = signal
"""``getsignal`` and ``signal`` without the enum conversions of the :mod:`signal` module."""


def _running_loop_raising() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


running_loop: Callable[[], asyncio.AbstractEventLoop | None] = getattr(
    asyncio, "_get_running_loop", _running_loop_raising)
"""The event loop running in this thread, or ``None``."""

set_running_loop: Callable[[asyncio.AbstractEventLoop | None], None] | None = getattr(
    asyncio, "_set_running_loop", None)
"""Sets the event loop :func:`running_loop` returns in this thread (``None``: not there; no step then runs without
the event loop)."""


async def own_task() -> None:
    """Before code that needs the running task (anyio's cancel scopes and checkpoints, the SDK's requests, callables
    of the user's): a coroutine run outside any task (the first part of a synchronous step, run in the calling
    thread without the event loop: :meth:`mcp_gym.client.runtime.Runtime.call`'s ``inline``) suspends here once, so
    what follows runs in the call's task, on the loop. In a task: nothing."""
    loop = running_loop()
    if loop is not None and asyncio.current_task(loop) is None:
        await asyncio.sleep(0)


until_complete_cb: Callable[[Any], None] | None = getattr(
    getattr(asyncio, "base_events", None), "_run_until_complete_cb", None)
"""``asyncio.base_events._run_until_complete_cb`` (``None``: not there; calls then use ``run_until_complete``)."""
if until_complete_cb is not None and not hasattr(asyncio.Task, "_callbacks"):
    until_complete_cb = None
if until_complete_cb is None:  # pragma: no cover - every CPython 3.10-3.14 has both
    moved("Python", "asyncio.base_events._run_until_complete_cb", "each synchronous env call takes one event-loop "
          "iteration more")


def only_until_complete(task: asyncio.Task[Any]) -> bool:
    """Whether :data:`until_complete_cb` is ``task``'s only done callback (``False`` without it)."""
    callbacks = task._callbacks if until_complete_cb is not None else None  # (typeshed has _callbacks)
    return callbacks is not None and len(callbacks) == 1 and callbacks[0][0] is until_complete_cb


_JSON_NAMES = ("c_make_encoder", "c_encode_basestring", "c_encode_basestring_ascii")

Encoder = Callable[[Any, int], Iterator[str]]


def missing() -> list[str]:
    """The private names used here that this Python lacks (``[]`` on CPython)."""
    out = [f"json.encoder.{n}" for n in _JSON_NAMES if getattr(json.encoder, n, None) is None]
    if signals.__name__ != "_signal":
        out.append("_signal")
    if not hasattr(asyncio, "_get_running_loop"):
        out.append("asyncio._get_running_loop")
    if until_complete_cb is None:
        out.append("asyncio.base_events._run_until_complete_cb")
    if set_running_loop is None:
        out.append("asyncio._set_running_loop")
    if not hasattr(sre_parse, "parse"):
        out.append(f"{sre_parse.__name__}.parse")
    return out


def c_json_encoders(default: Callable[[Any], Any]) -> tuple[Encoder, Encoder] | None:
    """Two C encoders of compact JSON (``","`` and ``":"``, ``allow_nan=False``, no circular-reference check: the
    caller removes cycles), calling ``default`` for what JSON has no type for: (keeping non-ASCII text, escaping it).
    Each is called as ``"".join(encode(value, 0))``. ``None`` (warned once) on a Python without the C encoder."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        moved("Python", "json.encoder.c_make_encoder", "JSON columns are written by the slower pure-Python encoder")
        return None
    keep = json.encoder.c_encode_basestring  # type: ignore[attr-defined]  # not in typeshed
    escape = json.encoder.c_encode_basestring_ascii  # type: ignore[attr-defined]  # not in typeshed
    return (make(None, default, keep, None, ":", ",", False, False, True),
            make(None, default, escape, None, ":", ",", False, False, True))
