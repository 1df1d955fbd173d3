"""A bundled server's reset that cannot be done says why (issue 26, item 13): the SDK hides an exception's text unless
it is raised as a tool error, so an unknown task id used to reach the env as a bare "Error executing tool
mcp_gym_reset". Real servers over Streamable HTTP (``mcp-gym serve``'s transport), a real :class:`MCPEnv`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import start_http_server, stop_process

from mcp_gym import MCPEnv, Stdio
from mcp_gym.tasks import Task

pytestmark = pytest.mark.xdist_group("bundled_reset_errors")  # one worker: `http_sql`: an HTTP server made once


@pytest.fixture(scope="module")
def http_sql() -> Iterator[str]:
    """URL of the bundled SQL server over Streamable HTTP on 127.0.0.1."""
    proc, url = start_http_server("mcp_gym.servers.sql")
    try:
        yield url
    finally:
        stop_process(proc)


def test_an_unknown_task_id_is_named_in_the_reset_error(http_sql: str) -> None:
    env = MCPEnv({"sql": http_sql}, [Task(id="my-own-7", prompt="How many customers are there?")])
    try:
        _, info = env.reset(seed=0)
        message = info["error"]["message"]
        assert info["error"]["tool"] == "mcp_gym_reset" and info["error"]["server"] == "sql"
        assert "unknown sql task 'my-own-7'" in message, message
    finally:
        env.close()


def test_an_env_without_tasks_resets_a_bundled_server_to_its_default(http_sql: str) -> None:
    env = MCPEnv({"sql": http_sql})
    try:
        _, info = env.reset(seed=3)
        assert info.get("error") is None, info.get("error")
        _, _, _, _, info = env.step({"tool": "list_tables", "arguments": {}})
        assert info.get("error") is None, info.get("error")  # the episode is held: its reset worked
    finally:
        env.close()


def test_a_failing_reset_of_a_stdio_server_keeps_its_reason() -> None:
    env = MCPEnv({"sql": Stdio.python_module("mcp_gym.servers.sql")}, [Task(id="sql-9999", prompt="x")])
    try:
        _, info = env.reset(seed=0)
        assert "unknown sql task 'sql-9999'" in info["error"]["message"], info["error"]
    finally:
        env.close()
