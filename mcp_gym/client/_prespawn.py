"""Stdio server processes started before anything in the process can connect to them (a job's first servers, started
as soon as its config exists, while the job still imports and plans: issue 40), and handed to the connection whose
start would have spawned exactly that process.

Standard library only: importing it costs nothing, so a job can start its first servers before it imports the MCP
SDK. A process is handed over only when the command line, environment and working directory the connection asks for
are exactly the ones it was started with (:func:`take`, called by the stdio transport's spawn); anything else spawns a
new process as usual. A process started here is in a process group of its own, as a spawned one is; its stdin is
held by this process alone, so it exits when this process dies (the kernel closes the pipe, even on SIGKILL), and
:func:`stop_all` (at the job's end, and at the interpreter's exit) stops every one not handed over."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["default_environment", "launch", "offer", "claim", "take", "adopted", "adopt", "stop_all", "pending"]

_POSIX_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""The variables the MCP SDK's ``get_default_environment`` passes to a stdio server on POSIX (checked again when a
process is handed over: a difference spawns a new one)."""

_STOP_GRACE = 2.0


def default_environment() -> dict[str, str]:
    """What the MCP SDK gives a stdio server of its environment on POSIX (without importing the SDK)."""
    return {k: v for k in _POSIX_INHERITED if (v := os.environ.get(k)) is not None and not v.startswith("()")}


@dataclasses.dataclass(eq=False)
class _Early:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    popen: subprocess.Popen[bytes]


@dataclasses.dataclass(eq=False)
class _Offer:
    key: Any
    workspace: Path


_lock = threading.Lock()
_processes: list[_Early] = []  # started, not handed over
_offers: list[_Offer] = []  # placeholder workspaces the processes run in, not claimed


def launch(argv: Sequence[str], env: dict[str, str] | None, cwd: str | None) -> int:
    """Start ``argv`` as the stdio transport would (its environment :func:`default_environment` plus ``env``, its own
    process group, stdin, stdout and stderr pipes); its pid."""
    full = default_environment() | dict(env or {})
    popen = subprocess.Popen(list(argv), env=full, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
    with _lock:
        _processes.append(_Early(list(argv), full, cwd, popen))
    return popen.pid


def offer(key: Any, workspace: Path) -> None:
    """Make ``workspace`` (where processes just launched run) available to :func:`claim` under ``key``."""
    with _lock:
        _offers.append(_Offer(key, workspace))


def claim(key: Any) -> Path | None:
    """The oldest workspace offered under ``key``, taken (the caller removes it), or ``None``."""
    with _lock:
        found = next((o for o in _offers if o.key == key), None)
        if found is not None:
            _offers.remove(found)
    return found.workspace if found is not None else None


def pending() -> list[int]:
    """Pids of the processes started here and not handed over (for tests)."""
    with _lock:
        return [e.popen.pid for e in _processes]


def take(argv: Sequence[str], env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes] | None:
    """The running process started with exactly ``argv``, ``env`` (the whole environment) and ``cwd``, handed over to
    the caller (who stops it from now on), or ``None``."""
    if not _processes:
        return None
    with _lock:
        found = next((e for e in _processes if e.argv == list(argv) and e.env == env and e.cwd == cwd), None)
        if found is None:
            return None
        _processes.remove(found)
    if found.popen.poll() is not None:  # it died meanwhile: spawn a new one
        _stop([found])
        return None
    return found.popen


def stop_all() -> None:
    """Stop every process not handed over (stdin closed, SIGTERM to its group, SIGKILL after a grace period) and
    remove every workspace not claimed."""
    with _lock:
        procs, _processes[:] = list(_processes), []
        offers, _offers[:] = list(_offers), []
    _stop(procs)
    for o in offers:
        shutil.rmtree(o.workspace, ignore_errors=True)


def _stop(procs: list[_Early]) -> None:
    for e in procs:
        for pipe in (e.popen.stdin, e.popen.stdout, e.popen.stderr):
            if pipe is not None:
                pipe.close()
        _signal_group(e.popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE
    for e in procs:
        try:
            e.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(e.popen.pid, signal.SIGKILL)
            e.popen.wait()
        _signal_group(e.popen.pid, signal.SIGKILL)  # what the leader left in its group


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _Started:
    """A process started ahead (:mod:`mcp_gym.client._prespawn`) with what the transport uses of anyio's ``Process``:
    ``pid``, ``returncode``, ``stderr`` (``receive``), ``kill`` and ``aclose``."""

    def __init__(self, popen: subprocess.Popen[bytes], stderr: Any, pipe: Any) -> None:
        self.popen, self.stderr, self._pipe, self._reader = popen, self, pipe, stderr
        self.pid = popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        import anyio

        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    async def aclose(self) -> None:
        import anyio

        self._pipe.close()
        try:
            while self.popen.poll() is None:
                await anyio.sleep(0.01)
        except BaseException:
            self.kill()
            raise


async def adopted(params: Any, stdin: Any, stdout: Any) -> Any:
    """The process started ahead with exactly the command line, environment and working directory the stdio
    transport would spawn for ``params`` (``StdioServerParameters``), run by :func:`adopt`; else ``None``."""
    if not _processes:
        return None
    from mcp.client.stdio import get_default_environment  # the environment the transport gives a server

    env = get_default_environment() | (params.env or {})
    popen = take([params.command, *params.args], env, None if params.cwd is None else str(params.cwd))
    return None if popen is None else await adopt(popen, stdin, stdout)


async def adopt(popen: subprocess.Popen[bytes], stdin: Any, stdout: Any) -> Any:
    """Run a process :func:`take` handed over on the running asyncio loop: its stdout and stdin pipes into the
    protocols ``stdout`` and ``stdin`` and its stderr into a reader, as the stdio transport's spawn does; the process
    (:class:`_Started`)."""
    import asyncio

    import anyio

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transports: list[Any] = []
    try:
        transports.append((await loop.connect_read_pipe(lambda: stdout, popen.stdout))[0])
        transports.append((await loop.connect_write_pipe(lambda: stdin, popen.stdin))[0])
        transports.append((await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                        popen.stderr))[0])
    except BaseException:  # e.g. cancelled: the whole group killed (npx's node too), its pipes closed
        for t in transports:
            t.close()
        for pipe in (popen.stdin, popen.stdout, popen.stderr):
            if pipe is not None:
                pipe.close()
        with anyio.CancelScope(shield=True):
            _signal_group(popen.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(popen.wait)
        raise
    return _Started(popen, reader, transports[-1])


atexit.register(stop_all)
