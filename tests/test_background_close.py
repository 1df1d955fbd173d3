"""A reset does not wait for the last episode's server to exit (issue 40): the old ``{workspace}`` server is closed in
the background, holding a unit of the spare budget until it has really exited, so a slot never runs more than
``N + spare_servers`` servers; its workspace is neither reused nor removed while it runs.

The server is ``tests/servers/pid_server.py`` in its lingering mode: once its stdin closes it writes into its
workspace (if it is still there) and stays alive, counting the live servers from ``/proc``, until the test opens its
gate. Nothing here depends on timing: while a gate is shut the old server is alive, whatever the machine's load (the
transport's wait before SIGTERM is raised for the test so that only the gate ends it)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_spare_servers import alive, pids, wait_for

from mcp_gym import MCPEnv, Stdio
from mcp_gym.cli import main
from mcp_gym.client import _stdio

PID_SERVER = ROOT / "tests" / "servers" / "pid_server.py"


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Folders ``pids``, ``notes``, ``tmp`` (where workspaces are made) and fixtures ``a`` and ``b``."""
    import tempfile

    folders = {name: tmp_path / name for name in ("pids", "notes", "tmp", "a", "b")}
    for folder in folders.values():
        folder.mkdir()
    for name in ("a", "b"):
        (folders[name] / "in.txt").write_text(f"hello {name}")
    monkeypatch.setattr(tempfile, "tempdir", str(folders["tmp"]))
    monkeypatch.setattr(_stdio, "_STOP_GRACE", 600.0)  # only the gate ends a lingering server (no SIGTERM)
    return folders


def make_env(f: dict[str, Path], spare_servers: int = 1, linger: str = "gate") -> MCPEnv:
    tasks = [{"id": "a1", "prompt": "p", "fixture": str(f["a"])}, {"id": "a2", "prompt": "p", "fixture": str(f["a"])},
             {"id": "b1", "prompt": "p", "fixture": str(f["b"])}]
    server = Stdio(command=sys.executable, args=[str(PID_SERVER), "{workspace}", str(f["pids"]), str(f["notes"]),
                                                 linger], connect_timeout=120)
    return MCPEnv({"s": server}, tasks, spare_servers=spare_servers)


def step(env: MCPEnv, tool: str, **arguments: Any) -> str:
    _, _, _, _, info = env.step({"tool": tool, "arguments": arguments})
    assert info["error"] is None, info["error"]
    return str(info["content"][0]["text"])


def exit_note(f: dict[str, Path], pid: int) -> dict[str, Any]:
    return dict(json.loads(wait_for(lambda: (f["notes"] / f"{pid}.exit").is_file() and
                                    (f["notes"] / f"{pid}.exit").read_text())))


def live(f: dict[str, Path]) -> set[int]:
    return {p for p in pids(f["pids"]) if alive(p)}


def open_gate(f: dict[str, Path], pid: int | str) -> None:
    (f["notes"] / f"{pid}.go").touch()


@pytest.mark.slow  # Python servers started per episode: 8-9 s at load 3 (the fast lane stays under 5 min)
def test_a_reset_takes_the_spare_while_the_old_server_still_exits_and_the_bound_holds(setup: dict[str, Path]) -> None:
    """Each reset returns on the spare while the old server lingers (its gate shut): the old one holds the spare's
    unit, so no new spare starts and exactly two servers live (N + spare_servers = 1 + 1); its workspace is still
    there, and the new episode's holds only the fixture. Once the old one exits, its workspace goes and the next
    spare starts."""
    env = make_env(setup)
    try:
        env.reset(options={"task_id": "a1"})
        spare = wait_for(lambda: env.spares.pids)
        for episode in range(1, 4):
            old, old_ws = env.host.connections["s"].pid, env.workspace
            assert old is not None and old_ws is not None
            step(env, "write_file", name="mine.txt", content=f"episode {episode - 1}")
            env.reset(options={"task_id": "a2"})
            assert env.spares.taken == episode and env.host.connections["s"].pid == spare[0]
            assert env.spares.retiring_pids == [old]  # the reset did not wait for it: it lingers, gate shut
            assert env.spares.pids == [] and env.spares.units.used == 1  # its unit: no spare meanwhile
            assert live(setup) == {old, spare[0]}
            assert old_ws.is_dir() and (old_ws / "mine.txt").is_file()  # kept while its server may write there
            assert env.workspace is not None and env.workspace != old_ws
            assert sorted(p.name for p in env.workspace.iterdir()) == ["in.txt"]
            assert step(env, "read_file", name="in.txt") == "hello a"
            open_gate(setup, old)
            assert exit_note(setup, old) == {"workspace": True, "live_max": 2}  # it wrote late.txt into its own
            wait_for(lambda pid=old: not alive(pid))
            spare = wait_for(lambda: env.spares.pids)  # the unit freed: the next spare
            wait_for(lambda ws=old_ws: not ws.exists())  # removed once its server is gone
            assert sorted(p.name for p in env.workspace.iterdir()) == ["in.txt"]  # nothing of the old server's
        (setup["notes"] / "all.go").touch()
    finally:
        (setup["notes"] / "all.go").touch()
        env.close()
    assert not live(setup) and list(setup["tmp"].iterdir()) == []
    assert max(int(p.read_text()) for p in setup["notes"].glob("*.start")) <= 2


@pytest.mark.slow  # four Python servers started: about 5 s of CPU
def test_a_wrong_forecast_s_spare_exits_in_the_background_holding_its_unit(setup: dict[str, Path]) -> None:
    """A reset whose task is not the one forecast does not wait for the spare made for the forecast one: that spare
    (its gate shut: alive after its stdin closed, whatever the timing) is still running when the reset returns, and
    holds its unit until it has exited (no spare for the next episode meanwhile: N + spare_servers = 2 servers). The
    old server, no unit free for it, is closed by the reset (its gate open: it exits at once)."""
    env = make_env(setup)
    # before this change the reset waited for the spare, which only its gate ends: that hang is bounded by opening
    # every gate after 60 s, and the spare then is gone when the reset returns (the test fails, not hangs)
    unhang = threading.Timer(60.0, (setup["notes"] / "all.go").touch)
    try:
        env.reset(options={"task_id": "a1", "next_task_id": "b1"})
        spare = wait_for(lambda: env.spares.pids)
        old = env.host.connections["s"].pid
        open_gate(setup, old)
        unhang.start()
        env.reset(options={"task_id": "a2"})
        unhang.cancel()
        new = env.host.connections["s"].pid
        assert env.spares.taken == 0 and new not in (old, *spare)
        assert alive(spare[0]) and not (setup["notes"] / f"{spare[0]}.exit").exists()  # it did not wait for it
        assert env.spares.pids == [] and env.spares.units.used == 1  # the leaving spare holds its unit
        assert live(setup) == {new, spare[0]}
        assert step(env, "read_file", name="in.txt") == "hello a"
        open_gate(setup, spare[0])
        assert exit_note(setup, spare[0]) == {"workspace": True, "live_max": 2}
        nxt = wait_for(lambda: env.spares.pids and set(env.spares.pids) <= live(setup) and env.spares.pids)
        assert live(setup) == {new, *nxt}  # the unit freed once the spare was gone: the next spare
    finally:
        unhang.cancel()
        (setup["notes"] / "all.go").touch()
        env.close()
    assert not live(setup) and list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_fresh_start_also_leaves_the_old_server_to_exit_in_the_background(setup: dict[str, Path]) -> None:
    """A task with another fixture gets a fresh server (the spare for a's is stopped, its unit freed): that unit
    covers the old server, which exits while the new one starts; its workspace stays until it is gone."""
    env = make_env(setup)
    try:
        env.reset(options={"task_id": "a1"})
        spare = wait_for(lambda: env.spares.pids)
        old, old_ws = env.host.connections["s"].pid, env.workspace
        open_gate(setup, spare[0])  # the spare stopped for b1 exits at once
        env.reset(options={"task_id": "b1"})
        new = env.host.connections["s"].pid
        assert env.spares.taken == 0 and new not in (old, spare[0])
        assert env.spares.retiring_pids == [old] and env.spares.pids == [] and env.spares.units.used == 1
        assert old_ws is not None and old_ws.is_dir()
        assert step(env, "read_file", name="in.txt") == "hello b"
        open_gate(setup, old)
        assert exit_note(setup, old)["workspace"] is True
        spare = wait_for(lambda: env.spares.pids and set(env.spares.pids) <= live(setup) and env.spares.pids)
        wait_for(lambda: not old_ws.exists())
        assert live(setup) == {new, *spare}
    finally:
        (setup["notes"] / "all.go").touch()
        env.close()
    assert not live(setup) and list(setup["tmp"].iterdir()) == []


def test_close_waits_for_the_servers_still_exiting(setup: dict[str, Path]) -> None:
    """env.close() returns only once the old servers exiting in the background are gone and their workspaces
    removed."""
    env = make_env(setup)
    env.reset(options={"task_id": "a1"})
    wait_for(lambda: env.spares.pids)
    old = env.host.connections["s"].pid
    env.reset(options={"task_id": "a2"})
    assert env.spares.retiring_pids == [old]
    (setup["notes"] / "all.go").touch()
    env.close()
    assert not live(setup) and list(setup["tmp"].iterdir()) == []
    assert all(json.loads(p.read_text())["workspace"] for p in setup["notes"].glob("*.exit"))


@pytest.mark.slow  # 11 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_an_old_server_that_never_exits_is_terminated_in_the_background(setup: dict[str, Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that does not exit when its stdin closes (its gate never opens) is stopped by SIGTERM after the
    transport's bounded wait (0.5 s here), in the background; its unit frees once it is gone (the next spare starts)
    and so does its workspace."""
    monkeypatch.setattr(_stdio, "_STOP_GRACE", 0.5)
    env = make_env(setup)
    try:
        env.reset(options={"task_id": "a1"})
        wait_for(lambda: env.spares.pids)
        old, old_ws = env.host.connections["s"].pid, env.workspace
        env.reset(options={"task_id": "a2"})
        assert old is not None and old_ws is not None and env.spares.taken == 1
        wait_for(lambda: not alive(old))
        spare = wait_for(lambda: env.spares.pids and set(env.spares.pids) <= live(setup) and env.spares.pids)
        wait_for(lambda: not old_ws.exists())
        assert not (setup["notes"] / f"{old}.exit").exists()  # it never got to exit on its own: it was terminated
        assert live(setup) == {env.host.connections["s"].pid, *spare}
    finally:
        (setup["notes"] / "all.go").touch()
        env.close()
    assert not live(setup) and list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
@pytest.mark.parametrize("spare_servers", [0, 1])
def test_no_workspace_is_removed_before_its_server_exits(setup: dict[str, Path], spare_servers: int) -> None:
    """With the pool on or off, every server finds its workspace still there once its stdin has closed (a server
    writing as it exits never writes into a removed folder, nor into the next episode's)."""
    (setup["notes"] / "all.go").touch()
    env = make_env(setup, spare_servers=spare_servers)
    served = set()
    try:
        for task in ("a1", "a2", "b1", "a1"):
            env.reset(options={"task_id": task})
            assert env.workspace is not None and "late.txt" not in [p.name for p in env.workspace.iterdir()]
            served.add(env.host.connections["s"].pid)
    finally:
        env.close()
    notes = {int(p.stem): json.loads(p.read_text()) for p in setup["notes"].glob("*.exit")}
    assert len(served) == 4 and served <= set(notes) <= set(pids(setup["pids"])), (served, notes)
    assert all(n["workspace"] for n in notes.values()), notes
    # A spare the close found still starting is stopped before it serves (killed before its pipes were connected, or
    # its stdin closed in the handshake): it may leave no note, depending on how far it got (a fresh-clone CI run: 5
    # notes of 6 servers). At most the pool's one is such; every server that served an episode noted its exit.
    assert len(set(pids(setup["pids"])) - set(notes)) <= spare_servers, (notes, pids(setup["pids"]))
    assert not live(setup) and list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # the heavy lane: the fast lane stays under 5 min
def test_a_job_at_concurrency_2_never_runs_more_than_3_servers(setup: dict[str, Path], tmp_path: Path) -> None:
    """Two slots, spare_servers=1 (job-wide): every server counts the live servers from /proc when it starts and
    while it exits (lingering 0.3 s after its stdin closes, so an old server overlaps whatever starts meanwhile): no
    count exceeds N + spare_servers = 3, whatever the timing (a count sees only processes that exist)."""
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "prompt": "Write out.txt.", "fixture": "a",
             "grader": {"kind": "files", "expect": {"out.txt": f"text {i}"}},
             "solution": [{"tool": "write_file", "arguments": {"name": "out.txt", "content": f"text {i}"}}]}
            for i in range(2)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "a" / "in.txt").write_text("hello a")
    server = (f'+env.servers.s="{sys.executable} {PID_SERVER} {{workspace}} {setup["pids"]} {setup["notes"]} '
              '0.3"')
    assert main(["eval", "env=custom", server, f"env.tasks={tasks}", "policy=oracle", "samples=3",
                 "launcher.num_envs=2", "launcher.progress=false", "plots=false", f"out={tmp_path / 'run'}"]) == 0
    started = [int(p.read_text()) for p in setup["notes"].glob("*.start")]
    exited = [json.loads(p.read_text()) for p in setup["notes"].glob("*.exit")]
    assert len(started) == len(exited) == len(pids(setup["pids"])) >= 6
    assert max(started) <= 3 and max(n["live_max"] for n in exited) <= 3, (started, exited)
    assert all(n["workspace"] for n in exited)
    assert not live(setup) and list(setup["tmp"].iterdir()) == []
