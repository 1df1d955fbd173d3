"""Attacks on the Code server's sandbox, through the real server (in-process and stdio).

Every attack program first disables the in-process audit hook (it replaces the hook function's ``__code__``) and proves
it did (``os.chdir``, which the hook forbids, then succeeds), so what stops the attack is the OS sandbox alone. Each
test asserts what is observable outside: files on the host, a listener on 127.0.0.1, host processes, the server's life.
"""

from __future__ import annotations

import os
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

import gymnasium
import pytest
from mcp import Client
from test_server_notes import call, stdio_params

import mcp_gym
import mcp_gym.envs.code.server as code_server
from mcp_gym.envs.code import tasks as env
from mcp_gym.envs.code._sandbox import SANDBOX_ENV, Limits, bwrap_args, detect_isolation
from mcp_gym.envs.code.server import server

pytestmark = pytest.mark.anyio
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


@pytest.fixture(params=["inprocess", "stdio"])
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
    assert Path(env.__file__).parts[-4:] == ("mcp_gym", "envs", "code", "tasks.py")
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


def test_package_is_hidden_where_its_parent_is_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if mcp_gym lay inside the mounted Python installation (a non-editable install): the checkout is mounted,
    but the package (with every ``envs/<env>/tasks.py``) and the site-packages in it are empty."""
    monkeypatch.setattr(sys, "base_prefix", str(REPO))
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
async def test_detached_processes_do_not_outlive_the_run(transport: str, ending: str) -> None:
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
    try:
        async with code_client(transport) as client:
            report = await attack(client, f"detach-{ending}", program)
            assert "SPAWNED" in report["output"] and "FORKED" in report["output"], report["output"]
            if ending == "killed":
                assert "bytes of output" in report["output"] and report["passed"] == 0
            else:
                assert report["passed"] == 10
            assert host_processes_with(marker) == []  # gone when run_tests returned
    finally:
        for pid in host_processes_with(marker):  # only if the sandbox failed: never leave them behind
            os.kill(pid, signal.SIGKILL)


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


# -- no sandbox, no start ----------------------------------------------------------------------------------------
def test_server_refuses_to_start_without_an_os_sandbox(tmp_path: Path) -> None:
    failing = tmp_path / "bwrap"  # a bubblewrap that cannot create namespaces (as with user namespaces disabled)
    failing.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    failing.chmod(0o755)
    cmd = [sys.executable, "-m", "mcp_gym.envs.code.server"]
    base = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for path, reason in [(str(tmp_path / "empty"), "bubblewrap (bwrap) is not installed"),
                         (str(tmp_path), "No permissions to create new namespace")]:
        done = subprocess.run(cmd, env={**base, "PATH": path}, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1, done.stderr
        assert "refuses to run agent code without an OS sandbox" in lines[0] and reason in lines[0]
        assert f"{SANDBOX_ENV}=unsafe" in lines[0]
    opted_in = subprocess.run(cmd, env={**base, "PATH": str(tmp_path / "empty"), SANDBOX_ENV: "unsafe"},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert opted_in.returncode == 0 and "WITHOUT an OS sandbox" in opted_in.stderr  # served until stdin closed


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
