"""The job's BFCL checker process: BFCL imported once, one forked child per check.

:func:`mcp_gym.envs.bfcl.grade.run_checks` asks it first. It is :mod:`mcp_gym.envs.bfcl.check` run as
``python -I check.py --serve ROOT OWNER``, started as the one-shot checker is (``-I``, an environment of
``PYTHONHASHSEED=0`` alone, a fresh temporary folder as its working directory) and in a session of its own (a Ctrl-C
at the terminal reaches the job, not it). It loads the BFCL copy, reads its data and imports the modules of the API
classes its tasks involve once (:func:`mcp_gym.envs.bfcl.check.preload`), then forks one child per request, before
anything of the request runs: each child is a fresh copy of the loaded BFCL (no instance, counter or global of another
check; the checker process itself never runs one), and its verdicts come back over a pipe of its own. Requests
from several slots run at once (a request id per request). BFCL's code still never runs in the job's process.

Bounds: the checker process kills a child that runs over the request's timeout (the grade fails with one line naming
the task); the job waits for an answer at most that timeout plus :data:`MARGIN`, then kills the checker process. A
checker process that dies (or will not start) is noticed: the request in flight is run by the one-shot subprocess
instead, and the next request starts a new checker process.

Lifetime: one checker process per BFCL copy in the job's process, owned by the envs that graded with it
(:mod:`mcp_gym.graders._shared`): stopped when the last of them closes, else by :func:`close_all` (at the end of a
``collect``/``eval`` job, and at the interpreter's exit, Ctrl-C included). If the job dies without either (SIGKILL),
the checker process reads the end of its stdin, or sees its parent gone, and exits, killing its children; the
children also die with it (Linux ``PR_SET_PDEATHSIG``) and each has an alarm of its own past its timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from mcp_gym.envs.bfcl import check
from mcp_gym.graders import _shared

__all__ = ["ForkChecker", "run", "close", "close_all", "checker_pids", "START_TIMEOUT", "MARGIN"]

START_TIMEOUT = 60.0
"""Seconds a checker process may take to load BFCL and say it is ready (else the one-shot subprocess grades)."""
MARGIN = 10.0
"""Seconds the job waits for an answer past the request's own timeout (the checker process enforces that one)."""


class _CheckerDied(RuntimeError):
    """The checker process ended (or never started) before it answered: the caller runs the one-shot checker."""


class ForkChecker:
    """One checker process for the BFCL copy ``root`` (see the module docstring); thread-safe."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._rids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._ready = threading.Event()
        self._dead = self._ended = False
        self._tmp = tempfile.mkdtemp(prefix="mcp-gym-bfcl-")
        self._stderr: IO[bytes] = open(os.path.join(self._tmp, ".stderr"), "w+b")  # noqa: SIM115 - closed in close()
        work = os.path.join(self._tmp, "cwd")
        os.mkdir(work)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-X", "utf8", str(Path(check.__file__).resolve()), "--serve", str(self.root),
                 str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=work,
                env={"PYTHONHASHSEED": "0"}, start_new_session=True)
        except BaseException:
            self._cleanup()
            raise
        self._reader = threading.Thread(target=self._read, name=f"bfcl-checker-{self.proc.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The checker process's id."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Whether it can take a request (started, not dead, not closed)."""
        return not self._dead and self.proc.poll() is None

    def _read(self) -> None:
        """The answers, by request id, until the checker process's stdout ends (it died or was closed)."""
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "ready" in msg:
                    self._ready.set()
                    continue
                with self._lock:
                    waiter = self._waiting.pop(msg.get("rid"), None)
                if waiter is not None:
                    waiter[1].append(msg)
                    waiter[0].set()
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                self._dead = True
                waiting, self._waiting = self._waiting, {}
            self._ready.set()
            for event, _ in waiting.values():
                event.set()  # no answer: _CheckerDied

    def _why(self) -> str:
        """The last lines of the checker process's stderr."""
        try:
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, self._stderr.tell() - 4096))
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        except (OSError, ValueError):
            return ""
        return " | ".join(tail)

    def run(self, checks: Sequence[Mapping[str, Any]], timeout: float) -> list[dict[str, Any]]:
        """BFCL's verdicts on ``checks``, from one forked child. Raises :class:`_CheckerDied` when the checker process
        is gone (or never became ready), ``RuntimeError`` naming the tasks when the check ran over ``timeout``."""
        ids = ", ".join(str(c.get("id")) for c in checks)
        if not self._ready.wait(START_TIMEOUT) or self._dead:
            why = self._why()
            self.close(ending=False)
            raise _CheckerDied(f"BFCL's checker process did not start: {why}")
        event = threading.Event()
        box: list[dict[str, Any]] = []
        with self._lock:
            if self._dead:
                raise _CheckerDied("BFCL's checker process has ended")
            rid = next(self._rids)
            self._waiting[rid] = (event, box)
            line = json.dumps({"rid": rid, "checks": list(checks), "timeout": timeout}) + "\n"
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):
                self._waiting.pop(rid, None)
                raise _CheckerDied("BFCL's checker process has ended") from None
        if not event.wait(timeout + MARGIN):
            with self._lock:
                self._waiting.pop(rid, None)
            self.close(ending=False)  # the checker process itself is stuck: the next request starts a new one
            raise RuntimeError(f"BFCL's checker process gave no verdict on {ids} in {timeout + MARGIN:g} s (killed)")
        if not box and self._ended:
            raise RuntimeError(f"BFCL's checker process was stopped (the job's end) while checking {ids}")
        if not box:
            raise _CheckerDied(f"BFCL's checker process ended while checking {ids}: {self._why()}")
        answer = box[0]
        if "error" in answer:
            raise RuntimeError(str(answer["error"]))
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(checks):
            raise RuntimeError("BFCL's checker answered something other than one verdict per check")
        return results

    def close(self, *, ending: bool = True) -> None:
        """Stop the checker process (its children die with it) and remove its folder; idempotent. ``ending``: the
        job's end (a request in flight then fails, rather than being run again by the one-shot checker)."""
        with self._lock:
            self._dead = True
            self._ended = self._ended or ending
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # it exits on the end of its stdin, killing its children first
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10.0)
        self._reader.join(10.0)
        self._cleanup()

    def _cleanup(self) -> None:
        with contextlib.suppress(OSError):
            self._stderr.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


_lock = threading.Lock()
_checkers: dict[str, ForkChecker] = {}


def _checker(root: str | Path) -> ForkChecker:
    key = str(Path(root).resolve())
    with _lock:
        found = _checkers.get(key)
        if found is not None and found.alive:
            return found
        if found is not None:
            found.close(ending=False)
        _checkers[key] = made = ForkChecker(key)
        return made


def run(root: str | Path, checks: Sequence[Mapping[str, Any]], timeout: float) -> list[dict[str, Any]] | None:
    """BFCL's verdicts on ``checks`` from the job's checker process for ``root`` (started on first use), or ``None``
    when there is none to ask (it died or would not start: the caller runs the one-shot checker; the next request
    starts a new one). Raises ``RuntimeError`` naming the tasks when the check ran over ``timeout``."""
    key = str(Path(root).resolve())
    _shared.use(("bfcl-checker", key), lambda: close(key))  # the env grading holds it: stopped at its last close
    try:
        return _checker(key).run(checks, timeout)
    except (_CheckerDied, OSError):
        return None


def close(root: str | Path) -> None:
    """Stop the checker process for ``root``, if one runs (a request in flight falls back to the one-shot checker):
    the last env that graded with it closes."""
    with _lock:
        found = _checkers.pop(str(Path(root).resolve()), None)
    if found is not None:
        found.close(ending=False)


def checker_pids() -> list[int]:
    """The ids of the job's live checker processes."""
    with _lock:
        return [c.pid for c in _checkers.values() if c.alive]


def close_all() -> None:
    """Stop every checker process of this process (the job's end; also run at the interpreter's exit)."""
    with _lock:
        checkers = list(_checkers.values())
        _checkers.clear()
    for c in checkers:
        c.close()


atexit.register(close_all)
