"""Shared fixtures: real third-party MCP servers (installed from npm on first use), HTTP servers on ports they hold."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NPM_DIR = Path(os.environ.get("MCP_GYM_NPM_DIR") or ROOT / ".mcp-gym-cache" / "npm")
NPM_SERVERS = {
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/server-memory": "2026.8.31",
    "@modelcontextprotocol/server-filesystem": "2026.8.31",
}


NPM_TOOLS = {"conformance": ("@modelcontextprotocol/conformance", "0.1.16"),
             "mcp-taskmanager": ("@kazuph/mcp-taskmanager", "1.1.1")}
"""npm tools and servers of other authors (executable -> package, version), each installed under its own prefix
``NPM_DIR/<executable>`` so that their dependencies never move the servers' (the conformance suite and the task
manager bring their own ``@modelcontextprotocol/sdk``)."""


NPM_LOCK_WAIT_S = 900.0
"""How long a test waits for another process's npm install (the lock) before it fails naming the lock file."""

COMPLETE_MARKER = ".mcp-gym-complete"
"""File written into an npm prefix only after ``npm install`` finished there; it names the pinned package set. A prefix
without it (an install killed half-way, another package set) is discarded and installed again."""


def npm_bin(name: str) -> str:
    """Path of an npm server's or tool's executable, installing the pinned servers into .mcp-gym-cache/npm (a tool of
    :data:`NPM_TOOLS` into ``.mcp-gym-cache/npm/<name>``) on first use.

    Safe under pytest-xdist and between concurrent runs: one installer at a time (an exclusive ``flock`` on
    ``.mcp-gym-cache/npm.lock``, waited for at most :data:`NPM_LOCK_WAIT_S`), and a prefix counts as installed only
    when its :data:`COMPLETE_MARKER` names exactly the pinned packages."""
    if name in NPM_TOOLS:
        package, version = NPM_TOOLS[name]
        prefix, pkgs = NPM_DIR / name, [f"{package}@{version}"]
    else:
        prefix, pkgs = NPM_DIR, [f"{p}@{v}" for p, v in NPM_SERVERS.items()]
    exe = prefix / "node_modules" / ".bin" / name
    if not _npm_complete(prefix, pkgs):
        with _npm_lock():
            if not _npm_complete(prefix, pkgs):  # another process may have installed it while this one waited
                _npm_install(prefix, pkgs)
    if not exe.exists():
        pytest.fail(f"npm installed {' '.join(pkgs)} into {prefix} but {exe} is missing")
    return str(exe)


def _npm_complete(prefix: Path, pkgs: list[str]) -> bool:
    marker = prefix / COMPLETE_MARKER
    try:
        return marker.read_text() == "\n".join(sorted(pkgs)) + "\n"
    except OSError:
        return False


@contextlib.contextmanager
def _npm_lock() -> Iterator[None]:
    """Hold the exclusive npm-install lock (``<NPM_DIR>.lock``), waiting for it at most :data:`NPM_LOCK_WAIT_S`."""
    lock_path = NPM_DIR.parent / f"{NPM_DIR.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        deadline = time.monotonic() + NPM_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another process held the npm install lock {lock_path} "
                                f"for over {NPM_LOCK_WAIT_S:.0f} s")
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _npm_install(prefix: Path, pkgs: list[str]) -> None:
    """Install ``pkgs`` into ``prefix`` from scratch (the caller holds the lock), then write its completion marker."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed for the third-party server tests (install Node.js >= 18)")
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / COMPLETE_MARKER).unlink(missing_ok=True)
    # Whatever an earlier, unfinished install left (a tool's own prefix below the servers' one stays).
    shutil.rmtree(prefix / "node_modules", ignore_errors=True)
    for leftover in ("package.json", "package-lock.json"):
        (prefix / leftover).unlink(missing_ok=True)
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(prefix), *pkgs],
        check=True,
        timeout=600,
    )
    tmp = prefix / f"{COMPLETE_MARKER}.tmp"
    tmp.write_text("\n".join(sorted(pkgs)) + "\n")
    os.replace(tmp, prefix / COMPLETE_MARKER)


def bound_socket() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1 (the kernel's pick), not listening: its port
    (``getsockname()[1]``) is this socket's while it is open, so no other process or xdist worker can take it.

    Hand it to the server that listens on it (:func:`serve_in_thread`), never close it and bind its port again later
    (in between, anything on the machine may take the port: the server fails "address in use" or the test talks to
    another one). Kept open and never listening, it is a port where nothing listens: a connection is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def serve_in_thread(app: Any, sock: socket.socket | None = None,
                    **config: Any) -> Iterator[tuple[int, asyncio.AbstractEventLoop]]:
    """Serve the ASGI ``app`` with uvicorn (``uvicorn.Config`` options ``config``) in a thread of this process, on
    ``sock`` (default: a new :func:`bound_socket`; uvicorn gets a duplicate, so ``sock`` stays bound to its port
    after the block and another server may listen on it next); yields ``(port, the server's event loop)`` once it
    listens, and stops the server when the block ends."""
    import uvicorn

    own = sock is None
    sock = sock if sock is not None else bound_socket()
    server = uvicorn.Server(uvicorn.Config(app, **{"log_level": "warning", **config}))
    loops: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        loops.append(asyncio.get_running_loop())
        await server.serve(sockets=[sock.dup()])

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert server.started, "the uvicorn server in a thread did not start within 30 s"
        yield int(sock.getsockname()[1]), loops[0]
    finally:
        server.should_exit = True
        thread.join(30)
        if own:
            sock.close()


SERVING = r"://127\.0\.0\.1:(\d+)"
"""What :func:`start_server` finds the port in: the first ``://127.0.0.1:PORT`` a server says on stderr (mcp-gym's
servers say ``serving ... on http://127.0.0.1:PORT/mcp``, the test servers and :data:`NODE_SAYS_PORT` alike)."""

NODE_SAYS_PORT = Path(__file__).parent / "servers" / "say_port.cjs"
"""A Node module that, preloaded (``NODE_OPTIONS=--require ...``) into a Node server given port 0, says the port each
of its TCP servers got once it listens (a third-party server names only the port it was given: 0)."""


def start_everything_http() -> tuple[subprocess.Popen[bytes], int]:
    """The Node server-everything over Streamable HTTP (``/mcp``) on a port of its own: ``(process, port)``."""
    node_options = f'{os.environ.get("NODE_OPTIONS", "")} --require "{NODE_SAYS_PORT}"'.strip()
    return start_server([npm_bin("mcp-server-everything"), "streamableHttp"],
                        env={**os.environ, "PORT": "0", "NODE_OPTIONS": node_options})


def start_server(cmd: list[str], env: dict[str, str] | None = None,
                 timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start a server process told to listen on port 0 (any free port: the kernel's pick is the server's socket's
    at once, so nothing else can take it); return ``(process, port)`` once it has said its port on stderr
    (:data:`SERVING`) and accepts connections there, within ``timeout`` seconds, else stop it and fail with what it
    said. Its stderr goes to an unnamed temporary file (a pipe nobody reads would fill and block the server)."""
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=said)
        deadline = time.monotonic() + timeout
        while (found := re.search(SERVING.encode(), os.pread(said.fileno(), 1 << 16, 0))) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                text = os.pread(said.fileno(), 1 << 16, 0).decode(errors="replace").strip()
                pytest.fail(f"{' '.join(cmd)} said no port within {timeout:g} s (exit status {proc.returncode}): "
                            f"{text[-2000:] or 'nothing on stderr'}")
            time.sleep(0.05)
    port = int(found.group(1))
    wait_for_port(port, timeout=max(deadline - time.monotonic(), 5.0), proc=proc)
    return proc, port


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:port (a port a server of the test holds: see
    :func:`start_server`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


def child_env(**extra: str) -> dict[str, str]:
    """Environment for server subprocesses: this interpreter's path plus extras."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.update(extra)
    return env


def start_http_server(
    module: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m module --transport http --port 0`` and return (process, url) (:func:`start_server`)."""
    proc, port = start_server([sys.executable, "-m", module, "--transport", "http", "--port", "0", *args],
                              env={**os.environ, **(env or {})})
    return proc, f"http://127.0.0.1:{port}/mcp"


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server subprocess, killing it if it does not exit within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


PEAK_MB = "int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) // 1024"
"""A Python expression: the peak memory in MB of the process that evaluates it (Linux's ``VmHWM``). Not
``ru_maxrss``: a child started by ``subprocess`` (vfork, then exec) keeps the peak of the pytest worker that started
it, so a 14 MB child of a worker that had reached 850 MB read 850 (a fresh-clone CI run)."""


@contextlib.contextmanager
def no_automatic_gc() -> Iterator[None]:
    """No automatic garbage collection in the block: the one SIGINT a Ctrl-C test sends is then never taken by a gc
    callback. Python runs a signal's handler in whatever Python code the main thread runs next, a ``gc.callbacks``
    function too (hypothesis registers one), and drops what a gc callback raises ("Exception ignored in ...
    gc_callback": KeyboardInterrupt): the job never saw its Ctrl-C and waited until the 300 s timeout (a fast-lane
    run at load 12-17)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.fixture
def automatic_gc_off() -> Iterator[None]:
    """:func:`no_automatic_gc` for the whole test (a test that sends this process one SIGINT)."""
    with no_automatic_gc():
        yield


@pytest.fixture
def http_counter() -> Iterator[str]:
    """URL of the Counter server (with diagnostic tools) over Streamable HTTP on 127.0.0.1."""
    proc, url = start_http_server("mcp_gym.servers.counter", "--diagnostics")
    try:
        yield url
    finally:
        stop_process(proc)


@pytest.fixture(autouse=True, scope="module")
def fresh_default_runtime() -> Iterator[None]:
    """Each test module starts with a new default runtime, in driven mode as users get it (a test that uses the env
    from another event loop switches the runtime to threaded mode; without this every later module would run so)."""
    yield
    from mcp_gym.client import runtime

    rt = runtime._default
    if rt is not None and not rt.closed:
        rt.close(timeout=10)


KEPT_LOGGERS = ("", "mcp_gym", "mcp_gym.client", "mcp", "httpx", "httpx2", "httpcore", "matplotlib", "hydra",
                "mcp_gym._stateful", "mcp_gym.jobs.collect", "mcp_gym.jobs.config")
"""The loggers whose set-up a test may change (root: ``""``): an in-process CLI job's Hydra ``dictConfig`` (a handler on
the ``sys.stderr`` pytest captured then, ``mcp_gym.client`` not propagating), a test raising an HTTP logger to INFO."""


def _is_pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")  # caplog's and the logging plugin's, per phase: theirs


@contextlib.contextmanager
def logging_kept(names: Iterable[str] = KEPT_LOGGERS) -> Iterator[None]:
    """Put the loggers ``names`` back as they were on exit: handlers (those added meanwhile removed, but pytest's own,
    which it adds and removes per test phase), level, ``propagate`` and ``disabled``."""
    loggers = [logging.getLogger(n or None) for n in names]
    before = [(lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in loggers]
    try:
        yield
    finally:
        for lg, handlers, level, propagate, disabled in before:
            for h in list(lg.handlers):
                if h not in handlers and not _is_pytests(h):
                    lg.removeHandler(h)
            for h in handlers:  # pytest's too: a job's dictConfig takes the root's (caplog's) away
                if h not in lg.handlers:
                    lg.addHandler(h)
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Each test leaves logging as it found it, so no test sees another's set-up (a CLI job run in-process earlier in
    the same worker left ``mcp_gym.client`` not propagating, and ``caplog`` saw none of its records)."""
    with logging_kept():
        yield


@pytest.fixture(autouse=True, scope="module")
def _logging_as_it_was_per_module() -> Iterator[None]:
    """Each test module leaves logging as it found it: a module-scoped fixture that runs a CLI job in-process
    (``test_reports``' ``graded_run``, ``test_viewer``'s ``runs``) sets logging up before the per-test fixture above
    looks, so that one keeps the job's set-up; without this a later module in the same worker kept it too."""
    with logging_kept():
        yield


CI_FULL_ENV = "MCP_GYM_CI_FULL"
"""Set to ``1`` by ``.ci/run`` once it has installed every extra and system tool: from then on a test that would skip
for a missing one fails instead (the README's test command, run first, skips them as on a user's machine)."""


COUNTER_EVAL = ["env=counter", "env.transport=inprocess", "launcher.progress=false", "plots=false",
                "env.max_steps=4", "launcher.num_envs=1"]
"""A small in-process ``eval`` on the bundled Counter: its options (:func:`counter_eval_run`)."""


def counter_eval_run(out: Path, samples: int = 1) -> Path:
    """A real run directory at ``out``: the oracle's ``eval`` on the bundled Counter, in this process."""
    from mcp_gym.cli import main

    assert main(["eval", *COUNTER_EVAL, "policy=oracle", f"samples={samples}", f"out={out}"]) == 0
    return out


def installed(var: str, exe: str, how: str) -> tuple[str | None, pytest.MarkDecorator]:
    """A server the user installs by hand (``$var``, else ``exe`` on PATH), and the mark that skips a test without it,
    saying ``how`` to install it (``pip install mcp-text-editor 'mcp<2'`` in a venv of its own)."""
    path = os.environ.get(var) or shutil.which(exe)
    return path, pytest.mark.skipif(path is None, reason=f"needs {exe}: {how}, then {var}=PATH/TO/{exe}")


def skip_unless_ci_full(reason: str) -> None:
    """Skip with ``reason``, or fail with it where everything is meant to be installed (:data:`CI_FULL_ENV`)."""
    if os.environ.get(CI_FULL_ENV) == "1":
        pytest.fail(f"{reason} ({CI_FULL_ENV}=1: .ci/run installed everything, so nothing may be missing)")
    pytest.skip(reason)


@functools.cache
def os_sandbox_missing() -> str | None:
    """Why the Code env's server refuses to start here (no usable bubblewrap), or ``None`` when it can."""
    from mcp_gym.servers._bwrap import SandboxUnavailable, detect_isolation

    try:
        detect_isolation()
    except SandboxUnavailable as e:
        return str(e).split(". ", 1)[0]
    return None


def with_code_marked(names: Iterable[str]) -> list[Any]:
    """Parameters for a test over bundled envs: ``Code`` (agent code in bubblewrap) carries the ``bwrap`` mark."""
    return [pytest.param(n, marks=pytest.mark.bwrap) if n == "Code" else n for n in names]


def pytest_configure(config: pytest.Config) -> None:
    """Python's Ctrl-C handler, also where the suite was started with SIGINT ignored (in the background of a
    non-interactive shell, ``cmd &``, or under ``nohup``): the Ctrl-C tests send SIGINT to this process and to jobs it
    starts, which then inherit the default action (a handled signal is reset at ``exec``) and get their own handler."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``bwrap`` (it starts the Code env's server) skips where bubblewrap cannot sandbox (the server
    refuses to start there), except under :data:`CI_FULL_ENV`."""
    if item.get_closest_marker("bwrap") is not None and (why := os_sandbox_missing()) is not None:
        skip_unless_ci_full(f"needs the Code env's OS sandbox: {why} (apt-get install bubblewrap)")


MISSING_SAYS = ("could not import", "needs the [", "needs verifiers", "not installed", "is missing")
"""What a skip's reason says when an extra or a tool is missing (``pytest.importorskip`` says "could not import")."""


def _missing_made_a_failure(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Under :data:`CI_FULL_ENV`, a skip for a missing extra or tool is a failure (everything is installed there)."""
    if os.environ.get(CI_FULL_ENV) != "1" or not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    if any(s in reason for s in MISSING_SAYS):
        report.outcome = "failed"
        report.longrepr = f"{reason} ({CI_FULL_ENV}=1: .ci/run installed everything, so nothing may be missing)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _missing_made_a_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _missing_made_a_failure(outcome.get_result())


class _Records(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def client_log() -> Iterator[list[logging.LogRecord]]:
    """The WARNING (and worse) records of the ``mcp_gym.client`` logger during the test, each once: a handler on that
    logger itself, so neither whether it propagates (an in-process CLI job earlier in the session leaves Hydra's
    ``propagate: false``) nor where pytest's ``caplog`` attaches its handlers (root, and non-propagating loggers since
    pytest 9: a record counted twice once the test set ``propagate`` back) changes what is seen."""
    logger = logging.getLogger("mcp_gym.client")
    records: list[logging.LogRecord] = []
    handler, level = _Records(records), logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
