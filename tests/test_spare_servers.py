"""Spare per-episode servers (issue 40): while an episode runs, the next episode's workspace is prepared and its
``{workspace}`` server started, so the next reset takes a server that is up; no spare outlives the env or the job.

The server is ``tests/servers/pid_server.py`` (a stdio MCP server writing files in its workspace and its pid into a
folder, so a test sees every process it ever started); npm ``server-filesystem`` is in the thirdparty test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from mcp_gym import MCPEnv, Stdio
from mcp_gym.cli import main
from mcp_gym.client.runtime import Runtime

PID_SERVER = ROOT / "tests" / "servers" / "pid_server.py"
FIXTURES = ("a", "b", "c")


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pids(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.iterdir()]


def wait_for(what: Callable[[], Any], bound: float = 120.0) -> Any:
    """Poll ``what()`` until it is truthy (a bound on hangs only: nothing here depends on how long it takes)."""
    deadline = time.monotonic() + bound
    while not (value := what()):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.02)
    return value


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Folders: ``pids`` (the servers'), ``tmp`` (where workspaces are made), fixtures ``a``, ``b`` and ``c`` (each
    with ``in.txt`` saying ``hello <name>``)."""
    folders = {name: tmp_path / name for name in ("pids", "tmp", *FIXTURES)}
    for folder in folders.values():
        folder.mkdir()
    for name in FIXTURES:
        (folders[name] / "in.txt").write_text(f"hello {name}")
    monkeypatch.setattr(tempfile, "tempdir", str(folders["tmp"]))
    return folders


def make_env(f: dict[str, Path], spare_servers: int = 1) -> MCPEnv:
    tasks = [{"id": "a1", "prompt": "p", "fixture": str(f["a"])}, {"id": "a2", "prompt": "p", "fixture": str(f["a"])},
             {"id": "b1", "prompt": "p", "fixture": str(f["b"])}]
    server = Stdio(command=sys.executable, args=[str(PID_SERVER), "{workspace}", str(f["pids"])], connect_timeout=120)
    return MCPEnv({"s": server}, tasks, spare_servers=spare_servers)


def read(env: MCPEnv, name: str) -> str:
    _, _, _, _, info = env.step({"tool": "read_file", "arguments": {"name": name}})
    assert info["error"] is None, info["error"]
    return str(info["content"][0]["text"])


@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_the_next_reset_takes_a_started_server_in_a_fresh_copy_of_the_fixture(setup: dict[str, Path]) -> None:
    env = make_env(setup)
    try:
        env.reset(options={"task_id": "a1"})
        first_ws, first_pid = env.workspace, env.host.connections["s"].pid
        assert first_ws is not None and first_pid is not None
        env.step({"tool": "write_file", "arguments": {"name": "in.txt", "content": "changed"}})
        assert (first_ws / "in.txt").read_text() == "changed"
        spare = wait_for(lambda: env.spares.pids)  # started while the episode runs
        env.reset(options={"task_id": "a2"})
        assert env.spares.taken == 1
        assert env.host.connections["s"].pid == spare[0] != first_pid
        assert env.workspace is not None and env.workspace != first_ws
        assert read(env, "in.txt") == "hello a"  # a fresh copy: the last episode's write is not seen
        env.step({"tool": "write_file", "arguments": {"name": "out.txt", "content": "x"}})
        assert (env.workspace / "out.txt").read_text() == "x"  # the server serves this episode's workspace
        assert (setup["a"] / "in.txt").read_text() == "hello a" and not (setup["a"] / "out.txt").exists()
        wait_for(lambda: not alive(first_pid))  # closed in the background (tests/test_background_close.py)
        wait_for(lambda: not first_ws.exists())  # ... and its workspace removed once it is gone
        wait_for(lambda: env.spares.pids)  # the next spare: three servers in all
        assert len(wait_for(lambda: pids(setup["pids"]) if len(pids(setup["pids"])) >= 3 else None)) == 3
    finally:
        env.close()
    assert not any(alive(p) for p in pids(setup["pids"]))
    assert list(setup["tmp"].iterdir()) == []  # every workspace, the spare's too, is removed


@pytest.mark.slow  # the fast lane keeps test_spare_next_task's test_a_wrong_forecast_costs_a_server_start_never_a_...
def test_a_task_with_another_fixture_gets_its_own_server_and_the_spare_is_stopped(setup: dict[str, Path]) -> None:
    env = make_env(setup)
    try:
        env.reset(options={"task_id": "a1"})
        spare = wait_for(lambda: env.spares.pids)
        env.reset(options={"task_id": "b1"})
        assert env.spares.taken == 0
        assert read(env, "in.txt") == "hello b"
        assert env.host.connections["s"].pid not in spare
        wait_for(lambda: not alive(spare[0]))  # closed in the background: it holds its unit until it has exited
    finally:
        env.close()
    assert not any(alive(p) for p in pids(setup["pids"]))


def test_spare_servers_0_turns_the_pool_off(setup: dict[str, Path]) -> None:
    env = make_env(setup, spare_servers=0)
    try:
        for task in ("a1", "a2"):
            env.reset(options={"task_id": task})
            assert env.spares.pids == []
            assert read(env, "in.txt") == "hello a"
        assert env.spares.taken == 0 and len(pids(setup["pids"])) == 2  # one server per episode, none ahead
    finally:
        env.close()



def test_an_env_without_a_workspace_server_prepares_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No server names ``{workspace}``: the pool has nothing to prepare. No spare workspace appears in the temp folder
    (one did, per episode, and a test checking that folder failed by chance), and the sync face keeps driving the
    loop in the caller's thread (no thread hop per step)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    rt = Runtime()  # its own, driven: the default runtime may have been moved to a thread by an earlier test
    env = MCPEnv({"s": Stdio(sys.executable, ["-m", "mcp_gym.servers.counter"])}, ["Count."], runtime=rt)
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            env.step({"tool": "add", "arguments": {"n": 1}})
            assert list(temp.iterdir()) == [] and env.spares.pids == []
        assert rt.mode == "driven"
    finally:
        env.close()
        rt.close()

@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_a_sync_env_with_the_pool_on_steps_in_driven_mode_once_the_spare_is_ready(setup: dict[str, Path]) -> None:
    """The spare starts on a loop thread while the episode runs (it progresses with no call to step), and once it is
    ready the runtime is driven again: steps run the loop in the caller's thread, no thread hop (it stayed threaded
    for good, +115-180 µs per step). The next reset takes the spare and the same holds for the next one."""
    # Its own, driven (the default runtime may have been moved to a thread by an earlier test), named so that no
    # other runtime's loop thread (the default one's, threaded after an in-process job) counts as its own below.
    rt = Runtime("spare-pool-test")
    env = MCPEnv({"s": Stdio(command=sys.executable, args=[str(PID_SERVER), "{workspace}", str(setup["pids"])],
                             connect_timeout=120)},
                 [{"id": "a1", "prompt": "p", "fixture": str(setup["a"])}], spare_servers=1, runtime=rt)
    try:
        for episode in range(2):
            env.reset(options={"task_id": "a1"})
            assert env.spares.taken == episode
            wait_for(lambda: env.spares.pids)  # the spare starts with no step called
            # ... and once it is up, no loop thread is left (it ends a moment after the runtime is driven again)
            wait_for(lambda: rt.mode == "driven" and not [t for t in threading.enumerate() if t.name == rt.name])
            assert read(env, "in.txt") == "hello a"
            assert rt.mode == "driven"
    finally:
        env.close()
        rt.close()
    assert not any(alive(p) for p in pids(setup["pids"]))
    assert list(setup["tmp"].iterdir()) == []


def test_no_spare_process_is_left_after_an_exception(setup: dict[str, Path]) -> None:
    with pytest.raises(RuntimeError, match="the job broke"), make_env(setup) as env:
        env.reset(options={"task_id": "a1"})
        wait_for(lambda: env.spares.pids)
        raise RuntimeError("the job broke")
    assert len(pids(setup["pids"])) == 2 and not any(alive(p) for p in pids(setup["pids"]))
    assert list(setup["tmp"].iterdir()) == []


def _eval_args(setup: dict[str, Path], tmp: Path, samples: int) -> list[str]:
    tasks = tmp / "tasks.jsonl"
    rows = [{"id": f"t{i}", "prompt": "Write out.txt.", "fixture": "a",  # setup["a"], beside the task file
             "grader": {"kind": "files", "expect": {"out.txt": f"text {i}"}},
             "solution": [{"tool": "write_file", "arguments": {"name": "out.txt", "content": f"text {i}"}}]}
            for i in range(2)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = f'+env.servers.s="{sys.executable} {PID_SERVER} {{workspace}} {setup["pids"]}"'
    return ["eval", "env=custom", server, f"env.tasks={tasks}", "policy=oracle", f"samples={samples}",
            "launcher.num_envs=2", "launcher.progress=false", "plots=false", f"out={tmp / 'run'}"]


@pytest.mark.slow  # the fast lane keeps test_spare_next_task's test_eval_over_interleaved_fixtures_with_the_pool_...
def test_an_eval_job_uses_spares_and_leaves_no_process(setup: dict[str, Path], tmp_path: Path) -> None:
    assert main(_eval_args(setup, tmp_path, samples=3)) == 0
    results = json.loads((tmp_path / "run" / "report" / "results.json").read_text())
    assert results["summary"]["success_rate"] == 1.0
    assert not any(alive(p) for p in pids(setup["pids"]))
    assert list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # the fast lane keeps test_ctrl_c_to_the_job_s_process_group_leaves_no_npx_server_filesystem
def test_ctrl_c_in_an_eval_job_leaves_no_server_process(setup: dict[str, Path], tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mcp_gym.cli", *_eval_args(setup, tmp_path, samples=200)]
    env = {**os.environ, "TMPDIR": str(setup["tmp"])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_for(lambda: len(pids(setup["pids"])) >= 6 or proc.poll() is not None, bound=300)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert not [p for p in pids(setup["pids"]) if alive(p)], output
    assert list(setup["tmp"].iterdir()) == [], output


@pytest.mark.slow  # the fast lane keeps test_spare_servers_0_turns_the_pool_off (the same through MCPEnv)
def test_env_spare_servers_0_turns_the_pool_off_in_a_job(setup: dict[str, Path], tmp_path: Path) -> None:
    assert main([*_eval_args(setup, tmp_path, samples=2), "env.spare_servers=0"]) == 0
    assert len(pids(setup["pids"])) == 4  # one server per episode, none ahead


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line names ``text`` (a workspace folder: every per-episode server's does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_job_at_concurrency_n_runs_at_most_n_plus_spare_servers_servers(setup: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """Two slots, spare_servers=1 (job-wide): never more than 3 servers at once (sampled from /proc while it runs:
    a sample can miss a peak but never invent one)."""
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(alive(p) for p in pids(setup["pids"])))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        assert main(_eval_args(setup, tmp_path, samples=3)) == 0
    finally:
        done.set()
        sampler.join(timeout=60)
    assert 2 <= peak[0] <= 3, peak
    assert len(pids(setup["pids"])) >= 6  # 6 episodes, each on a server of its own (spares among them)
    assert not any(alive(p) for p in pids(setup["pids"]))


def _kill_job_mid_run(setup: dict[str, Path], tmp_path: Path, server: str | None = None,
                      ctrl_c: bool = False) -> list[int]:
    """Start an eval job in its own process group, SIGKILL it (``ctrl_c``: SIGINT to its whole process group, as a
    terminal's Ctrl-C does, then wait for it) once its servers and a spare run; the servers seen."""
    args = _eval_args(setup, tmp_path, samples=200)
    if server is not None:
        args[2] = server
    cmd = [sys.executable, "-m", "mcp_gym.cli", *args]
    env = {**os.environ, "TMPDIR": str(setup["tmp"])}
    log = (tmp_path / "job.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        seen = wait_for(lambda: (s := _processes_naming(str(setup["tmp"]))) and len(s) >= 3 and s, bound=300)
        if ctrl_c:
            # a job that ended on its own (its servers failed) is not a Ctrl-C's doing: say so, with its output
            assert proc.poll() is None, (f"the job ended with status {proc.returncode} before the Ctrl-C",
                                         (tmp_path / "job.log").read_text()[-3000:])
            os.killpg(proc.pid, signal.SIGINT)
            # 130, or killed by SIGINT after its clean-up: a Ctrl-C during the job's set-up can end in CPython 3.10/3.11
            # re-raising SIGINT on itself after finalization (strace: the job's own kill(self, SIGINT) after its early
            # servers were stopped, ~1 run in 8 under load); a shell reports both as exit status 130
            code = proc.wait(timeout=120)
            assert code in (130, -signal.SIGINT), (code, (tmp_path / "job.log").read_text()[-3000:])
        else:
            proc.send_signal(signal.SIGKILL)  # a crash: no handler, no cleanup in the job
            proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    return list(seen)


def _still_ours(pid: int, text: str) -> bool:
    """``pid`` runs and is still the server it was: its command line names ``text``, or is gone (it is exiting); a
    reused pid (another program) is not."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return alive(pid) and (not cmdline or text.encode() in cmdline)


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_no_server_or_spare_outlives_a_sigkilled_job(setup: dict[str, Path], tmp_path: Path) -> None:
    seen = _kill_job_mid_run(setup, tmp_path)
    every = [*seen, *pids(setup["pids"])]
    # they exit on their own once the job's end of their stdin is closed (by the kernel, with the job)
    wait_for(lambda: not _processes_naming(str(setup["tmp"])) and not any(_still_ours(p, str(tmp_path)) for p in every),
             bound=120)


@pytest.mark.slow  # the fast lane keeps test_no_server_or_spare_outlives_a_sigkilled_job (and npx: the ctrl-c test)
@pytest.mark.thirdparty
def test_no_npx_server_filesystem_outlives_a_sigkilled_job(setup: dict[str, Path], tmp_path: Path) -> None:
    """The same with server-filesystem under ``npx -y`` (npx and its node child), resolved from the npm cache."""
    from conftest import npm_bin

    npm_bin("mcp-server-filesystem")  # fills the npm cache npx resolves from
    server = '+env.servers.s="npx -y @modelcontextprotocol/server-filesystem {workspace}"'
    seen = _kill_job_mid_run(setup, tmp_path, server)
    wait_for(lambda: not _processes_naming(str(setup["tmp"])) and not any(_still_ours(p, str(tmp_path)) for p in seen),
             bound=120)


@pytest.mark.thirdparty
def test_npm_server_filesystem_runs_on_a_spare_rooted_in_the_next_workspace(setup: dict[str, Path]) -> None:
    from conftest import npm_bin

    server = Stdio(command=npm_bin("mcp-server-filesystem"), args=["{workspace}"], connect_timeout=120,
                   env={"MCP_GYM_TEST_ROOT": "{workspace}"})  # the workspace in its environment: never re-rooted
    env = MCPEnv({"fs": server}, [{"id": "a", "prompt": "p", "fixture": str(setup["a"])}])
    started: list[int] = []
    try:
        env.reset(options={"task_id": "a"})
        first = env.workspace
        started += [env.host.connections["fs"].pid or 0, *wait_for(lambda: env.spares.pids)]
        env.reset(options={"task_id": "a"})
        assert env.spares.taken == 1 and env.host.connections["fs"].pid == started[1]
        _, _, _, _, info = env.step({"tool": "read_text_file", "arguments": {"path": "{workspace}/in.txt"}})
        assert info["error"] is None and info["content"][0]["text"] == "hello a"
        _, _, _, _, info = env.step({"tool": "write_file", "arguments": {"path": f"{first}/x.txt", "content": "x"}})
        assert info["is_error"] or info["error"] is not None  # the last episode's workspace is not this server's root
        started += wait_for(lambda: env.spares.pids)
    finally:
        env.close()
    assert not any(alive(p) for p in started) and list(setup["tmp"].iterdir()) == []


@pytest.mark.thirdparty
def test_ctrl_c_to_the_job_s_process_group_leaves_no_npx_server_filesystem(setup: dict[str, Path],
                                                                           tmp_path: Path) -> None:
    from conftest import npm_bin

    npm_bin("mcp-server-filesystem")  # fills the npm cache npx resolves from
    server = '+env.servers.s="npx -y @modelcontextprotocol/server-filesystem {workspace}"'
    seen = _kill_job_mid_run(setup, tmp_path, server, ctrl_c=True)
    wait_for(lambda: not _processes_naming(str(setup["tmp"])) and not any(_still_ours(p, str(tmp_path)) for p in seen),
             bound=120)
    assert list(setup["tmp"].iterdir()) == []  # the job removed every workspace, the spares' too
