"""Best-effort sandbox for running untrusted Python functions against test inputs (used by the code server).

Each run writes the workspace files into a fresh temporary directory and starts ``sys.executable -I -S -c RUNNER``
there (isolated mode, no site-packages, no environment variables but ``PATH``), in its own session, through anyio so
the server's event loop never blocks. The runner reads its configuration (function inputs, limits) from stdin before
any untrusted code runs, so the inputs are never on disk and the expected outputs never reach the child: it only
reports what the function returned, and the caller compares.

Limits (see :class:`Limits`):

* ``RLIMIT_CPU`` (CPU seconds; SIGXCPU/SIGKILL), ``RLIMIT_AS`` (address space: allocations fail with MemoryError),
  ``RLIMIT_FSIZE`` (largest file written), ``RLIMIT_NOFILE``, ``RLIMIT_CORE = 0`` and ``RLIMIT_NPROC = 0`` (no new
  processes or threads — not enforced for root, hence the audit hook below);
* a per-test ``SIGALRM`` timer and a wall-clock limit after which the parent SIGKILLs the child's process group;
* output (stdout + stderr + result channel) is read incrementally and capped; past :attr:`Limits.output_bytes` the
  child is killed;
* at most ``2 x CPU count`` runs at once per server (an anyio semaphore); further runs wait.

Network and process isolation without root: before importing the solution, the runner installs a
``sys.addaudithook`` hook (which cannot be removed afterwards) that raises ``PermissionError`` on

* every ``socket.*`` event (creating a socket, connect, bind, getaddrinfo, ...), so no network access;
* ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.spawn*``, ``os.posix_spawn``, ``os.fork``/``forkpty``,
  ``os.kill``/``killpg``, ``ctypes.*``, ``resource.setrlimit``/``prlimit``, ``gc.get_objects``/``get_referrers``
  and imports of ``_posixsubprocess``/``_ctypes``;
* opening a file for writing, or removing/renaming/creating one, outside the temporary directory, and opening for
  reading anything outside the temporary directory and the standard library (so the server's own source, including
  the task generators, cannot be read).

Audit hooks are a best-effort barrier, not a security boundary (CPython documents that determined code can escape
them). For adversarial models, run the whole server in a container or VM with networking disabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

MAX_CONCURRENT_RUNS = 2 * (os.cpu_count() or 1)
"""Sandboxed runs executing at once, per server process and event loop."""


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


def _kill_group(proc: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _write_workspace(root: Path, files: Mapping[str, str]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


async def run_function_tests(
    files: Mapping[str, str],
    module: str,
    entry: str,
    inputs: Sequence[Sequence[Any]],
    limits: Limits = Limits(),
) -> RunResult:
    """Call ``module.entry(*args)`` for every ``args`` in ``inputs`` inside the sandbox; see the module docstring."""
    config = {
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
            "RLIMIT_NPROC": 0,
        },
    }
    result = RunResult()
    async with _run_slots():
        with tempfile.TemporaryDirectory(prefix="mcp-gym-code-", ignore_cleanup_errors=True) as tmp:
            _write_workspace(Path(tmp), files)
            channel, output = _Capture(limits.output_bytes), _Capture(limits.keep_output_chars)
            proc = await anyio.open_process(
                [sys.executable, "-I", "-S", "-c", _RUNNER], cwd=tmp, env={"PATH": os.environ.get("PATH", "")},
                start_new_session=True,
            )
            try:
                result.killed = await _supervise(proc, json.dumps(config).encode(), channel, output, limits)
            finally:
                if proc.returncode is None:
                    _kill_group(proc)
                with anyio.CancelScope(shield=True):
                    await proc.aclose()
    _parse_channel(channel.text(), result)
    code = proc.returncode
    if result.killed is None and code is not None and code < 0:
        result.killed = f"signal {-code}"
    result.output = output.text() + _kill_note(result.killed, limits)
    return result


async def _supervise(proc: Process, config: bytes, channel: _Capture, output: _Capture, limits: Limits) -> str | None:
    """Feed the config, drain both pipes within the limits; return why the child was killed, if it was."""
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
                _kill_group(proc)

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
