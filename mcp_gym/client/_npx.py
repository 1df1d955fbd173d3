"""A stdio server run by ``npx`` (``npx -y PKG ...``, ``npm exec ...``) starts through npx once; its later starts in
this process run the program npx ran, directly (issue 40: npx resolves the package and asks the registry at every
start, 3-4 s, where the server itself answers ``initialize`` in ~0.25 s).

Once the first start answered ``initialize``, the process tree under the npx process is read from ``/proc`` (Linux):
the server process's ``argv``, executable, environment and working directory. A later start of the same server spec
runs that ``argv`` with that environment in that directory, its own arguments after the package in the place npx put
them, so the server is the same program with the same arguments and environment, minus npx's wrapper. Nothing is
assumed; the resolution is refused (the server keeps starting through npx, said once at INFO on the
``mcp_gym.client`` logger) unless all of these hold:

- the command line is one this module parses: ``npx`` or ``npm exec``/``npm x`` with known options before the
  package (``-y``/``--yes``, ``-p``/``--package PKG``, ``--registry URL``, ...), never ``-c``/``--call``;
- under the npx process is one chain of processes (each one child): npx, npm's ``sh -c`` wrappers, then exactly one
  server process without children of its own;
- that process's ``argv`` ends with exactly the arguments given after the package (npx passes them through), and
  none of them (4 characters or longer) appears elsewhere in its ``argv`` or in an environment variable npx added or
  changed, so the next start's arguments go in the same places and nowhere else;
- its program is what ``argv[0]`` names on the ``PATH`` it was started with, and the files it ran exist (checked again
  at every start; a resolved start that fails to connect forgets the resolution).

"The same server spec" is the same npx command line up to the package and the same environment and working
directory given to npx (the arguments after the package may differ: each episode's ``{workspace}``), in the same
process. A job so runs one version of the package in all its episodes: the one npx resolved at its first start (a
version published mid-job is not picked up). ``Stdio(..., resolve_npx=False)`` (``env.resolve_npx=false`` in a job)
keeps npx at every start. Without ``/proc`` (macOS, Windows) npx runs every time.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.stdio import get_default_environment

from mcp_gym.client.specs import Stdio
from mcp_gym.protocol import redact_text

__all__ = ["NpxStart", "start_for", "resolutions"]

log = logging.getLogger("mcp_gym.client")

_FLAGS = frozenset({"-y", "--yes", "--no", "--no-install", "-q", "--quiet", "--silent", "-s", "--prefer-offline",
                    "--prefer-online", "--offline", "--ignore-existing"})
"""npx/npm exec options that take no value."""
_VALUED = frozenset({"-p", "--package", "--registry", "--cache", "--userconfig", "--globalconfig", "--loglevel",
                     "--node-options", "--script-shell"})
"""npx/npm exec options that take a value (the next argument, or ``--opt=value``)."""
_SHELLS = frozenset({"sh", "dash", "bash", "ash", "ksh", "mksh", "zsh", "busybox"})
_MIN_ECHO = 4
"""Shorter arguments are not looked for elsewhere (``-v`` or ``1`` occur in paths by chance)."""
_MAX_KEYS = 256


@dataclass(frozen=True)
class Resolution:
    """What npx ran for one server spec: ``argv`` without the arguments it passed through, environment, directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    files: tuple[str, ...]
    """The executable and the script paths in ``argv``: each must still exist for a start to run them."""

    def usable(self) -> bool:
        return all(os.path.exists(f) for f in self.files)


_lock = threading.Lock()
resolutions: dict[tuple[Any, ...], Resolution | str] = {}
"""Per server spec (:func:`_split`'s key): its resolution, or why it has none (kept: said once, not tried again)."""


@dataclass
class NpxStart:
    """One start of an npx server: ``resolved`` (run directly) or learning (run through npx, :meth:`learn` after its
    handshake)."""

    alias: str
    key: tuple[Any, ...]
    passed: tuple[str, ...]
    """The arguments after the package, which npx passes to the server."""
    resolved: Resolution | None

    def command(self) -> tuple[str, list[str], dict[str, str], Path]:
        """``(command, args, env, cwd)`` to run instead of npx (``resolved`` only)."""
        r = self.resolved
        assert r is not None
        return r.argv[0], [*r.argv[1:], *self.passed], dict(r.env), Path(r.cwd)

    def learn(self, pid: int | None, describe: str) -> None:
        """The npx process ``pid`` answered ``initialize``: find the server it runs and keep its resolution."""
        if self.resolved is not None or pid is None:
            return
        with _lock:
            if self.key in resolutions:
                return
        try:
            found: Resolution | str = _resolve(pid, self.passed, dict(self.key[-1]))
        except OSError as e:  # a process exited while read, or /proc refused: not provably the same
            found = f"its process tree could not be read ({type(e).__name__}: {e})"
        with _lock:
            if self.key in resolutions:
                return
            if len(resolutions) >= _MAX_KEYS:  # specs whose environment differs per episode: each its own key
                resolutions.clear()
            resolutions[self.key] = found
        said = ("learned", self.alias, *self.key[:2], isinstance(found, str))  # once per server, not per environment
        if isinstance(found, str):
            _once(said, f"mcp-gym: server '{self.alias}' ({describe}) keeps starting through npx: {redact_text(found)}")
        else:
            _once(said, f"mcp-gym: server '{self.alias}' ({describe}): npx ran {redact_text(' '.join(found.argv))}; "
                        "later starts of it in this process run that directly (resolve_npx=False keeps npx)")

    def failed(self) -> None:
        """A resolved start did not connect: forget the resolution (the next start runs npx again)."""
        if self.resolved is not None:
            with _lock:
                if resolutions.get(self.key) is self.resolved:
                    del resolutions[self.key]


def start_for(alias: str, spec: Stdio) -> NpxStart | None:
    """The npx start of the stdio server ``spec``, or ``None`` when it is not run by npx, ``spec.resolve_npx`` is off or
    this is not Linux (npx runs as written)."""
    if not spec.resolve_npx:
        return None
    command, args, env = spec.command, spec.args, spec.env
    cwd = None if spec.cwd is None else os.fspath(spec.cwd)
    split = _split(command, args)
    if split is None:
        return None
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/task"):
        _once(("platform",), f"mcp-gym: npx servers start through npx every time on {sys.platform} (no /proc)")
        return None
    head, passed = split
    if isinstance(head, str):
        _once(("parse", alias, command, head), f"mcp-gym: server '{alias}' keeps starting through npx: {head}")
        return None
    given = get_default_environment() | dict(env or {})
    key = (command, head, cwd, os.getcwd(), tuple(sorted(given.items())))
    with _lock:
        known = resolutions.get(key)
    resolved = known if isinstance(known, Resolution) and known.usable() else None
    if isinstance(known, Resolution) and resolved is None:
        with _lock:
            resolutions.pop(key, None)
        known = None
    if isinstance(known, str):
        return None
    return NpxStart(alias, key, passed, resolved)


_said: set[tuple[Any, ...]] = set()


def _once(key: tuple[Any, ...], message: str) -> None:
    """Log ``message`` at INFO the first time ``key`` is seen in this process."""
    with _lock:
        if key in _said:
            return
        _said.add(key)
    log.info(message)


def _split(command: str, args: Sequence[str]) -> tuple[tuple[str, ...] | str, tuple[str, ...]] | None:
    """``(npx's own arguments up to the package, the arguments passed through)`` of an npx command line, with a reason
    (a string) instead of the first when it cannot be parsed; ``None``: not npx."""
    name = Path(command).name
    args = list(args)
    if name == "npm" and args[:1] in (["exec"], ["x"]):
        start = 1
    elif name == "npx":
        start = 0
    else:
        return None
    i = start
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        option = a.split("=", 1)[0]
        if a in _FLAGS or (option in _VALUED and "=" in a):
            i += 1
        elif a in _VALUED:
            i += 2
        elif a.startswith("-"):
            return f"npx option {a!r} is not one mcp-gym knows", ()
        else:
            break
    if i >= len(args):
        return "no package on its command line", ()
    return tuple(args[: i + 1]), tuple(args[i + 1:])


def _resolve(root: int, passed: tuple[str, ...], given: dict[str, str]) -> Resolution | str:
    """The server process npx (process ``root``) runs, checked as the module says, or why it is not used."""
    pid = root
    while True:
        kids = _children(pid)
        if pid != root and not _npm_shell(pid):
            break
        if len(kids) != 1:
            what = "the npx process" if pid == root else f"npm's shell {pid}"
            return f"{what} has {len(kids)} child processes, not one"
        pid = kids[0]
    if _children(pid):
        return f"the server process {pid} has child processes of its own"
    proc = Path(f"/proc/{pid}")
    argv = [os.fsdecode(a) for a in (proc / "cmdline").read_bytes().split(b"\0")[:-1]]
    exe, cwd = os.readlink(proc / "exe"), os.readlink(proc / "cwd")
    env: dict[str, str] = {}
    for item in (proc / "environ").read_bytes().split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[os.fsdecode(k)] = os.fsdecode(v)
    if not argv:
        return f"the server process {pid} shows no command line"
    n = len(argv) - len(passed)
    if n < 1 or tuple(argv[n:]) != passed:
        return (f"the server's command line ({' '.join(argv)!r}) does not end with the arguments npx was given "
                f"({' '.join(passed)!r}), so they cannot be mapped to a direct start")
    own = argv[:n]
    added = [v for k, v in env.items() if given.get(k) != v]
    for a in passed:
        if len(a) >= _MIN_ECHO and (any(a in x for x in own) or any(a in v for v in added)):
            return f"the argument {a!r} also appears elsewhere in the server's command line or environment"
    missing = [k for k in get_default_environment() if k not in env]
    if missing:
        return f"the server's environment lacks {', '.join(missing)}, which every start is given"
    if exe.endswith(" (deleted)") or not os.path.exists(exe):
        return f"its program {exe} no longer exists"
    found = own[0] if "/" in own[0] else shutil.which(own[0], path=env.get("PATH", ""))
    if found is None or os.path.realpath(os.path.join(cwd, found)) != os.path.realpath(exe) \
            or ("/" in own[0] and not os.path.isabs(own[0])):
        return f"its argv[0] {own[0]!r} does not name its program {exe} on its PATH"
    files = (exe, *(x for x in own[1:] if os.path.isabs(x) and os.path.exists(x)))
    return Resolution(tuple(own), env, cwd, files)


def _npm_shell(pid: int) -> bool:
    """Process ``pid`` is a ``sh -c COMMAND ...`` (npm's way of running a package's bin)."""
    try:
        argv = (Path(f"/proc/{pid}") / "cmdline").read_bytes().split(b"\0")
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return len(argv) >= 3 and argv[1] == b"-c" and Path(exe).name in _SHELLS


def _children(pid: int) -> list[int]:
    """Child process ids of ``pid`` (every thread's; a scan of ``/proc`` where the kernel has no ``children`` file)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    kids: list[int] = []
    try:
        for task in tasks:
            kids += [int(x) for x in (task / "children").read_text().split()]
        return sorted(set(kids))
    except FileNotFoundError:
        pass
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids
