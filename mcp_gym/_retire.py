"""What a slot is done with at a reset, put away off the reset's path (issue 40): the last episode's ``{workspace}``
servers closed in the background, and its workspace removed once no server runs in it any more.

A reset that has a new server for its slot (a spare taken, or a fresh start) need not wait for the old one to exit
once its stdin closes (0.15-0.7 s for a Python server tearing down what it imported): the old one is closed by a task
of its own on the runtime's loop, and the reset returns when the new one is ready. The bound of ``N + spare_servers``
live servers per alias holds at every instant: the old servers keep one unit of the spare budget
(:class:`SpareBudget`) until every one of them has really exited (the spare's unit, when the reset took a spare, else
one acquired for it; without a free unit the reset closes them itself, as before), and a spare that finds the budget
spent is not started: it waits for a unit to free (:meth:`SpareBudget.when_free`). The old episode's workspace is
neither reused nor removed while a server of that episode may still run in it (:meth:`Retirer.leave`): it is removed
after its servers are closed (or re-rooted away from it). A background close takes a
:meth:`~mcp_gym.client.runtime.Runtime.keep_running` hold (a driven runtime runs its loop on a thread until the
server is gone: its bounded stop, stdin closed then SIGTERM then SIGKILL, needs the loop), and
:meth:`Retirer.aclose` (the env's close) waits for every one."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_gym._compat.stdlib import running_loop
from mcp_gym.client.connection import ServerConnection

__all__ = ["SpareBudget", "Retirement", "Retirer", "close_or_unit"]


class SpareBudget:
    """The spares (each one server per ``{workspace}`` alias) that the envs of one job may run at once: a job at
    concurrency N so runs at most ``N + total`` servers per alias at every instant. A slot's old servers still
    exiting after its reset hold a unit too (:class:`Retirer`). Workspace-only spares (re-rooting) do not count."""

    def __init__(self, total: int) -> None:
        self.total = max(0, int(total))
        self.used = 0
        self.peak = 0
        """The most units ever held at once (for tests)."""
        self._waiters: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    def acquire(self) -> bool:
        if self.used >= self.total:
            return False
        self.used += 1
        self.peak = max(self.peak, self.used)
        return True

    def release(self) -> None:
        """Give a unit back; every function waiting for one (:meth:`when_free`) is called once, on its own loop."""
        self.used -= 1
        waiters, self._waiters = self._waiters, []
        for loop, wake in waiters:
            if running_loop() is loop:
                wake()
            else:
                with contextlib.suppress(RuntimeError):  # its loop is closed: its env is gone
                    loop.call_soon_threadsafe(wake)

    def when_free(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` (on the running loop) once, at the next :meth:`release` (once however often asked)."""
        if all(w != wake for _, w in self._waiters):
            self._waiters.append((asyncio.get_running_loop(), wake))


@dataclasses.dataclass(eq=False)
class Retirement:
    """A slot's old servers being closed in the background, with the unit of the budget they hold."""

    units: SpareBudget | None  # None: no unit held
    conns: list[ServerConnection] = dataclasses.field(default_factory=list)
    open: int = 0  # closes not finished
    sealed: bool = False  # no more servers join it
    workspaces: list[Path] = dataclasses.field(default_factory=list)  # removed once its servers are gone
    gone: anyio.Event = dataclasses.field(default_factory=anyio.Event)


class Retirer:
    """The servers and workspaces of an env's finished episodes: closed and removed in the background, each
    workspace only once no server runs in it. ``on_free`` is called (on the loop) when a retirement gives its unit
    back (the spare pool starts the spare it wants)."""

    def __init__(self, on_free: Callable[[], None]) -> None:
        self.on_free = on_free
        self.behind: list[Path] = []  # workspaces of finished episodes whose servers may still run in them
        self.retiring: list[Retirement] = []
        self.removing: list[tuple[Path, anyio.Event]] = []  # old workspaces being deleted in a worker thread
        self.closed = False
        self.background = True
        """Remove workspaces in a worker thread (``False``: the pool is off; each is removed where it is let go)."""

    def leave(self, episode: Any) -> None:
        """The finished ``episode``'s workspace is removed once its servers are gone (:meth:`seal`, :meth:`drop`)."""
        if episode.workspace is not None:
            self.behind.append(episode.workspace)
            episode.workspace = None

    def start(self, units: SpareBudget | None, held: bool = False) -> Retirement | None:
        """A retirement for a slot's old servers holding one unit of ``units`` (``held``: the caller's, e.g. the spare
        just taken), or ``None`` when no unit is free (the caller closes its old servers itself)."""
        if self.closed or units is None or not (held or units.acquire()):
            if held and units is not None:
                units.release()
            return None
        r = Retirement(units)
        self.retiring.append(r)
        return r

    def retire(self, runtime: Any, r: Retirement, conn: ServerConnection) -> None:
        """Close ``conn`` in a task of its own on ``runtime`` (once, however often asked); returns at once."""
        if any(c is conn for c in r.conns):
            return
        r.conns.append(conn)
        r.open += 1
        release = runtime.keep_running()  # a driven runtime's loop runs until the server is gone

        async def close() -> None:
            try:
                with anyio.CancelScope(shield=True):  # bounded: the transport's stop (stdin, SIGTERM, SIGKILL)
                    await conn.close()
            finally:
                r.open -= 1
                release()
                self._settle(runtime, r)

        try:
            runtime.task_group.start_soon(close, name="mcp-gym-retire")
        except BaseException:
            r.open -= 1
            release()
            raise

    def seal(self, runtime: Any, r: Retirement | None, done: bool) -> None:
        """No more servers join ``r``. ``done``: the slot's old ``{workspace}`` servers are all closed, retiring or
        re-rooted, so the workspaces left behind go (with ``r``'s servers, else now); else they stay behind."""
        if done and (r is None or not r.open):
            self.drop(runtime)
        if r is None:
            return
        if done:
            r.workspaces += self.behind
            self.behind = []
        r.sealed = True
        self._settle(runtime, r)

    def _settle(self, runtime: Any, r: Retirement) -> None:
        """``r``'s servers are all gone and it is sealed: remove its workspaces, give its unit back."""
        if not r.sealed or r.open or r.gone.is_set():
            return
        r.gone.set()
        self.retiring.remove(r)
        for workspace in r.workspaces:
            self.remove_later(runtime, workspace)
        if r.units is not None:
            r.units.release()
            if not self.closed:
                self.on_free()

    def drop(self, runtime: Any) -> None:
        """Remove the workspaces left behind now (their servers are closed or re-rooted)."""
        behind, self.behind = self.behind, []
        for workspace in behind:
            self.remove_later(runtime, workspace)

    def remove_later(self, runtime: Any, workspace: Path) -> None:
        """Remove ``workspace`` off the caller's path: renamed at once, deleted in a worker thread (:meth:`aclose` waits
        for it). When closed, not :attr:`background`, or if the rename fails, it is deleted here."""
        if self.closed or not self.background:
            shutil.rmtree(workspace, ignore_errors=True)
            return
        trash = workspace.with_name(workspace.name + ".removing")
        try:
            os.rename(workspace, trash)
        except OSError:
            shutil.rmtree(workspace, ignore_errors=True)
            return
        done = anyio.Event()
        release = runtime.keep_running()  # the loop runs on its own until the folder is gone

        async def remove() -> None:
            try:
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(trash, ignore_errors=True))
            finally:
                done.set()
                release()

        self.removing = [(p, e) for p, e in self.removing if not e.is_set()]
        self.removing.append((trash, done))
        try:
            runtime.task_group.start_soon(remove, name="mcp-gym-remove-workspace")
        except Exception:  # noqa: BLE001 - no task group to run it on: delete it here
            shutil.rmtree(trash, ignore_errors=True)
            done.set()
            release()

    async def aclose(self) -> None:
        """Wait for every background close (bounded: each server's stop) and folder removal (no new ones after)."""
        with anyio.CancelScope(shield=True):
            for r in list(self.retiring):
                r.sealed = True
                self._settle_closed(r)
                await r.gone.wait()
            self.closed = True
            for _, done in self.removing:
                await done.wait()  # bounded: a worker thread deleting a folder

    def _settle_closed(self, r: Retirement) -> None:
        if not r.open and not r.gone.is_set():
            r.gone.set()
            self.retiring.remove(r)
            for workspace in r.workspaces:
                shutil.rmtree(workspace, ignore_errors=True)
            if r.units is not None:
                r.units.release()

    def forget(self) -> None:
        """Remove every workspace this holds, whatever runs (the runtime that ran the servers has ended)."""
        self.closed = True
        for trash, _ in self.removing:
            shutil.rmtree(trash, ignore_errors=True)
        self.removing.clear()
        for workspace in [*self.behind, *(w for r in self.retiring for w in r.workspaces)]:
            shutil.rmtree(workspace, ignore_errors=True)
        self.behind.clear()


async def close_or_unit(conn: ServerConnection, units: SpareBudget, start: Callable[[], Retirement | None],
                        retiring: list[Retirement | None]) -> None:
    """Close a slot's old server ``conn`` that no free unit covers, unless a unit frees first (e.g. a wrong forecast's
    spare, closed in the background, has exited): whichever comes first. A unit got is a retirement from ``start()``,
    put in ``retiring[0]`` at once (the caller retires ``conn`` with it, its close going on in the background, and
    seals it whatever happens); else ``conn`` is closed. Bounded: ``conn``'s stop."""
    async with anyio.create_task_group() as tg:

        async def close() -> None:
            await conn.close()  # (its owner task stops the server: cancelling this wait leaves that going)
            tg.cancel_scope.cancel()

        async def unit() -> None:
            while True:
                freed = anyio.Event()
                units.when_free(freed.set)  # asked first: a release between the two is not missed
                if (r := start()) is not None:
                    retiring[0] = r
                    tg.cancel_scope.cancel()
                    return
                await freed.wait()

        tg.start_soon(close)
        tg.start_soon(unit)
