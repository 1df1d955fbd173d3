"""A new user's first hour (issue 14): servers that fail or hang at start are loud, ids resolve, the CLI explains its
keys, and plotting jobs keep stdout clean."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import npm_bin

from mcp_gym import MCPEnv, ServerUnavailableWarning, Stdio
from mcp_gym.chat import ChatView
from mcp_gym.client.specs import InProcess
from mcp_gym.envs.counter.server import server as counter_server

ROOT = Path(__file__).resolve().parents[1]
TASKS = [{"id": "t1", "prompt": "Create hello.txt containing hi"}]


# -- a server that fails at start is reported loudly ------------------------------------------------------------------
def test_filesystem_server_on_a_missing_folder_is_reported_in_warning_info_and_first_observation(
        tmp_path: Path) -> None:
    missing = tmp_path / "workspace"  # never created: the real npm server refuses to start
    fs = Stdio(npm_bin("mcp-server-filesystem"), [str(missing)], connect_timeout=60)
    env = MCPEnv({"fs": fs, "counter": InProcess(counter_server)}, TASKS)
    try:
        with pytest.warns(ServerUnavailableWarning, match=r"server 'fs' is unavailable .*Cannot access directory"):
            obs, info = env.reset(seed=0)
        assert info["servers"]["fs"]["status"] == "failed"
        assert "Cannot access directory" in info["servers"]["fs"]["error"]
        assert [(e["kind"], e["server"]) for e in info["reset_errors"]] == [("server_dead", "fs")]
        assert info["error"] == info["reset_errors"][0]
        assert obs["result"].startswith("Error: server 'fs' is unavailable (failed: ")
        assert "its tools are not offered" in obs["result"]
        assert info["servers"]["counter"]["status"] == "ready"  # the other server goes on
        assert "counter__add" in env.action_space.tool_names
        # a chat agent sees the reason in its first user turn
        user = ChatView(obs["task"], obs["resources"], notice=obs["result"]).messages[1]["content"]
        assert user.startswith(TASKS[0]["prompt"]) and "server 'fs' is unavailable" in user
        # the folder appears: the next reset restarts the server and the notice is gone
        missing.mkdir()
        obs, info = env.reset(seed=1)
        assert info["servers"]["fs"]["status"] == "ready" and info["reset_errors"] == []
        assert obs["result"] == ""
        assert "fs__write_file" in env.action_space.tool_names
    finally:
        env.close()


def test_a_stdio_command_that_exits_is_reported_with_its_stderr() -> None:
    gone = Stdio(sys.executable, ["-c", "import sys; sys.exit('no such database: prod.db')"])
    env = MCPEnv({"db": gone}, TASKS)
    try:
        with pytest.warns(ServerUnavailableWarning, match="server 'db'.*no such database: prod.db"):
            obs, info = env.reset(seed=0)
        assert "no such database: prod.db" in obs["result"]
        assert info["reset_errors"][0]["server"] == "db"
        assert env.action_space.tool_names == ["submit"]
    finally:
        env.close()


# -- a server that never answers is announced, and not retried at once ------------------------------------------------
def test_a_server_that_never_answers_is_announced_and_not_retried_by_the_first_reset(
        caplog: pytest.LogCaptureFixture) -> None:
    mute = Stdio(sys.executable, ["-c", "import time; time.sleep(600)"], connect_timeout=1.5)
    caplog.set_level(logging.WARNING, logger="mcp_gym.client")
    env = MCPEnv({"mute": mute}, TASKS)
    try:
        waits = [r.getMessage() for r in caplog.records if "waiting for server" in r.getMessage()]
        assert waits == [f"mcp-gym: waiting for server 'mute' ({mute.describe()}) to answer the MCP handshake "
                         "(up to connect_timeout=1.5 s)"]
        with pytest.warns(ServerUnavailableWarning, match="could not connect within 1.5 s"):
            obs, info = env.reset(seed=0)
        messages = [r.getMessage() for r in caplog.records]
        assert sum("waiting for server 'mute'" in m for m in messages) == 1  # the first reset did not retry
        assert not any("restarting server" in m for m in messages)
        assert info["servers"]["mute"]["status"] == "failed"
        with pytest.warns(ServerUnavailableWarning):
            env.reset(seed=1)  # a later reset retries, and says so
        messages = [r.getMessage() for r in caplog.records]
        assert "mcp-gym: restarting server 'mute' (failed: could not connect within 1.5 s)" in messages
        assert sum("waiting for server 'mute'" in m for m in messages) == 2
    finally:
        env.close()


def test_the_waiting_line_reaches_stderr_without_logging_configured(tmp_path: Path) -> None:
    script = (
        "import sys, warnings\n"
        "from mcp_gym import MCPEnv, Stdio\n"
        "env = MCPEnv({'mute': Stdio(sys.executable, ['-c', 'import time; time.sleep(600)'], connect_timeout=1)},\n"
        "             [{'id': 't', 'prompt': 'p'}])\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mcp-gym: waiting for server 'mute'" in done.stderr
    assert done.stdout == ""


# -- gym.make ids -----------------------------------------------------------------------------------------------------
def test_gym_make_with_the_module_prefix_needs_no_import(tmp_path: Path) -> None:
    script = (
        "import gymnasium as gym\n"
        "try:\n"
        "    gym.make('mcp_gym/SQL-v0')\n"
        "except gym.error.Error as e:\n"
        "    print('bare id without import:', type(e).__name__)\n"
        "env = gym.make('mcp_gym:mcp_gym/SQL-v0')\n"
        "print('tools:', sorted(env.unwrapped.action_space.tool_names))\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    assert "bare id without import: NamespaceNotFound" in done.stdout
    assert "tools: ['describe_table', 'list_tables', 'query', 'submit']" in done.stdout
