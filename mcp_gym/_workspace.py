"""Per-episode server set-up: a fresh workspace directory (a task's ``fixture`` copied in) and the server specs of one
episode (``{workspace}`` substituted, the task's environment variables added).

What the agent sees and what is recorded names the workspace ``{workspace}``, never its random temporary path
(:func:`mask_workspace` on observations, infos and recorded arguments; :func:`expand_workspace` on the agent's
actions), so episodes of one task that behave alike are alike as text: at inference, in recordings, in SFT examples
and for deduplication."""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import shutil
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import anyio

from mcp_gym._reroot import Rerooter, mentions_workspace, names_filesystem_server, template_key
from mcp_gym._retire import Retirement, Retirer, SpareBudget, close_or_unit
from mcp_gym._wsdir import link_stays_inside, new_workspace
from mcp_gym.client.connection import ServerConnection
from mcp_gym.client.host import MCPHost
from mcp_gym.client.specs import Stdio
from mcp_gym.episode import Episode, EpisodeState
from mcp_gym.tasks import Task, TaskDataError, _not_regular, as_task

__all__ = ["PLACEHOLDER", "mentions_workspace", "make_workspace", "episode_spec", "task_env", "TaskEnvIgnored",
           "fill_task",
           "next_task", "NO_HINT",
           "prepare_episode_servers", "mask_workspace", "expand_workspace", "SpareServers", "SpareBudget"]

PLACEHOLDER = "{workspace}"


def make_workspace(task: Task) -> Path:
    """A new private temporary directory (mode ``0700``, whatever the fixture's) with the task's ``fixture`` copied
    in: each entry with its mode and times, symlinks as links (the caller removes it). Named after this process, so
    a later process removes it if this one dies without doing so (:mod:`mcp_gym._wsdir`)."""
    workspace = new_workspace()
    if task.fixture:
        fixture = Path(task.fixture)
        if not fixture.is_dir():
            shutil.rmtree(workspace, ignore_errors=True)
            raise ValueError(f"task '{task.id}': fixture {fixture} is not a directory")
        try:
            _copy_entries(fixture, workspace)
        except TaskDataError as e:
            shutil.rmtree(workspace, ignore_errors=True)
            raise TaskDataError(f"task '{task.id}': {e}") from None
        except BaseException:
            shutil.rmtree(workspace, ignore_errors=True)
            raise
    return workspace


def _copy_entries(fixture: Path, workspace: Path) -> None:
    """Copy what ``fixture`` holds into ``workspace`` as ``shutil.copytree(symlinks=True)`` would, but never the
    fixture folder's own mode and times onto ``workspace`` (it stays as ``mkdtemp`` made it: readable by its user
    only, at every moment, so no other user can list what the episode writes there)."""
    def refuse_links_out(folder: str, names: list[str]) -> list[str]:
        """copytree's ``ignore`` callback, which ignores nothing: it raises :class:`~mcp_gym.tasks.TaskDataError`
        when one of ``names`` in ``folder`` is a symlink pointing out of the fixture (copytree copies links as
        links), and returns ``[]``."""
        for name in names:
            if os.path.islink(src := os.path.join(folder, name)) and not link_stays_inside(fixture, src):
                raise TaskDataError(f"fixture symlink {src} points out of the fixture (or of the workspace it would "
                                    "be copied into): not copied")
        return []

    with os.scandir(fixture) as entries:
        for entry in entries:
            src, dst = entry.path, os.path.join(workspace, entry.name)
            if entry.is_symlink():
                refuse_links_out(str(fixture), [entry.name])
                os.symlink(os.readlink(src), dst)
                shutil.copystat(src, dst, follow_symlinks=False)
            elif entry.is_dir():
                shutil.copytree(src, dst, symlinks=True, copy_function=clone_file, ignore=refuse_links_out)
            else:
                clone_file(src, dst)


def clone_file(src: str, dst: str) -> str:
    """Copy one fixture file as ``shutil.copy2`` does (content, mode, times), sharing its blocks where the file
    system can: ``os.copy_file_range`` makes a copy-on-write clone on btrfs, XFS and other reflink file systems (a
    write to either copy never reaches the other) and an in-kernel copy elsewhere; anything it cannot do is copied
    the ordinary way. Only a regular file is copied: a named pipe, socket or device node (or a symlink put in the
    file's place) is a :class:`~mcp_gym.tasks.TaskDataError`, never opened for reading (a copy would block, read
    without end, or read a whole disk)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)  # a pipe's open never blocks
    try:
        fd = os.open(src, flags)
    except OSError as e:
        if os.path.islink(src):
            raise TaskDataError(f"fixture file {src} is a symlink where a file was: not copied") from None
        raise e
    with open(fd, "rb") as fin:
        st = os.fstat(fin.fileno())
        if (kind := _not_regular(st.st_mode)) is not None:
            raise TaskDataError(f"fixture file {src} is a {kind}, not a regular file: not copied")
        copy_range = getattr(os, "copy_file_range", None)
        with open(dst, "wb") as fout:
            done = 0
            if copy_range is not None and st.st_size:
                try:
                    while done < st.st_size:
                        n = copy_range(fin.fileno(), fout.fileno(), st.st_size - done)
                        if not n:  # a file system that reports nothing copied: copy it the ordinary way
                            break
                        done += n
                except OSError:  # not supported here (another file system, an old kernel): the ordinary way
                    done = -1
            if done != st.st_size or not st.st_size:
                fin.seek(0)
                fout.seek(0)
                fout.truncate()
                shutil.copyfileobj(fin, fout)
    shutil.copystat(src, dst, follow_symlinks=False)
    return dst


def setup_key(env: _EpisodeServers, task: Task) -> tuple[Any, ...]:
    """What a task's per-episode servers depend on besides the workspace path: its fixture and, per server naming
    ``{workspace}``, the task's env variables. Two tasks with one key can run on the same prepared servers."""
    envs = tuple((a, tuple(sorted(task_env(task, a, env.server_templates[a]).items())))
                 for a in sorted(env.workspace_servers))
    return (str(task.fixture) if task.fixture else None, envs)


class _NoHint(enum.Enum):
    NO_HINT = 0


NO_HINT: Literal[_NoHint.NO_HINT] = _NoHint.NO_HINT
"""A reset whose options say nothing about the next episode (the pool prepares for the task just started)."""


def next_task(options: Mapping[str, Any] | None, tasks: Sequence[Task]) -> Task | None | Literal[_NoHint.NO_HINT]:
    """The task a reset's ``options`` say the env's next reset will most likely run, for the spare-server pool:
    ``options["next_task_id"]`` (the id of one of ``tasks``) or ``options["next_task"]`` (a :class:`Task`, a task
    record or a prompt, as ``options["task"]``; ``None``: no episode follows, nothing is prepared); :data:`NO_HINT`
    without either. A hint is only a forecast: a reset takes a spare only for a task with the same set-up key."""
    opts = options or {}
    if "next_task_id" in opts:
        if "next_task" in opts:
            raise ValueError("reset options: give next_task_id or next_task, not both")
        wanted = opts["next_task_id"]
        found = next((t for t in tasks if t.id == wanted), None)
        if found is None:
            raise ValueError(f"unknown next_task_id {wanted!r} ({len(tasks)} tasks)")
        return found
    if "next_task" in opts:
        return None if opts["next_task"] is None else as_task(opts["next_task"])
    return NO_HINT


@dataclasses.dataclass(eq=False)
class _Spare:
    key: tuple[Any, ...]
    servers: bool = True  # False: a workspace only (the servers are re-rooted to it)
    budgeted: bool = False  # holds one unit of the job's SpareBudget until its servers are closed or adopted
    workspace: Path | None = None
    conns: dict[str, ServerConnection] = dataclasses.field(default_factory=dict)
    ready: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    error: BaseException | None = None
    scope: anyio.CancelScope = dataclasses.field(default_factory=anyio.CancelScope)
    gone: anyio.Event = dataclasses.field(default_factory=anyio.Event)  # closed and its workspace removed


class SpareServers:
    """A bounded pool of spare per-episode servers, prepared ahead of the env's next reset.

    After each reset the env asks for one spare with the set-up key (:func:`setup_key`) of the task its next reset
    will most likely run: the one the reset's options named (``next_task_id``/``next_task``: :func:`next_task`), else
    the task just started. A spare is a fresh workspace (the fixture copied in) and the servers naming ``{workspace}``
    started in it and initialized, in the background while the episode runs. The next reset whose task has the same
    key takes it (a task with another key closes it and starts its servers as without a pool: a wrong forecast costs
    a server start, never a wrong state). Each spare holds a unit of the budget (``size`` units of the env's own, or
    the job's shared :class:`SpareBudget`), and so does a slot's old servers while they exit in the background after
    a reset (:mod:`mcp_gym._retire`): a spare that finds the budget spent is started when a unit frees.
    :meth:`aclose` (the env's close) stops every one and removes its workspace, so no spare process outlives the
    env."""

    def __init__(self, size: int = 1) -> None:
        self.size = max(0, int(size))
        self._spares: list[_Spare] = []
        self._closed = False
        self.taken = 0
        """Resets that took a prepared spare (for benchmarks and tests)."""
        self.rerooter = Rerooter()
        """Warm servers re-rooted to the next workspace over MCP roots (:mod:`mcp_gym._reroot`)."""
        self.budget: SpareBudget | None = None
        """Shared by the envs of a job (``jobs.config.env_factory``): their spares count against its concurrency."""
        self._own = SpareBudget(self.size)  # the env's units when no job shares one
        self.old = Retirer(self._refill)
        self.old.background = bool(self.size)
        """The slot's old servers closed, and old workspaces removed, off the reset's path (:mod:`mcp_gym._retire`)."""
        self._leaving: list[_Spare] = []  # spares for a task no longer expected, being closed in the background
        self._hint: Task | None | Literal[_NoHint.NO_HINT] = NO_HINT
        self._want: tuple[_EpisodeServers, Task, tuple[Any, ...], bool, int] | None = None  # what _refill makes

    @property
    def units(self) -> SpareBudget:
        """The budget the spares and the slot's exiting servers take their units from."""
        return self.budget if self.budget is not None else self._own

    @property
    def pids(self) -> list[int]:
        """Process ids of the spare stdio servers now running (for tests)."""
        return [c.pid for s in self._spares for c in s.conns.values() if c.pid is not None]

    @property
    def retiring_pids(self) -> list[int]:
        """Process ids of the slot's old stdio servers being closed in the background (for tests)."""
        return [c.pid for r in self.old.retiring for c in r.conns if c.pid is not None]

    def expect(self, task: Task | None | Literal[_NoHint.NO_HINT]) -> None:
        """Set what the next :meth:`prepare` prepares for (once): ``task``, nothing (``None``: no episode follows), or
        :data:`NO_HINT` (the task it is given: the one just started). The env calls it at every reset."""
        self._hint = task

    def prepare(self, env: _EpisodeServers, task: Task) -> None:
        """Start preparing spares for tasks like ``task``, up to ``size``, or one for the task :meth:`expect` named, in
        the env runtime's task group (returns at once); those the budget has no unit for start when one frees. Spares
        for another set-up are closed in the background."""
        hint, self._hint, self._want = self._hint, NO_HINT, None
        if not self.size or not env.workspace_servers:  # the pool is off (every env without a {workspace} server)
            return
        upcoming = task if hint is NO_HINT else hint
        if upcoming is None:  # no episode follows: nothing to prepare, no spare kept (its budget goes to other envs)
            self._close_later(env, list(self._spares))
            return
        key = setup_key(env, upcoming)
        self._close_later(env, [s for s in self._spares if s.key != key])
        servers = not all(self.rerooter.armed(env.host.connections[a]) for a in env.workspace_servers)
        wanted = self.size if servers and hint is NO_HINT else 1  # a forecast names one episode: one spare for it
        self._want = (env, upcoming, key, servers, wanted)
        self._refill()

    def _refill(self) -> None:
        """Start the spares :meth:`prepare` wants and the budget has units for (on the loop; again when one frees)."""
        if self._want is None or self._closed:
            return
        env, upcoming, key, servers, wanted = self._want
        while len(self._spares) < wanted:
            spare = _Spare(key, servers)
            if servers:
                if not self.units.acquire():  # spent: this spare starts when a unit frees, if still wanted
                    self.units.when_free(self._refill)
                    return
                spare.budgeted = True
            self._spares.append(spare)
            # the loop runs on its own until the spare is ready (a driven runtime is driven again after)
            release = env.runtime.keep_running()
            try:
                env.runtime.task_group.start_soon(self._fill, env, upcoming, spare, release, name="mcp-gym-spare")
            except BaseException:
                release()
                raise

    def _close_later(self, env: _EpisodeServers, spares: list[_Spare]) -> None:
        """Take ``spares`` out of the pool and close them in the env runtime's task group (:meth:`aclose` waits; the
        loop runs on its own until they are closed)."""
        for spare in spares:
            self._spares.remove(spare)
            self._leaving.append(spare)

            async def leave(spare: _Spare, release: Callable[[], None]) -> None:
                try:
                    await self._discard(spare)
                finally:
                    self._leaving.remove(spare)
                    release()

            release = env.runtime.keep_running()
            try:
                env.runtime.task_group.start_soon(leave, spare, release, name="mcp-gym-spare-close")
            except BaseException:
                release()
                raise

    async def _fill(self, env: _EpisodeServers, task: Task, spare: _Spare, release: Callable[[], None]) -> None:
        try:
            with spare.scope:
                with anyio.CancelScope(shield=True):  # a copy made is a folder to remove
                    spare.workspace = workspace = await anyio.to_thread.run_sync(make_workspace, task)
                async with anyio.create_task_group() as tg:
                    for alias in env.workspace_servers if spare.servers else ():
                        template, own = env.server_templates[alias], env.host.connections[alias]
                        spec = episode_spec(template, workspace, task_env(task, alias, template))
                        conn = spare.conns[alias] = self.rerooter.connection(alias, template, spec, workspace, own)
                        tg.start_soon(conn.start, env.runtime.task_group)
        except BaseException as e:  # noqa: BLE001 - a spare that fails is not used; the reset starts its own
            spare.error = e
            if not isinstance(e, Exception):
                raise
        finally:
            spare.ready.set()
            release()

    async def take(self, env: _EpisodeServers, key: tuple[Any, ...]) -> _Spare | None:
        """The spare prepared for ``key`` once it is ready (its servers started or failed), or ``None``. Spares for
        other keys (a wrong forecast) are closed in the background (:meth:`_close_later`), each holding its unit of
        the budget until it has exited: the reset never waits for one. A spare wanted for ``key`` but not started,
        the budget's unit held by the slot's old servers still exiting, is waited for: those servers' exit (bounded:
        their stop), then the spare's start."""
        if self._want is not None and self._want[2] == key and not any(s.key == key for s in self._spares):
            for r in list(self.old.retiring):
                await r.gone.wait()  # its unit frees: _refill starts the spare (unless another env's took it)
        self._want = None  # the reset's prepare says what comes next
        found = next((s for s in self._spares if s.key == key), None)  # the oldest: the most likely to be ready
        self._close_later(env, [s for s in self._spares if s.key != key])
        if found is None:
            return None
        await found.ready.wait()  # bounded: each server's connect_timeout (and the reset's reset_timeout)
        self._spares.remove(found)
        if found.error is not None or any(c.status != "ready" for c in found.conns.values()):
            await self._discard(found)
            return None
        self.taken += 1
        return found

    async def _drop(self, spare: _Spare) -> None:
        self._spares.remove(spare)
        await self._discard(spare)

    def release(self, spare: _Spare) -> None:
        """``spare``'s servers are closed, or a slot's own now (its old ones closed): its budget unit is free."""
        if spare.budgeted:
            spare.budgeted = False
            self.units.release()

    def retirement(self, spare: _Spare | None = None) -> Retirement | None:
        """A unit for closing the slot's old ``{workspace}`` servers in the background (:mod:`mcp_gym._retire`):
        ``spare``'s (taken by this reset), else a free one; ``None`` (close them at once) without one."""
        if not self.size or self._closed:
            return None
        held = spare is not None and spare.budgeted
        if spare is not None:
            spare.budgeted = False
        return self.old.start(self.units, held)

    async def _discard(self, spare: _Spare) -> None:
        with anyio.CancelScope(shield=True):
            try:
                spare.scope.cancel()
                await spare.ready.wait()
                for conn in spare.conns.values():
                    await conn.close()
                self.release(spare)
                if spare.workspace is not None:
                    await anyio.to_thread.run_sync(lambda: shutil.rmtree(spare.workspace or "", ignore_errors=True))
            finally:
                spare.gone.set()

    def forget(self) -> None:
        """Remove the spares' workspaces without stopping their servers (the runtime that ran them has ended)."""
        self._closed = True
        self.old.forget()
        for spare in [*self._spares, *self._leaving]:
            if spare.workspace is not None:
                shutil.rmtree(spare.workspace, ignore_errors=True)
        self._spares.clear()

    async def aclose(self, then: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Stop every spare server and every old one still exiting, remove their workspaces (idempotent; no new spares
        afterwards); then await ``then()`` (the env's own sessions' close), whatever happened, and remove the
        workspaces its servers ran in."""
        self._closed = True
        try:
            for spare in list(self._spares):
                await self._drop(spare)
            with anyio.CancelScope(shield=True):
                for spare in list(self._leaving):
                    await spare.gone.wait()  # bounded: closing its servers
                await self.old.aclose()
        finally:
            if then is not None:
                await then()
            behind, self.old.behind = self.old.behind, []
            for workspace in behind:
                await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, workspace, ignore_errors=True))


def episode_spec(spec: Any, workspace: Path | None, env: Mapping[str, str]) -> Any:
    """``spec`` for one episode: ``{workspace}`` substituted in a stdio server's arguments, environment and working
    directory, and the task's environment variables added (other transports are returned as they are)."""
    if not isinstance(spec, Stdio) or (workspace is None and not env):
        return spec

    def fill(x: str) -> str:
        return x.replace(PLACEHOLDER, str(workspace)) if workspace is not None else x

    merged = {k: fill(v) for k, v in {**(spec.env or {}), **dict(env)}.items()} if (spec.env or env) else None
    return dataclasses.replace(spec, args=[fill(a) for a in spec.args], env=merged,
                               cwd=fill(os.fspath(spec.cwd)) if spec.cwd else None)


class TaskEnvIgnored(UserWarning):
    """A task's ``env`` names a variable the user's own server config sets: the user's value is kept."""


_ignored: set[tuple[str, str, str]] = set()
"""``(task, server, key)`` already warned about (once per process)."""


def task_env(task: Task, alias: str, spec: Any) -> dict[str, str]:
    """The task's ``env`` for server ``alias`` without the variables its spec (the user's own config) already sets:
    the user's value wins, and each ignored key is warned about once (naming task, server and key)."""
    own = getattr(spec, "env", None) or {}
    if not task.env or not isinstance(spec, Stdio):
        return dict(task.env)
    kept: dict[str, str] = {}
    for key, value in task.env.items():
        if key not in own:
            kept[key] = value
            continue
        if (task.id, alias, key) not in _ignored:
            _ignored.add((task.id, alias, key))
            warnings.warn(f"mcp-gym: task '{task.id}' sets env key {key!r} of server '{alias}', which the server's "
                          "own config sets: the config's value is kept, the task's ignored", TaskEnvIgnored,
                          stacklevel=2)
    return kept


def fill_task(task: Task, workspace: Path) -> Task:
    """``task`` with ``{workspace}`` replaced in its prompt, reference solution, answer, data and turns."""

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace(PLACEHOLDER, str(workspace))
        if isinstance(v, Mapping):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(fill(x) for x in v)
        return v

    return dataclasses.replace(task, prompt=fill(task.prompt), solution=fill(task.solution), answer=fill(task.answer),
                               data=fill(dict(task.data)), turns=fill(task.turns))


_SCALARS = (int, float, bool)


def _replace_strings(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """``value`` with every ``old -> new`` of ``pairs`` replaced in its strings (keys too), through dicts, lists and
    tuples (new containers; anything else is returned as it is)."""
    if isinstance(value, str):
        for old, new in pairs:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():  # (plain str keys and scalar values without a call: every step masks its info)
            if k.__class__ is str:
                for old, new in pairs:
                    if old in k:
                        k = k.replace(old, new)
            else:
                k = _replace_strings(k, pairs)
            if v.__class__ is str:
                for old, new in pairs:
                    if old in v:
                        v = v.replace(old, new)
            elif v is not None and v.__class__ not in _SCALARS:
                v = _replace_strings(v, pairs)
            out[k] = v
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_strings(v, pairs) for v in value) if type(value) in (list, tuple) else value
    return value


_T = TypeVar("_T")


_MASKS: dict[str, tuple[Any, list[tuple[str, str]]]] = {}
"""Each recent workspace's replacement pairs, by its path, with the path object they were made for (a new object, as
each episode's workspace is: resolved anew). ``Path.resolve`` walks the path with a system call per component."""
_MASKS_MAX = 64


def mask_workspace(value: _T, workspace: Path | None) -> _T:
    """``value`` with the episode's workspace path (as created, and resolved if that differs: ``/var`` vs
    ``/private/var``) written ``{workspace}`` in every string; ``value`` itself without a workspace."""
    if workspace is None:
        return value
    key = str(workspace)
    known = _MASKS.get(key)
    if known is None or known[0] is not workspace:  # resolved once per episode's workspace, not on every step
        paths = sorted({key, str(Path(workspace).resolve())}, key=len, reverse=True)
        if len(_MASKS) >= _MASKS_MAX:
            _MASKS.clear()
        known = _MASKS[key] = (workspace, [(p, PLACEHOLDER) for p in paths])
    masked: _T = _replace_strings(value, known[1])  # same shape, new containers
    return masked


def expand_workspace(action: Any, workspace: Path | None) -> Any:
    """An action ``{"tool", "arguments"}`` with ``{workspace}`` in its argument strings replaced by the episode's real
    workspace path (what the server needs); anything that is not a plain dict action is returned as it is."""
    if workspace is None or action.__class__ is not dict or dict.get(action, "arguments").__class__ is not dict:
        return action
    return {**action, "arguments": _replace_strings(action["arguments"], [(PLACEHOLDER, str(workspace))])}


class _EpisodeServers(EpisodeState, Protocol):
    """What per-episode set-up needs of an env (:class:`~mcp_gym.env.MCPEnv` has it)."""

    host: MCPHost

    @property
    def runtime(self) -> Any: ...


async def prepare_episode_servers(env: _EpisodeServers, episode: Episode) -> set[str]:
    """Per-task server set-up of the env's next ``episode``: a fresh workspace (the task's ``fixture`` copied in) when
    a server command line names ``{workspace}`` (``episode.workspace``), the task's ``env`` variables (never over one
    the server's own config sets: :func:`task_env`); servers whose spec changes restart. With the pool on, the old
    ``{workspace}`` servers are closed in the background when a unit of the budget covers them
    (:mod:`mcp_gym._retire`), and the last episode's workspace is removed once they are gone. Returns them."""
    task = episode.task
    if task.fixture and not env.workspace_servers:
        raise ValueError(f"task '{task.id}' has a fixture but no server command line names {{workspace}}")
    spares: SpareServers | None = getattr(env, "spares", None)
    if spares is None:
        return await _set_up(env, episode, None, False)
    retiring: list[Retirement | None] = [None]
    done = False
    try:
        restarted = await _set_up(env, episode, spares, not any(getattr(env.host.connections[a], "shared", False)
                                                                for a in env.workspace_servers), retiring)
        done = True
    finally:
        spares.old.seal(env.runtime, retiring[0], done)  # the old workspace goes once its servers are gone
    return restarted


async def _set_up(env: _EpisodeServers, episode: Episode, spares: SpareServers | None, own: bool,
                  retiring: list[Retirement | None] | None = None) -> set[str]:
    """:func:`prepare_episode_servers`'s work; ``retiring[0]``: the retirement closing the slot's old servers."""
    task, tg, restarted = episode.task, env.runtime.task_group, set[str]()
    pool = spares is not None and own and bool(spares.size) and bool(env.workspace_servers)
    spare = await spares.take(env, setup_key(env, task)) if spares is not None and pool else None

    def retirer() -> Callable[[ServerConnection], None] | None:
        if retiring is None or retiring[0] is None or spares is None:
            return None
        return functools.partial(spares.old.retire, env.runtime, retiring[0])

    if spare is not None and spares is not None:  # a workspace (and servers) prepared while the last episode ran
        episode.workspace = spare.workspace
        restarted.update(spare.conns)
        if retiring is not None:
            retiring[0] = spares.retirement(spare)  # the spare's unit covers the old servers until they exit
        try:
            await env.host.adopt(spare.conns, tg, retirer())
        finally:
            spares.release(spare)
    elif env.workspace_servers:
        if spares is not None and pool:  # a first reset: a server started ahead by the job, re-rooted below
            await _take_early(env, spares.rerooter)
        with anyio.CancelScope(shield=True):  # off the loop (the other slots' steps go on); a copy made is ours
            episode.workspace = await anyio.to_thread.run_sync(make_workspace, task)
    if spares is not None and pool and not restarted:  # warm servers re-rooted to this workspace (_reroot)
        if all(spares.rerooter.armed(env.host.connections[a]) for a in env.workspace_servers):
            spares.old.drop(env.runtime)  # a re-root needs the old root gone (renamed away at once)
        restarted.update(await _reroot_all(env, spares.rerooter, episode))
    for alias, template in env.server_templates.items():
        if alias in restarted:
            continue
        spec = episode_spec(template, episode.workspace, task_env(task, alias, template))
        conn = env.host.connections[alias]
        if spec == conn.spec and alias not in env.workspace_servers:
            continue
        if getattr(conn, "shared", False):  # a session shared by concurrent episodes (VectorMCPEnv)
            raise ValueError(f"server '{alias}': per-episode set-up (workspace, task env) needs a session of its "
                             "own per episode; do not share sessions (share_servers=None)")
        if spares is not None and pool and retiring is not None and retiring[0] is None \
                and alias in env.workspace_servers and conn.status != "new":
            retiring[0] = spares.retirement()  # a free unit: the old server exits while the new one starts
            if retiring[0] is None:  # none: its exit, or a unit freed (a spare exiting elsewhere), whichever first
                await close_or_unit(conn, spares.units, spares.retirement, retiring)
        retire = retirer() if alias in env.workspace_servers else None
        if spares is not None and pool and spares.rerooter.advertises(alias, template) and episode.workspace:
            new = spares.rerooter.connection(alias, template, spec, episode.workspace, conn)  # advertising roots
        elif retire is not None:
            new = ServerConnection(alias, spec, conn.callbacks, conn.tap_factory)
        else:
            conn.spec = spec
            await env.host.restart(alias, tg)
            restarted.add(alias)
            continue
        if retire is not None:
            retire(conn)
        elif conn.status != "new":  # never started: adopt closes it (a second close would wait for its task)
            await conn.close()  # first, as a restart does: one server per slot
        await new.start(tg)
        await env.host.adopt({alias: new}, tg, retire)
        restarted.add(alias)
    if spares is not None and pool and episode.workspace is not None:
        for alias in restarted & env.workspace_servers:  # a first start: may this server be re-rooted next time?
            await spares.rerooter.learn(alias, env.server_templates[alias], env.host.connections[alias],
                                        episode.workspace)
    if spares is not None and own:  # the next episode's servers start while this one runs
        spares.prepare(env, task)
    return restarted


async def _take_early(env: _EpisodeServers, rerooter: Rerooter) -> None:
    """Make servers the job started ahead in a placeholder workspace (:mod:`mcp_gym.jobs._early`) this env's first
    ones, when its ``{workspace}`` servers have never started and such servers are waiting: connected (the process
    already booted), checked as every first start is (:meth:`Rerooter.learn`: it reports exactly the placeholder),
    and the placeholder removed, so the reset re-roots them to the episode's workspace (:func:`_reroot_all`, which
    checks again; anything else restarts them there, as without them)."""
    from mcp_gym.client import _prespawn

    templates = {a: env.server_templates[a] for a in sorted(env.workspace_servers)}
    if any(env.host.connections[a].status != "new" for a in templates) \
            or not all(names_filesystem_server(t) for t in templates.values()):
        return
    workspace = _prespawn.claim(template_key(templates))
    if workspace is None:
        return
    conns: dict[str, ServerConnection] = {}
    adopted = False
    try:
        conns = {a: rerooter.connection(a, t, episode_spec(t, workspace, {}), workspace, env.host.connections[a])
                 for a, t in templates.items()}
        async with anyio.create_task_group() as tg:
            for conn in conns.values():
                tg.start_soon(conn.start, env.runtime.task_group)
        if all(c.status == "ready" for c in conns.values()):
            adopted = True  # the host owns them from adopt's first line on (its close stops them)
            await env.host.adopt(conns, env.runtime.task_group)
            for alias, template in templates.items():
                await rerooter.learn(alias, template, env.host.connections[alias], workspace)
    finally:
        with anyio.CancelScope(shield=True):  # a failed or cancelled take leaves no process and no folder
            if not adopted:
                for conn in conns.values():
                    await conn.close()
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(workspace, ignore_errors=True))


async def _reroot_all(env: _EpisodeServers, rerooter: Rerooter, episode: Episode) -> set[str]:
    """Re-root every ``{workspace}`` server to ``episode.workspace`` when each one can be (none otherwise); the
    aliases re-rooted (one that fails to is restarted by the caller)."""
    task, workspace = episode.task, episode.workspace
    if workspace is None:
        return set()
    unfilled = {a: episode_spec(env.server_templates[a], None, task_env(task, a, env.server_templates[a]))
                for a in env.workspace_servers}
    if not all(rerooter.can_reroot(a, env.host.connections[a], unfilled[a]) for a in env.workspace_servers):
        return set()
    done = set()
    for alias in env.workspace_servers:
        spec = episode_spec(env.server_templates[alias], workspace, task_env(task, alias, env.server_templates[alias]))
        if await rerooter.reroot(env.host.connections[alias], workspace, spec):
            done.add(alias)
    return done
