"""MCPEnv over the bundled Counter server (diagnostics on) on all three transports: real MCP, no mocks."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import mcp_gym
from mcp_gym import Http, InProcess, InvalidAction, MCPEnv, Stdio, ToolCallFailed
from mcp_gym.envs import load_env_tasks
from mcp_gym.envs.counter.tasks import verify
from mcp_gym.servers.counter import make_server

TASKS = load_env_tasks("Counter")[:5]


def stdio_spec() -> Stdio:
    return Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")


@pytest.fixture(params=["inprocess", "stdio", "http"])
def any_env(request: pytest.FixtureRequest) -> MCPEnv:
    """The env on each transport."""
    yield from _env(request)


@pytest.fixture(params=["inprocess", pytest.param("stdio", marks=pytest.mark.slow),
                        pytest.param("http", marks=pytest.mark.slow)])
def env(request: pytest.FixtureRequest) -> MCPEnv:
    """The env in process (fast lane) and over stdio and HTTP (heavy lane): ``any_env`` runs every transport."""
    yield from _env(request)


def _env(request: pytest.FixtureRequest) -> Iterator[MCPEnv]:
    if request.param == "inprocess":
        spec = InProcess(make_server(diagnostics=True))
    elif request.param == "stdio":
        spec = stdio_spec()
    else:
        spec = Http(request.getfixturevalue("http_counter"))
    e = MCPEnv({"counter": spec}, TASKS, verifier=verify, call_timeout=60.0, observe_resources=["counter://state"])
    yield e
    e.close()


def test_episode_on_every_transport(any_env: MCPEnv) -> None:
    env = any_env
    obs, info = env.reset(seed=0, options={"task_id": TASKS[0].id})
    srv = info["servers"]["counter"]
    assert srv["status"] == "ready" and srv["name"] == "mcp-gym-counter" and srv["version"] == "1.0.0"
    assert srv["protocol_version"] == "2026-07-28"
    assert "add" in env.action_space.tool_names and "submit" in env.action_space.tool_names
    assert "mcp_gym_reset" not in env.action_space.tool_names and "bonus" not in env.action_space.tool_names
    target = TASKS[0].data["target"]
    assert obs["resources"]["counter://state"] == f"count=0 target={target}"
    total = 0.0
    for call in TASKS[0].solution[:-1]:
        obs, reward, terminated, truncated, info = env.step(call)
        total += reward
    assert terminated and not truncated and info["success"] is True
    assert total == pytest.approx(1.0 - 0.01 * (len(TASKS[0].solution) - 2))
    # resources/updated re-read the observed resource
    assert obs["resources"]["counter://state"] == f"count={target} target={target}"
    # a second episode on the same session starts from a clean state
    obs, info = env.reset(seed=1, options={"task_id": TASKS[1].id})
    assert obs["resources"]["counter://state"].startswith("count=0 ")


def test_tools_list_changed_updates_action_space(env: MCPEnv) -> None:
    env.reset(seed=0)
    _, _, _, _, info = env.step({"tool": "unlock_bonus", "arguments": {}})
    assert info["tools_changed"] is True
    assert "bonus" in env.action_space.tool_names
    assert env.unwrapped.catalogue_changes[-1]["step"] == 1
    _, reward, _, _, info = env.step({"tool": "bonus", "arguments": {}})
    assert reward == 0.5 and info["error"] is None
    env.reset(seed=0)  # the next episode no longer has it
    assert "bonus" not in env.action_space.tool_names


def test_error_observations(env: MCPEnv) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step({"tool": "fail", "arguments": {"message": "boom"}})
    assert info["is_error"] and info["error"]["kind"] == "tool_error" and "boom" in obs["result"]
    assert info["error"]["tool"] == "fail" and info["error"]["server"] == "counter"
    _, _, _, _, info = env.step({"tool": "rpc_error", "arguments": {}})
    assert info["error"]["kind"] == "jsonrpc" and info["error"]["code"] == -32602
    assert "rpc_error" in info["error"]["message"] and "counter" in info["error"]["message"]
    _, _, _, _, info = env.step({"tool": "nope", "arguments": {}})
    assert info["error"]["kind"] == "unknown_tool" and "add" in info["error"]["message"]
    obs, _, _, _, info = env.step({"tool": "add", "arguments": {"amount": 99}})
    assert info["error"]["kind"] == "invalid_arguments" and info["error"]["argument"] == "amount"
    assert "99" in obs["result"]
    _, _, _, _, info = env.step(["not", "a", "dict"])
    assert info["error"]["kind"] == "malformed"
    _, _, terminated, truncated, info = env.step({"tool": "echo", "arguments": {"text": "x" * 1_100_000}})
    assert info["error"]["kind"] == "too_large" and not terminated and not truncated
    _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "still alive"}})
    assert info["error"] is None and info["content"][0]["text"] == "still alive"


def test_timeout_and_progress(env: MCPEnv) -> None:
    env.reset(seed=0)
    _, _, _, _, info = env.step({"tool": "slow", "arguments": {"seconds": 0.3}})
    assert info["error"] is None and len(info["progress"]) >= 3
    env.call_timeout = 0.2
    _, _, terminated, truncated, info = env.step({"tool": "slow", "arguments": {"seconds": 2.0}})
    assert info["error"]["kind"] == "timeout" and info["error"]["tool"] == "slow"
    assert not terminated and not truncated
    env.call_timeout = 60.0  # a bound on hangs again
    _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "after timeout"}})
    assert info["error"] is None


def test_non_text_content_kept_in_info(env: MCPEnv) -> None:
    env.reset(seed=0)
    obs, _, _, _, info = env.step({"tool": "image", "arguments": {}})
    assert "[image: image/png" in obs["result"] and "a 1x1 pixel" in obs["result"]
    img = info["content"][0]
    assert img["type"] == "image" and img["mimeType"] == "image/png" and len(img["data"]) > 20


def test_sampling_and_elicitation_callables(env: MCPEnv) -> None:
    seen: list[str] = []

    def sampler(messages, params):
        seen.append(messages[0]["content"])
        return "forty-two"

    env.unwrapped.host.sampling = sampler
    env.unwrapped.host.elicitation = lambda message, schema, params: {"name": "Ada"}
    env.reset(seed=0)
    obs, _, _, _, info = env.step({"tool": "ask_llm", "arguments": {"prompt": "meaning of life?"}})
    assert seen == ["meaning of life?"] and "LLM said: forty-two" in obs["result"]
    obs, _, _, _, _ = env.step({"tool": "ask_user", "arguments": {}})
    assert "hello Ada" in obs["result"]


def test_sampling_refused_by_default() -> None:
    env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, ["t"])
    env.reset(seed=0)
    obs, _, _, _, info = env.step({"tool": "ask_llm", "arguments": {"prompt": "hi"}})
    assert info["error"] is not None and "sampling" in obs["result"]
    env.close()


def test_async_face_from_another_loop() -> None:
    async def main() -> float:
        env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, TASKS, verifier=verify)
        await env.areset(seed=0, options={"task_id": TASKS[2].id})
        total = 0.0
        for call in TASKS[2].solution:
            _, r, term, _, _ = await env.astep(call)
            total += float(r)
            if term:
                break
        await env.aclose()
        return total

    assert asyncio.run(main()) > 0.9


def test_called_from_several_threads() -> None:
    env = MCPEnv({"c": stdio_spec()}, ["t"])
    env.reset(seed=0)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            env.step({"tool": "echo", "arguments": {"text": "from a thread"}})
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    env.close()


def test_strict_mode_raises() -> None:
    env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, ["t"], strict=True)
    env.reset(seed=0)
    with pytest.raises(InvalidAction, match="unknown tool"):
        env.step({"tool": "nope", "arguments": {}})
    with pytest.raises(ToolCallFailed, match="rpc_error"):
        env.step({"tool": "rpc_error", "arguments": {}})
    env.close()


def test_server_crash_truncates_and_reset_restarts() -> None:
    env = MCPEnv({"c": stdio_spec()}, ["t"], call_timeout=10)
    env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step({"tool": "crash", "arguments": {}})
    assert truncated and not terminated and info["termination"] == "servers_dead"
    assert info["error"]["kind"] == "server_dead" and info["servers"]["c"]["status"] == "dead"
    _, info = env.reset(seed=0)
    assert info["servers"]["c"]["status"] == "ready"
    _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "back"}})
    assert info["error"] is None
    env.close()


def test_two_servers_one_failing_to_start() -> None:
    env = MCPEnv(
        {
            "good": InProcess(make_server()),
            "bad": Stdio(sys.executable, ["-c", "import sys; print('nope', file=sys.stderr); sys.exit(2)"]),
        },
        ["t"],
    )
    _, info = env.reset(seed=0)
    assert info["servers"]["good"]["status"] == "ready"
    assert info["servers"]["bad"]["status"] == "failed" and "nope" in info["servers"]["bad"]["error"]
    names = env.action_space.tool_names
    assert "good__add" in names and not any(n.startswith("bad__") for n in names)
    _, reward, _, _, info = env.step({"tool": "good__add", "arguments": {"amount": 1}})
    assert info["error"] is None and info["server"] == "good" and info["server_tool"] == "add"
    env.close()


def test_hung_server_fails_after_the_configured_connect_timeout() -> None:
    from mcp_gym.jobs.config import env_factory

    hung = f"{sys.executable} -c 'import time; time.sleep(120)'"  # never answers the handshake: any bound expires
    env = env_factory({"servers": {"hung": hung}, "connect_timeout": 0.5}, [])()
    assert env.host.connections["hung"].spec.connect_timeout == 0.5
    _, info = env.reset(seed=0)  # no exception: the server is reported and has no tools
    assert info["servers"]["hung"]["status"] == "failed"
    assert info["servers"]["hung"]["error"] == "could not connect within 0.5 s"
    assert env.action_space.tool_names == ["submit"]
    env.close()


def test_two_servers_one_dies_mid_episode() -> None:
    env = MCPEnv({"a": stdio_spec(), "b": InProcess(make_server(diagnostics=True))}, ["t"])
    env.reset(seed=0)
    _, _, _, truncated, info = env.step({"tool": "a__crash", "arguments": {}})
    assert not truncated and info["error"]["kind"] == "server_dead" and info["tools_changed"]
    assert not any(n.startswith("a__") for n in env.action_space.tool_names)
    _, _, _, _, info = env.step({"tool": "b__echo", "arguments": {"text": "ok"}})
    assert info["error"] is None
    env.close()


def test_block_destructive_and_roots() -> None:
    env = MCPEnv({"c": InProcess(make_server(diagnostics=True))}, ["t"], block_destructive=True, roots=["/tmp"])
    env.reset(seed=0)
    names = env.action_space.tool_names
    assert "crash" not in names and "echo" in names and "get_count" in names and "add" in names
    env.close()


def test_max_steps_truncates_and_submit_grades() -> None:
    env = MCPEnv({"c": InProcess(make_server())}, TASKS, verifier=verify, max_steps=2)
    env.reset(seed=0, options={"task_id": TASKS[0].id})
    env.step({"tool": "get_count", "arguments": {}})
    _, _, terminated, truncated, info = env.step({"tool": "get_count", "arguments": {}})
    assert truncated and not terminated and info["termination"] == "max_steps"
    env.reset(seed=0, options={"task_id": TASKS[0].id})
    _, reward, terminated, _, info = env.step({"tool": "submit", "arguments": {"answer": "wrong"}})
    assert terminated and reward == 0.0 and info["success"] is False and info["final_answer"] == "wrong"
    env.close()


def test_sample_is_valid_and_reproducible() -> None:
    env = MCPEnv({"c": InProcess(make_server())}, ["t"])
    env.reset(seed=0)
    env.action_space.seed(7)
    a = [env.action_space.sample() for _ in range(5)]
    env.action_space.seed(7)
    assert a == [env.action_space.sample() for _ in range(5)]
    assert all(env.action_space.contains(x) for x in a)
    env.close()


def test_check_env_and_registration() -> None:
    assert "mcp_gym/Counter-v0" in gym.registry
    env = gym.make("mcp_gym/Counter-v0")
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert obs["task"] and info["task_id"].startswith("counter-")
    env.close()
    assert mcp_gym.__version__


def test_parse_server_strings() -> None:
    from mcp_gym.client.specs import parse_server

    assert parse_server("http://127.0.0.1:8000/mcp", connect_timeout=3) == Http("http://127.0.0.1:8000/mcp",
                                                                                  connect_timeout=3)
    spec = parse_server("npx -y '@scope/server x' --flag", inherit_env=True)
    assert isinstance(spec, Stdio) and spec.command == "npx" and spec.args == ("-y", "@scope/server x", "--flag")
    assert spec.env is not None and spec.env.get("PATH") == os.environ.get("PATH")
    assert parse_server("python -m srv").env is None  # the SDK's minimal environment unless asked
    with pytest.raises(ValueError, match="not a server command line or URL"):
        parse_server("   ")
