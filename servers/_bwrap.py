"""The bubblewrap command of one sandboxed run, and the check that it is safe here (see :mod:`._sandbox`).

As root, bubblewrap would map the sandbox's uid to host uid 0: without capabilities, but with every permission check
that compares the uid itself (sysctls under ``/proc/sys``: ``kernel.core_pattern`` set to a pipe makes the kernel run a
command as root; ``RLIMIT_NPROC``, not enforced for uid 0). So when the server runs as root, the sandbox's own
bubblewrap runs as an unprivileged host uid (:data:`SANDBOX_UID_ENV`, default 65534): a first bubblewrap, as root,
builds a minimal root holding what the second needs (the interpreter may sit under a home directory the unprivileged
uid cannot traverse, such as ``/root``), and ``setpriv`` (util-linux) drops to that uid with no groups and no
capabilities before the second one starts. A seccomp filter refuses the calls that would hold memory outside the
run's address-space limit (System V shared memory and message queues, ``memfd_create``) and any syscall of another
ABI. Agent code sees an allowlist of host paths: the shared-library directories, the interpreter and its standard
library (site-packages hidden), nothing else of ``/usr`` or the Python prefix. :func:`detect_isolation` runs a probe
through the real command once per process and refuses (one line) unless the probe finds the host uid non-root,
``/proc/sys`` and ``/dev`` read-only and ``RLIMIT_NPROC`` holding.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import logging
import os
import platform
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_gym.errors import MCPGymError

SANDBOX_ENV = "MCP_GYM_CODE_SANDBOX"
"""Environment variable choosing the isolation: ``auto`` (default: bubblewrap, else refuse), ``bwrap`` (the same,
stated) or ``unsafe`` (no OS isolation, only the in-process audit hook: trusted code only)."""
SANDBOX_UID_ENV = "MCP_GYM_CODE_SANDBOX_UID"
"""Environment variable: the unprivileged host uid (and gid) agent code runs as when the server runs as root (default
65534, ``nobody``); never 0."""
WORKDIR = "/workspace"
"""The run's working directory inside the bubblewrap sandbox."""

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


class SandboxUnavailable(MCPGymError, RuntimeError):
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
    Python under ``/usr``, ``/usr/local`` and the base installation) and the mcp_gym package with the folders it
    maps in (a checkout's ``envs/``, with the ``envs/<env>/tasks.py`` task generators and hidden tests, ``servers/``
    and ``conf/``). Only the outermost of nested ones (bubblewrap cannot mount in a read-only tmpfs)."""
    dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    dirs |= {sysconfig.get_path(k) for k in ("purelib", "platlib")}
    dirs |= {p for p in sys.path if "-packages" in p}
    for root in {"/usr", "/usr/local", *_prefixes()}:
        for pattern in ("lib*/python*/*-packages", "local/lib*/python*/*-packages"):
            dirs |= set(glob.glob(os.path.join(root, pattern)))
    for package in ("mcp_gym", "mcp_gym.envs", "mcp_gym.servers", "mcp_gym.conf"):  # in a checkout, not in mcp_gym/
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(package)
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


def _python_files() -> list[str]:
    """What the interpreter needs of its installation: the standard library (extension modules included) and its
    shared library, not the rest of the prefix (a prefix such as ``/usr`` or ``/usr/local`` holds much more)."""
    paths = {os.path.dirname(os.__file__), sysconfig.get_config_var("DESTSHARED")}  # the base's (not a venv's)
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname:
        paths |= set(glob.glob(os.path.join(libdir, soname.split(".so")[0] + ".so*")))
    return sorted(os.path.realpath(p) for p in paths if p and os.path.exists(p))


def _library_dirs(args: list[str]) -> list[str]:
    """Add the host's shared-library directories to ``args`` (read-only) and the top-level links (``/lib`` ->
    ``usr/lib``); return the directories bound. An allowlist: ``/usr/lib/<multiarch>``, ``/usr/lib64`` and their
    unmerged ``/lib`` twins, never all of ``/usr`` (whose ``lib/`` also holds other software, e.g. an SDK's own
    site-packages)."""
    bound: list[str] = []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
    arch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    for d in (f"/usr/lib/{arch}", "/usr/lib64", f"/lib/{arch}", "/lib64"):
        real = os.path.realpath(d)
        if os.path.isdir(real) and not _under(real, bound):
            args += ["--ro-bind", real, real]
            bound.append(real)
    return bound


def _bind_readonly(args: list[str], bound: list[str], paths: Sequence[str], parents: bool = False) -> None:
    """Add ``paths`` (read-only) to ``args`` unless already under ``bound``; with ``parents``, create their parent
    directories world-traversable first (bubblewrap run as root makes them 0700)."""
    for path in paths:
        if _under(path, bound) or not os.path.exists(path):
            continue
        if parents:
            missing: list[str] = []
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
    bound = _library_dirs(args)  # an allowlist: libraries, the interpreter and its standard library, nothing else
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    _bind_readonly(args, bound, [*_python_files(), _python()])
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


def sandbox_command(isolation: Isolation, limits: Limits, seccomp_fd: int | None = None) -> list[str]:
    """The whole command line (up to and excluding ``--``) that starts one bubblewrap sandbox: :func:`bwrap_args`,
    run as :attr:`Isolation.host_uid` when the server runs as root; with ``seccomp_fd`` (an inherited descriptor to
    read :func:`seccomp_filter` from), that filter applies to the sandboxed process."""
    assert isolation.bwrap is not None
    outer = _drop_root_args(isolation) if isolation.host_uid is not None else []
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return [*outer, *bwrap_args(isolation.bwrap, limits), *seccomp]


# (audit arch, syscalls refused: shmget, msgget, memfd_create) per machine; elsewhere no filter
_SECCOMP_ABI = {"x86_64": (0xC000003E, (29, 68, 319)), "aarch64": (0xC00000B7, (194, 186, 279))}


@functools.cache
def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program (bubblewrap's ``--seccomp`` format) that makes ``shmget``, ``msgget`` and
    ``memfd_create`` fail with EPERM (memory they hold is outside ``RLIMIT_AS``) and refuses every syscall of another
    ABI (x32, 32-bit) with EPERM; ``None`` on machines it does not know (then those calls stay allowed)."""
    abi = _SECCOMP_ABI.get(platform.machine())
    if abi is None:
        return None
    arch, refused = abi
    deny = 4 + len(refused) + 1  # index of the EPERM return

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    prog = [op(ld, 4), op(jeq, arch, 0, deny - 2), op(ld, 0), op(jge, 0x40000000, deny - 4, 0)]
    prog += [op(jeq, nr, deny - 5 - i, 0) for i, nr in enumerate(refused)]
    prog += [op(ret, 0x7FFF0000), op(ret, 0x00050000 | 1)]  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    return b"".join(prog)


def seccomp_pipe() -> int | None:
    """A pipe's read end holding :func:`seccomp_filter` (to pass to bubblewrap; the caller closes it), or ``None``."""
    program = seccomp_filter()
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: fits in the pipe's buffer
    finally:
        os.close(write_end)
    return read_end


_PROBE = r"""
import errno, os, resource
problems = []
try:  # opened, never written; EACCES: refused by the permission check itself, so the host uid is not 0
    os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY))
    problems.append("/proc/sys is writable")
except OSError as e:
    if e.errno not in (errno.EACCES, errno.ENOENT):
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
    seccomp = seccomp_pipe()
    cmd = [*sandbox_command(isolation, Limits(), seccomp), "--", _python(), "-I", "-S", "-c", _PROBE]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL, cwd="/", env={},
                              pass_fds=() if seccomp is None else (seccomp,))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{isolation.bwrap} failed to run ({e})"
    finally:
        if seccomp is not None:
            os.close(seccomp)
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
    found = _bwrap_isolation(path, euid)
    if isinstance(found, str):
        raise SandboxUnavailable(
            f"Code server refuses to run agent code without an OS sandbox: {found}. Install bubblewrap "
            f"(apt-get install bubblewrap; unprivileged user namespaces must be allowed), or set {SANDBOX_ENV}=unsafe "
            "to run it with only an in-process audit hook (trusted code only).")
    return found


def _bwrap_isolation(path: str, euid: int) -> Isolation | str:
    """The bubblewrap isolation for this ``$PATH`` and effective uid, checked by the probe, or why there is none."""
    bwrap = shutil.which("bwrap", path=path)
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    isolation = Isolation("bwrap", os.path.realpath(bwrap))
    if euid == 0:
        setpriv = shutil.which("setpriv", path=path)
        if setpriv is None:
            return "the server runs as root and setpriv (util-linux) is not installed to drop to an unprivileged uid"
        isolation = Isolation("bwrap", isolation.bwrap, _sandbox_uid(), os.path.realpath(setpriv))
    return _probe(isolation) or isolation


def detect_isolation() -> Isolation:
    """The isolation agent code gets here, chosen by ``$MCP_GYM_CODE_SANDBOX`` (see :data:`SANDBOX_ENV`) and, as root,
    ``$MCP_GYM_CODE_SANDBOX_UID``; cached per setting, ``$PATH`` and effective uid. Raises :class:`SandboxUnavailable`
    (one line) when there is none and no opt-in."""
    return _detect(os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto", os.environ.get("PATH", os.defpath),
                   os.geteuid(), os.environ.get(SANDBOX_UID_ENV, ""))


