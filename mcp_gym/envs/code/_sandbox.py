"""Sandbox for running untrusted Python functions against test inputs (used by the code server).

Every run starts ``python -I -S -c RUNNER`` in a fresh process, never in the server's (or trainer's) own process,
through anyio so the server's event loop never blocks. The runner reads its configuration (the workspace files,
function inputs, limits) from stdin before any untrusted code runs, writes the files into its working directory, and
only reports what the function returned: the expected outputs never reach the child, the caller compares.

**OS isolation (the security boundary).** The run is wrapped in `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``, the unprivileged sandbox of Flatpak; a Debian/Ubuntu/Fedora package), detected and probed once per
process by :func:`detect_isolation`:

* its own user, PID, network, mount, IPC, UTS and cgroup namespaces; no capabilities, ``no_new_privs``, no nested
  user namespaces, uid 65534 inside. No network (only its own loopback: the host's ``127.0.0.1`` is unreachable);
  it sees only its own processes, so it can neither signal the server or trainer (``os.getppid()`` is the namespace's
  init) nor anything else on the host;
* a new, read-only root with only ``/usr``, ``/lib*``, the Python installation (with every ``site-packages`` and the
  ``mcp_gym`` package hidden under empty read-only mounts) and ``/etc/ld.so.cache``; no ``/etc``, ``/home``,
  ``/root``, ``/tmp`` or repository. The task generators, hidden tests, credentials and other episodes' files are not
  in its file system. The only writable place is its working directory, a private tmpfs of
  :attr:`Limits.workspace_bytes` (also ``$TMPDIR``) that vanishes with the run;
* it cannot outlive the run: when the run ends (normally, or killed for a limit) the namespace's init is killed, which
  makes the kernel kill every process inside, detached or not, before :func:`run_function_tests` returns; and
  ``--die-with-parent`` kills it if the server process dies.

Where bubblewrap is missing or cannot create namespaces (e.g. unprivileged user namespaces disabled), the Code server
refuses to start with one line saying so, unless ``MCP_GYM_CODE_SANDBOX=unsafe`` opts in to running agent code with
only the in-process layers below (for trusted code; never for RL on untrusted policies).

Limits (see :class:`Limits`):

* ``RLIMIT_CPU`` (CPU seconds; SIGXCPU/SIGKILL), ``RLIMIT_AS`` (address space: allocations fail with MemoryError),
  ``RLIMIT_FSIZE`` (largest file written), ``RLIMIT_NOFILE``, ``RLIMIT_CORE = 0`` and ``RLIMIT_NPROC = 0`` (no new
  processes or threads — not enforced for root, hence the audit hook below);
* a per-test ``SIGALRM`` timer and a wall-clock limit after which the whole sandbox is killed;
* output (stdout + stderr + result channel) is read incrementally and capped; past :attr:`Limits.output_bytes` the
  sandbox is killed;
* at most ``2 x CPU count`` runs at once per server (an anyio semaphore); further runs wait.

Second layer (in-process, best effort): before importing the solution, the runner installs a ``sys.addaudithook``
hook that raises ``PermissionError`` on

* every ``socket.*`` event (creating a socket, connect, bind, getaddrinfo, ...);
* ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.spawn*``, ``os.posix_spawn``, ``os.fork``/``forkpty``,
  ``os.kill``/``killpg``, ``ctypes.*``, ``resource.setrlimit``/``prlimit``, ``gc.get_objects``/``get_referrers``
  and imports of ``_posixsubprocess``/``_ctypes``;
* opening a file for writing, or removing/renaming/creating one, outside the working directory, and opening for
  reading anything outside the working directory and the standard library.

It gives readable error messages for honest mistakes; it is not a boundary (determined code disables it, e.g. by
replacing the hook function's ``__code__``; ``tests/test_sandbox_attacks.py`` does exactly that before every attack).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import importlib.util
import json
import logging
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

MAX_CONCURRENT_RUNS = 2 * (os.cpu_count() or 1)
"""Sandboxed runs executing at once, per server process and event loop."""
SANDBOX_ENV = "MCP_GYM_CODE_SANDBOX"
"""Environment variable choosing the isolation: ``auto`` (default: bubblewrap, else refuse), ``bwrap`` (the same,
stated) or ``unsafe`` (no OS isolation, only the in-process audit hook: trusted code only)."""
SANDBOX_UID_ENV = "MCP_GYM_CODE_SANDBOX_UID"
"""Environment variable: the unprivileged host uid (and gid) agent code runs as when the server runs as root (default
65534, ``nobody``); never 0."""
WORKDIR = "/workspace"
"""The run's working directory inside the bubblewrap sandbox."""
KILL_WAIT_SECONDS = 10.0
"""Bound on waiting for a killed sandbox to be gone (the kernel tears a PID namespace down in milliseconds)."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    cpu_seconds: int = 5
    memory_bytes: int = 512 * 2**20
    wall_seconds: float = 10.0
    test_seconds: float = 2.0
    file_bytes: int = 4 * 2**20
    open_files: int = 64
    output_bytes: int = 2 * 2**20
    """Total bytes the child may print before it is killed."""
    keep_output_chars: int = 4000
    """Characters of output kept for the report (head and tail)."""
    workspace_bytes: int = 16 * 2**20
    """Size of the run's private writable tmpfs (its working directory and ``$TMPDIR``) under bubblewrap."""
    shm_bytes: int = 4 * 2**20
    """Size of the run's ``/dev/shm`` tmpfs under bubblewrap (the rest of ``/dev`` is read-only)."""
    processes: int = 0
    """``RLIMIT_NPROC`` of the run: under bubblewrap the count is of the processes of the sandbox uid in the run's own
    user namespace, i.e. of this run (its init included), so the default 0 allows no new process or thread at all."""


@dataclass
class RunResult:
    """What a sandboxed run produced.

    Attributes:
        values: ``{test index: canonical JSON of the returned value}`` for tests that returned.
        errors: ``{test index: error text}`` for tests that raised, timed out or returned something not JSON-able.
        fatal: Why no test could run (e.g. the module failed to import), if so.
        output: The child's stdout and stderr (truncated in the middle), plus a note if it was killed.
        killed: ``"wall"``, ``"output"``, ``"signal N"`` or ``None``.
    """

    values: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    fatal: str | None = None
    output: str = ""
    killed: str | None = None


_RUNNER = r'''
import json, os, resource, signal, sys
cfg = json.loads(sys.stdin.buffer.read())
sys.stdin.close()
sys.stdin = open(os.devnull)
for rel, text in cfg.pop("files").items():
    if os.path.dirname(rel):
        os.makedirs(os.path.dirname(rel), exist_ok=True)
    with open(rel, "w", encoding="utf-8") as f:
        f.write(text)
sys.dont_write_bytecode = True
for name, value in cfg["rlimits"].items():
    soft, hard = value if isinstance(value, list) else (value, value)
    try:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    except (ValueError, OSError):
        pass
results = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stderr.reconfigure(errors="backslashreplace")
sys.stdout.reconfigure(errors="backslashreplace", line_buffering=True)

ROOT = os.path.realpath(os.getcwd())
READ_ROOTS = tuple(os.path.realpath(p) + os.sep for p in sys.path if p and "-packages" not in p)
BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty",
           "os.kill", "os.killpg", "os.setuid", "os.setgid", "ctypes.", "resource.setrlimit", "resource.prlimit",
           "signal.pthread_kill", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "pty.", "webbrowser.",
           "urllib.", "http.", "ftplib.", "smtplib.", "imaplib.", "poplib.", "nntplib.", "telnetlib.", "os.chdir",
           "os.fchdir", "os.chroot", "sys.unraisablehook", "os.startfile")
PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.chmod": (0,),
               "os.chown": (0,), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.utime": (0,),
               "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (1,)}
BLOCKED_IMPORTS = {"_posixsubprocess", "_ctypes"}  # their functions raise no audit events
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _inside(path, roots, _root=ROOT, _rp=os.path.realpath, _join=os.path.join, _fspath=os.fspath,
            _isinstance=isinstance):
    p = _fspath(path)
    if _isinstance(p, bytes):
        p = p.decode("utf-8", "surrogateescape")
    p = _rp(_join(_root, p))
    return p == _root or p.startswith(roots)


def _hook(event, args, _blocked=BLOCKED, _paths=PATH_EVENTS, _imports=BLOCKED_IMPORTS, _inside=_inside,
          _own=(ROOT + os.sep,), _read=(ROOT + os.sep,) + READ_ROOTS, _wf=WRITE_FLAGS, _isinstance=isinstance,
          _int=int, _str=str, _any=any, _err=PermissionError):
    if event.startswith(_blocked):
        raise _err("sandbox: %s is not allowed" % event)
    if event == "import":
        if args[0] in _imports:
            raise _err("sandbox: importing %s is not allowed" % args[0])
    elif event == "open":
        path, mode, flags = args
        if path is None or _isinstance(path, _int):
            return
        write = (_isinstance(mode, _str) and _any(c in mode for c in "wax+")) or bool((flags or 0) & _wf)
        if not _inside(path, _own if write else _read):
            raise _err("sandbox: %s outside the working directory is not allowed: %r"
                       % ("writing" if write else "reading", path))
    elif event in _paths:
        for i in _paths[event]:
            if i < len(args) and args[i] is not None and not _isinstance(args[i], _int) and not _inside(args[i], _own):
                raise _err("sandbox: %s outside the working directory is not allowed: %r" % (event, args[i]))


import copy, traceback
sys.path.insert(0, ROOT)


def _alarm(signum, frame):
    raise TimeoutError("test took longer than %g s" % cfg["test_seconds"])


signal.signal(signal.SIGALRM, _alarm)
sys.addaudithook(_hook)


def _emit(**msg):
    results.write(json.dumps(msg) + "\n")
    results.flush()


def _describe(exc):
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[:500]


try:
    signal.setitimer(signal.ITIMER_REAL, cfg["test_seconds"])
    module = __import__(cfg["module"])
    fn = getattr(module, cfg["entry"])
    signal.setitimer(signal.ITIMER_REAL, 0)
except BaseException as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)
    traceback.print_exc()
    _emit(fatal="could not load %s.%s: %s" % (cfg["module"], cfg["entry"], _describe(exc)))
    sys.stdout.flush()
    os._exit(0)
for i, args in enumerate(cfg["inputs"]):
    try:
        signal.setitimer(signal.ITIMER_REAL, cfg["test_seconds"])
        value = fn(*copy.deepcopy(args))
        signal.setitimer(signal.ITIMER_REAL, 0)
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        if len(text) > 100000:
            raise ValueError("returned value too large (%d characters of JSON)" % len(text))
        _emit(i=i, value=text)
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if isinstance(exc, TypeError) and "JSON serializable" in str(exc):
            exc = TypeError("returned a value of a type that is not a plain list/dict/str/int/float/bool/None")
        else:
            print("--- test %d raised:" % (i + 1), file=sys.stderr)
            traceback.print_exc()
        _emit(i=i, error=_describe(exc))
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
'''


def canonical_json(value: Any) -> str:
    """The JSON text the runner emits for ``value`` (used to compare results with expected values)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class SandboxUnavailable(RuntimeError):
    """No OS sandbox is available and the user did not opt in to the unsafe mode (the message is one line)."""


@dataclass(frozen=True)
class Isolation:
    """How agent code is isolated: ``mechanism`` is ``"bwrap"`` (the OS sandbox) or ``"unsafe"`` (opted in: a plain
    subprocess with rlimits and the audit hook only); ``bwrap`` is the bubblewrap executable used. When the server
    runs as root, ``host_uid`` is the unprivileged host uid agent code runs as and ``setpriv`` the util-linux tool that
    drops to it (``None`` otherwise: agent code runs as the server's own, non-root, uid)."""

    mechanism: str
    bwrap: str | None = None
    host_uid: int | None = None
    setpriv: str | None = None


def _python() -> str:
    """The interpreter the runner uses: the real file behind ``sys.executable`` (a venv's link leads outside it)."""
    return os.path.realpath(sys.executable)


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _prefixes() -> list[str]:
    """The Python installation(s) the runner needs: its standard library, extension modules and shared library."""
    return sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)})


@functools.cache
def _hidden_dirs() -> tuple[str, ...]:
    """Directories that must not be readable inside the sandbox although a parent is mounted: every site-packages
    and dist-packages (third-party code, and mcp_gym itself when installed: those of this environment and of every
    Python under ``/usr``, ``/usr/local`` and the base installation) and the mcp_gym package (its
    ``envs/<env>/tasks.py`` task generators and hidden tests). Only the outermost of nested ones (bubblewrap cannot
    mount in a read-only tmpfs)."""
    dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    dirs |= {sysconfig.get_path(k) for k in ("purelib", "platlib")}
    dirs |= {p for p in sys.path if "-packages" in p}
    for root in {"/usr", "/usr/local", *_prefixes()}:
        for pattern in ("lib*/python*/*-packages", "local/lib*/python*/*-packages"):
            dirs |= set(glob.glob(os.path.join(root, pattern)))
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("mcp_gym")
        dirs |= set(spec.submodule_search_locations or ()) if spec else set()
    found = sorted({os.path.realpath(d) for d in dirs if d and os.path.isdir(d)})
    return tuple(d for d in found if not _under(d, [o for o in found if o != d]))


def _system_dirs(args: list[str]) -> list[str]:
    """Add ``/usr``, ``/bin``, ``/lib*`` (read-only, symlinks kept) to ``args``; return the directories bound."""
    bound: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
            bound.append(top)
    return bound


def _bind_readonly(args: list[str], bound: list[str], paths: Sequence[str], parents: bool = False) -> None:
    """Add ``paths`` (read-only) to ``args`` unless already under ``bound``; with ``parents``, create their parent
    directories world-traversable first (bubblewrap run as root makes them 0700)."""
    for path in paths:
        if _under(path, bound) or not os.path.exists(path):
            continue
        if parents:
            missing = []
            parent = os.path.dirname(path)
            while parent != "/" and not _under(parent, bound):
                missing.insert(0, parent)
                parent = os.path.dirname(parent)
            for d in missing:
                args += ["--perms", "0755", "--dir", d]
        args += ["--ro-bind", path, path]
        bound.append(path)


def bwrap_args(bwrap: str, limits: Limits) -> list[str]:
    """The bubblewrap command line (up to and excluding ``--``) of one run; see the module docstring."""
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "TMPDIR", WORKDIR, "--setenv", "HOME", WORKDIR]
    bound = _system_dirs(args)
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    _bind_readonly(args, bound, [*_prefixes(), _python()])
    for hidden in _hidden_dirs():
        if _under(hidden, bound):
            args += ["--tmpfs", hidden, "--remount-ro", hidden]
    # /proc/sys read-only (bwrap's own cover skips it: the directory itself is not writable, its files may be);
    # /dev read-only but for a size-capped /dev/shm
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
             "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--size", str(limits.workspace_bytes), "--tmpfs", WORKDIR, "--chdir", WORKDIR, "--remount-ro", "/"]
    return args


def _drop_root_args(isolation: Isolation) -> list[str]:
    """As root: the outer command that runs the sandbox's own ``bwrap`` as :attr:`Isolation.host_uid`. A first
    bubblewrap (as root: mounts need no user namespace) builds a minimal root holding only what the second needs
    (``/usr``, ``/lib*``, the Python installation under world-traversable parents, ``/proc``, ``/dev``), then
    ``setpriv`` drops to the unprivileged uid with no groups and no capabilities. Run as root, bubblewrap would map
    the sandbox uid to host uid 0, which keeps root's permission checks that do not need capabilities (sysctls)."""
    assert isolation.bwrap is not None and isolation.setpriv is not None and isolation.host_uid is not None
    uid = str(isolation.host_uid)
    args = [isolation.bwrap, "--die-with-parent"]
    bound = _system_dirs(args)
    args += ["--perms", "0755", "--dir", "/etc", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += ["--bind", "/proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    _bind_readonly(args, bound, [*_prefixes(), _python(), isolation.bwrap, isolation.setpriv], parents=True)
    args += ["--chdir", "/", "--",
             isolation.setpriv, "--reuid", uid, "--regid", uid, "--clear-groups", "--inh-caps=-all",
             "--bounding-set=-all", "--"]
    return args


def sandbox_command(isolation: Isolation, limits: Limits) -> list[str]:
    """The whole command line (up to and excluding ``--``) that starts one bubblewrap sandbox: :func:`bwrap_args`,
    run as :attr:`Isolation.host_uid` when the server runs as root."""
    assert isolation.bwrap is not None
    outer = _drop_root_args(isolation) if isolation.host_uid is not None else []
    return [*outer, *bwrap_args(isolation.bwrap, limits)]


_PROBE = r"""
import errno, os, resource
problems = []
try:  # opened, never written; EACCES: refused by the permission check itself, so the host uid is not 0
    os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
    problems.append("/proc/sys is writable")
except OSError as e:
    if e.errno != errno.EACCES:
        problems.append("agent code would run as host uid 0 (a sysctl's permission check passed)")
try:
    os.close(os.open("/dev/mcp-gym-probe", os.O_WRONLY | os.O_CREAT))
    problems.append("/dev is writable")
except OSError:
    pass
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
try:
    if os.fork() == 0:
        os._exit(0)
    problems.append("RLIMIT_NPROC does not hold (a process could be started)")
except OSError:
    pass
print("; ".join(problems) or "ok")
"""


def _probe(isolation: Isolation) -> str | None:
    """Run a check of the sandbox's own guarantees (a non-root host uid, read-only ``/proc/sys`` and ``/dev``, no new
    processes) through the real sandbox command; ``None`` if it holds, else why not (one line)."""
    cmd = [*sandbox_command(isolation, Limits()), "--", _python(), "-I", "-S", "-c", _PROBE]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL, cwd="/", env={})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{isolation.bwrap} failed to run ({e})"
    said = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode == 0 and said == "ok":
        return None
    if done.returncode == 0 and said:
        return f"the sandbox is not safe here ({said})"
    why = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return f"{isolation.bwrap} cannot create a sandbox here ({why})"


def _sandbox_uid() -> int:
    """The host uid agent code runs as when the server runs as root (``$MCP_GYM_CODE_SANDBOX_UID``, default 65534)."""
    text = os.environ.get(SANDBOX_UID_ENV, "").strip() or "65534"
    if not text.isdigit() or int(text) == 0 or int(text) >= 2**32 - 1:
        raise SandboxUnavailable(f"{SANDBOX_UID_ENV}={text!r} is not an unprivileged uid (a number other than 0).")
    return int(text)


@functools.cache
def _detect(mode: str, path: str, euid: int, uid_setting: str) -> Isolation:
    if mode == "unsafe":
        _log.warning("%s=unsafe: agent code runs WITHOUT an OS sandbox (only an audit hook); trusted code only",
                     SANDBOX_ENV)
        return Isolation("unsafe")
    if mode not in ("auto", "bwrap"):
        raise SandboxUnavailable(f"{SANDBOX_ENV}={mode!r} is not one of 'auto', 'bwrap', 'unsafe'.")
    bwrap = shutil.which("bwrap", path=path)
    if bwrap is None:
        problem: str | None = "bubblewrap (bwrap) is not installed"
    elif euid != 0:
        isolation = Isolation("bwrap", os.path.realpath(bwrap))
        problem = _probe(isolation)
    elif (setpriv := shutil.which("setpriv", path=path)) is None:
        problem = "the server runs as root and setpriv (util-linux) is not installed to drop to an unprivileged uid"
    else:
        isolation = Isolation("bwrap", os.path.realpath(bwrap), _sandbox_uid(), os.path.realpath(setpriv))
        problem = _probe(isolation)
    if problem is not None:
        raise SandboxUnavailable(
            f"Code server refuses to run agent code without an OS sandbox: {problem}. Install bubblewrap "
            f"(apt-get install bubblewrap; unprivileged user namespaces must be allowed), or set {SANDBOX_ENV}=unsafe "
            "to run it with only an in-process audit hook (trusted code only).")
    return isolation


def detect_isolation() -> Isolation:
    """The isolation agent code gets here, chosen by ``$MCP_GYM_CODE_SANDBOX`` (see :data:`SANDBOX_ENV`) and, as root,
    ``$MCP_GYM_CODE_SANDBOX_UID``; cached per setting, ``$PATH`` and effective uid. Raises :class:`SandboxUnavailable`
    (one line) when there is none and no opt-in."""
    return _detect(os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto", os.environ.get("PATH", os.defpath),
                   os.geteuid(), os.environ.get(SANDBOX_UID_ENV, ""))


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Semaphore] = weakref.WeakKeyDictionary()


def _run_slots() -> anyio.Semaphore:
    """The concurrency semaphore of the running event loop (servers in tests run several loops in turn)."""
    loop = asyncio.get_running_loop()
    sem = _slots.get(loop)
    if sem is None:
        sem = _slots[loop] = anyio.Semaphore(MAX_CONCURRENT_RUNS)
    return sem


class _Capture:
    """Keeps the head and tail of a byte stream and counts its size."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail = (self.tail + chunk)[-self.keep :]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        if not self.tail:
            return head
        skipped = self.size - len(self.head) - len(self.tail)
        gap = f"\n... [{skipped} bytes omitted] ...\n" if skipped > 0 else ""
        return head + gap + self.tail.decode("utf-8", "replace")


class _Run:
    """One started run: its process (``bwrap`` or, in unsafe mode, the runner) and, under bubblewrap, a pidfd of the
    init process of its PID namespace (killing that init makes the kernel kill everything inside)."""

    def __init__(self, proc: Process, info_fd: int | None) -> None:
        self.proc = proc
        self.info_fd = info_fd
        self.pidfd: int | None = None

    async def watch_namespace(self, limit: float) -> None:
        """Read bwrap's ``--info-fd`` report and open a pidfd of the namespace's init (verified to be that init)."""
        if self.info_fd is None:
            return
        with anyio.move_on_after(limit):
            data = await anyio.to_thread.run_sync(_read_to_end, self.info_fd, abandon_on_cancel=True)
            with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
                info = json.loads(data)
                pid, ns = int(info["child-pid"]), f"pid:[{int(info['pid-namespace'])}]"
                pidfd = os.pidfd_open(pid)
                # The pidfd pins that process; if it is still running after the check, the check saw the right one.
                if os.readlink(f"/proc/{pid}/ns/pid") == ns and not _exited(pidfd):
                    self.pidfd = pidfd
                else:
                    os.close(pidfd)

    def kill(self) -> None:
        """Send SIGKILL to the whole sandbox (namespace init, else the process group); returns at once."""
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        if self.proc.returncode is None:
            _kill_group(self.proc)

    async def finish(self) -> None:
        """Kill what is left and wait (bounded) until every process of the run is gone; close the descriptors."""
        with anyio.CancelScope(shield=True):
            self.kill()
            if self.pidfd is not None:
                with anyio.move_on_after(KILL_WAIT_SECONDS) as scope:
                    await anyio.wait_readable(self.pidfd)  # readable once the init exited, after the kernel
                if scope.cancelled_caught:  # killed the rest of its namespace
                    _log.warning("sandbox namespace init still alive %g s after SIGKILL", KILL_WAIT_SECONDS)
                os.close(self.pidfd)
                self.pidfd = None
            with anyio.move_on_after(KILL_WAIT_SECONDS):
                await self.proc.wait()
            await self.proc.aclose()
            if self.info_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.info_fd)
                self.info_fd = None


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _exited(pidfd: int) -> bool:
    import select

    return bool(select.select([pidfd], [], [], 0)[0])


def _kill_group(proc: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _start(isolation: Isolation, limits: Limits, cwd: str) -> _Run:
    """Start the runner: inside bubblewrap (working directory: its private tmpfs), or unsafe in ``cwd``."""
    runner = [_python(), "-I", "-S", "-c", _RUNNER]
    if isolation.mechanism != "bwrap" or isolation.bwrap is None:
        proc = await anyio.open_process(runner, cwd=cwd, env={"PATH": os.environ.get("PATH", "")},
                                        start_new_session=True)
        return _Run(proc, None)
    read_end, write_end = os.pipe()
    try:
        cmd = [*sandbox_command(isolation, limits), "--info-fd", str(write_end), "--", *runner]
        proc = await anyio.open_process(cmd, cwd="/", env={}, start_new_session=True, pass_fds=(write_end,))
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return _Run(proc, read_end)


async def run_function_tests(
    files: Mapping[str, str],
    module: str,
    entry: str,
    inputs: Sequence[Sequence[Any]],
    limits: Limits = Limits(),
) -> RunResult:
    """Call ``module.entry(*args)`` for every ``args`` in ``inputs`` inside the sandbox; see the module docstring.

    When it returns, no process of the run is left. Without an OS sandbox (and no opt-in to the unsafe mode) nothing
    runs and :attr:`RunResult.fatal` says why."""
    config = {
        "files": dict(files),
        "module": module,
        "entry": entry,
        "inputs": [list(a) for a in inputs],
        "test_seconds": limits.test_seconds,
        "rlimits": {
            "RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 1],
            "RLIMIT_AS": limits.memory_bytes,
            "RLIMIT_FSIZE": limits.file_bytes,
            "RLIMIT_NOFILE": limits.open_files,
            "RLIMIT_CORE": 0,
            "RLIMIT_NPROC": limits.processes,
            "RLIMIT_MSGQUEUE": 0,
        },
    }
    try:
        isolation = await anyio.to_thread.run_sync(detect_isolation)
    except SandboxUnavailable as e:
        return RunResult(fatal=str(e))
    result = RunResult()
    async with _run_slots():
        unsafe = isolation.mechanism != "bwrap"  # only then the workspace is a host directory
        workdir = tempfile.TemporaryDirectory(prefix="mcp-gym-code-", ignore_cleanup_errors=True) if unsafe else None
        with workdir or contextlib.nullcontext():
            channel, output = _Capture(limits.output_bytes), _Capture(limits.keep_output_chars)
            run = await _start(isolation, limits, workdir.name if workdir else "/")
            try:
                await run.watch_namespace(limits.wall_seconds)
                result.killed = await _supervise(run, json.dumps(config).encode(), channel, output, limits)
            finally:
                await run.finish()
    _parse_channel(channel.text(), result)
    code = run.proc.returncode
    if result.killed is None and code is not None and code != 0:
        # bwrap reports a child killed by signal N as exit status 128 + N
        signum = -code if code < 0 else code - 128 if isolation.mechanism == "bwrap" and code > 128 else None
        result.killed = f"signal {signum}" if signum else f"exit status {code}"
    result.output = output.text() + _kill_note(result.killed, limits)
    return result


async def _supervise(run: _Run, config: bytes, channel: _Capture, output: _Capture, limits: Limits) -> str | None:
    """Feed the config, drain both pipes within the limits; return why the sandbox was killed, if it was."""
    proc = run.proc
    killed: str | None = None
    total = 0

    async def pump(stream: ByteReceiveStream | None, sink: _Capture) -> None:
        nonlocal killed, total
        if stream is None:
            return
        async for chunk in stream:
            sink.add(chunk)
            total += len(chunk)
            if total > limits.output_bytes and killed is None:
                killed = "output"
                run.kill()

    with anyio.move_on_after(limits.wall_seconds) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump, proc.stdout, channel)
            tg.start_soon(pump, proc.stderr, output)
            if proc.stdin is not None:
                try:
                    await proc.stdin.send(config)
                    await proc.stdin.aclose()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
        await proc.wait()
    if scope.cancelled_caught and killed is None:
        killed = "wall"
    return killed


def _parse_channel(text: str, result: RunResult) -> None:
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "fatal" in msg:
            result.fatal = str(msg["fatal"])
        elif isinstance(msg.get("i"), int) and isinstance(msg.get("value"), str):
            result.values[msg["i"]] = msg["value"]
        elif isinstance(msg.get("i"), int):
            result.errors[msg["i"]] = str(msg.get("error"))


def _kill_note(killed: str | None, limits: Limits) -> str:
    notes = {
        "wall": f"run stopped: wall-clock limit of {limits.wall_seconds:g} s exceeded",
        "output": f"run stopped: more than {limits.output_bytes} bytes of output",
        f"signal {int(signal.SIGXCPU)}": f"run stopped: CPU time limit of {limits.cpu_seconds} s exceeded",
        f"signal {int(signal.SIGKILL)}": "run killed (CPU or memory limit)",
    }
    if killed is None:
        return ""
    return "\n[sandbox] " + notes.get(killed, f"run ended by {killed}")


def limits_info(limits: Limits = Limits()) -> dict[str, Any]:
    """The limits as a JSON-able dict (for documentation and tool descriptions)."""
    return asdict(limits)
