"""Sandbox for running untrusted Python functions against test inputs (used by the code server).

Every run starts ``python -I -S -c RUNNER`` in a fresh process, never in the server's (or trainer's) own process,
through anyio so the server's event loop never blocks. The runner reads its configuration (the workspace files,
function inputs, limits) from stdin before any untrusted code runs, writes the files into its working directory, and
only reports what the function returned: the expected outputs never reach the child, the caller compares.

**OS isolation (the security boundary).** The run is wrapped in `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``, the unprivileged sandbox of Flatpak; a Debian/Ubuntu/Fedora package), detected and probed once per
process by :func:`detect_isolation`:

* its own user, PID, network, mount, IPC, UTS and cgroup namespaces; no capabilities, ``no_new_privs``, no nested
  user namespaces, uid 65534 inside — and an unprivileged uid on the host too, also when the server runs as root
  (see :mod:`._bwrap`: as host root, code without capabilities still passes the sysctl permission checks and is
  exempt from ``RLIMIT_NPROC``). No network (only its own loopback: the host's ``127.0.0.1`` is unreachable);
  it sees only its own processes, so it can neither signal the server or trainer (``os.getppid()`` is the namespace's
  init) nor anything else on the host;
* a new, read-only root with only ``/usr``, ``/lib*``, the Python installation (with every ``site-packages`` and
  ``dist-packages`` — this environment's, the base interpreter's, the system Pythons' — and the ``mcp_gym`` package
  hidden under empty read-only mounts) and ``/etc/ld.so.cache``; no ``/etc``, ``/home``, ``/root``, ``/tmp`` or
  repository; ``/proc/sys`` and ``/dev`` read-only. The task generators, hidden tests, credentials and other
  episodes' files are not in its file system. The only writable places are its working directory, a private tmpfs of
  :attr:`Limits.workspace_bytes` (also ``$TMPDIR``), and ``/dev/shm``, one of :attr:`Limits.shm_bytes`; both vanish
  with the run;
* it cannot outlive the run: when the run ends (normally, or killed for a limit) the namespace's init is killed, which
  makes the kernel kill every process inside, detached or not, before :func:`run_function_tests` returns; and
  ``--die-with-parent`` kills it if the server process dies.

Where bubblewrap is missing or cannot create namespaces (e.g. unprivileged user namespaces disabled), or the probe
finds one of the guarantees above not holding, the Code server refuses to start with one line saying why, unless
``MCP_GYM_CODE_SANDBOX=unsafe`` opts in to running agent code with only the in-process layers below (for trusted
code; never for RL on untrusted policies).

Limits (see :class:`Limits`):

* ``RLIMIT_CPU`` (CPU seconds; SIGXCPU/SIGKILL), ``RLIMIT_AS`` (address space: allocations fail with MemoryError),
  ``RLIMIT_FSIZE`` (largest file written), ``RLIMIT_NOFILE``, ``RLIMIT_CORE = 0``, ``RLIMIT_MSGQUEUE = 0`` and
  ``RLIMIT_NPROC = 0`` (:attr:`Limits.processes`: no new process or thread; it holds because the host uid is not
  root, and it counts per run because each run has its own user namespace). One process per run makes the limits
  whole-run limits: memory is at most ``RLIMIT_AS`` plus the two tmpfs sizes plus kernel buffers of at most
  ``RLIMIT_NOFILE`` descriptors (the seccomp filter refuses System V shared memory and message queues and
  ``memfd_create``, which would hold memory outside the address space). No cgroup is used (none is writable without
  systemd's delegation, and not on cgroup v1 hosts);
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
import json
import logging
import os
import signal
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from mcp_gym.servers._bwrap import (
    SANDBOX_ENV,
    SANDBOX_UID_ENV,
    WORKDIR,
    Isolation,
    Limits,
    SandboxUnavailable,
    _python,
    bwrap_args,
    detect_isolation,
    sandbox_command,
    seccomp_pipe,
)

__all__ = ["SANDBOX_ENV", "SANDBOX_UID_ENV", "WORKDIR", "Isolation", "Limits", "RunResult", "SandboxUnavailable",
           "bwrap_args", "canonical_json", "detect_isolation", "limits_info", "run_function_tests", "sandbox_command"]

MAX_CONCURRENT_RUNS = 2 * (os.cpu_count() or 1)
"""Sandboxed runs executing at once, per server process and event loop."""
DEFAULT_LIMITS = Limits()
"""The limits of a run unless told otherwise."""
KILL_WAIT_SECONDS = 10.0
"""Bound on waiting for a killed sandbox to be gone (the kernel tears a PID namespace down in milliseconds)."""

_log = logging.getLogger(__name__)


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
    seccomp = seccomp_pipe()
    try:
        cmd = [*sandbox_command(isolation, limits, seccomp), "--info-fd", str(write_end), "--", *runner]
        fds = (write_end,) if seccomp is None else (write_end, seccomp)
        proc = await anyio.open_process(cmd, cwd="/", env={}, start_new_session=True, pass_fds=fds)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
        if seccomp is not None:
            os.close(seccomp)
    return _Run(proc, read_end)


async def run_function_tests(
    files: Mapping[str, str],
    module: str,
    entry: str,
    inputs: Sequence[Sequence[Any]],
    limits: Limits = DEFAULT_LIMITS,
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


def limits_info(limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The limits as a JSON-able dict (for documentation and tool descriptions)."""
    return asdict(limits)
