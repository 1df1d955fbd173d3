"""Re-rooting a warm ``server-filesystem`` to the next episode's workspace over MCP roots (issue 40): the pool keeps
one server per env and moves its root instead of starting a server per episode, only where that is provably the same
as a fresh start (``mcp_gym/_reroot.py``). Real npm server, real files; no timing assumptions (bounded polls only)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_spare_servers import alive

from mcp_gym import MCPEnv, Stdio
from mcp_gym._reroot import rerootable_template

pytestmark = pytest.mark.thirdparty


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """``tmp`` (where workspaces are made), fixture ``a`` (``in.txt``, ``sub/deep.txt``), ``other`` (a second dir)."""
    f = {name: tmp_path / name for name in ("tmp", "a", "other")}
    for folder in f.values():
        folder.mkdir()
    (f["a"] / "in.txt").write_text("hello a")
    (f["a"] / "sub").mkdir()
    (f["a"] / "sub" / "deep.txt").write_text("deep")
    monkeypatch.setattr(tempfile, "tempdir", str(f["tmp"]))
    return f


def fs_env(f: dict[str, Path], args: list[str] | None = None, spare_servers: int = 1) -> MCPEnv:
    from conftest import npm_bin

    server = Stdio(command=npm_bin("mcp-server-filesystem"), args=args or ["{workspace}"], connect_timeout=120)
    tasks = [{"id": f"t{i}", "prompt": "p", "fixture": str(f["a"])} for i in range(6)]
    return MCPEnv({"fs": server}, tasks, spare_servers=spare_servers)


def call(env: MCPEnv, tool: str, **arguments: Any) -> dict[str, Any]:
    _, _, _, _, info = env.step({"tool": tool, "arguments": arguments})
    return dict(info)


def text(info: dict[str, Any]) -> str:
    assert info["error"] is None and not info["is_error"], info
    return str(info["content"][0]["text"])


def test_a_warm_server_is_re_rooted_and_the_old_workspace_is_unreachable(folders: dict[str, Path]) -> None:
    env = fs_env(folders)
    pids: set[int] = set()
    try:
        for i in range(3):  # a cold start (the roots capability offered, roots/list refused until checked), then
            env.reset(options={"task_id": f"t{i}"})  # re-roots
            pids.add(env.host.connections["fs"].pid or 0)
        assert env.spares.rerooter.rerooted == 2 and env.spares.rerooter.learned == {"fs"} and len(pids) == 1
        warm = env.host.connections["fs"].pid
        old = env.workspace
        assert old is not None
        text(call(env, "write_file", path="{workspace}/in.txt", content="changed by episode 3"))
        assert (old / "in.txt").read_text() == "changed by episode 3"
        env.reset(options={"task_id": "t3"})
        assert env.spares.rerooter.rerooted == 3 and env.host.connections["fs"].pid == warm  # the same process
        assert env.workspace is not None and env.workspace != old and not old.exists()
        assert text(call(env, "read_text_file", path="{workspace}/in.txt")) == "hello a"  # a fresh copy
        assert text(call(env, "read_text_file", path="{workspace}/sub/deep.txt")) == "deep"
        assert text(call(env, "list_allowed_directories")) == "Allowed directories:\n{workspace}"  # the path, masked
        old.mkdir()  # the old root exists again, with a file in it: the server must still refuse it
        (old / "in.txt").write_text("secret")
        for tool, args in [("read_text_file", {"path": f"{old}/in.txt"}), ("list_directory", {"path": str(old)}),
                           ("write_file", {"path": f"{old}/x.txt", "content": "x"})]:
            info = call(env, tool, **args)
            assert info["is_error"] or info["error"] is not None, (tool, info)
            assert "secret" not in str(info["content"])
        assert not (old / "x.txt").exists()
        shutil.rmtree(old)  # the test's own folder
        text(call(env, "write_file", path="{workspace}/out.txt", content="y"))
        assert (env.workspace / "out.txt").read_text() == "y"  # it serves the new workspace
    finally:
        env.close()
    assert not any(alive(p) for p in pids) and list(folders["tmp"].iterdir()) == []


def test_the_server_modifying_a_fixture_file_never_changes_the_fixture(folders: dict[str, Path]) -> None:
    env = fs_env(folders)
    try:
        for i in range(5):
            env.reset(options={"task_id": f"t{i}"})
            assert text(call(env, "read_text_file", path="{workspace}/in.txt")) == "hello a"
            text(call(env, "write_file", path="{workspace}/in.txt", content=f"episode {i}"))
            call(env, "edit_file", path="{workspace}/sub/deep.txt", edits=[{"oldText": "deep", "newText": "edited"}])
            text(call(env, "create_directory", path="{workspace}/new"))
            assert env.workspace is not None and (env.workspace / "sub" / "deep.txt").read_text() == "edited"
        assert env.spares.rerooter.rerooted == 4
    finally:
        env.close()
    assert (folders["a"] / "in.txt").read_text() == "hello a" and (folders["a"] / "sub" / "deep.txt").read_text() == \
        "deep"
    assert sorted(p.name for p in folders["a"].iterdir()) == ["in.txt", "sub"]


def test_a_server_rooted_in_more_than_the_workspace_is_never_re_rooted(folders: dict[str, Path]) -> None:
    env = fs_env(folders, args=["{workspace}", str(folders["other"])])
    try:
        pids = []
        for i in range(4):
            env.reset(options={"task_id": f"t{i}"})
            pids.append(env.host.connections["fs"].pid)
        assert env.spares.rerooter.learned == set() and env.spares.rerooter.rerooted == 0
        assert len(set(pids)) == 4  # a server per episode (taken from the spares)
        allowed = text(call(env, "list_allowed_directories"))
        assert str(folders["other"].resolve()) in allowed  # both roots kept: the roots capability was never offered
    finally:
        env.close()


def test_spare_servers_0_neither_re_roots_nor_keeps_a_server(folders: dict[str, Path]) -> None:
    env = fs_env(folders, spare_servers=0)
    try:
        pids = []
        for i in range(3):
            env.reset(options={"task_id": f"t{i}"})
            pids.append(env.host.connections["fs"].pid)
        assert len(set(pids)) == 3 and env.spares.rerooter.rerooted == 0
    finally:
        env.close()


def test_which_command_lines_may_be_re_rooted() -> None:
    ok = Stdio(command="mcp-server-filesystem", args=["{workspace}"])
    assert rerootable_template(ok)
    npx = ["-y", "@modelcontextprotocol/server-filesystem", "{workspace}"]
    assert rerootable_template(Stdio(command="npx", args=npx, env={"A": "b"}))
    for bad in (Stdio(command="x", args=["{workspace}/sub"]), Stdio(command="x", args=["{workspace}", "{workspace}"]),
                Stdio(command="x", args=["{workspace}"], cwd="{workspace}"),
                Stdio(command="x", args=["{workspace}"], env={"HOME": "{workspace}"}),
                Stdio(command="x", args=["--root={workspace}"])):
        assert not rerootable_template(bad), bad
