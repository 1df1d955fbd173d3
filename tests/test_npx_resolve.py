"""A server run by ``npx`` starts through npx once; its later starts run the program npx ran, directly, with the same
arguments, environment and directory (``mcp_gym.client._npx``, issue 40), and only where that is checked to be so.

The local tests run ``tests/servers/pid_server.py`` through ``npx -y <a local package>`` whose bin is a shell script
(``exec python pid_server.py ...``): the server writes its own pid, so a start that ran npx (the connection's process
is npm's) and one that ran the server directly (the connection's process is the server) tell themselves apart. The
third-party tests run npm ``server-filesystem`` through ``npx -y`` (resolved from the npm cache the tests fill)."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_spare_servers
from test_spare_servers import PID_SERVER, _eval_args, alive, pids, wait_for

from mcp_gym import MCPEnv, Stdio
from mcp_gym.client import _npx

setup = test_spare_servers.setup  # folders pids, tmp (the workspaces) and fixtures a, b, c


@pytest.fixture(autouse=True)
def _fresh_resolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's first start goes through npx (nothing learned by an earlier test in this process)."""
    monkeypatch.setattr(_npx, "resolutions", {})
    monkeypatch.setattr(_npx, "_said", set())


def package(folder: Path, body: str) -> Path:
    """A local npm package whose bin is the shell script ``body`` (npx installs it into its cache, offline)."""
    pkg = folder / "pkg"
    pkg.mkdir()
    (pkg / "package.json").write_text(json.dumps({"name": "mcp-gym-test-wrapper", "version": "1.0.0",
                                                  "bin": {"mcp-gym-test-wrapper": "wrapper.sh"}}))
    (pkg / "wrapper.sh").write_text(f"#!/bin/sh\n{body}\n")
    (pkg / "wrapper.sh").chmod(0o755)
    return pkg


def server(first: str, second: str) -> str:
    """``exec python pid_server.py FIRST SECOND`` (``$1``/``$2`` of the wrapper, or ``"$@"`` as ``first``)."""
    return f"exec {shlex.quote(sys.executable)} {shlex.quote(str(PID_SERVER))} {first} {second}".strip()


def make(setup: dict[str, Path], pkg: Path, args: list[str], **kw: object) -> MCPEnv:
    spec = Stdio("npx", ["-y", str(pkg), *args], connect_timeout=120, **kw)  # type: ignore[arg-type]
    tasks = [{"id": "a", "prompt": "p", "fixture": str(setup["a"])}]
    return MCPEnv({"s": spec}, tasks, spare_servers=0)


def read_in(env: MCPEnv) -> str:
    _, _, _, _, info = env.step({"tool": "read_file", "arguments": {"name": "in.txt"}})
    assert info["error"] is None, info["error"]
    return str(info["content"][0]["text"])


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_a_second_start_runs_the_server_npx_ran_without_npx(setup: dict[str, Path], tmp_path: Path) -> None:
    env = make(setup, package(tmp_path, server('"$@"', "")), ["{workspace}", str(setup["pids"])])
    conns = []
    try:
        for _ in range(3):  # the pool is off: every reset starts a server in a fresh workspace
            env.reset(options={"task_id": "a"})
            conns.append(env.host.connections["s"].pid)
            assert read_in(env) == "hello a"
    finally:
        env.close()
    servers = pids(setup["pids"])
    assert len(servers) == 3
    assert conns[0] not in servers  # the first start: the connection's process is npx
    assert conns[1] in servers and conns[2] in servers  # later ones: the server itself, no npx process
    assert not any(alive(p) for p in [*servers, *conns]) and list(setup["tmp"].iterdir()) == []


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_resolve_npx_false_keeps_npx(setup: dict[str, Path], tmp_path: Path) -> None:
    env = make(setup, package(tmp_path, server('"$@"', "")), ["{workspace}", str(setup["pids"])], resolve_npx=False)
    try:
        env.reset(options={"task_id": "a"})
        env.reset(options={"task_id": "a"})
        assert env.host.connections["s"].pid not in pids(setup["pids"])
        assert read_in(env) == "hello a"
    finally:
        env.close()
    assert _npx.resolutions == {}


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_arguments_that_do_not_map_back_keep_npx(setup: dict[str, Path], tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The wrapper swaps its two arguments: the server's argv does not end with what npx was given, so a direct start
    could not put the next workspace where npx would: every start runs npx, said once."""
    caplog.set_level(logging.INFO, logger="mcp_gym.client")
    env = make(setup, package(tmp_path, server('"$2"', '"$1"')), [str(setup["pids"]), "{workspace}"])
    try:
        for _ in range(2):
            env.reset(options={"task_id": "a"})
            assert env.host.connections["s"].pid not in pids(setup["pids"])  # npx's process, not the server
            assert read_in(env) == "hello a"
    finally:
        env.close()
    said = [r.getMessage() for r in caplog.records if "keeps starting through npx" in r.getMessage()]
    assert len(said) == 1 and "does not end with the arguments npx was given" in said[0], said
    assert not any(alive(p) for p in pids(setup["pids"]))


def test_npx_command_lines_are_parsed_or_refused() -> None:
    split = _npx._split
    assert split("npx", ["-y", "pkg", "a", "-b"]) == (("-y", "pkg"), ("a", "-b"))
    assert split("/usr/bin/npx", ["--yes", "--registry", "R", "-p", "p2", "bin", "x"]) == \
        (("--yes", "--registry", "R", "-p", "p2", "bin"), ("x",))
    assert split("npm", ["exec", "--yes", "--", "pkg", "x"]) == (("exec", "--yes", "--", "pkg"), ("x",))
    assert split("npm", ["install", "pkg"]) is None and split("node", ["npx"]) is None
    assert isinstance(split("npx", ["-c", "echo hi"])[0], str)  # a shell command: not parsed, npx runs it
    assert isinstance(split("npx", ["-y"])[0], str)


def _direct_children_of(parent: int, folder: Path) -> list[int]:
    """Servers in ``folder`` (their pid files) whose parent is ``parent``: started by it directly, not by npx."""
    found = []
    for pid in pids(folder):
        try:
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent and alive(pid):
                found.append(pid)
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.slow  # 8 s: the heavy lane (test_spare_servers kills jobs in the fast lane)
@pytest.mark.parametrize("stop", ["sigkill", "ctrl_c"])
def test_no_server_outlives_a_job_whose_servers_run_directly(setup: dict[str, Path], tmp_path: Path,
                                                             stop: str) -> None:
    """An eval job over an npx server: its spares run the server directly; killed (SIGKILL) or interrupted (Ctrl-C
    to its process group) once they do, it leaves no server running."""
    pkg = package(tmp_path, server('"$@"', ""))
    args = _eval_args(setup, tmp_path, samples=200)
    args[2] = f'+env.servers.s="npx -y {pkg} {{workspace}} {setup["pids"]}"'
    env = {**os.environ, "TMPDIR": str(setup["tmp"])}
    proc = subprocess.Popen([sys.executable, "-m", "mcp_gym.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        wait_for(lambda: _direct_children_of(proc.pid, setup["pids"]) or proc.poll() is not None, bound=300)
        assert proc.poll() is None
        if stop == "ctrl_c":
            os.killpg(proc.pid, signal.SIGINT)
            # 130, or killed by SIGINT after its clean-up (a Ctrl-C in the job's set-up: see test_spare_servers'
            # _kill_job_mid_run); a shell reports both as 130
            assert proc.wait(timeout=120) in (130, -signal.SIGINT)
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for(lambda: not any(alive(p) for p in pids(setup["pids"])), bound=120)


def _tree(pid: int) -> list[int]:
    """``pid``'s descendants (a scan of /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _process(pid: int) -> dict[str, object]:
    proc = Path(f"/proc/{pid}")
    return {"exe": os.readlink(proc / "exe"), "cwd": os.readlink(proc / "cwd"),
            "argv": (proc / "cmdline").read_bytes().split(b"\0")[:-1],
            "env": sorted((proc / "environ").read_bytes().split(b"\0"))}


@pytest.mark.slow  # npm server-filesystem; fast: test_a_second_start_runs_the_server_npx_ran_without_npx
@pytest.mark.thirdparty
def test_npx_server_filesystem_runs_directly_from_its_second_start_exactly_as_npx_ran_it(setup: dict[str, Path]) \
        -> None:
    """Pool off: each reset starts server-filesystem in the episode's own workspace; from the second on without npx,
    the same program, arguments (the new workspace in the old one's place), environment and directory, with the same
    tools and allowed directory."""
    from conftest import npm_bin

    npm_bin("mcp-server-filesystem")  # fills the npm cache npx resolves from
    spec = Stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "{workspace}"], connect_timeout=120)
    env = MCPEnv({"fs": spec}, [{"id": "a", "prompt": "p", "fixture": str(setup["a"])}], spare_servers=0)
    seen: list[dict[str, object]] = []
    started: list[int] = []
    try:
        for _ in range(2):
            env.reset(options={"task_id": "a"})
            conn = env.host.connections["fs"]
            assert conn.pid is not None
            tree = _tree(conn.pid)
            started += [conn.pid, *tree]
            leaves = [p for p in [conn.pid, *tree] if not _tree(p)]
            assert len(leaves) == 1
            seen.append({**_process(leaves[0]), "tree": len(tree), "workspace": str(env.workspace),
                         "tools": sorted(env.host.catalogue), "text": read_text(env)})
            _, _, _, _, info = env.step({"tool": "list_allowed_directories", "arguments": {}})
            assert info["content"][0]["text"].splitlines()[1:] == ["{workspace}"]  # (the workspace, masked)
            assert conn.spec.args[:2] == ("-y", "@modelcontextprotocol/server-filesystem")  # the spec keeps npx
    finally:
        env.close()
    first, second = seen
    assert first["tree"] >= 1 and second["tree"] == 0  # npx and its shell, then the server alone
    assert first["workspace"] != second["workspace"]
    assert second["argv"] == [*first["argv"][:-1], second["workspace"].encode()]  # type: ignore[index]
    assert first["argv"][-1] == first["workspace"].encode()  # type: ignore[index]
    assert (second["exe"], second["cwd"], second["env"]) == (first["exe"], first["cwd"], first["env"])
    assert second["tools"] == first["tools"] and second["text"] == first["text"] == "hello a"
    assert not any(alive(p) for p in started)


def read_text(env: MCPEnv) -> str:
    _, _, _, _, info = env.step({"tool": "read_text_file", "arguments": {"path": "{workspace}/in.txt"}})
    assert info["error"] is None, info["error"]
    return str(info["content"][0]["text"])


def test_env_resolve_npx_false_reaches_every_stdio_server_of_a_job_s_env() -> None:
    from mcp_gym.jobs.config import env_config, server_specs

    server = '+env.servers.fs="npx -y @modelcontextprotocol/server-filesystem {workspace}"'
    assert server_specs(env_config("custom", overrides=[server]))["fs"].resolve_npx is True  # type: ignore[union-attr]
    off = server_specs(env_config("custom", overrides=[server, "env.resolve_npx=false"]))["fs"]
    assert isinstance(off, Stdio) and off.resolve_npx is False and off.args[-1] == "{workspace}"


# Heavy lane (5 s: three npx starts); its fast cover: test_a_second_start_runs_the_server_npx_ran_without_npx
# (the resolution) and test_arguments_that_do_not_map_back_keep_npx (a refused resolution keeps npx).
@pytest.mark.slow
def test_a_resolution_whose_files_are_gone_runs_npx_again(setup: dict[str, Path], tmp_path: Path) -> None:
    """The server npx ran is a copy of the pid server; once that copy is gone, the next start runs npx (whose wrapper
    then runs the original)."""
    copy = tmp_path / "copy_server.py"
    copy.write_text(PID_SERVER.read_text())
    py, copied = shlex.quote(sys.executable), shlex.quote(str(copy))
    wrapper = f'[ -f {copied} ] && exec {py} {copied} "$@"\n' + server('"$@"', "")
    env = make(setup, package(tmp_path, wrapper), ["{workspace}", str(setup["pids"])])
    try:
        env.reset(options={"task_id": "a"})
        env.reset(options={"task_id": "a"})
        assert env.host.connections["s"].pid in pids(setup["pids"])  # resolved: the copy, run directly
        copy.unlink()
        env.reset(options={"task_id": "a"})
        assert env.host.connections["s"].pid not in pids(setup["pids"])  # npx again
        assert read_in(env) == "hello a"
    finally:
        env.close()
    assert not any(alive(p) for p in pids(setup["pids"]))


def test_without_proc_npx_runs_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = Stdio("npx", ["-y", "pkg", "{workspace}"])
    assert _npx.start_for("s", spec) is not None  # Linux: a first start that learns
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _npx.start_for("s", spec) is None
    assert _npx.start_for("s", Stdio("node", ["server.js"])) is None  # not npx at all
