"""A Ctrl-C that C code swallowed, kept: a job's ``KeyboardInterrupt`` must end the job (exit status 130), even when
it was raised where it cannot propagate.

Python runs a signal handler in whatever Python code runs next. When that code was called back from C that does not
pass errors on (pydantic-core building a validator, a ``gc`` callback, a ``__del__``), the ``KeyboardInterrupt`` is
dropped with an "Exception ignored in ..." line: a fresh-clone test run saw a job Ctrl-C'd while pydantic-core built
a schema validator run all its 400 episodes and exit 0. While a job runs (:func:`keep`, then :func:`release`), a
``sys.unraisablehook`` notices such a drop and sends the Ctrl-C again from another thread (at most
:data:`_MAX_RESENT` times), so the job's own handler sees it in the Python code that runs next; and :func:`lost` tells
the job, once it ends normally, whether a Ctrl-C was dropped, so it exits 130 rather than as if nothing happened.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

__all__ = ["keep", "lost", "release"]

_MAX_RESENT = 10
"""Most times a dropped Ctrl-C is sent again (each lands where the next Python code runs: rarely in C again)."""

_state: dict[str, Any] = {"dropped": 0, "previous": None}


def _resend() -> None:
    if _state["previous"] is not None:  # the job still runs (a Ctrl-C after it is not the job's)
        os.kill(os.getpid(), signal.SIGINT)  # to the process: its handler runs in the main thread


def _hook(unraisable: Any) -> None:
    previous = _state["previous"] or sys.__unraisablehook__
    if isinstance(unraisable.exc_value, KeyboardInterrupt) or (
            unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt)):
        _state["dropped"] += 1
        if _state["dropped"] <= _MAX_RESENT and sys.platform != "win32":
            threading.Thread(target=_resend, name="mcp-gym-ctrl-c", daemon=True).start()
    previous(unraisable)


def keep() -> None:
    """From now until :func:`release`, notice a ``KeyboardInterrupt`` that C code drops and send the Ctrl-C again."""
    if _state["previous"] is None and threading.current_thread() is threading.main_thread():
        _state["dropped"], _state["previous"] = 0, sys.unraisablehook
        sys.unraisablehook = _hook


def release() -> None:
    """Put back the ``sys.unraisablehook`` :func:`keep` found."""
    if _state["previous"] is not None:
        if sys.unraisablehook is _hook:
            sys.unraisablehook = _state["previous"]
        _state["previous"] = None


def lost() -> bool:
    """Whether a ``KeyboardInterrupt`` was dropped since the last :func:`keep`."""
    return bool(_state["dropped"])
