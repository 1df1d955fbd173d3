"""Per-episode workspace folders in the temporary directory: private to the user running the job, named after the
process that owns them, and removed by a later process once that owner is gone (a job killed with SIGKILL, a crashed
machine: nothing of the dead job removes them).

A workspace is ``<tmp>/mcp-gym-ws-<pid>-<start>-<ns>-<random>`` (``mode 0700``): ``pid`` is the owning process,
``start`` its start time (``/proc/<pid>/stat``, clock ticks since boot; ``0`` where there is no ``/proc``) so a reused
pid is not taken for the owner, ``ns`` the inode of its pid namespace (``0`` without ``/proc``) so a process that sees
other pids (another container sharing the folder) never judges them. The first workspace a process makes in a
temporary directory sweeps it (:func:`sweep`): it removes at most :data:`SWEEP_MAX` folders named so whose owner is
provably gone, that are real directories (never a symlink, never followed) owned by this user; anything else, and
anything it cannot remove, is left, and nothing it meets raises into the job. The temporary directory is treated as
shared with other users and processes. Standard library only (the job's early start imports it).

Versions before this naming made ``<tmp>/mcp-gym-ws-<8 of [a-z0-9_]>`` (``tempfile.mkdtemp``'s name), which names no
owner. The sweep removes such a folder, with the same rules, only where the kernel proves its maker gone: its inode
last changed (``st_ctime``, which no ``utime`` can set back) before this system booted (``btime`` of ``/proc/stat``),
so every process that could own it has ended. A folder that is not provably older than the boot is left.

What a workspace receives is a copy of a task's fixture, symlinks as links: :func:`link_stays_inside` says whether a
link stays inside the folder it is copied with, wherever that folder is."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "SWEEP_MAX", "new_workspace", "sweep", "link_stays_inside"]

PREFIX = "mcp-gym-ws-"
SWEEP_MAX = 32
"""The most dead workspaces one sweep removes (the rest go in later sweeps)."""
_SCAN_MAX = 100_000  # the most entries of the temporary directory one sweep looks at
_NAME = re.compile(re.escape(PREFIX) + r"(\d{1,10})-(\d{1,20})-(\d{1,20})-[A-Za-z0-9_]{1,32}(?:\.removing)?")
_OLD_NAME = re.compile(re.escape(PREFIX) + r"[a-z0-9_]{8}")  # before the owner tag: tempfile.mkdtemp(prefix=PREFIX)
_swept: set[str] = set()  # temporary directories this process has swept


def _boot_time() -> float | None:
    """When this system booted (``btime`` of ``/proc/stat``, seconds since the epoch), or ``None`` if unknown."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


def _stat_of(pid: int | str) -> tuple[str, int] | None:
    """The state letter and start time of process ``pid`` from ``/proc``, or ``None`` if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime) of proc(5)
    except (OSError, IndexError, ValueError):
        return None


def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_tag() -> str:
    """``<pid>-<start>-<ns>`` of this process (see the module docstring)."""
    own = _stat_of("self")
    return f"{os.getpid()}-{own[1] if own else 0}-{_namespace()}"


def new_workspace() -> Path:
    """A new private (``0700``) workspace folder in the temporary directory, named after this process, after a sweep
    of the dead processes' ones (the first time in that directory)."""
    tmp = tempfile.gettempdir()
    if tmp not in _swept:
        _swept.add(tmp)
        sweep(tmp)
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{owner_tag()}-", dir=tmp))
    os.chmod(path, 0o700)  # mkdtemp's mode, whatever the umask
    return path


def _owner_gone(pid: int, start: int, ns: int) -> bool:
    """Whether the process that named a workspace ``pid-start-ns`` is provably gone (unsure: it is not)."""
    if pid <= 0:
        return False
    if start and ns:  # named on a system with /proc
        if ns != _namespace():  # pids of another pid namespace mean nothing here
            return False
        now = _stat_of(pid)
        if now is None:
            return not os.path.exists(f"/proc/{pid}") and os.path.isdir("/proc/self")
        state, started = now
        return started != start or state in ("Z", "X")  # another process under a reused pid, or a dead one
    if start or ns:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, someone else's
        return False
    return False


def sweep(tmp: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove up to :data:`SWEEP_MAX` workspaces in ``tmp`` (default: the temporary directory) whose owning process
    is gone: real directories (not symlinks) owned by this user, named as :func:`new_workspace` names them (or as
    versions before it did, when made before this boot). The ones removed; never raises (a folder it cannot remove is
    left)."""
    removed: list[Path] = []
    try:
        folder = os.fspath(tmp if tmp is not None else tempfile.gettempdir())
        uid = os.geteuid() if hasattr(os, "geteuid") else None
        booted: list[float | None] = []  # read once, at the first folder of the old naming
        with os.scandir(folder) as entries:
            for seen, entry in enumerate(entries):
                if seen >= _SCAN_MAX or len(removed) >= SWEEP_MAX:
                    break
                m = _NAME.fullmatch(entry.name)
                if m is None and _OLD_NAME.fullmatch(entry.name) is None:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode) or (uid is not None and st.st_uid != uid):
                        continue  # a symlink, a file, another user's folder: never touched
                    if m is not None and not _owner_gone(int(m[1]), int(m[2]), int(m[3])):
                        continue
                    if m is None:  # the old naming: no owner named; gone only if made before this boot
                        booted = booted or [_boot_time()]
                        if booted[0] is None or not st.st_ctime < booted[0]:
                            continue
                    # rmtree refuses a symlink at the top and, where the system allows, works through directory
                    # descriptors without following links inside (shutil.rmtree.avoids_symlink_attacks)
                    if not shutil.rmtree.avoids_symlink_attacks:
                        continue
                    shutil.rmtree(entry.path, ignore_errors=True)
                    if not os.path.lexists(entry.path):
                        removed.append(Path(entry.path))
                except Exception:  # noqa: BLE001 - a folder it cannot judge or remove is left
                    continue
    except Exception:  # noqa: BLE001 - a sweep never fails the job
        pass
    return removed


def link_stays_inside(root: str | os.PathLike[str], link: str | os.PathLike[str]) -> bool:
    """Whether the symlink ``link`` (a path inside ``root``), followed as the kernel follows it, stays inside ``root``
    at every step: no absolute target, no ``..`` above ``root``, through the other links it meets (at most 40).
    A link that leaves and comes back by ``root``'s own name (``../fixture/x`` in ``fixture/``) resolves inside
    ``root`` but, copied into a workspace, leads to ``<tmp>/fixture/x``: a path any local user can create."""
    todo = list(Path(os.path.relpath(link, root)).parts)
    here: list[str] = []  # the components below root walked so far
    hops = 0
    while todo:
        name = todo.pop(0)
        if name == "..":
            if not here:
                return False
            here.pop()
            continue
        path = os.path.join(root, *here, name)
        if not os.path.islink(path):
            here.append(name)
            continue
        hops += 1
        target = os.readlink(path)
        if hops > 40 or os.path.isabs(target):
            return False
        todo[:0] = [p for p in Path(target).parts if p != "."]
    return True

