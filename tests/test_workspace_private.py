"""Per-episode workspaces in a temporary directory shared with other users and processes: each one's folder is
private to the user running the job (mode 0700, whatever the fixture's mode), for the first reset's workspace, the
spare prepared for the next one and a job's early placeholder; the files inside keep the fixture's modes
(tests/test_workspace_copy.py). A job killed with SIGKILL leaves its workspaces behind: the next job's first workspace
removes those whose owning process is gone, never a live process's, never through a symlink planted there."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_spare_servers import _kill_job_mid_run, make_env, pids, read, wait_for

from mcp_gym._wsdir import sweep
from mcp_gym.jobs._early import start_early_servers, stop_early_servers

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Folders ``pids`` (the servers'), ``tmp`` (where workspaces are made), fixtures ``a`` and ``b`` (``in.txt``:
    ``hello <name>``), as tests/test_spare_servers.py's ``make_env`` uses them."""
    folders = {name: tmp_path / name for name in ("pids", "tmp", "a", "b")}
    for folder in folders.values():
        folder.mkdir()
    for name in ("a", "b"):
        (folders[name] / "in.txt").write_text(f"hello {name}")
    monkeypatch.setattr(tempfile, "tempdir", str(folders["tmp"]))
    return folders


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_every_workspace_is_private_whatever_the_fixture_s_mode(setup: dict[str, Path]) -> None:
    for name in ("a", "b"):
        setup[name].chmod(0o755)
        (setup[name] / "in.txt").chmod(0o644)
    env = make_env(setup, spare_servers=1)
    try:
        env.reset(options={"task_id": "a1"})
        first = env.workspace
        assert first is not None and mode(first) == 0o700
        assert mode(first / "in.txt") == 0o644  # the files keep their modes
        assert read(env, "in.txt") == "hello a"
        env.reset(options={"task_id": "a2"})  # takes the spare prepared while a1 ran
        assert env.spares.taken == 1 and env.workspace is not None and env.workspace != first
        assert mode(env.workspace) == 0o700 and read(env, "in.txt") == "hello a"
        spare = wait_for(lambda: [p for p in setup["tmp"].iterdir() if p != env.workspace and p.is_dir()
                                  and not p.name.endswith(".removing")])
        assert [mode(p) for p in spare] == [0o700]  # the spare made for the next reset, before any reset takes it
    finally:
        env.close()


def test_a_job_s_early_placeholder_workspaces_are_private(setup: dict[str, Path]) -> None:
    fake = setup["tmp"].parent / "fake-server-filesystem.py"
    fake.write_text((Path(__file__).parent / "servers" / "pid_server.py").read_text())
    cfg = OmegaConf.create({"command": "eval",
                            "env": {"servers": {"s": f"{sys.executable} {fake} {{workspace}} {setup['pids']}"}},
                            "launcher": {"kind": "local", "num_envs": 2, "max_connecting": 2}})
    try:
        assert start_early_servers(cfg) == 2
        wait_for(lambda: len(pids(setup["pids"])) == 2)
        assert [mode(p) for p in setup["tmp"].iterdir()] == [0o700, 0o700]
    finally:
        stop_early_servers()


# -- a dead job's workspaces are removed by the next job; never a live process's, never through a symlink -------------

HOLD = ("import sys; from mcp_gym._wsdir import new_workspace; print(new_workspace(), flush=True); "
        "sys.stdin.read() if sys.argv[1] == 'hold' else None")


def _make_workspace_in(tmp: Path, hold: bool) -> tuple[subprocess.Popen[str], Path]:
    """A process that makes one workspace in ``tmp`` (and, ``hold``, keeps running until its stdin closes)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, "hold" if hold else "exit"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_the_next_job_s_first_episode_removes_a_killed_job_s_workspaces_and_keeps_a_live_one_s(
        setup: dict[str, Path], tmp_path: Path) -> None:
    live, kept = _make_workspace_in(setup["tmp"], hold=True)
    try:
        _kill_job_mid_run(setup, tmp_path)  # an eval job SIGKILLed mid-run: nothing of it removes its folders
        left = [p for p in setup["tmp"].iterdir() if p != kept]
        assert left and all(p.is_dir() for p in left)  # its workspaces and spares, left behind
        env = make_env(setup, spare_servers=0)  # the next job, in this process
        try:
            env.reset(options={"task_id": "a1"})
            assert read(env, "in.txt") == "hello a"
            assert not [p for p in left if os.path.lexists(p)]
            assert kept.is_dir()  # the live process's workspace
            assert sorted(setup["tmp"].iterdir()) == sorted([kept, env.workspace])
        finally:
            env.close()
    finally:
        live.communicate(input="")
    assert kept.is_dir()  # (a process that ends normally removes its own; this one did not)


def test_a_sweep_never_follows_or_deletes_through_a_symlink_planted_in_the_temporary_directory(
        tmp_path: Path) -> None:
    tmp, victim = tmp_path / "tmp", tmp_path / "victim"
    tmp.mkdir()
    (victim / "sub").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    (victim / "sub" / "deep.txt").write_text("keep me too")
    proc, dead = _make_workspace_in(tmp, hold=False)  # its owner exits without removing it (as a SIGKILL would)
    assert proc.wait() == 0 and dead.is_dir()
    tag = dead.name.rsplit("-", 1)[0]  # mcp-gym-ws-<pid>-<start>-<ns>: a dead owner's
    (dead / "into-victim").symlink_to(victim)  # inside the dead workspace: removed as a link, never followed
    planted = [tmp / "mcp-gym-ws-x", tmp / f"{tag}-planted", tmp / f"{tag}-planted.removing"]
    for link in planted:
        link.symlink_to(victim)
    (tmp / f"{tag}-afile").write_text("not a folder")
    assert sweep(tmp) == [dead]
    assert not os.path.lexists(dead)
    assert all(link.is_symlink() for link in planted)  # not ours to judge: left as they are
    assert (tmp / f"{tag}-afile").read_text() == "not a folder"
    assert (victim / "precious.txt").read_text() == "keep me" and (victim / "sub" / "deep.txt").read_text() == \
        "keep me too"
    assert sweep(tmp_path / "missing") == []  # never raises into the job


SWEEP = "import json, sys; from mcp_gym._wsdir import sweep; print(json.dumps([str(p) for p in sweep(sys.argv[1])]))"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="a time namespace (unshare --time) needs root and util-linux")
@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_old_named_workspaces_are_removed_only_when_made_before_this_boot(tmp_path: Path) -> None:
    """Versions before the owner tag made ``mcp-gym-ws-<8 random>`` (``tempfile.mkdtemp``), which names no owner. A
    sweep removes one only where the kernel proves its maker gone: the folder's inode last changed before this boot.
    Seen from this boot it is kept; seen from a time namespace whose boot is after the folder was made (``unshare
    --time --boottime``: ``/proc/stat``'s ``btime`` follows it), it is removed, with the sweep's rules (a symlink or a
    file of that name is left, a link inside is never followed)."""
    tmp, victim = tmp_path / "tmp", tmp_path / "victim"
    tmp.mkdir()
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    old = Path(tempfile.mkdtemp(prefix="mcp-gym-ws-", dir=tmp))  # exactly as those versions made them
    (old / "out.txt").write_text("left by a killed job")
    (old / "into-victim").symlink_to(victim)
    link, afile, other = tmp / "mcp-gym-ws-abcd1234", tmp / "mcp-gym-ws-efgh5678", tmp / "mcp-gym-ws-notours"
    link.symlink_to(victim)
    afile.write_text("not a folder")
    other.mkdir()  # 7 characters: no name mkdtemp gives
    assert sweep(tmp) == [] and old.is_dir()  # made during this boot: its maker may run
    made = os.lstat(old).st_ctime
    while time.time() < made + 2.5:  # the clock moves on (btime has whole seconds): bounded by the clock itself
        time.sleep(0.1)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    done = subprocess.run(["unshare", "--time", "--boottime", str(-int(uptime)), sys.executable, "-c", SWEEP,
                           str(tmp)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [str(old)] and not os.path.lexists(old)
    assert link.is_symlink() and afile.read_text() == "not a folder" and other.is_dir()
    assert (victim / "precious.txt").read_text() == "keep me"
