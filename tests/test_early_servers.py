"""A job's first servers start as soon as its config exists (issue 40): each slot's first server-filesystem boots in
an empty placeholder workspace while the job imports and plans, and the env's first reset connects it, checks it and
re-roots it to the episode's fresh workspace; no early process outlives the job, Ctrl-C or a SIGKILL of the job.

``fake-server-filesystem.py`` (a copy of ``tests/servers/pid_server.py`` whose path names server-filesystem) starts
early but fails the re-root checks (it is not server-filesystem), so the first reset replaces it by a fresh start;
npm ``server-filesystem`` (thirdparty) is re-rooted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from omegaconf import OmegaConf
from test_spare_servers import _eval_args, _kill_job_mid_run, _processes_naming, _still_ours, alive, pids, wait_for

from mcp_gym import MCPEnv, Stdio
from mcp_gym.cli import main
from mcp_gym.client import _prespawn
from mcp_gym.jobs._early import start_early_servers, stop_early_servers

PID_SERVER = ROOT / "tests" / "servers" / "pid_server.py"


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """Folders ``pids``, ``tmp`` (TMPDIR: workspaces and placeholders), fixture ``a`` (``in.txt``: ``hello a``), and
    ``fake``: the pid server under a name naming server-filesystem."""
    folders = {name: tmp_path / name for name in ("pids", "tmp", "a")}
    for folder in folders.values():
        folder.mkdir()
    (folders["a"] / "in.txt").write_text("hello a")
    folders["fake"] = tmp_path / "fake-server-filesystem.py"
    shutil.copy(PID_SERVER, folders["fake"])
    monkeypatch.setattr(tempfile, "tempdir", str(folders["tmp"]))
    yield folders
    stop_early_servers()


def job_cfg(servers: dict[str, str], **launcher: Any) -> Any:
    return OmegaConf.create({"command": "eval", "env": {"servers": servers},
                             "launcher": {"kind": "local", "num_envs": 2, "max_connecting": 2, **launcher}})


def fake_server(setup: dict[str, Path]) -> str:
    return f"{sys.executable} {setup['fake']} {{workspace}} {setup['pids']}"


def test_a_job_starts_one_server_per_slot_before_any_env_exists_and_stops_the_ones_no_env_took(
        setup: dict[str, Path]) -> None:
    assert start_early_servers(job_cfg({"s": fake_server(setup)}, num_envs=3)) == 2  # max_connecting
    early = wait_for(lambda: len(pids(setup["pids"])) == 2 and pids(setup["pids"]))
    assert sorted(early) == sorted(_prespawn.pending())
    assert len(list(setup["tmp"].iterdir())) == 2  # the placeholders
    stop_early_servers()
    assert not any(alive(p) for p in early) and list(setup["tmp"].iterdir()) == [] and _prespawn.pending() == []


@pytest.mark.parametrize("why", ["spare_servers=0", "not server-filesystem", "workspace in its env", "recorded",
                                 "collect on ray", "export-sft"])
def test_nothing_starts_early_where_the_pool_does_not_re_root_from_the_first_start(setup: dict[str, Path],
                                                                                   why: str) -> None:
    cfg = job_cfg({"s": fake_server(setup)})
    if why == "spare_servers=0":
        cfg.env.spare_servers = 0
    elif why == "not server-filesystem":
        cfg.env.servers = {"s": f"{sys.executable} {PID_SERVER} {{workspace}} {setup['pids']}"}
    elif why == "workspace in its env":
        cfg.env.servers = {"s": {"command": sys.executable, "args": [str(setup["fake"]), "{workspace}",
                                                                     str(setup["pids"])], "env": {"W": "{workspace}"}}}
    elif why == "recorded":
        cfg.env.servers = {"s": {"command": sys.executable, "args": [str(setup["fake"]), "{workspace}",
                                                                     str(setup["pids"])], "record": "c.jsonl"}}
    elif why == "collect on ray":
        cfg.command, cfg.launcher.kind = "collect", "ray"
    else:
        cfg.command = "export-sft"
    assert start_early_servers(cfg) == 0
    assert _prespawn.pending() == [] and pids(setup["pids"]) == [] and list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # 11 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_the_first_reset_takes_the_early_server_and_replaces_one_that_is_not_provably_re_rootable(
        setup: dict[str, Path]) -> None:
    assert start_early_servers(job_cfg({"s": fake_server(setup)}, num_envs=1)) == 1
    early = wait_for(lambda: pids(setup["pids"]))
    [placeholder] = list(setup["tmp"].iterdir())
    env = MCPEnv({"s": Stdio(command=sys.executable, args=[str(setup["fake"]), "{workspace}", str(setup["pids"])],
                             connect_timeout=120)},
                 [{"id": "a", "prompt": "p", "fixture": str(setup["a"])}])
    try:
        env.reset(options={"task_id": "a"})
        assert _prespawn.pending() == []  # the connection took it (it was not spawned again)
        assert env.host.connections["s"].pid not in early  # its identity is not server-filesystem's: a fresh start
        assert env.spares.rerooter.rerooted == 0
        _, _, _, _, info = env.step({"tool": "read_file", "arguments": {"name": "in.txt"}})
        assert info["error"] is None and info["content"][0]["text"] == "hello a"
        assert not any(alive(p) for p in early)  # closed by the env, not left for the job's end
        assert not placeholder.exists() and env.workspace != placeholder
    finally:
        env.close()
    assert not any(alive(p) for p in pids(setup["pids"]))


# Heavy lane (11 s: a whole eval job); its fast cover: test_no_early_server_outlives_a_killed_job (a real job,
# killed) and test_the_first_reset_takes_the_early_server_and_replaces_one_that_is_not_provably_re_rootable.
@pytest.mark.slow
def test_an_eval_job_with_early_servers_leaves_no_process_and_no_folder(setup: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    args = _eval_args(setup, tmp_path, samples=2)  # two tasks of fixture "a" (setup["a"], beside the task file)
    args[2] = f'+env.servers.s="{fake_server(setup)}"'
    assert main(args) == 0
    assert len(pids(setup["pids"])) >= 2 + 4  # two early servers, then one fresh server per episode (not re-rooted)
    assert not any(alive(p) for p in pids(setup["pids"]))
    assert list(setup["tmp"].iterdir()) == []


def _start_early_then(setup: dict[str, Path], ending: str) -> subprocess.CompletedProcess[str]:
    """A process that starts a job's early servers as ``_run_job`` does, waits until both run, then runs ``ending``."""
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        from omegaconf import OmegaConf
        from mcp_gym.jobs._early import start_early_servers
        cfg = OmegaConf.create({{"command": "eval", "env": {{"servers": {{"s": {fake_server(setup)!r}}}}},
                                "launcher": {{"kind": "local", "num_envs": 2, "max_connecting": 2}}}})
        assert start_early_servers(cfg) == 2
        deadline = time.monotonic() + 120
        while len(list(Path({str(setup["pids"])!r}).iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        {ending}
    """)
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(setup["tmp"])},
                          timeout=300, capture_output=True, text=True)


def test_early_servers_exit_when_the_job_is_killed_before_any_env_took_them(setup: dict[str, Path]) -> None:
    """The job process starts them and is SIGKILLed at once: no handler runs; their stdin closes with the job."""
    done = _start_early_then(setup, "os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == -signal.SIGKILL, done.stderr
    early = pids(setup["pids"])
    assert len(early) == 2
    wait_for(lambda: not any(_still_ours(p, str(setup["tmp"])) for p in early), bound=120)


# Heavy lane (6 s: a whole job, SIGKILLed mid-run); its fast cover:
# test_early_servers_exit_when_the_job_is_killed_before_any_env_took_them (the same guarantee, no job around it).
@pytest.mark.slow
def test_no_early_server_outlives_a_killed_job(setup: dict[str, Path], tmp_path: Path) -> None:
    seen = _kill_job_mid_run(setup, tmp_path, f'+env.servers.s="{fake_server(setup)}"')
    every = [*seen, *pids(setup["pids"])]
    wait_for(lambda: not _processes_naming(str(setup["tmp"])) and not any(_still_ours(p, str(tmp_path))
                                                                        for p in every), bound=120)


def test_ctrl_c_before_any_env_took_them_stops_the_early_servers_and_removes_their_folders(
        setup: dict[str, Path]) -> None:
    """Ctrl-C in the job's set-up (a KeyboardInterrupt in its main thread, as the job's imports see it)."""
    done = _start_early_then(setup, "raise KeyboardInterrupt")
    assert "KeyboardInterrupt" in done.stderr
    early = pids(setup["pids"])
    assert len(early) == 2 and not any(alive(p) for p in early)  # stopped before the interpreter exited
    assert list(setup["tmp"].iterdir()) == []


# Heavy lane (8 s: npm server-filesystem); its fast cover:
# test_the_first_reset_takes_the_early_server_and_replaces_one_that_is_not_provably_re_rootable.
@pytest.mark.slow
@pytest.mark.thirdparty
def test_npm_server_filesystem_started_early_is_re_rooted_to_the_first_episode_s_workspace(
        setup: dict[str, Path]) -> None:
    from conftest import npm_bin

    command = npm_bin("mcp-server-filesystem")
    assert start_early_servers(job_cfg({"fs": f"{command} {{workspace}}"}, num_envs=1)) == 1
    [early] = _prespawn.pending()
    [placeholder] = list(setup["tmp"].iterdir())
    env = MCPEnv({"fs": Stdio(command=command, args=["{workspace}"], connect_timeout=120)},
                 [{"id": "a", "prompt": "p", "fixture": str(setup["a"])}])
    try:
        _, info = env.reset(options={"task_id": "a"})
        assert env.host.connections["fs"].pid == early and _prespawn.pending() == []
        assert env.spares.rerooter.rerooted == 1 and not placeholder.exists()
        _, _, _, _, info = env.step({"tool": "list_allowed_directories", "arguments": {}})
        assert info["content"][0]["text"].splitlines()[1:] == ["{workspace}"]  # the episode's own, masked
        _, _, _, _, info = env.step({"tool": "read_text_file", "arguments": {"path": "{workspace}/in.txt"}})
        assert info["error"] is None and info["content"][0]["text"] == "hello a"
        _, _, _, _, info = env.step({"tool": "list_directory", "arguments": {"path": str(placeholder)}})
        assert info["is_error"] or info["error"] is not None
    finally:
        env.close()
    assert not alive(early)
