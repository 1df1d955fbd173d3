"""MCPEnv against real third-party MCP servers: no mocks, real processes, real protocol eras.

- ``@modelcontextprotocol/server-everything`` (npm, TypeScript SDK, handshake era 2025-11-25): results, images,
  sampling, elicitation, progress, logging, isError results, resource subscriptions, timeouts, sampled actions.
- ``mcp-server-git`` (PyPI, mcp 2.x, discover era 2026-07-28): calls, env-level and server-level errors, strict mode,
  JSON-RPC errors.
- Several servers in one env: a server that fails to start, a server killed mid-episode.
- A raw JSON-RPC stdio server that never answers ``server/discover``: connecting must not stall.

The npm servers are installed (pinned) into ``.mcp-gym-cache/npm`` on first use by ``conftest.npm_bin``.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from conftest import npm_bin

from mcp_gym import InvalidAction, MCPEnv, Stdio, ToolCallFailed
from mcp_gym.client.host import ToolEntry

pytestmark = pytest.mark.thirdparty

HANDSHAKE_ERA = "2025-11-25"
DISCOVER_ERA = "2026-07-28"
DYNAMIC_TEXT = "demo://resource/dynamic/text/1"
SDK_DISCOVER_PROBE_TIMEOUT = 10.0  # the mcp SDK's own server/discover probe timeout (a protocol-level constant)


# -- helpers ------------------------------------------------------------------------------------------------------
def everything(*, pidfile: Path | None = None) -> Stdio:
    """server-everything over stdio; with ``pidfile``, launched via ``sh`` (exec keeps the pid) to record its pid."""
    exe = npm_bin("mcp-server-everything")
    if pidfile is None:
        return Stdio(exe, ["stdio"])
    return Stdio("sh", ["-c", f'echo $$ > "{pidfile}"; exec "$0" stdio', exe])


def git_server(repo: Path) -> Stdio:
    return Stdio("mcp-server-git", ["--repository", str(repo)])


@pytest.fixture
def make_env() -> Iterator[Callable[..., MCPEnv]]:
    """Build MCPEnvs that are closed (servers stopped) when the test ends, pass or fail."""
    envs: list[MCPEnv] = []

    def make(servers: Any, **kw: Any) -> MCPEnv:
        kw.setdefault("tasks", ["explore the server"])
        kw.setdefault("call_timeout", 60.0)  # a bound on hangs (a reset's listing and reset call obey it too)
        env = MCPEnv(servers, **kw)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit (identity given with -c: no global git config needed)."""
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", "-C", str(path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "hello.txt").write_text("hello\n")
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    return path


def step(env: MCPEnv, tool: str, **arguments: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
    obs, reward, terminated, truncated, info = env.step({"tool": tool, "arguments": arguments})
    return obs, float(reward), terminated, truncated, info


def step_until(
    env: MCPEnv, done: Callable[[dict[str, Any], dict[str, Any]], bool], *, within: float, pause: float = 0.25
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Step the cheap ``echo`` tool every ``pause`` s until ``done(obs, info)`` or ``within`` s; also give all infos."""
    deadline = time.monotonic() + within
    infos: list[dict[str, Any]] = []
    while True:
        obs, _, _, _, info = step(env, "echo", message="tick")
        assert info["error"] is None, info["error"]
        infos.append(info)
        if done(obs, info) or time.monotonic() > deadline:
            return obs, info, infos
        time.sleep(pause)


# -- 1. server-everything (TypeScript SDK, handshake era) ---------------------------------------------------------
def test_everything_connects_in_handshake_era_and_lists_late_registered_tools(make_env):
    env = make_env({"everything": everything()})
    obs, info = env.reset(seed=0)
    srv = info["servers"]["everything"]
    assert srv["name"] == "mcp-servers/everything"
    assert srv["version"]
    assert srv["protocol_version"] == HANDSHAKE_ERA
    assert srv["status"] == "ready" and srv["error"] is None
    names = env.action_space.tool_names
    assert {"echo", "get-sum", "get-tiny-image", "trigger-long-running-operation"} <= set(names)
    # Registered only after initialization (and announced with tools/list_changed), since they depend on the
    # capabilities mcp-gym declares: sampling and elicitation are always answered by the host.
    assert {"trigger-sampling-request", "trigger-elicitation-request"} <= set(names)
    assert "get-roots-list" not in names  # no roots given -> no roots capability -> the server does not offer it
    assert "submit" in names
    assert info["tools"] == names
    # The burst of list_changed right after init must not show up as a catalogue change in the first step.
    _, _, _, _, info = step(env, "echo", message="hi")
    assert info["tools_changed"] is False


def test_everything_valid_calls_return_text_and_structured_content(make_env):
    env = make_env({"everything": everything()})
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = step(env, "echo", message="hello there")
    assert obs["result"] == "Echo: hello there"
    assert info["error"] is None and info["is_error"] is False
    assert info["content"] == [{"type": "text", "text": "Echo: hello there"}]
    assert (info["tool"], info["server"]) == ("echo", "everything")
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, _, _, _, info = step(env, "get-sum", a=2, b=40)
    assert "42" in obs["result"]
    obs, _, _, _, info = step(env, "get-structured-content", location="Chicago")
    assert info["error"] is None
    assert isinstance(info["structured_content"], dict) and "temperature" in info["structured_content"]


def test_everything_image_kept_in_info_and_placeholder_in_observation(make_env):
    env = make_env({"everything": everything()})
    env.reset(seed=0)
    obs, _, _, _, info = step(env, "get-tiny-image")
    assert info["error"] is None
    images = [c for c in info["content"] if c["type"] == "image"]
    assert len(images) == 1
    assert images[0]["mimeType"] == "image/png"
    png = base64.b64decode(images[0]["data"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert "[image: image/png" in obs["result"]
    assert images[0]["data"] not in obs["result"]  # the base64 payload stays out of the text observation
    assert "The image above is the MCP logo." in obs["result"]  # the surrounding text blocks are kept


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_everything_sampling_request_routed_to_callable(make_env, flavour):
    calls: list[dict[str, Any]] = []
    env_box: list[MCPEnv] = []

    def record(messages: list[dict[str, Any]], params: mt.CreateMessageRequestParams) -> str:
        calls.append({"messages": messages, "max_tokens": params.max_tokens, "system": params.system_prompt,
                      "on_runtime_loop": env_box[0].unwrapped._rt.in_loop()})
        return f"PONG-{flavour}-7"

    if flavour == "sync":
        sampling: Any = record
    else:

        async def sampling(messages, params):
            return record(messages, params)

    env = make_env({"everything": everything()}, sampling=sampling)
    env_box.append(env)
    env.reset(seed=0)
    obs, _, _, _, info = step(env, "trigger-sampling-request", prompt="Say hi to the gym", maxTokens=20)
    assert info["error"] is None and info["is_error"] is False
    assert len(calls) == 1
    (msg,) = calls[0]["messages"]
    assert msg["role"] == "user" and "Say hi to the gym" in msg["content"]
    assert calls[0]["max_tokens"] == 20
    assert calls[0]["system"] == "You are a helpful test server."
    if flavour == "sync":
        assert calls[0]["on_runtime_loop"] is False  # a blocking sync callable must not stall the sessions' loop
    assert f"PONG-{flavour}-7" in obs["result"]  # the server put the callable's reply into its tool result
    assert env.unwrapped.host.sampling_log[-1]["reply"] == f"PONG-{flavour}-7"


def test_everything_sampling_without_callable_is_refused_clearly(make_env):
    env = make_env({"everything": everything()})
    env.reset(seed=0)
    obs, _, terminated, truncated, info = step(env, "trigger-sampling-request", prompt="Say hi")
    # The host answers the server's sampling/createMessage with a JSON-RPC error; server-everything turns the
    # failed request into an isError tool result quoting it.
    assert info["is_error"] is True
    assert "sampling refused by mcp-gym" in obs["result"]
    assert "sampling=" in obs["result"]  # the message says how to fix it
    err = info["error"]
    assert err["kind"] == "tool_error"
    assert (err["tool"], err["server"]) == ("trigger-sampling-request", "everything")
    assert (terminated, truncated) == (False, False)
    obs, _, _, _, info = step(env, "echo", message="still here")  # the session survives the refusal
    assert obs["result"] == "Echo: still here"


def test_everything_elicitation_accept_and_default_decline(make_env):
    seen: list[tuple[str, dict[str, Any]]] = []

    def elicit(message: str, schema: dict[str, Any], params: mt.ElicitRequestParams) -> dict[str, Any]:
        seen.append((message, schema))
        return {"name": "Ada Lovelace"}

    env = make_env({"everything": everything()}, elicitation=elicit)
    env.reset(seed=0)
    obs, _, _, _, info = step(env, "trigger-elicitation-request")
    assert info["error"] is None
    assert len(seen) == 1
    message, schema = seen[0]
    assert message
    assert "name" in schema["properties"] and "name" in schema["required"]
    assert "Ada Lovelace" in obs["result"]
    assert '"action": "accept"' in obs["result"]

    env2 = make_env({"everything": everything()})  # no callable: the host declines
    env2.reset(seed=0)
    obs, _, _, _, info = step(env2, "trigger-elicitation-request")
    assert info["error"] is None
    assert "declined" in obs["result"]
    assert '"action": "decline"' in obs["result"]


def test_everything_progress_notifications_collected(make_env):
    env = make_env({"everything": everything()})
    env.reset(seed=0)
    obs, _, _, _, info = step(env, "trigger-long-running-operation", duration=1, steps=4)
    assert info["error"] is None
    assert "completed" in obs["result"]
    progress = info["progress"]
    assert [p["progress"] for p in progress] == [1, 2, 3, 4]
    assert all(p["total"] == 4 for p in progress)
    assert [p["t"] for p in progress] == sorted(p["t"] for p in progress)
    _, _, _, _, info = step(env, "echo", message="x")
    assert info["progress"] == []  # progress belongs to the call that asked for it


def test_everything_logging_notifications_reach_info(make_env):
    env = make_env({"everything": everything()}, max_steps=100)
    env.reset(seed=0)
    # Each time simulated logging starts, server-everything sends one message at a random level (one of 8) at once,
    # then one every 5 s. Toggle it on and off 32 times: 32 immediate messages, none of them may be "debug", which is
    # below the "info" level mcp-gym asks for (a regression delivers a debug one with probability 1 - (7/8)**32).
    logs: list[dict[str, Any]] = []
    for _ in range(32):
        for expected in ("Started simulated", "Stopped simulated"):
            obs, _, _, _, info = step(env, "toggle-simulated-logging")
            assert obs["result"].startswith(expected)
            logs += info["logs"]
    _, _, _, _, info = step(env, "echo", message="flush")
    logs += info["logs"]
    simulated = [e for e in logs if "level" in str(e["data"]) and "message" in str(e["data"])]
    assert simulated, "no notifications/message arrived"
    assert len(simulated) <= 32
    for entry in simulated:
        assert entry["server"] == "everything"
        assert entry["level"] in str(entry["data"]).lower()
    levels = [e["level"] for e in simulated]
    assert "debug" not in levels, f"the server was not asked for level info (logging/setLevel): {levels}"
    # Drained: each log shows up in exactly one step's info.
    _, _, _, _, info = step(env, "echo", message="x")
    assert not [e for e in info["logs"] if e in simulated]


def test_everything_server_side_error_is_error_observation(make_env):
    env = make_env({"everything": everything()}, error_penalty=0.5)
    env.reset(seed=0)
    # resourceId is a JSON "number" in the schema, so 0 passes the env's validation; the server rejects it.
    assert env.action_space.contains({"tool": "get-resource-reference", "arguments": {"resourceId": 0}})
    obs, reward, terminated, truncated, info = step(env, "get-resource-reference", resourceId=0)
    assert info["is_error"] is True
    assert "Invalid resourceId" in obs["result"]
    err = info["error"]
    assert err["kind"] == "tool_error"
    assert (err["tool"], err["server"]) == ("get-resource-reference", "everything")
    assert "Invalid resourceId" in err["message"]
    assert reward == -0.5
    assert (terminated, truncated) == (False, False)
    # A schema violation is caught by the env before anything is sent.
    obs, reward, _, _, info = step(env, "get-sum", a="two", b=3)
    assert info["error"]["kind"] == "invalid_arguments" and info["error"]["argument"] == "a"
    assert info["error"]["server"] == "everything"
    assert reward == -0.5
    obs, reward, _, _, info = step(env, "get-resource-reference", resourceId=2)
    assert info["error"] is None and "Resource 2" in obs["result"] and reward == 0.0


def test_everything_roots_are_advertised_when_given(make_env, tmp_path):
    env = make_env({"everything": everything()}, roots=[tmp_path])
    env.reset(seed=0)
    assert "get-roots-list" in env.action_space.tool_names
    obs, _, _, _, info = step(env, "get-roots-list")
    assert info["error"] is None
    assert tmp_path.resolve().as_uri() in obs["result"]


def test_everything_resource_updates_reread_observed_resource(make_env):
    env = make_env({"everything": everything()}, observe_resources=[DYNAMIC_TEXT])
    obs, _ = env.reset(seed=0)
    text0 = obs["resources"][DYNAMIC_TEXT]
    assert text0.startswith("Resource 1:") and "created at" in text0  # the server stamps the read time (seconds)
    # Without updates the env does not re-read: the stamp stays although time passes.
    time.sleep(1.1)
    obs, _, _, _, _ = step(env, "echo", message="x")
    assert obs["resources"][DYNAMIC_TEXT] == text0
    obs, _, _, _, _ = step(env, "toggle-subscriber-updates")
    assert "Started simulated resource updated" in obs["result"]
    # resources/updated for subscribed URIs every 5 s -> the env re-reads the resource -> a new stamp.
    obs, info, _ = step_until(env, lambda o, i: o["resources"][DYNAMIC_TEXT] != text0, within=60.0)  # a bound on hangs
    text1 = obs["resources"][DYNAMIC_TEXT]
    assert text1 != text0, "no resources/updated was followed within 60 s"
    assert text1.startswith("Resource 1:")


def test_everything_sampled_actions_are_valid_and_step(make_env):
    env = make_env({"everything": everything()}, sampling=lambda messages, params: "ok", max_steps=50)
    env.reset(seed=0)
    slow_or_external = {"trigger-long-running-operation", "gzip-file-as-resource", "simulate-research-query",
                        "trigger-url-elicitation", "submit"}
    allowed = [n for n in env.action_space.tool_names if n not in slow_or_external]
    env.action_space.seed(1234)
    for _ in range(5):
        action = env.action_space.sample(mask=allowed)
        assert action["tool"] in allowed
        assert env.action_space.contains(action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs["result"], str)
        assert env.observation_space.contains(obs)
        assert info["error"] is None or info["error"]["kind"] == "tool_error", info["error"]
        assert info["server"] == "everything"
        assert not terminated and not truncated
    # The same seed draws the same actions (sampling uses only the space's RNG).
    env.action_space.seed(1234)
    a = [env.action_space.sample(mask=allowed) for _ in range(3)]
    env.action_space.seed(1234)
    assert a == [env.action_space.sample(mask=allowed) for _ in range(3)]


# -- 2. call timeout ----------------------------------------------------------------------------------------------
def test_call_timeout_is_an_error_observation_and_session_survives(make_env):
    env = make_env({"everything": everything()}, call_timeout=60.0)  # a bound on hangs for every other call
    env.reset(seed=0)
    env.unwrapped.call_timeout = 0.5  # only the 2 s operation meets the short limit (a loaded machine is slow too)
    obs, _, terminated, truncated, info = step(env, "trigger-long-running-operation", duration=2, steps=2)
    env.unwrapped.call_timeout = 60.0
    err = info["error"]
    assert err["kind"] == "timeout"
    assert (err["tool"], err["server"]) == ("trigger-long-running-operation", "everything")
    assert "0.5" in err["message"]
    assert info["is_error"] is True and obs["result"].startswith("Error:")
    assert (terminated, truncated) == (False, False)
    assert len(info["progress"]) < 2  # returned before the operation's 2 progress reports: it did not wait for it
    obs, _, _, _, info = step(env, "echo", message="after timeout")
    assert obs["result"] == "Echo: after timeout" and info["error"] is None
    # The abandoned operation's late progress/result must not leak into later steps.
    time.sleep(1.8)
    for _ in range(2):
        obs, _, _, _, info = step(env, "echo", message="later")
        assert obs["result"] == "Echo: later" and info["progress"] == [] and info["error"] is None
    assert env.unwrapped.host.connections["everything"].status == "ready"


@pytest.mark.slow  # the strict twin of the test above
def test_call_timeout_strict_raises_tool_call_failed(make_env):
    env = make_env({"everything": everything()}, call_timeout=60.0, strict=True)
    env.reset(seed=0)
    env.unwrapped.call_timeout = 0.5  # only the 2 s operation meets the short limit
    with pytest.raises(ToolCallFailed) as exc:
        step(env, "trigger-long-running-operation", duration=2, steps=2)
    env.unwrapped.call_timeout = 60.0
    assert exc.value.error["kind"] == "timeout"
    assert exc.value.error["server"] == "everything"
    obs, _, _, _, _ = step(env, "echo", message="ok")
    assert obs["result"] == "Echo: ok"


# -- 3. mcp-server-git (mcp 2.x, discover era) --------------------------------------------------------------------
def test_git_server_calls_and_errors(make_env, repo):
    env = make_env({"git": git_server(repo)})
    obs, info = env.reset(seed=0)
    srv = info["servers"]["git"]
    assert srv["name"] == "mcp-git" and srv["protocol_version"] == DISCOVER_ERA and srv["status"] == "ready"
    assert {"git_status", "git_log", "git_commit"} <= set(env.action_space.tool_names)

    obs, _, _, _, info = step(env, "git_status", repo_path=str(repo))
    assert info["error"] is None and "working tree clean" in obs["result"]
    obs, _, _, _, info = step(env, "git_log", repo_path=str(repo), max_count=5)
    assert info["error"] is None and "first commit" in obs["result"]

    # Unknown tool: caught by the env, never sent.
    obs, _, terminated, truncated, info = step(env, "git_teleport", repo_path=str(repo))
    assert info["error"]["kind"] == "unknown_tool" and info["error"]["tool"] == "git_teleport"
    assert "git_status" in obs["result"]  # the message lists what is available
    assert (terminated, truncated) == (False, False)

    # A real tool with a repo_path outside --repository: the server answers isError.
    outside = repo.parent
    obs, _, terminated, truncated, info = step(env, "git_status", repo_path=str(outside))
    assert info["is_error"] is True
    err = info["error"]
    assert err["kind"] == "tool_error" and (err["tool"], err["server"]) == ("git_status", "git")
    assert "outside the allowed repository" in obs["result"]
    assert (terminated, truncated) == (False, False)

    # The episode goes on, and the server's side effects are real.
    (repo / "new.txt").write_text("new\n")
    _, _, _, _, info = step(env, "git_add", repo_path=str(repo), files=["new.txt"])
    assert info["error"] is None
    obs, _, _, _, info = step(env, "git_commit", repo_path=str(repo), message="add new file")
    assert info["error"] is None
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True)
    assert log.stdout.splitlines()[0] == "add new file"


@pytest.mark.slow  # 23 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_git_jsonrpc_errors_and_strict_mode(make_env, repo):
    # reset_mode="tool" calls the hidden reset tool even though git lacks it: git answers JSON-RPC -32602.
    env = make_env({"git": git_server(repo)}, reset_mode="tool")
    _, info = env.reset(seed=0)
    (err,) = info["reset_errors"]
    assert err["kind"] == "jsonrpc" and err["code"] == -32602
    assert (err["tool"], err["server"]) == ("mcp_gym_reset", "git")
    assert info["error"] == err

    # Routing by server alias: a JSON-RPC error becomes CallOutcome.error, never an exception.
    host = env.unwrapped.host

    async def call_missing():
        return await host.call_server("git", "no_such_tool", {}, timeout=60)  # a bound on hangs

    out = env.unwrapped._rt.call(call_missing)
    assert out.result is None
    assert out.error["kind"] == "jsonrpc" and out.error["code"] == -32602
    assert out.error["server"] == "git" and "no_such_tool" in out.error["message"]

    # A stale catalogue (a tool the server no longer has) is how a JSON-RPC error reaches a step.
    def add_ghost(e: MCPEnv) -> None:
        ghost = mt.Tool(name="git_ghost", input_schema={"type": "object", "properties": {}})
        host = e.unwrapped.host  # the host replaces its catalogue on every change (the env watches identity)
        host.catalogue = {**host.catalogue, "git_ghost": ToolEntry("git_ghost", "git", "git_ghost", ghost)}
        e.unwrapped._sync_space()

    add_ghost(env)
    obs, _, terminated, truncated, info = step(env, "git_ghost")
    assert info["error"]["kind"] == "jsonrpc" and info["error"]["code"] == -32602
    assert (info["error"]["tool"], info["error"]["server"]) == ("git_ghost", "git")
    assert (terminated, truncated) == (False, False)
    obs, _, _, _, info = step(env, "git_status", repo_path=str(repo))
    assert info["error"] is None

    strict = make_env({"git": git_server(repo)}, strict=True)
    strict.reset(seed=0)
    add_ghost(strict)
    with pytest.raises(ToolCallFailed) as exc:
        step(strict, "git_ghost")
    assert exc.value.error["kind"] == "jsonrpc" and exc.value.error["code"] == -32602
    with pytest.raises(InvalidAction) as bad:
        step(strict, "git_teleport")
    assert bad.value.error["kind"] == "unknown_tool"
    # An isError result is a result, not a failed call: strict mode returns it.
    obs, _, _, _, info = step(strict, "git_status", repo_path=str(repo.parent))
    assert info["is_error"] is True and info["error"]["kind"] == "tool_error"
    obs, _, _, _, info = step(strict, "git_status", repo_path=str(repo))
    assert info["error"] is None


# -- 4. several servers: one fails to start, one dies mid-episode ---------------------------------------------------
def test_failed_server_loses_only_its_tools(make_env, repo):
    broken = Stdio(sys.executable, ["-c", "import sys; sys.stderr.write('broken on purpose\\n'); sys.exit(1)"])
    env = make_env({"git": git_server(repo), "broken": broken})
    _, info = env.reset(seed=0)
    assert info["servers"]["git"]["status"] == "ready"
    b = info["servers"]["broken"]
    assert b["status"] == "failed"
    assert b["error"] and "broken on purpose" in b["error"]  # the server's stderr is quoted
    names = env.action_space.tool_names
    assert "git__git_status" in names and "git__git_log" in names
    assert not [n for n in names if n.startswith("broken__")]
    obs, _, _, truncated, info = step(env, "git__git_status", repo_path=str(repo))
    assert info["error"] is None and "working tree clean" in obs["result"]
    assert (info["tool"], info["server"], info["server_tool"]) == ("git__git_status", "git", "git_status")
    assert truncated is False


# Two third-party servers, one SIGKILLed: the fast lane has the same on the Counter in tests/test_env.py
# (test_two_servers_one_dies_mid_episode, test_server_crash_truncates_and_reset_restarts).
@pytest.mark.slow
def test_server_killed_mid_episode(make_env, repo, tmp_path):
    pidfile = tmp_path / "everything.pid"
    env = make_env({"everything": everything(pidfile=pidfile), "git": git_server(repo)})
    _, info = env.reset(seed=0)
    assert info["servers"]["everything"]["status"] == "ready"
    pid = int(pidfile.read_text())
    assert "server-everything" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    obs, _, _, _, info = step(env, "everything__echo", message="alive")
    assert obs["result"] == "Echo: alive"

    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    obs, _, terminated, truncated, info = step(env, "everything__echo", message="anyone?")
    err = info["error"]
    assert err["kind"] == "server_dead"
    assert (err["tool"], err["server"]) == ("everything__echo", "everything")
    assert info["tools_changed"] is True
    assert info["servers"]["everything"]["status"] == "dead"
    assert (terminated, truncated) == (False, False)  # git is still alive
    names = env.action_space.tool_names
    assert not [n for n in names if n.startswith("everything__")]
    assert "git__git_status" in names

    obs, _, _, _, info = step(env, "git__git_status", repo_path=str(repo))
    assert info["error"] is None and "working tree clean" in obs["result"]
    assert info["tools_changed"] is False
    _, _, _, _, info = step(env, "everything__echo", message="gone")
    assert info["error"]["kind"] == "unknown_tool"

    # The next episode restarts the dead server.
    _, info = env.reset(seed=1)
    assert info["servers"]["everything"]["status"] == "ready"
    assert int(pidfile.read_text()) != pid
    assert "everything__echo" in env.action_space.tool_names
    obs, _, _, _, info = step(env, "everything__echo", message="back")
    assert obs["result"] == "Echo: back" and info["error"] is None


# -- 5. connecting to a server that never answers server/discover ---------------------------------------------------
RAW_SERVER = textwrap.dedent(
    """
    import json, sys
    ADD = {"name": "add", "description": "Add two integers.", "inputSchema": {"type": "object",
           "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}
    METHODS = {"name": "methods", "description": "Methods received so far.", "inputSchema": {"type": "object"}}
    seen = []
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        seen.append(method)
        if mid is None:
            continue  # notifications
        if method == "initialize":
            res = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                   "serverInfo": {"name": "raw-silent", "version": "0.1"}}
        elif method == "tools/list":
            res = {"tools": [ADD, METHODS]}
        elif method == "tools/call":
            p = msg["params"]
            a = p.get("arguments") or {}
            text = ",".join(m for m in seen if m) if p["name"] == "methods" else str(a["a"] + a["b"])
            res = {"content": [{"type": "text", "text": text}]}
        elif method == "ping":
            res = {}
        else:
            continue  # never answers anything else: server/discover included, not even with an error
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": res}) + "\\n")
        sys.stdout.flush()
    """
)


@pytest.fixture
def probe_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The timeout each real ``server/discover`` probe is sent with (the SDK reads it from a module global then)."""
    import mcp.client.session as sdk_session

    seen: list[float] = []
    send = sdk_session.ClientSession.send_discover

    async def spy(self: Any, version: str) -> Any:
        seen.append(sdk_session.DISCOVER_TIMEOUT_SECONDS)
        return await send(self, version)

    monkeypatch.setattr(sdk_session.ClientSession, "send_discover", spy)
    return seen


def test_server_ignoring_discover_does_not_stall_connect(make_env, tmp_path, probe_timeouts):
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    timings = {}
    for protocol in ("auto", "legacy"):
        spec = Stdio(sys.executable, [str(script)], protocol=protocol)
        t0 = time.perf_counter()
        env = make_env({"raw": spec})
        obs, info = env.reset(seed=0)
        timings[protocol] = time.perf_counter() - t0
        conn = env.unwrapped.host.connections["raw"]
        srv = info["servers"]["raw"]
        assert srv["status"] == "ready" and srv["name"] == "raw-silent"
        assert srv["protocol_version"] == "2025-06-18"
        assert env.action_space.tool_names == ["add", "methods", "submit"]
        obs, _, _, _, info = step(env, "add", a=2, b=3)
        assert obs["result"] == "5" and info["error"] is None
        obs, _, _, _, _ = step(env, "methods")
        seen = obs["result"].split(",")
        assert "initialize" in seen and "tools/list" in seen
        if protocol == "auto":
            assert "server/discover" in seen  # the probe really went out and was left unanswered
            assert conn.connect_seconds >= spec.discover_timeout * 0.9  # ... and was waited for, bounded
        else:
            assert "server/discover" not in seen
        print(f"\nconnect+reset to a server ignoring server/discover, protocol={protocol}: {timings[protocol]:.2f} s "
              f"(connect {conn.connect_seconds:.2f} s)")
    # The probe waited mcp-gym's bound (Stdio.discover_timeout), not the SDK's own 10 s.
    assert probe_timeouts == [Stdio(sys.executable).discover_timeout] != [SDK_DISCOVER_PROBE_TIMEOUT]


def test_each_connection_probes_with_its_own_discover_timeout(make_env, tmp_path, probe_timeouts):
    """The SDK keeps the probe timeout in a module global: two servers starting together with different
    ``discover_timeout`` values must each be waited for their own value (mcp-gym takes turns between values)."""
    script = tmp_path / "raw_server.py"
    stamped = RAW_SERVER.replace("import json, sys", "import json, sys, time").replace(
        "seen.append(method)", "seen.append(f'{method}@{time.monotonic():.3f}')")
    script.write_text(stamped)
    fast = Stdio(sys.executable, [str(script)], protocol="auto", discover_timeout=0.3)
    slow = Stdio(sys.executable, [str(script)], protocol="auto", discover_timeout=1.0)
    env = make_env({"fast": fast, "slow": slow})
    _, info = env.reset(seed=0)
    assert info["servers"]["fast"]["status"] == info["servers"]["slow"]["status"] == "ready"
    waited = {}
    for alias in ("fast", "slow"):
        obs, _, _, _, _ = step(env, f"{alias}__methods")
        stamps = dict(m.rsplit("@", 1) for m in obs["result"].split(",") if "@" in m)
        waited[alias] = float(stamps["initialize"]) - float(stamps["server/discover"])  # the probe, then the fallback
    print(f"\nprobe waited: fast {waited['fast']:.2f} s (timeout 0.3), slow {waited['slow']:.2f} s (timeout 1.0)")
    assert sorted(probe_timeouts) == [0.3, 1.0]  # each probe went out with its own connection's timeout
