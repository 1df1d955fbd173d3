"""Per-episode workspaces in a temporary directory shared with other users and processes: each one's folder is
private to the user running the job (mode 0700, whatever the fixture's mode), for the first reset's workspace, the
spare prepared for the next one and a job's early placeholder; the files inside keep the fixture's modes
(tests/test_workspace_copy.py)."""

from __future__ import annotations

import stat
import sys
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_spare_servers import make_env, pids, read, wait_for

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
