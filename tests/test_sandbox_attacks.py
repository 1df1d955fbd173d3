"""Attacks on the Code server's sandbox, through the real server (in-process and stdio).

Every attack program first disables the in-process audit hook (it replaces the hook function's ``__code__``) and proves
it did (``os.chdir``, which the hook forbids, then succeeds), so what stops the attack is the OS sandbox alone. Each
test asserts what is observable outside: files on the host, a listener on 127.0.0.1, host processes, the server's life.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import gymnasium
import pytest
from mcp import Client
from test_server_notes import call, stdio_params

import mcp_gym
import mcp_gym.servers.code as code_server
from mcp_gym.envs.code import tasks as env
from mcp_gym.servers._sandbox import (
    SANDBOX_ENV,
    SANDBOX_UID_ENV,
    Limits,
    SandboxUnavailable,
    bwrap_args,
    detect_isolation,
    run_function_tests,
)
from mcp_gym.servers.code import server

pytestmark = [pytest.mark.anyio, pytest.mark.bwrap]
REPO = Path(__file__).resolve().parents[1]
TASK = env.generate_tasks(0)[0]  # sum_above with K = -3
DISABLE_HOOK = """
import __main__, os, sys
__main__._hook.__code__ = (lambda *args, **kwargs: None).__code__
os.chdir(".")  # refused by the audit hook: succeeding proves the hook is gone
print("HOOK-DISABLED")


def attempt(name, fn):
    try:
        print("DONE", name, repr(fn())[:200])
    except BaseException as e:
        print("DENIED", name, type(e).__name__, e)
"""
SOLUTION = "\n\ndef sum_above(xs):\n    return sum(x for x in xs if x > -3)\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def os_sandbox() -> None:
    """These attacks (``kill(-1, 9)`` as root!) must never run without the OS sandbox."""
    assert os.environ.get(SANDBOX_ENV, "auto") != "unsafe"
    assert detect_isolation().mechanism == "bwrap"


@pytest.fixture(params=["inprocess", pytest.param("stdio", marks=pytest.mark.slow)])  # the same bwrap run either way
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def code_client(transport: str) -> AsyncIterator[Client]:
    target = server.mcp if transport == "inprocess" else stdio_params("code")
    async with Client(target, cache=None) as client:
        yield client


async def attack(client: Client, ep: str, program: str) -> dict[str, Any]:
    """Run ``program`` (after the hook-disabling prelude, at import) with a correct solution; return the report."""
    await call(client, ep, "mcp_gym_reset", {"task_id": TASK.id})
    res = await call(client, ep, "write_file", {"path": env.SOLUTION_FILE, "content": DISABLE_HOOK + program
                                                + SOLUTION})
    assert not res.is_error, res.content
    res = await call(client, ep, "run_tests")
    assert not res.is_error, res.content
    report = res.structured_content
    assert "HOOK-DISABLED" in report["output"], report["output"]
    return report


def outcomes(output: str) -> dict[str, str]:
    """``{attempt name: "DONE"/"DENIED"}`` from the attack's output."""
    found = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("DONE", "DENIED"):
            found[rest.split(" ", 1)[0]] = word
    return found


def host_processes_with(marker: str) -> list[int]:
    """Pids of host processes whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


# -- files -------------------------------------------------------------------------------------------------------
async def test_no_write_outside_the_sandbox(transport: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("original")
    created = tmp_path / "created-by-agent"
    stdlib_victim = Path(sysconfig.get_paths()["stdlib"]) / f"pwned-{uuid.uuid4().hex}.py"
    program = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)

def c_write(path, flags):
    fd = libc.open(path.encode(), flags, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return libc.write(fd, b"pwned", 5)

def at_root(path, flags):
    root = os.open("/", os.O_RDONLY)
    return os.write(os.open(path.lstrip("/"), flags, 0o644, dir_fd=root), b"pwned")

attempt("ctypes_overwrite", lambda: c_write({str(sentinel)!r}, os.O_WRONLY | os.O_TRUNC))
attempt("ctypes_create", lambda: c_write({str(created)!r}, os.O_WRONLY | os.O_CREAT))
attempt("ctypes_stdlib", lambda: c_write({str(stdlib_victim)!r}, os.O_WRONLY | os.O_CREAT))
attempt("dirfd_overwrite", lambda: at_root({str(sentinel)!r}, os.O_WRONLY | os.O_TRUNC))
attempt("dirfd_create", lambda: at_root({str(created)!r}, os.O_WRONLY | os.O_CREAT))
attempt("dirfd_stdlib", lambda: at_root({str(stdlib_victim)!r}, os.O_WRONLY | os.O_CREAT))
attempt("open_overwrite", lambda: open({str(sentinel)!r}, "w").write("pwned"))
attempt("workspace", lambda: open("scratch.txt", "w").write("fine"))
"""
    try:
        async with code_client(transport) as client:
            report = await attack(client, "writes", program)
        assert outcomes(report["output"]) == {
            "ctypes_overwrite": "DENIED", "ctypes_create": "DENIED", "ctypes_stdlib": "DENIED",
            "dirfd_overwrite": "DENIED", "dirfd_create": "DENIED", "dirfd_stdlib": "DENIED",
            "open_overwrite": "DENIED", "workspace": "DONE",
        }, report["output"]
        assert report["passed"] == 10
        assert sentinel.read_text() == "original" and not created.exists() and not stdlib_victim.exists()
    finally:
        stdlib_victim.unlink(missing_ok=True)


async def test_secrets_are_unreadable(transport: str) -> None:
    assert Path(env.__file__).parts[-3:] == ("envs", "code", "tasks.py")
    secrets = {
        "generator": env.__file__,  # the task generator: references and hidden tests
        "server": code_server.__file__,
        "readme": str(REPO / "README.md"),
        "shadow": "/etc/shadow",
        "passwd": "/etc/passwd",
        "site_packages": gymnasium.__file__,  # third-party code (and mcp_gym itself when installed)
        "package": mcp_gym.__file__,
        "server_environ": f"/proc/{os.getpid()}/environ",
    }
    program = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\n"
    program += "def c_read(path):\n    fd = libc.open(path.encode(), 0)\n    if fd < 0:\n        raise OSError('no')\n"
    program += "    buf = ctypes.create_string_buffer(64)\n    return libc.read(fd, buf, 64), buf.raw\n\n"
    for name, path in secrets.items():
        program += f"attempt({name!r}, lambda: open({path!r}, 'rb').read(64))\n"
        program += f"attempt('ctypes_{name}', lambda: c_read({path!r}))\n"
    program += "attempt('stdlib', lambda: open(os.__file__, 'rb').read(16))\n"  # what it needs stays readable
    async with code_client(transport) as client:
        report = await attack(client, "reads", program)
    expected = {name: "DENIED" for name in secrets} | {f"ctypes_{name}": "DENIED" for name in secrets}
    assert outcomes(report["output"]) == expected | {"stdlib": "DONE"}, report["output"]
    assert report["passed"] == 10


@pytest.mark.skipif(os.geteuid() != 0, reason="creates folders under /usr, /usr/local and /opt")
async def test_only_allowlisted_host_paths_are_visible(transport: str) -> None:
    """Issue 36: the sandbox exposes an allowlist (shared libraries, the interpreter and its standard library), not
    "everything but a denylist": a folder of any other software (as an SDK's bundled site-packages under /usr/lib
    was) is not there, wherever it sits, and the sandboxed code still runs."""
    made = [Path(d) / "mcp-gym-secret-test" for d in ("/usr/lib", "/usr/share", "/usr/local", "/opt", "/usr/bin")]
    secrets = {}
    try:
        for i, folder in enumerate(made):
            folder.mkdir(exist_ok=True)
            (folder / "secret.txt").write_text("host secret")
            secrets[f"secret{i}"] = str(folder / "secret.txt")
        gcloud = glob.glob("/usr/lib/google-cloud-sdk/platform/bundledpythonunix/lib/python3*/site-packages/*")
        if gcloud:
            secrets["gcloud"] = sorted(gcloud)[0]
        program = "".join(f"attempt({n!r}, lambda: os.stat({p!r}))\n" for n, p in secrets.items())
        program += "attempt('stdlib', lambda: __import__('json').dumps([1]) and __import__('_ctypes'))\n"
        async with code_client(transport) as client:
            report = await attack(client, "allowlist", program)
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
    expected = {name: "DENIED" for name in secrets} | {"stdlib": "DONE"}
    assert outcomes(report["output"]) == expected, report["output"]
    assert report["passed"] == 10  # the solution runs and passes its tests


def test_package_is_hidden_where_its_parent_is_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if mcp_gym lay inside the mounted standard library (a non-editable install into it): the checkout is
    mounted, but the package (with every ``envs/<env>/tasks.py``) and the site-packages in it are empty."""
    from mcp_gym.servers import _bwrap

    real = _bwrap._python_files()
    monkeypatch.setattr(_bwrap, "_python_files", lambda: [*real, str(REPO)])
    isolation = detect_isolation()
    assert isolation.bwrap is not None
    program = "import os\nfor p in map(os.fsdecode, os.sys.argv[1:]):\n    try:\n        open(p, 'rb').read(1)\n"
    program += "        print('DONE', p)\n    except OSError as e:\n        print('DENIED', p, e)\n"
    from mcp_gym.envs.sql import tasks as sql_tasks

    hidden = [env.__file__, sql_tasks.__file__, mcp_gym.__file__, gymnasium.__file__]
    cmd = [*bwrap_args(isolation.bwrap, Limits()), "--", os.path.realpath(sys.executable), "-I", "-S", "-c", program,
           str(REPO / "README.md"), *hidden]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd="/", env={})
    assert done.returncode == 0, done.stderr
    found = {line.split(" ", 2)[1]: line.split(" ", 1)[0] for line in done.stdout.splitlines()}
    assert found == {str(REPO / "README.md"): "DONE"} | {p: "DENIED" for p in hidden}, done.stdout


# -- processes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ending", ["normal", "killed"])
async def test_detached_processes_do_not_outlive_the_run(ending: str) -> None:
    """With processes allowed (the server allows none, see below), detached ones still die with the run."""
    marker = f"mcp-gym-detached-{uuid.uuid4().hex}"
    program = f"""
import subprocess
sleeper = [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}]
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("SPAWNED", subprocess.Popen(sleeper, start_new_session=True, **quiet).pid, flush=True)
child = os.fork()
if child == 0:  # double fork: the grandchild has its own session and no living parent
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv(sys.executable, sleeper)
    os._exit(0)
os.waitpid(child, 0)
print("FORKED", flush=True)
"""
    if ending == "killed":  # the sandbox is killed for its output while the detached processes run
        program += "while True:\n    print('x' * 10000)\n"
    limits = Limits(processes=16)
    try:
        run = await run_function_tests({"solution.py": DISABLE_HOOK + program + SOLUTION}, "solution", "sum_above",
                                       [[[1, -5]]], limits)
        assert "SPAWNED" in run.output and "FORKED" in run.output, run.output
        if ending == "killed":
            assert run.killed == "output" and run.values == {}
        else:
            assert run.killed is None and run.values == {0: "1"}, run
        assert host_processes_with(marker) == []  # gone when the run returned
    finally:
        for pid in host_processes_with(marker):  # only if the sandbox failed: never leave them behind
            os.kill(pid, signal.SIGKILL)


async def test_no_new_processes_or_threads(transport: str) -> None:
    """No fork, clone, exec'd child or thread, however started (RLIMIT_NPROC holds: the host uid is not root)."""
    program = """
import ctypes, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)

def c_call(fn, *args):
    pid = fn(*args)
    if pid == 0:
        libc._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return pid

def forks(n):
    for _ in range(n):
        if os.fork() == 0:
            os._exit(0)
    return n

attempt("fork", lambda: forks(1))
attempt("fork_many", lambda: forks(50))
attempt("subprocess", lambda: subprocess.run(["/usr/bin/true"]).returncode)
attempt("posix_spawn", lambda: os.posix_spawn("/usr/bin/true", ["true"], {}))
attempt("thread", lambda: threading.Thread(target=lambda: None).start())
attempt("ctypes_fork", lambda: c_call(libc.fork))
attempt("ctypes_clone", lambda: c_call(libc.syscall, 56 if os.uname().machine == "x86_64" else 220, 17, 0, 0, 0, 0))
"""
    async with code_client(transport) as client:
        report = await attack(client, "procs", program)
    names = ("fork", "fork_many", "subprocess", "posix_spawn", "thread", "ctypes_fork", "ctypes_clone")
    assert outcomes(report["output"]) == dict.fromkeys(names, "DENIED"), report["output"]
    assert report["passed"] == 10


async def test_memory_of_the_whole_run_is_bounded(transport: str) -> None:
    """The run is one process (no children to multiply it), whose allocations fail at the memory limit, and it
    cannot hold memory outside its address space (System V shared memory or message queues, memfd)."""
    program = """
import signal
signal.setitimer(signal.ITIMER_REAL, 0)  # no per-test timer: only the memory limit (and the wall clock) stops it

def hog():
    held = []
    try:
        while True:
            held.append(bytearray(16 * 2**20))
    except MemoryError:
        return len(held) * 16

def children():
    for _ in range(4):
        if os.fork() == 0:
            hold = bytearray(200 * 2**20)
            os._exit(0)
    return 4

def sysv_shm():  # attached, filled and detached: no longer in the address space, still in memory
    for _ in range(12):
        sid = libc.shmget(0, 64 * 2**20, 0o1600)  # IPC_CREAT | 0600
        if sid < 0:
            raise OSError(ctypes.get_errno(), "shmget")
        addr = libc.shmat(sid, None, 0)
        ctypes.memset(addr, 1, 64 * 2**20)
        libc.shmdt(ctypes.c_void_p(addr))
    return 12 * 64

def c_check(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result

import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
print("ALLOCATED", hog())
attempt("children", children)
attempt("sysv_shm", sysv_shm)
attempt("msgget", lambda: c_check(libc.msgget(0, 0o1600)))
attempt("memfd", lambda: os.memfd_create("hold"))
attempt("ctypes_memfd", lambda: c_check(libc.memfd_create(b"hold", 0)))
"""
    async with code_client(transport) as client:
        report = await attack(client, "memory", program)
    allocated = [int(line.split()[1]) for line in report["output"].splitlines() if line.startswith("ALLOCATED ")]
    assert allocated and 0 < allocated[0] * 2**20 <= Limits().memory_bytes, report["output"]
    refused = ("children", "sysv_shm", "msgget", "memfd", "ctypes_memfd")
    assert outcomes(report["output"]) == dict.fromkeys(refused, "DENIED"), report["output"]
    assert report["passed"] == 10


async def test_dev_and_shm_are_read_only_or_capped(transport: str) -> None:
    """``/dev`` is read-only, ``/dev/shm`` and the workspace are tmpfs of a fixed size (memory they could hold)."""
    program = """
def fill(folder, most=64):
    written = 0
    try:
        for i in range(most):  # 1 MB files (RLIMIT_FSIZE caps one file, not their sum)
            with open(os.path.join(folder, "fill-%d" % i), "wb") as f:
                f.write(b"x" * 2**20)
            written += 1
    except OSError as e:
        print("FILLED", folder, written, e.errno)
        return
    print("FILLED", folder, written, 0)

attempt("dev", lambda: open("/dev/new-file", "wb").write(b"x"))
attempt("shm_small", lambda: open("/dev/shm/small", "wb").write(b"x"))
fill("/dev/shm")
fill(".")
"""
    async with code_client(transport) as client:
        report = await attack(client, "dev", program)
    assert outcomes(report["output"]) == {"dev": "DENIED", "shm_small": "DONE"}, report["output"]
    filled = {parts[1]: int(parts[2]) for parts in map(str.split, report["output"].splitlines())
              if parts[:1] == ["FILLED"]}
    assert filled.keys() == {"/dev/shm", "."}, report["output"]
    assert filled["/dev/shm"] * 2**20 <= Limits().shm_bytes and filled["."] * 2**20 <= Limits().workspace_bytes


# -- the host kernel -----------------------------------------------------------------------------------------------
async def test_sysctls_are_read_only_and_agent_code_is_not_host_root(transport: str) -> None:
    """Sysctls are checked against the HOST uid, not capabilities: as host root, sandboxed code could set
    ``kernel.core_pattern`` to a pipe and have the kernel run a command as root. The write is refused, and the
    sandboxed process, seen from the host, is not uid 0 (even when the server runs as root)."""
    comm = f"mcpgym{uuid.uuid4().hex[:9]}"  # its name in the host's /proc while it waits for SIGUSR1
    program = f"""
import ctypes, signal
signal.setitimer(signal.ITIMER_REAL, 0)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
ctypes.CDLL(None).prctl(15, {comm.encode()!r}, 0, 0, 0)  # PR_SET_NAME
attempt("hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("pwned"))  # harmless: its own UTS ns
attempt("core_pattern", lambda: os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))  # never written
attempt("drop_caches", lambda: os.close(os.open("/proc/sys/vm/drop_caches", os.O_WRONLY)))
sys.stdout.flush()
print("WOKEN", signal.sigtimedwait([signal.SIGUSR1], 8) is not None)
"""
    original = Path("/proc/sys/kernel/core_pattern").read_text()
    uids: list[str] = []

    async def watch() -> None:
        while True:
            for entry in os.listdir("/proc"):
                with contextlib.suppress(OSError):
                    if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                        status = Path(f"/proc/{entry}/status").read_text()
                        uids.extend(line for line in status.splitlines() if line.startswith(("Uid:", "Gid:")))
                        os.kill(int(entry), signal.SIGUSR1)
                        return
            await anyio.sleep(0.02)

    async with code_client(transport) as client, anyio.create_task_group() as tg:
        tg.start_soon(watch)
        report = await attack(client, "sysctl", program)
        tg.cancel_scope.cancel()
    assert Path("/proc/sys/kernel/core_pattern").read_text() == original
    assert outcomes(report["output"]) == dict.fromkeys(("hostname", "core_pattern", "drop_caches"), "DENIED"), \
        report["output"]
    assert "WOKEN True" in report["output"] and len(uids) == 2, (uids, report["output"])
    host_ids = {int(v) for line in uids for v in line.split()[1:]}  # real, effective, saved, fs uid and gid
    assert 0 not in host_ids and (os.geteuid() != 0 or host_ids == {65534}), uids


async def test_only_the_standard_library_is_visible(transport: str) -> None:
    """Every site-packages and dist-packages on the host (this venv's, the base interpreter's, the system Pythons')
    is empty inside; the standard library is there."""
    folders = {os.path.realpath(p) for p in glob.glob("/usr/lib*/python*/*-packages")
               + glob.glob("/usr/local/lib*/python*/*-packages")
               + glob.glob(os.path.join(sys.base_prefix, "lib*/python*/*-packages"))
               + [p for p in sys.path if p.endswith("-packages")]}
    folders = {p for p in folders if os.path.isdir(p) and os.listdir(p)}
    assert Path(sys.base_prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                "site-packages").resolve() in {Path(p) for p in folders}
    program = "def listing(path):\n    try:\n        return os.listdir(path)\n    except OSError:\n"
    program += "        return []\n\n"
    for i, folder in enumerate(sorted(folders)):
        program += f"attempt('packages{i}', lambda: listing({folder!r}) or 1 / 0)\n"
    program += "attempt('stdlib', lambda: 'json' in os.listdir(os.path.dirname(os.__file__)) or 1 / 0)\n"
    async with code_client(transport) as client:
        report = await attack(client, "packages", program)
    expected = {f"packages{i}": "DENIED" for i in range(len(folders))} | {"stdlib": "DONE"}
    assert outcomes(report["output"]) == expected, (sorted(folders), report["output"])
    assert report["passed"] == 10


async def test_signals_cannot_reach_the_server(transport: str) -> None:
    program = """
import ctypes, signal
libc = ctypes.CDLL(None, use_errno=True)
print("PARENT", os.getppid())
attempt("kill_parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("ctypes_kill_parent", lambda: libc.kill(os.getppid(), signal.SIGKILL))
attempt("kill_everything", lambda: os.kill(-1, signal.SIGKILL))
"""
    async with code_client(transport) as client:
        report = await attack(client, "signals", program)
        assert report["passed"] == 10  # the runner survived too
        assert f"PARENT {os.getpid()}\n" not in report["output"]  # the server is not even visible as its parent
        follow_up = await call(client, "signals", "list_files")  # the server (this process, or stdio) is alive
        assert not follow_up.is_error


# -- network -----------------------------------------------------------------------------------------------------
async def test_no_connection_to_localhost(transport: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # a connection would wait in its backlog
    datagrams = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    datagrams.bind(("127.0.0.1", 0))
    port, udp_port = listener.getsockname()[1], datagrams.getsockname()[1]
    program = f"""
import socket
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"x"))
attempt("dns", lambda: socket.getaddrinfo("pypi.org", 443))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.sendto(b"x", ("127.0.0.1", {udp_port}))  # accepted by the sandbox's own loopback, never reaches the host's
"""
    try:
        async with code_client(transport) as client:
            report = await attack(client, "net", program)
        assert outcomes(report["output"]) == {"tcp": "DENIED", "dns": "DENIED"}, report["output"]
        assert report["passed"] == 10
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
        datagrams.setblocking(False)
        with pytest.raises(BlockingIOError):
            datagrams.recvfrom(16)  # nothing arrived
    finally:
        listener.close()
        datagrams.close()


# -- a server that is not root ----------------------------------------------------------------------------------
NON_ROOT_SERVER = """
import anyio, os
from mcp_gym.servers._sandbox import detect_isolation, run_function_tests
assert os.geteuid() == 65534 and detect_isolation().host_uid is None  # no uid to drop to: its own is not root
code = PROGRAM + "\\n\\ndef f(x):\\n    return x + 1\\n"
print(anyio.run(run_function_tests, {"s.py": code}, "s", "f", [[1]]).output)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user, every other test here already runs the non-root server")
def test_a_non_root_server_sandboxes_too() -> None:
    """The same sandbox when the server runs as an ordinary user (here 65534, from root, with the interpreter's
    home made traversable for it): it starts, runs code, and the attacks fail the same way."""
    if any(not os.stat(p).st_mode & 0o001 for p in [*REPO.parents, REPO] if not str(p).startswith("/root")):
        pytest.skip(f"{REPO} is not reachable for another uid")
    program = DISABLE_HOOK + """
import ctypes
attempt("core_pattern", lambda: os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))
attempt("fork", lambda: os.fork() or 1)
attempt("memfd", lambda: os.memfd_create("hold"))
attempt("dev", lambda: open("/dev/new-file", "wb").write(b"x"))
"""
    script = NON_ROOT_SERVER.replace("PROGRAM", repr(program))
    prefix = os.path.realpath(sys.base_prefix)
    home = ["--tmpfs", "/root"] if prefix.startswith("/root/") else []  # 0700: the interpreter is bound back
    for parent in [str(p) for p in reversed(Path(prefix).parents) if str(p).startswith("/root/")]:
        home += ["--perms", "0755", "--dir", parent]
    cmd = ["bwrap", "--dev-bind", "/", "/", *home, "--ro-bind", prefix, prefix, "--", "setpriv", "--reuid", "65534",
           "--regid", "65534", "--clear-groups", "--", sys.executable, "-c", script]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd="/",
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "HOOK-DISABLED" in done.stdout, done.stdout
    assert outcomes(done.stdout) == dict.fromkeys(("core_pattern", "fork", "memfd", "dev"), "DENIED"), done.stdout


# -- no sandbox, no start ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_server_refuses_to_start_without_an_os_sandbox(tmp_path: Path) -> None:
    failing = tmp_path / "bwrap"  # a bubblewrap that cannot create namespaces (as with user namespaces disabled)
    failing.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    failing.chmod(0o755)
    (tmp_path / "setpriv").symlink_to(shutil.which("setpriv") or "/usr/bin/setpriv")
    cases = [(str(tmp_path / "empty"), "bubblewrap (bwrap) is not installed"),
             (str(tmp_path), "No permissions to create new namespace")]
    if os.geteuid() == 0:  # as root: no way to drop to an unprivileged uid, or one that does not drop
        (tmp_path / "no-setpriv").mkdir()
        (tmp_path / "no-setpriv" / "bwrap").symlink_to(shutil.which("bwrap") or "/usr/bin/bwrap")
        (tmp_path / "fake").mkdir()
        (tmp_path / "fake" / "bwrap").symlink_to(shutil.which("bwrap") or "/usr/bin/bwrap")
        fake = tmp_path / "fake" / "setpriv"  # skips its options and runs the command as root
        fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
        fake.chmod(0o755)
        cases += [(str(tmp_path / "no-setpriv"), "the server runs as root and setpriv (util-linux) is not installed"),
                  (str(tmp_path / "fake"), "the sandbox is not safe here (agent code would run as host uid 0")]
    cmd = [sys.executable, "-m", "mcp_gym.servers.code"]
    base = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for path, reason in cases:
        done = subprocess.run(cmd, env={**base, "PATH": path}, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert "refuses to run agent code without an OS sandbox" in lines[0] and reason in lines[0]
        assert f"{SANDBOX_ENV}=unsafe" in lines[0]
    opted_in = subprocess.run(cmd, env={**base, "PATH": str(tmp_path / "empty"), SANDBOX_ENV: "unsafe"},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert opted_in.returncode == 0 and "WITHOUT an OS sandbox" in opted_in.stderr  # served until stdin closed


@pytest.mark.skipif(os.geteuid() != 0, reason="the setting is read only when the server runs as root")
@pytest.mark.parametrize(("setting", "accepted"), [("0", False), ("root", False), ("-1", False), ("1234", True)])
def test_the_sandbox_uid_setting(monkeypatch: pytest.MonkeyPatch, setting: str, accepted: bool) -> None:
    monkeypatch.setenv(SANDBOX_UID_ENV, setting)
    if accepted:
        assert detect_isolation().host_uid == int(setting)
    else:
        with pytest.raises(SandboxUnavailable, match=f"{SANDBOX_UID_ENV}='{setting}' is not an unprivileged uid"):
            detect_isolation()


async def test_in_process_server_refuses_without_an_os_sandbox(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap there
    with pytest.raises(Exception, match="refuses to run agent code without an OS sandbox"):
        async with Client(server.mcp, cache=None):
            pass
    env_ = gymnasium.make("mcp_gym/Code-v0")
    try:
        _, info = env_.reset(seed=0)
        status = info["servers"]["code"]
        assert status["status"] == "failed" and "bubblewrap (bwrap) is not installed" in status["error"]
    finally:
        env_.close()
